"""The GPU proof (issue 21): GRPO steps through the kit's trainer at the presets' real shapes, with random
weights and no network, measured against the memory arithmetic of ``python -m grpo_kit plan``.

For each route below, in a child process of its own (Unsloth patches transformers and TRL when imported, and
one route's peak memory must not carry into the next): the model is built on the GPU from the shipped
``config.json`` with random weights (:func:`grpo_kit.policy.shapes.build_random`), a word-level tokenizer
covers its whole vocabulary (prompts are ``--prompt`` random tokens; a random policy rarely stops, so
completions run to their full length: the worst case), a length-based reward keeps every group's advantage
non-zero, and ``grpo_kit.training.trainer.build_trainer`` trains ``--steps`` GRPO steps without vLLM
(generation with transformers). Recorded per route: peak GPU memory (``torch.cuda.max_memory_allocated`` and
``max_memory_reserved``), seconds per step (median after the first), generated tokens per second, whether
every trainable tensor moved, and the estimate of :func:`grpo_kit.training.memory.estimate_memory` for the
same settings (vLLM off). Then the held-out evaluation throughput of the transformers backend (questions per
second, ``--eval-tokens`` new tokens, batched).

| route | shape | what |
| --- | --- | --- |
| ``a100-peft`` | Llama-3.1-8B | ``a100`` without vLLM, plain TRL + peft: bf16 LoRA r32, 8 generations, 256 + 256 |
| ``a100-unsloth-16bit`` | Llama-3.1-8B | the same through Unsloth (16-bit LoRA); where unsloth imports |
| ``a100-unsloth-4bit`` | Llama-3.1-8B | the same, 4-bit (QLoRA); where bitsandbytes loads too |
| ``full-80gb`` | Qwen2.5-1.5B | full fine-tuning, float32 master weights, bf16 autocast, 16 completions, 256 + 512 |
| ``colab-t4`` | Qwen2.5-3B | fp16 LoRA r64, 6 generations, 256 + 256 (plain peft: 4-bit needs Unsloth + bitsandbytes) |
| ``eval`` | Qwen2.5-1.5B | greedy evaluation throughput of ``TransformersBackend``, batch 64 |

Run on a CUDA machine (``make gpu-proof``; wheels for a machine without network: ``benchmarks/wheel_bundle.py``):
  python benchmarks/gpu_proof.py --out benchmarks/results/gpu-proof-<date>
It writes ``raw.jsonl`` (one object per route, the machine first) and ``summary.md``. Without CUDA it refuses
(exit 2); ``--miniature`` runs the same code at toy shapes on the CPU, for the kit's tests, and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Scratch space: trainer output and, for Unsloth's routes, the random model saved for its loader (16 GB at 8B).
WORK = Path(tempfile.gettempdir()) / "grpo_kit_gpu_proof"

#: Each route: the preset it takes its recipe from, the model whose shape it builds, the preset fields changed
#: so it runs without vLLM (and without bitsandbytes' 8-bit optimizer unless the route loads it), its loader.
ROUTES: dict[str, dict[str, Any]] = {
    "a100-peft": {"preset": "a100", "model": "unsloth/Meta-Llama-3.1-8B-Instruct", "loader": "peft",
                  "dtype": "bfloat16",
                  "set": {"use_unsloth": False, "load_in_4bit": False, "fast_inference": False,
                          "optim": "adamw_torch"}},
    "a100-unsloth-16bit": {"preset": "a100", "model": "unsloth/Meta-Llama-3.1-8B-Instruct", "loader": "unsloth",
                           "dtype": "bfloat16",
                           "set": {"load_in_4bit": False, "fast_inference": False, "optim": "adamw_torch"}},
    "a100-unsloth-4bit": {"preset": "a100", "model": "unsloth/Meta-Llama-3.1-8B-Instruct", "loader": "unsloth",
                          "dtype": "bfloat16", "set": {"fast_inference": False}},
    "full-80gb": {"preset": "full-80gb", "model": "Qwen/Qwen2.5-1.5B-Instruct", "loader": "full",
                  "dtype": "float32", "set": {"use_vllm": False}},
    "colab-t4": {"preset": "colab-t4", "model": "unsloth/Qwen2.5-3B-Instruct", "loader": "peft", "dtype": "float16",
                 "set": {"use_unsloth": False, "load_in_4bit": False, "fast_inference": False,
                         "optim": "adamw_torch"}},
}
#: A toy architecture for ``--miniature`` (the CPU test): the same code, shapes small enough for seconds.
MINIATURE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 512, "head_dim": 16}


def machine() -> dict[str, Any]:
    """The device, driver and versions this proof ran on."""
    import importlib.metadata as md

    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "torch_cuda": torch.version.cuda}
    for name in ("transformers", "trl", "peft", "accelerate", "unsloth", "bitsandbytes"):
        try:
            info[name] = md.version(name)
        except md.PackageNotFoundError:
            info[name] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, memory_gib=round(props.total_memory / 2**30, 2),
                    bf16=(props.major, props.minor) >= (8, 0), compute_capability=f"{props.major}.{props.minor}")
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            info["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, IndexError):
            info["driver"] = None
    return info


def word_tokenizer(vocab_size: int, eos_id: int) -> Any:
    """A tokenizer with one word per id (``w0`` .. ``w<vocab_size-1>``): every id a random policy samples
    decodes, and a prompt of ``n`` words is ``n`` tokens. A chat template joins the messages' contents."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=f"w{eos_id}", pad_token=f"w{eos_id}",
                                        unk_token="w0", padding_side="left")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return tokenizer


def prompts(vocab_size: int, length: int, count: int, seed: int = 0) -> list[str]:
    """``count`` prompts of ``length`` random words each (ids above 1000, clear of special tokens)."""
    import random

    rng = random.Random(seed)
    low = min(1000, vocab_size // 2)
    return [" ".join(f"w{rng.randrange(low, vocab_size)}" for _ in range(length)) for _ in range(count)]


def distinct_words(completions: list[Any], **kwargs: Any) -> list[float]:
    """The reward: distinct words in a completion (varies within every group of a random policy)."""
    return [float(len(set(str(c).split()))) for c in completions]


def _config(route: dict[str, Any], miniature: bool) -> dict[str, Any]:
    from grpo_kit.policy.shapes import model_config

    config = model_config(route["model"])
    if miniature:
        config = {**config, **MINIATURE, "max_position_embeddings": 2048}
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if eos is None or eos >= config["vocab_size"]:
        eos = config["vocab_size"] - 1
    config.update(eos_token_id=eos, bos_token_id=None, pad_token_id=eos)
    return config


def _preset(route: dict[str, Any], miniature: bool, steps: int) -> Any:
    from grpo_kit.training.presets import get_preset

    changes = dict(route["set"], max_steps=steps, save_steps=10**6, logging_steps=1, report_to="none")
    if miniature:  # the CPU test: no mixed precision, short sequences
        changes.update(use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, max_prompt_tokens=8,
                       max_completion_length=8, max_seq_length=16, load_in_4bit=False)
    return get_preset(route["preset"], **changes)


def run_route(name: str, steps: int, miniature: bool, workdir: Path) -> dict[str, Any]:
    """Train ``steps`` GRPO steps on route ``name`` in this process and measure them (see the module docstring)."""
    route = ROUTES[name]
    if route["loader"] == "unsloth":
        from grpo_kit.policy.loading import import_unsloth

        import_unsloth()  # before transformers, TRL and peft
    import torch
    from datasets import Dataset

    from grpo_kit.policy.devices import Gpu, first_gpu
    from grpo_kit.policy.shapes import ModelShape, build_random
    from grpo_kit.training.memory import estimate_memory
    from grpo_kit.training.presets import get_preset
    from grpo_kit.training.trainer import build_trainer

    preset = _preset(route, miniature, steps)
    config = _config(route, miniature)
    device = "cpu" if miniature else "cuda"
    tokenizer = word_tokenizer(config["vocab_size"], config["eos_token_id"])
    if route["loader"] == "unsloth":
        model = _unsloth_model(config, preset, workdir / name, tokenizer)
    else:
        model = build_random(config, device, route["dtype"] if not miniature else "float32")
    if not miniature:
        torch.cuda.reset_peak_memory_stats()
    data = Dataset.from_dict({"prompt": prompts(config["vocab_size"], preset.max_prompt_tokens, 256)})
    trainer = build_trainer(model, tokenizer, data, preset, [distinct_words], str(workdir / name / "out"))
    trainable = {n: t.detach().float().cpu().clone() for n, t in trainer.model.named_parameters() if t.requires_grad}
    times: list[float] = []

    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)

    trainer.add_callback(Clock())
    trainer.train()
    after = dict(trainer.model.named_parameters())
    moved = [n for n, before in trainable.items() if not torch.equal(before, after[n].detach().float().cpu())]
    lengths = [row["completions/mean_length"] for row in trainer.state.log_history if "completions/mean_length" in row]
    completions = preset.per_device_train_batch_size * preset.gradient_accumulation_steps
    step_s = statistics.median(times[1:] or times)
    shape = ModelShape.from_config(config, route["model"])
    gpu = first_gpu() or Gpu("cpu", 0.0, False)
    estimate = estimate_memory(get_preset(preset, fast_inference=False, use_vllm=False), shape, gpu)
    result = {"route": name, "model_shape": route["model"], "parameters": shape.parameters,
              "trainable_tensors": len(trainable), "moved_tensors": len(moved), "every_trainable_moved":
              len(moved) == len(trainable), "steps": len(times), "step_s": round(step_s, 3),
              "step_times_s": [round(t, 3) for t in times],
              "completion_tokens_per_step": round(statistics.mean(lengths) * completions, 1) if lengths else None,
              "estimate": estimate}
    if lengths:
        result["generated_tokens_per_s"] = round(statistics.mean(lengths) * completions / step_s, 1)
    if device == "cuda":
        result.update(peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2))
    return result


def _unsloth_model(config: dict[str, Any], preset: Any, folder: Path, tokenizer: Any) -> Any:
    """Unsloth loads only from a folder: save the random model (bfloat16) there, then load it through the kit."""
    from grpo_kit.policy.loading import load_unsloth_policy
    from grpo_kit.policy.shapes import build_random

    if not (folder / "config.json").is_file():
        build_random(config, "cpu", "bfloat16").save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder))
    model, _ = load_unsloth_policy(str(folder), preset.loading)
    return model


def run_eval(miniature: bool, questions: int, new_tokens: int, batch_size: int) -> dict[str, Any]:
    """Greedy evaluation throughput of the transformers backend at the 1.5B shape (questions per second)."""
    import torch

    from grpo_kit.policy.generation import Sampling, TransformersBackend
    from grpo_kit.policy.shapes import build_random

    config = _config(ROUTES["full-80gb"], miniature)
    device = "cpu" if miniature else "cuda"
    model = build_random(config, device, "float32" if miniature else "bfloat16").eval()
    tokenizer = word_tokenizer(config["vocab_size"], config["eos_token_id"])
    chats = [[{"role": "user", "content": p}] for p in prompts(config["vocab_size"], 8 if miniature else 128,
                                                                 questions)]
    backend = TransformersBackend(model, tokenizer, batch_size=batch_size, progress=False)
    start = time.perf_counter()
    results = backend.generate(chats, Sampling(temperature=0.0, max_new_tokens=new_tokens))
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens = sum(g.num_tokens for row in results for g in row)
    return {"route": "eval", "model_shape": "Qwen/Qwen2.5-1.5B-Instruct", "questions": questions,
            "max_new_tokens": new_tokens, "batch_size": batch_size, "seconds": round(seconds, 2),
            "questions_per_s": round(questions / seconds, 2), "generated_tokens_per_s": round(tokens / seconds, 1)}


def available_routes() -> list[str]:
    """The routes this machine can run: Unsloth's where it imports, 4-bit where bitsandbytes does too."""
    import importlib.util

    names = ["a100-peft", "full-80gb", "colab-t4"]
    if importlib.util.find_spec("unsloth") is not None:
        names.insert(1, "a100-unsloth-16bit")
        if importlib.util.find_spec("bitsandbytes") is not None:
            names.insert(2, "a100-unsloth-4bit")
    return names


def summary(rows: list[dict[str, Any]]) -> str:
    """The Markdown summary of a proof's rows (the machine first)."""
    info = rows[0]
    lines = [f"# GPU proof on {info.get('device', 'a CPU (miniature: nothing measured)')}", "",
             f"driver {info.get('driver')}, torch {info['torch']} (CUDA {info['torch_cuda']}), transformers "
             f"{info['transformers']}, trl {info['trl']}, peft {info['peft']}, unsloth {info['unsloth']}, "
             f"bitsandbytes {info['bitsandbytes']}", "",
             "| route | shape | s/step | generated tokens/s | peak allocated GiB | peak reserved GiB | estimate GiB | "
             "every trainable tensor moved |", "| --- | --- | --: | --: | --: | --: | --: | --- |"]
    for row in rows[1:]:
        if row["route"] == "eval":
            continue
        if "error" in row:
            lines.append(f"| {row['route']} | | failed: {row['error'][:120]} | | | | | |")
            continue
        lines.append(f"| {row['route']} | {row['model_shape']} | {row['step_s']} | {row.get('generated_tokens_per_s')} "
                     f"| {row.get('peak_allocated_gib')} | {row.get('peak_reserved_gib')} | "
                     f"{row['estimate']['needed']} | {row['every_trainable_moved']} "
                     f"({row['moved_tensors']}/{row['trainable_tensors']}) |")
    for row in rows[1:]:
        if row["route"] == "eval" and "error" not in row:
            lines += ["", f"Evaluation (transformers backend, {row['model_shape']} shape, greedy, "
                          f"{row['max_new_tokens']} new tokens, batch {row['batch_size']}): {row['questions_per_s']} "
                          f"questions/s, {row['generated_tokens_per_s']} tokens/s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/gpu-proof", help="folder for raw.jsonl and summary.md")
    parser.add_argument("--routes", nargs="*", default=None, help=f"from {', '.join(ROUTES)} (default: all that "
                                                                  "can run here) and eval")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per route (the first is not timed)")
    parser.add_argument("--eval-questions", type=int, default=128)
    parser.add_argument("--eval-tokens", type=int, default=256)
    parser.add_argument("--eval-batch", type=int, default=64)
    parser.add_argument("--miniature", action="store_true", help="toy shapes on the CPU (tests); measures nothing")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import torch

    if not args.miniature and not torch.cuda.is_available():
        print("gpu_proof: no CUDA GPU here (torch sees none), so there is nothing to measure. Run it on a CUDA "
              "machine (make gpu-proof), or pass --miniature to check the code at toy shapes on this CPU.",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    if args.child is not None:  # one route, in this process: print its row as the last line
        row = (run_eval(args.miniature, args.eval_questions, args.eval_tokens, args.eval_batch)
               if args.child == "eval" else run_route(args.child, args.steps, args.miniature, WORK))
        print(json.dumps(row, default=str))
        return 0
    names = args.routes if args.routes is not None else available_routes() + ["eval"]
    unknown = sorted(set(names) - set(ROUTES) - {"eval"})
    if unknown:
        parser.error(f"unknown route(s) {unknown}: choose from {', '.join(ROUTES)}, eval")
    from grpo_kit.system.files import write_text

    rows: list[dict[str, Any]] = [{"route": "machine", **machine()}]
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        command = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--steps", str(args.steps),
                   "--out", str(out), "--eval-questions", str(args.eval_questions), "--eval-tokens",
                   str(args.eval_tokens), "--eval-batch", str(args.eval_batch)] + (["--miniature"] * args.miniature)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        write_text(out / f"{name}.log", done.stdout + done.stderr)
        try:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            rows.append({"route": name, "error": " / ".join(tail) or f"exit {done.returncode}"})
        print(json.dumps(rows[-1], default=str), flush=True)
    write_text(out / "raw.jsonl", "".join(json.dumps(r, default=str) + "\n" for r in rows))
    write_text(out / "summary.md", summary(rows))
    print(summary(rows))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
