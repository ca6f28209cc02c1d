"""The GPU proof (issues 21, 33): the notebooks' pipeline and GRPO steps at the presets' real shapes, with random
weights and no network, measured against the memory arithmetic of ``python -m grpo_kit plan``, in ONE device call.

First a pipeline smoke (:func:`run_smoke`): on a random-weights model of a real architecture (Qwen2.5-1.5B's
``config.json``) with the kit's own tokenizer, the notebooks' calls in order: notebook 02's baseline evaluation
(through Unsloth without vLLM on a GPU: the route of a runtime without vLLM), notebook 03's two GRPO steps on
``a100``'s route, notebook 04's evaluation after and its merged export from the local 16-bit base (``base=``) with
its verification, each step's result and seconds recorded.

Then for each memory route below, in a child process of its own (Unsloth patches transformers and TRL when
imported, and one route's peak memory must not carry into the next): the model is built on the GPU from the shipped
``config.json`` with random weights (:func:`grpo_kit.policy.shapes.build_random`; for Unsloth's routes saved once
to a folder both load), a word-level tokenizer covers its whole vocabulary (prompts are random tokens; a random
policy rarely stops, so completions run to their full length: the worst case), a length-based reward keeps every
group's advantage non-zero, and ``grpo_kit.training.trainer.build_trainer`` trains ``--steps`` GRPO steps without
vLLM. Recorded per route: peak GPU memory (``torch.cuda.max_memory_allocated`` and ``max_memory_reserved``),
seconds per step (median after the first), generated tokens per second, whether every trainable tensor moved, and
the estimate of :func:`grpo_kit.training.memory.estimate_memory` for the same settings (vLLM off). Then the held-out
evaluation throughput of the transformers backend (questions per second).

| route | shape | what |
| --- | --- | --- |
| ``pipeline-smoke`` | Qwen2.5-1.5B, kit tokenizer | notebooks 02, 03, 04 and the export, ``a100``'s route |
| ``a100-unsloth-4bit`` | Llama-3.1-8B | ``a100`` without vLLM: Unsloth 4-bit LoRA r32, 8 generations, 256 + 256 |
| ``a100-peft`` | Llama-3.1-8B | the same through plain TRL + peft, bf16 LoRA |
| ``full-80gb`` | Qwen2.5-1.5B | full fine-tuning, float32 master weights, bf16 autocast, 16 completions, 256 + 512 |
| ``colab-t4`` | Qwen2.5-3B | fp16 LoRA r64, 6 generations, 256 + 256 (plain peft) |
| ``eval`` | Qwen2.5-1.5B | greedy evaluation throughput of ``TransformersBackend``, batch 64 |
| ``a100-unsloth-16bit`` | Llama-3.1-8B | ``a100`` through Unsloth, 16-bit LoRA |

Each child runs under a timeout within the call's budget (``--budget-s``); its row is appended to ``raw.jsonl``
in ``--out`` as it finishes (the machine first), its output's tail to ``log.txt``, and ``summary.md`` is rewritten:
what a call cut short had measured comes back. On a lent machine the whole command is ``benchmarks/gpu_call.sh``
(docs/development/benchmarks.md). Without CUDA it refuses (exit 2); ``--miniature`` runs the same code at toy
shapes on the CPU (the smoke through ``cpu-tiny``'s route), for the kit's tests, and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Scratch space: trainer output, the smoke's run folder and, for Unsloth's routes, the random model saved once for
#: its loader (16 GB at 8B).
WORK = Path(tempfile.gettempdir()) / "grpo_kit_gpu_proof"
#: The smoke's architecture (its shipped config.json), with the kit's own tokenizer.
SMOKE_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
#: Seconds each child may take at most (within what is left of ``--budget-s``): the smoke, the 8B routes, the rest.
TIMEOUTS = {"machine": 60, "pipeline-smoke": 200, "a100-unsloth-4bit": 150, "a100-unsloth-16bit": 150,
            "a100-peft": 120}
DEFAULT_TIMEOUT = 90
#: A child is not started with less than this left of the budget.
MIN_LEFT_S = 20

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
    if route["loader"] == "unsloth":  # one saved folder per shape, for both Unsloth routes
        model = _unsloth_model(config, preset, workdir / ("random-" + route["model"].replace("/", "--")), tokenizer)
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
    """Unsloth loads only from a folder: the random model is built on the GPU (bfloat16) and saved there once (both
    Unsloth routes of a shape load it; a ``.complete`` marker says the save finished), then loaded through the kit."""
    from grpo_kit.policy.loading import load_unsloth_policy

    save_random(config, folder, tokenizer, "cuda", "bfloat16")
    model, _ = load_unsloth_policy(str(folder), preset.loading)
    return model


def save_random(config: dict[str, Any], folder: Path, tokenizer: Any, device: str, dtype: str) -> Path:
    """Build the model of ``config`` with random weights on ``device`` and save it with ``tokenizer`` into ``folder``,
    once: a folder whose ``.complete`` marker exists is kept. The GPU's memory is given back afterwards."""
    import shutil

    import torch

    from grpo_kit.policy.shapes import build_random

    if (folder / ".complete").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    model = build_random(config, device, dtype)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    (folder / ".complete").write_text("saved whole\n")
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return folder


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


def kit_tokenizer() -> Any:
    """The kit's own tokenizer: the shipped tiny policy's (a chat template, 2052 tokens)."""
    from transformers import AutoTokenizer

    from grpo_kit.policy.warm_start import SHIPPED_DIR

    folder = next(p for p in sorted(SHIPPED_DIR.iterdir()) if (p / "tokenizer.json").is_file())
    return AutoTokenizer.from_pretrained(str(folder))


def smoke_base(workdir: Path, miniature: bool) -> Path:
    """The smoke's model, saved once into ``workdir``: :data:`SMOKE_MODEL`'s architecture (``--miniature``: at toy
    shapes) with the kit's tokenizer's vocabulary and special tokens, random weights, built on the GPU (bfloat16; the
    CPU, float32, for ``--miniature``)."""
    from grpo_kit.policy.shapes import model_config

    tokenizer = kit_tokenizer()
    config = model_config(SMOKE_MODEL)
    if miniature:
        config = {**config, **MINIATURE, "max_position_embeddings": 2048}
    config.update(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                  pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
    folder = workdir / ("smoke-base-miniature" if miniature else "smoke-base")
    return save_random(config, folder, tokenizer, "cpu" if miniature else "cuda",
                       "float32" if miniature else "bfloat16")


def run_smoke(miniature: bool, workdir: Path) -> dict[str, Any]:
    """The notebooks' calls in order on :func:`smoke_base`'s model (see the module docstring); each step's result and
    seconds. ``a100``'s route on a GPU (Unsloth, 4-bit LoRA; no vLLM here, so without ``fast_inference``, as on a
    runtime without one), ``cpu-tiny``'s with ``--miniature``. A step that fails ends the smoke, named in the row."""
    import shutil

    from grpo_kit import notebook

    preset = "cpu-tiny" if miniature else "a100"
    small = {"max_steps": 2, "save_steps": 2, "num_generations": 4, "per_device_train_batch_size": 4,
             "gradient_accumulation_steps": 1, "max_completion_length": 8 if miniature else 32,
             "max_prompt_tokens": 200, "max_seq_length": 256, "logging_steps": 1}
    config = notebook.gpu_check(preset, small)  # first: Unsloth before transformers on its route
    base = smoke_base(workdir, miniature)
    run_dir = workdir / "smoke-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    row: dict[str, Any] = {"route": "pipeline-smoke", "preset": preset, "model_shape": SMOKE_MODEL, "steps": []}

    def step(name: str, call: Any) -> Any:
        start = time.perf_counter()
        entry: dict[str, Any] = {"step": name}
        row["steps"].append(entry)
        try:
            done = call()
        except Exception as e:
            entry.update(ok=False, seconds=round(time.perf_counter() - start, 2),
                         error=f"{type(e).__name__}: {e}"[:600])
            raise
        entry.update(ok=True, seconds=round(time.perf_counter() - start, 2))
        return done

    from grpo_kit.runs.export import ExportRefused
    from grpo_kit.runs.measure import measure_after, measure_before
    from grpo_kit.runs.train import train

    try:
        plan, run = step("02 plan_baseline", lambda: notebook.plan_baseline(
            "gsm8k", config, run_dir=str(run_dir), model=str(base), eval_questions=8,
            max_new_tokens=8 if miniature else 32))
        step("02 measure_before", lambda: measure_before(plan, run))
        row["steps"][-1]["route"] = json.loads(run.eval_settings.read_text())["route"]
        spec = step("03 plan_training", lambda: notebook.plan_training(config, "gsm8k", run_dir=str(run_dir),
                                                                       model=str(base), max_steps=2))
        trained = step("03 train", lambda: train(spec))
        row["steps"][-1].update(finished_step=run.finished_step(), fast_inference=spec.preset.fast_inference,
                                rewards=[h.get("reward") for h in trained.log_history if "reward" in h])
        opened, _ = step("04 open_run", lambda: notebook.open_run(str(run_dir)))
        step("04 measure_after", lambda: measure_after(opened))
        row["steps"][-1]["report"] = opened.report.is_file()

        def export() -> str:
            try:
                return notebook.export_run(opened, ["merged"], questions=4,
                                           base=str(base) if config.use_unsloth else None)
            except ExportRefused as e:  # the pipeline ran; the check said no (a random policy's answers)
                return f"REFUSED: {e}".splitlines()[0]

        said = step("04 export_run (merged, verified)", export)
        row["steps"][-1]["verification"] = said[:600]
    except Exception:  # noqa: BLE001 - named in the row's failed step
        pass
    row["ok"] = all(s.get("ok") for s in row["steps"]) and len(row["steps"]) == 7
    row["seconds"] = round(sum(s["seconds"] for s in row["steps"]), 2)
    import torch

    if torch.cuda.is_available():
        row["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return row


def available_routes() -> list[str]:
    """The memory routes this machine can run, the blog post's first: Unsloth's where it imports, 4-bit where
    bitsandbytes does too; the 16-bit one last (what is left of the budget after the others)."""
    import importlib.util

    unsloth = importlib.util.find_spec("unsloth") is not None
    names = ["a100-unsloth-4bit"] if unsloth and importlib.util.find_spec("bitsandbytes") is not None else []
    names += ["a100-peft", "full-80gb", "colab-t4", "eval"]
    return names + (["a100-unsloth-16bit"] if unsloth else [])


def summary(rows: list[dict[str, Any]]) -> str:
    """The Markdown summary of a proof's rows (the machine first, then the smoke and the routes so far)."""
    info = rows[0] if rows and rows[0].get("route") == "machine" else {}
    lines = [f"# GPU proof on {info.get('device', 'a CPU (miniature: nothing measured)')}", "",
             f"driver {info.get('driver')}, torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), transformers "
             f"{info.get('transformers')}, trl {info.get('trl')}, peft {info.get('peft')}, unsloth "
             f"{info.get('unsloth')}, bitsandbytes {info.get('bitsandbytes')}", ""]
    for row in rows:
        if row["route"] == "pipeline-smoke" and "steps" in row:
            lines += [f"Pipeline smoke ({row.get('preset')}'s route, {row.get('model_shape')} shape, kit tokenizer): "
                      + ("every step ran" if row.get("ok") else "stopped"), "", "| step | seconds | result |",
                      "| --- | --: | --- |"]
            for s in row["steps"]:
                said = s.get("error") or ", ".join(f"{k} {v}" for k, v in s.items()
                                                   if k not in ("step", "seconds", "ok"))
                lines.append(f"| {s['step']} | {s.get('seconds')} | {str(said)[:160]} |")
            lines.append("")
    lines += ["| route | shape | s/step | generated tokens/s | peak allocated GiB | peak reserved GiB | estimate GiB | "
              "every trainable tensor moved |", "| --- | --- | --: | --: | --: | --: | --: | --- |"]
    for row in rows:
        if row["route"] in ("machine", "eval") or "steps" in row and row["route"] == "pipeline-smoke":
            continue
        if "error" in row or "skipped" in row:
            lines.append(f"| {row['route']} | | {'failed: ' + row['error'][:120] if 'error' in row else row['skipped']}"
                         " | | | | | |")
            continue
        lines.append(f"| {row['route']} | {row['model_shape']} | {row['step_s']} | {row.get('generated_tokens_per_s')} "
                     f"| {row.get('peak_allocated_gib')} | {row.get('peak_reserved_gib')} | "
                     f"{row['estimate']['needed']} | {row['every_trainable_moved']} "
                     f"({row['moved_tensors']}/{row['trainable_tensors']}) |")
    for row in rows:
        if row["route"] == "eval" and "error" not in row and "skipped" not in row:
            lines += ["", f"Evaluation (transformers backend, {row['model_shape']} shape, greedy, "
                          f"{row['max_new_tokens']} new tokens, batch {row['batch_size']}): {row['questions_per_s']} "
                          f"questions/s, {row['generated_tokens_per_s']} tokens/s."]
    return "\n".join(lines) + "\n"


def run_child(name: str, args: argparse.Namespace, timeout: float) -> tuple[dict[str, Any], str]:
    """Run route ``name`` in a child process of its own session, killed with everything it started after
    ``timeout`` seconds. Returns ``(its row, its output)``; a failure or a timeout is a row with ``error``."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--steps", str(args.steps),
               "--out", str(args.out), "--eval-questions", str(args.eval_questions), "--eval-tokens",
               str(args.eval_tokens), "--eval-batch", str(args.eval_batch)] + (["--miniature"] * args.miniature)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             start_new_session=True)
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the route's own children (data loader workers) too
        output, _ = child.communicate()
        return {"route": name, "error": f"timed out after {timeout:.0f} s", "seconds": round(timeout, 1)}, output
    seconds = round(time.perf_counter() - start, 1)
    try:
        row = json.loads(output.strip().splitlines()[-1])
        row["child_seconds"] = seconds
    except (IndexError, json.JSONDecodeError):
        tail = output.strip().splitlines()[-3:]
        row = {"route": name, "error": " / ".join(tail) or f"exit {child.returncode}", "seconds": seconds}
    return row, output


def _append(path: Path, text: str) -> None:
    """Append ``text`` and push it to the disk now: what a call cut short had written comes back."""
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results/gpu-proof",
                        help="folder for raw.jsonl, summary.md and log.txt (default $OUT, the device tool's)")
    parser.add_argument("--routes", nargs="*", default=None, help=f"from {', '.join(ROUTES)} and eval (default: all "
                                                                  "that can run here)")
    parser.add_argument("--no-smoke", action="store_true", help="leave the pipeline smoke out")
    parser.add_argument("--budget-s", type=float, default=420, help="seconds for the whole proof (the device "
                        "call's limit less a margin); a route is cut at what is left, and none starts with under "
                        f"{MIN_LEFT_S} s")
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per route (the first is not timed)")
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
    workdir = WORK / ("miniature" if args.miniature else "gpu")
    if args.child is not None:  # one route, in this process: print its row as the last line
        workdir.mkdir(parents=True, exist_ok=True)
        if args.child == "machine":
            row = {"route": "machine", **machine()}
        elif args.child == "pipeline-smoke":
            row = run_smoke(args.miniature, workdir)
        elif args.child == "eval":
            row = run_eval(args.miniature, args.eval_questions, args.eval_tokens, args.eval_batch)
        else:
            row = run_route(args.child, args.steps, args.miniature, workdir)
        print(json.dumps(row, default=str))
        return 0
    names = args.routes if args.routes is not None else available_routes()
    unknown = sorted(set(names) - set(ROUTES) - {"eval"})
    if unknown:
        parser.error(f"unknown route(s) {unknown}: choose from {', '.join(ROUTES)}, eval")
    names = ["machine"] + ([] if args.no_smoke else ["pipeline-smoke"]) + names
    from grpo_kit.system.files import write_text

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("raw.jsonl", "log.txt"):
        (out / name).unlink(missing_ok=True)  # this proof's rows only
    deadline = time.monotonic() + args.budget_s
    rows: list[dict[str, Any]] = []
    for name in names:
        left = deadline - time.monotonic()
        if left < MIN_LEFT_S:
            row, output = {"route": name, "skipped": f"the proof's budget ({args.budget_s:g} s) is spent"}, ""
        else:
            row, output = run_child(name, args, min(TIMEOUTS.get(name, DEFAULT_TIMEOUT), left))
        rows.append(row)
        _append(out / "raw.jsonl", json.dumps(row, default=str) + "\n")
        _append(out / "log.txt", f"== {name}: {json.dumps(row, default=str)[:300]}\n"
                + "\n".join(output.splitlines()[-150:]) + "\n")
        write_text(out / "summary.md", summary(rows))
        print(json.dumps(row, default=str), flush=True)
    print(summary(rows))
    return 0 if all("error" not in r and r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
