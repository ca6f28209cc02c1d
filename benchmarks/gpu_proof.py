"""The GPU proof (issues 21, 33, 42): the notebooks' pipeline and GRPO steps at the presets' real shapes, with random
weights and no network, measured against the memory arithmetic of ``python -m grpo_kit plan``, in one device call
and a rerun (docs/development/benchmarks.md gives the commands and the first run's numbers).

First a pipeline smoke (:func:`run_smoke`): on a random-weights model of a real architecture (Qwen2.5-1.5B's
``config.json``) with the kit's own tokenizer, the notebooks' calls in order: notebook 02's baseline evaluation
(through Unsloth without vLLM on a GPU: the route of a runtime without vLLM), notebook 03's two GRPO steps on
``a100``'s route with GSM8K's rewards plus :func:`distinct_characters` (so the adapter moves on a random model),
notebook 04's evaluation after and its merged export from the local 16-bit base (``base=``) with its verification,
each step's result and seconds recorded.

Then each memory route below, in a child process of its own (Unsloth patches transformers and TRL when imported,
and one route's peak memory must not carry into the next): the model is built on the GPU from the shipped
``config.json`` with random weights (:func:`grpo_kit.policy.shapes.build_random`; for Unsloth's routes saved once
to a folder they load), a word-level tokenizer covers its whole vocabulary (prompts are random tokens; a random
policy rarely stops, so completions run to their full length: the worst case), a reward that varies keeps every
group's advantage non-zero, and ``grpo_kit.training.trainer.build_trainer`` trains ``--steps`` GRPO steps without
vLLM. Recorded per route: peak GPU memory (``torch.cuda.max_memory_allocated`` and ``max_memory_reserved``) and its
ratio to the estimate of :func:`grpo_kit.training.memory.estimate_memory` for the same settings (vLLM off), seconds
per step (median after the first), generation tokens per second (generation alone: :func:`time_generation`) and
whether every trainable tensor moved. Then the evaluation throughput of the transformers backend.

| route | shape | what |
| --- | --- | --- |
| ``pipeline-smoke`` | Qwen2.5-1.5B, kit tokenizer | notebooks 02, 03, 04 and the export, ``a100``'s route |
| ``a100-unsloth-4bit`` | Llama-3.1-8B | ``a100`` without vLLM: Unsloth 4-bit LoRA r32, 8 generations, 256 + 256 |
| ``a100-peft`` | Llama-3.1-8B | the same through plain TRL + peft, bf16 LoRA |
| ``eval`` | Qwen2.5-1.5B | greedy evaluation throughput of ``TransformersBackend`` at the notebooks' batch size |
| ``full-80gb`` | Qwen2.5-1.5B | full fine-tuning, float32 master weights, bf16 autocast, 16 completions, 256 + 512 |
| ``a100-unsloth-16bit`` | Llama-3.1-8B | ``a100`` through Unsloth, 16-bit LoRA |
| ``colab-t4`` | Qwen2.5-3B | the shipped recipe without vLLM: Unsloth 4-bit LoRA r64, ``adamw_8bit``, fp16 |

Each child runs under its cap (:data:`PLAN`) within the call's budget and writes its row as it goes
(:class:`Progress`); the row is appended to ``raw.jsonl`` in ``--out`` when the child ends or is cut, its output's
tail to ``log.txt``, and ``summary.md`` is rewritten. ``--rerun`` runs what the last call on the same machine left
unfinished. Without CUDA it refuses (exit 2); ``--miniature`` runs the same code at toy shapes on the CPU (the smoke
through ``cpu-tiny``'s route), for the kit's tests and ``make gpu-rehearsal``, and measures nothing; what it replaces
because only a GPU runs it is said in its rows.
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
#: The proof's parts in order of value, each with its cap in seconds, sized from the first run on an H200
#: (benchmarks/results/gpu-2026-11-27: the smoke reached the export at 176 s; Unsloth's first GRPO step took about
#: 97 s at the smoke's shape and over 80 s at 8B; one 8B step through TRL + peft 30 s, 26 of them generating). The
#: first call's budget (:data:`BUDGET_S`) is the first three caps; ``--rerun`` (:data:`RERUN_BUDGET_S`) runs what it
#: left unfinished, else the next parts; the last three need a further loan (docs/development/benchmarks.md).
PLAN: list[tuple[str, int]] = [("machine", 15), ("pipeline-smoke", 240), ("a100-unsloth-4bit", 245),
                               ("a100-peft", 90), ("eval", 60), ("full-80gb", 90), ("a100-unsloth-16bit", 120),
                               ("colab-t4", 150)]
#: The first call's budget for the proof itself: the first three caps, inside its ``timeout_s`` (540) with the
#: install (1 s on the H200) and a margin.
BUDGET_S = sum(cap for _, cap in PLAN[:3])
#: The rerun's budget: its ``timeout_s`` (180) less a margin (the bundle is installed already on a warm machine).
RERUN_BUDGET_S = 160
#: A child is not started with less than this left of the budget.
MIN_LEFT_S = 15
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
    # the shipped recipe as it runs where vLLM is missing: Unsloth 4-bit LoRA r64, adamw_8bit, fp16
    "colab-t4": {"preset": "colab-t4", "model": "unsloth/Qwen2.5-3B-Instruct", "loader": "unsloth",
                 "dtype": "float16", "set": {"fast_inference": False}},
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


def _preset(route: dict[str, Any], miniature: bool, steps: int) -> tuple[Any, dict[str, str]]:
    """The route's recipe for ``steps`` GRPO steps, and what ``--miniature`` replaced that only a GPU runs."""
    from grpo_kit.training.presets import get_preset

    changes = dict(route["set"], max_steps=steps, save_steps=10**6, logging_steps=1, report_to="none")
    replaced: dict[str, str] = {}
    if miniature:  # the CPU test: no mixed precision, short sequences, no bitsandbytes kernels
        changes.update(use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, max_prompt_tokens=8,
                       max_completion_length=8, max_seq_length=16)
        recipe = get_preset(route["preset"], **changes)
        if recipe.load_in_4bit:
            replaced["load_in_4bit"] = "16-bit weights: bitsandbytes' 4-bit kernels need CUDA"
        if "8bit" in str(recipe.optim):
            replaced["optim"] = f"adamw_torch for {recipe.optim}: bitsandbytes' 8-bit optimizers need CUDA"
        changes.update(load_in_4bit=False, optim="adamw_torch" if "optim" in replaced else recipe.optim)
    return get_preset(route["preset"], **changes), replaced


class Progress:
    """A child's row so far, rewritten whole (:func:`grpo_kit.system.files.write_text`) at every phase and step into
    the file the parent named: a child killed at its timeout still has what it measured read back, with the phase it
    was in. Without a file (a child run by hand) it only keeps the row."""

    def __init__(self, path: str | None, row: dict[str, Any]) -> None:
        self.path, self.row = path, row

    def note(self, **fields: Any) -> None:
        from grpo_kit.system.files import write_text

        self.row.update(fields)
        if self.path:
            write_text(self.path, json.dumps(self.row, default=str))


def _peak(row: dict[str, Any], estimate_gib: float | None) -> dict[str, Any]:
    """Peak GPU memory so far (allocated and reserved, GiB) and the reserved peak over ``plan``'s estimate."""
    import torch

    if not torch.cuda.is_available():
        return {}
    allocated = torch.cuda.max_memory_allocated() / 2**30
    reserved = torch.cuda.max_memory_reserved() / 2**30
    out = {"peak_allocated_gib": round(allocated, 2), "peak_reserved_gib": round(reserved, 2)}
    if estimate_gib:
        out["peak_reserved_over_estimate"] = round(reserved / estimate_gib, 2)
    return out


def time_generation(trainer: Any, device: str, progress: Progress) -> dict[str, Any]:
    """Wrap ``trainer._generate`` (TRL 1.15's rollout, which Unsloth's trainer keeps calling as ``self._generate``)
    to add up the seconds spent generating and the completion tokens it returns (its second value: one list of ids
    per completion), each call's seconds noted in ``progress`` as it ends (a step cut short still says whether it was
    generating). Returns the running totals, ``{"seconds": s, "tokens": n, "calls": k}``."""
    import torch

    totals: dict[str, Any] = {"seconds": 0.0, "tokens": 0, "calls": 0}
    generate = trainer._generate
    each: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        if device == "cuda":
            torch.cuda.synchronize()
        progress.note(phase=f"{progress.row.get('phase', 'training')}: generating (call {totals['calls'] + 1})")
        start = time.perf_counter()
        out = generate(*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        each.append(round(time.perf_counter() - start, 2))
        totals["seconds"] += each[-1]
        totals["calls"] += 1
        progress.note(phase=f"training: generation call {totals['calls']} done, scoring and backward",
                      generation_call_s=each)
        try:
            totals["tokens"] += sum(len(ids) for ids in out[1])
        except (TypeError, IndexError):  # another return shape: seconds without tokens, said in the row
            totals["tokens_unread"] = True
        return out

    trainer._generate = timed
    return totals


def run_route(name: str, steps: int, miniature: bool, workdir: Path,
              progress: Progress | None = None) -> dict[str, Any]:
    """Train ``steps`` GRPO steps on route ``name`` in this process and measure them (see the module docstring);
    ``progress`` holds the row as it grows."""
    route = ROUTES[name]
    progress = progress or Progress(None, {"route": name})
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

    preset, replaced = _preset(route, miniature, steps)
    config = _config(route, miniature)
    device = "cpu" if miniature else "cuda"
    shape = ModelShape.from_config(config, route["model"])
    gpu = first_gpu() or Gpu("cpu", 0.0, False)
    estimate = estimate_memory(get_preset(preset, fast_inference=False, use_vllm=False), shape, gpu)
    progress.note(model_shape=route["model"], parameters=shape.parameters, loader=route["loader"],
                  load_in_4bit=preset.load_in_4bit, optim=str(preset.optim), estimate=estimate,
                  miniature_replaced={**progress.row.get("miniature_replaced", {}), **replaced},
                  phase="building the model")
    tokenizer = word_tokenizer(config["vocab_size"], config["eos_token_id"])
    if route["loader"] == "unsloth":  # one saved folder per shape, for both Unsloth routes
        dtype = "float16" if preset.fp16 else "bfloat16"
        folder = workdir / ("random-" + route["model"].replace("/", "--") + "-" + dtype)
        if miniature:  # Unsloth's loader reads the GPU's properties (FastLanguageModel.from_pretrained)
            save_random(config, folder, tokenizer, "cpu", "float32")
            progress.note(phase="done", only_on_a_gpu="Unsloth's loader: FastLanguageModel.from_pretrained reads the "
                          "GPU's properties (unsloth get_device_stats), so the rehearsal stops after saving the model")
            return progress.row
        model = _unsloth_model(config, preset, folder, tokenizer, progress, dtype)
    else:
        model = build_random(config, device, route["dtype"] if not miniature else "float32")
    if not miniature:
        torch.cuda.reset_peak_memory_stats()
    progress.note(phase="building the trainer")
    data = Dataset.from_dict({"prompt": prompts(config["vocab_size"], preset.max_prompt_tokens, 256)})
    trainer = build_trainer(model, tokenizer, data, preset, [distinct_words], str(workdir / name / "out"))
    trainable = {n: t.detach().float().cpu().clone() for n, t in trainer.model.named_parameters() if t.requires_grad}
    times: list[float] = []
    generated = time_generation(trainer, device, progress)
    completions = preset.per_device_train_batch_size * preset.gradient_accumulation_steps

    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()
            progress.note(phase=f"training: step {len(times) + 1}")

        def on_substep_end(self, args, state, control, **kwargs):  # a gradient-accumulation micro-step
            progress.note(phase=f"training: step {len(times) + 1}, a micro-step's backward done",
                          **_peak(progress.row, estimate.get("needed")))

        def on_step_end(self, args, state, control, **kwargs):
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)
            progress.note(phase=f"training: step {len(times)} of {steps} done", steps=len(times),
                          step_times_s=[round(t, 3) for t in times], **_rates(times, generated),
                          **_peak(progress.row, estimate.get("needed")))

    trainer.add_callback(Clock())
    progress.note(phase="training", trainable_tensors=len(trainable), completions_per_step=completions)
    trainer.train()
    after = dict(trainer.model.named_parameters())
    moved = [n for n, before in trainable.items() if not torch.equal(before, after[n].detach().float().cpu())]
    progress.note(phase="done", moved_tensors=len(moved), every_trainable_moved=len(moved) == len(trainable),
                  **_peak(progress.row, estimate.get("needed")))
    return progress.row


def _rates(times: list[float], generated: dict[str, float]) -> dict[str, Any]:
    """Seconds per GRPO step (the median after the first, which includes compilation and warm-up) and generation's
    own throughput: completion tokens over the seconds spent inside ``_generate`` alone (all steps)."""
    out: dict[str, Any] = {"step_s": round(statistics.median(times[1:] or times), 3)}
    if generated["seconds"] > 0:
        out.update(generation_s=round(generated["seconds"], 2), generated_tokens=int(generated["tokens"]),
                   generation_tokens_per_s=round(generated["tokens"] / generated["seconds"], 1))
    return out


def _unsloth_model(config: dict[str, Any], preset: Any, folder: Path, tokenizer: Any, progress: Progress,
                   dtype: str) -> Any:
    """Unsloth loads only from a folder: the random model is built on the GPU in ``dtype`` and saved there once (both
    Unsloth routes of a shape load it, and a rerun on the same machine finds it; a ``.complete`` marker says the save
    finished), then loaded through the kit. The seconds of each part go into the row."""
    from grpo_kit.policy.loading import load_unsloth_policy

    start = time.perf_counter()
    saved = (folder / ".complete").is_file()
    save_random(config, folder, tokenizer, "cpu" if preset.use_cpu else "cuda", "float32" if preset.use_cpu else dtype)
    progress.note(save_s=0.0 if saved else round(time.perf_counter() - start, 1), phase="loading through Unsloth")
    start = time.perf_counter()
    model, _ = load_unsloth_policy(str(folder), preset.loading)
    progress.note(load_s=round(time.perf_counter() - start, 1))
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


def run_eval(miniature: bool, questions: int, new_tokens: int, batch_size: int,
             progress: Progress | None = None) -> dict[str, Any]:
    """Greedy evaluation throughput of the transformers backend at the 1.5B shape (questions per second), a batch
    at a time so that a cut run keeps the batches it finished (``progress``)."""
    import torch

    from grpo_kit.policy.generation import Sampling, TransformersBackend
    from grpo_kit.policy.shapes import build_random

    progress = progress or Progress(None, {"route": "eval"})
    progress.note(model_shape="Qwen/Qwen2.5-1.5B-Instruct", questions=questions, max_new_tokens=new_tokens,
                  batch_size=batch_size, phase="building the model")
    config = _config(ROUTES["full-80gb"], miniature)
    device = "cpu" if miniature else "cuda"
    model = build_random(config, device, "float32" if miniature else "bfloat16").eval()
    tokenizer = word_tokenizer(config["vocab_size"], config["eos_token_id"])
    chats = [[{"role": "user", "content": p}] for p in prompts(config["vocab_size"], 8 if miniature else 128,
                                                                 questions)]
    backend = TransformersBackend(model, tokenizer, batch_size=batch_size, progress=False)
    seconds, done, tokens = 0.0, 0, 0
    for first in range(0, questions, batch_size):
        progress.note(phase=f"generating: batch {first // batch_size + 1}")
        start = time.perf_counter()
        results = backend.generate(chats[first:first + batch_size], Sampling(temperature=0.0,
                                                                             max_new_tokens=new_tokens))
        if device == "cuda":
            torch.cuda.synchronize()
        seconds += time.perf_counter() - start
        done += len(results)
        tokens += sum(g.num_tokens for row in results for g in row)
        progress.note(questions_done=done, seconds=round(seconds, 2), questions_per_s=round(done / seconds, 2),
                      generated_tokens_per_s=round(tokens / seconds, 1))
    progress.note(phase="done")
    return progress.row


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


def distinct_characters(completions: list[Any], **kwargs: Any) -> list[float]:
    """The smoke's reward beside GSM8K's (TRL's contract): distinct characters in a completion's text, over 10. A
    random policy earns 0 from every GSM8K reward, so every advantage would be 0 and the adapter would never move
    (the evaluation after training then refuses it as untrained); this one varies within every group of its text."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [len(set(t)) / 10 for t in texts]


def run_smoke(miniature: bool, workdir: Path, progress: Progress | None = None) -> dict[str, Any]:
    """The notebooks' calls in order on :func:`smoke_base`'s model (see the module docstring); each step's result and
    seconds. ``a100``'s route on a GPU (Unsloth, 4-bit LoRA; no vLLM here, so without ``fast_inference``, as on a
    runtime without one), ``cpu-tiny``'s with ``--miniature``; GSM8K's rewards plus :func:`distinct_characters`. A step
    that fails ends the smoke, named in the row; ``progress`` holds the row as each step starts and ends."""
    import shutil

    from grpo_kit import notebook
    from grpo_kit.tasks import RewardSet, get_task

    preset = "cpu-tiny" if miniature else "a100"
    small = {"max_steps": 2, "save_steps": 2, "num_generations": 4, "per_device_train_batch_size": 4,
             "gradient_accumulation_steps": 1, "max_completion_length": 8 if miniature else 32,
             "max_prompt_tokens": 200, "max_seq_length": 256, "logging_steps": 1}
    config = notebook.gpu_check(preset, small)  # first: Unsloth before transformers on its route
    base = smoke_base(workdir, miniature)
    run_dir = workdir / "smoke-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    progress = progress or Progress(None, {"route": "pipeline-smoke"})
    progress.note(preset=preset, model_shape=SMOKE_MODEL, steps=[])
    row = progress.row
    task_rewards = get_task("gsm8k").reward_set()
    rewards = RewardSet([*task_rewards.rewards, distinct_characters], weights=[*task_rewards.weights, 1.0])

    def step(name: str, call: Any) -> Any:
        start = time.perf_counter()
        entry: dict[str, Any] = {"step": name}
        row["steps"].append(entry)
        progress.note(phase=name)
        try:
            done = call()
        except Exception as e:
            entry.update(ok=False, seconds=round(time.perf_counter() - start, 2),
                         error=f"{type(e).__name__}: {e}"[:600])
            progress.note(**_peak(row, None))
            raise
        entry.update(ok=True, seconds=round(time.perf_counter() - start, 2))
        progress.note(**_peak(row, None))
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
                                                                       model=str(base), max_steps=2,
                                                                       rewards=rewards))
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
    progress.note(ok=all(s.get("ok") for s in row["steps"]) and len(row["steps"]) == 7, phase="done",
                  seconds=round(sum(s["seconds"] for s in row["steps"]), 2), **_peak(row, None))
    return row


def available_routes() -> list[str]:
    """The memory routes this machine can run, in :data:`PLAN`'s order of value: Unsloth's 4-bit ones where Unsloth
    and bitsandbytes import, its 16-bit one where Unsloth does."""
    import importlib.util

    unsloth = importlib.util.find_spec("unsloth") is not None
    bnb = unsloth and importlib.util.find_spec("bitsandbytes") is not None
    needs = {"a100-unsloth-4bit": bnb, "colab-t4": bnb, "a100-unsloth-16bit": unsloth}
    return [name for name, _ in PLAN if name not in ("machine", "pipeline-smoke") and needs.get(name, True)]


def _said(row: dict[str, Any]) -> str:
    """What stopped a row short, or ``""``: an error, a cut with the phase it was in, a skip."""
    if "error" in row:
        return "failed: " + str(row["error"])[:140]
    if "cut" in row:
        return f"cut: {row['cut']} ({row.get('phase', '?')})"
    if "only_on_a_gpu" in row:
        return f"rehearsed up to: {row['only_on_a_gpu']}"
    return f"skipped: {row['skipped']}" if "skipped" in row else ""


def summary(rows: list[dict[str, Any]]) -> str:
    """The Markdown summary of a proof's rows (the machine first, then the smoke and the routes so far)."""
    info = next((r for r in rows if r.get("route") == "machine"), {})
    lines = [f"# GPU proof on {info.get('device', 'a CPU (miniature: nothing measured)')}", "",
             f"driver {info.get('driver')}, torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), transformers "
             f"{info.get('transformers')}, trl {info.get('trl')}, peft {info.get('peft')}, unsloth "
             f"{info.get('unsloth')}, bitsandbytes {info.get('bitsandbytes')}", ""]
    replaced = sorted({f"{k}: {v}" for row in rows for k, v in (row.get("miniature_replaced") or {}).items()})
    if replaced:
        lines += ["What the rehearsal replaced, since only a GPU runs it:", "", *[f"- {r}" for r in replaced], ""]
    for row in rows:
        if row["route"] == "pipeline-smoke":
            lines += [f"Pipeline smoke ({row.get('preset')}'s route, {row.get('model_shape')} shape, kit tokenizer): "
                      + ("every step ran" if row.get("ok") else _said(row) or "stopped"), ""]
            if row.get("steps"):
                lines += ["| step | seconds | result |", "| --- | --: | --- |"]
                for s in row["steps"]:
                    said = s.get("error") or ", ".join(f"{k} {v}" for k, v in s.items()
                                                       if k not in ("step", "seconds", "ok"))
                    lines.append(f"| {s['step']} | {s.get('seconds', 'cut')} | {str(said)[:160]} |")
                lines.append("")
    lines += ["| route | shape | s/step (median after the first) | generation tokens/s (generation alone) | "
              "peak allocated GiB | peak reserved GiB | plan's estimate GiB | reserved / estimate | "
              "every trainable tensor moved | stopped |",
              "| --- | --- | --: | --: | --: | --: | --: | --: | --- | --- |"]
    for row in rows:
        if row["route"] in ("machine", "eval", "pipeline-smoke"):
            continue
        moved = (f"{row['every_trainable_moved']} ({row['moved_tensors']}/{row['trainable_tensors']})"
                 if "moved_tensors" in row else "")
        lines.append(f"| {row['route']} | {row.get('model_shape', '')} | {row.get('step_s', '')} | "
                     f"{row.get('generation_tokens_per_s', '')} | {row.get('peak_allocated_gib', '')} | "
                     f"{row.get('peak_reserved_gib', '')} | {(row.get('estimate') or {}).get('needed', '')} | "
                     f"{row.get('peak_reserved_over_estimate', '')} | {moved} | {_said(row)} |")
    for row in rows:
        if row["route"] == "eval":
            lines += ["", f"Evaluation (transformers backend, {row.get('model_shape')} shape, greedy, "
                          f"{row.get('max_new_tokens')} new tokens, batch {row.get('batch_size')}): "
                          + (f"{row['questions_per_s']} questions/s, {row['generated_tokens_per_s']} tokens/s."
                             if "questions_per_s" in row else _said(row))]
    return "\n".join(lines) + "\n"


def run_child(name: str, args: argparse.Namespace, timeout: float) -> tuple[dict[str, Any], str]:
    """Run route ``name`` in a child process of its own session, killed with everything it started after
    ``timeout`` seconds. Returns ``(its row, its output)``. A child that fails or is cut keeps what it had measured
    (its :class:`Progress` file), with ``error`` or ``cut`` and the phase it was in."""
    progress = WORK / ("miniature" if args.miniature else "gpu") / "progress" / f"{name}.json"
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--progress", str(progress),
               "--steps", str(args.steps), "--out", str(args.out), "--eval-questions", str(args.eval_questions),
               "--eval-tokens", str(args.eval_tokens), "--eval-batch", str(args.eval_batch)] + (
                  ["--miniature"] * args.miniature)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1", **({"UNSLOTH_ALLOW_CPU": "1"} if args.miniature else {})}
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             start_new_session=True)
    cut = None
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the route's own children (data loader workers) too
        output, _ = child.communicate()
        cut = f"timed out after {timeout:.0f} s"
    seconds = round(time.perf_counter() - start, 1)
    try:
        partial = json.loads(progress.read_text())
    except (OSError, json.JSONDecodeError):
        partial = {}
    row = {"route": name, **partial}
    if cut:
        row["cut"] = cut
    else:
        try:
            row = json.loads(output.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            row["error"] = " / ".join(output.strip().splitlines()[-3:]) or f"exit {child.returncode}"
    row["child_seconds"] = seconds
    return row, output


def _append(path: Path, text: str) -> None:
    """Append ``text`` and push it to the disk now: what a call cut short had written comes back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def unfinished(row: dict[str, Any]) -> bool:
    """Whether ``row`` is one to run again: failed, cut, skipped, or a smoke that stopped."""
    return any(k in row for k in ("error", "cut", "skipped")) or row.get("ok") is False


def child_timeout(name: str, left: float, later: list[str]) -> float:
    """A part's time limit: its :data:`PLAN` cap, plus what the parts before it saved of theirs (what is left beyond
    the caps of the parts still to come), never more than is left."""
    caps = dict(PLAN)
    return min(left, max(caps.get(name, 30), left - sum(caps.get(n, 30) for n in later)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results/gpu-proof",
                        help="folder for raw.jsonl, summary.md and log.txt (default $OUT, the device tool's)")
    parser.add_argument("--routes", nargs="*", default=None, help=f"from {', '.join(ROUTES)} and eval (default: all "
                                                                  "that can run here)")
    parser.add_argument("--no-smoke", action="store_true", help="leave the pipeline smoke out")
    parser.add_argument("--rerun", action="store_true",
                        help="run again only what the last proof on this machine left failed, cut or skipped (its "
                             f"rows are kept under {WORK}); its rows and the new ones go to --out. Without them, the "
                             "plan from the top")
    parser.add_argument("--budget-s", type=float, default=None,
                        help=f"seconds for the whole proof (default {BUDGET_S}, the caps' sum; {RERUN_BUDGET_S} with "
                             f"--rerun); a part is cut at its time limit, and none starts with under {MIN_LEFT_S} s")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps per route (the first, with its warm-up "
                        "and compilation, is timed apart)")
    parser.add_argument("--eval-questions", type=int, default=128)
    parser.add_argument("--eval-tokens", type=int, default=None, help="default: the notebooks' (EvalPlan's)")
    parser.add_argument("--eval-batch", type=int, default=None, help="default: the notebooks' (EvalPlan's)")
    parser.add_argument("--miniature", action="store_true", help="toy shapes on the CPU (tests); measures nothing")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--progress", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.eval_tokens is None or args.eval_batch is None:
        from grpo_kit.runs.measure import EvalPlan

        args.eval_tokens = args.eval_tokens or EvalPlan.max_new_tokens
        args.eval_batch = args.eval_batch or EvalPlan.batch_size
    import torch

    if not args.miniature and not torch.cuda.is_available():
        print("gpu_proof: no CUDA GPU here (torch sees none), so there is nothing to measure. Run it on a CUDA "
              "machine (make gpu-proof), or pass --miniature to check the code at toy shapes on this CPU.",
              file=sys.stderr)
        return 2
    workdir = WORK / ("miniature" if args.miniature else "gpu")
    if args.child is not None:  # one part, in this process: print its row as the last line
        workdir.mkdir(parents=True, exist_ok=True)
        progress = Progress(args.progress, {"route": args.child})
        if args.miniature and args.child not in ("machine", "eval"):  # a CPU: TRL 1.15's Triton kernel cannot run
            if ROUTES.get(args.child, {}).get("loader") == "unsloth":
                from grpo_kit.policy.loading import import_unsloth

                import_unsloth()  # before TRL, as on the GPU
            from triton_shim import swap_in_without_gpu

            swapped = swap_in_without_gpu()
            if swapped:
                progress.note(miniature_replaced={"trl_logprob_kernel": swapped})
        if args.child == "machine":
            progress.note(**machine())
            row = progress.row
        elif args.child == "pipeline-smoke":
            row = run_smoke(args.miniature, workdir, progress)
        elif args.child == "eval":
            row = run_eval(args.miniature, args.eval_questions, args.eval_tokens, args.eval_batch, progress)
        else:
            row = run_route(args.child, args.steps, args.miniature, workdir, progress)
        print(json.dumps(row, default=str))
        return 0
    mirror = workdir / "raw.jsonl"  # the rows on this machine, for --rerun (the call's --out is emptied each call)
    kept: list[dict[str, Any]] = []
    if args.rerun and mirror.is_file():
        previous = [json.loads(line) for line in mirror.read_text().splitlines() if line.strip()]
        kept = [dict(r, call="first") for r in previous if not unfinished(r)]
        budget = args.budget_s or RERUN_BUDGET_S
        # a part cut after at least this call's whole budget would be cut again: it comes last, after the parts
        # that did not run, and gets what they leave
        hopeless = {r["route"] for r in previous if "cut" in r and r.get("child_seconds", 0) >= budget - MIN_LEFT_S}
        names = [r["route"] for r in previous if unfinished(r) and r["route"] not in hopeless]
        names += [r["route"] for r in previous if r["route"] in hopeless]
        print(f"gpu_proof --rerun: {len(kept)} rows kept from the last call, running again: "
              f"{', '.join(names) or 'none'}")
    else:
        if args.rerun:
            print(f"gpu_proof --rerun: no earlier rows on this machine ({mirror}), so the plan from the top")
        names = args.routes if args.routes is not None else available_routes()
        unknown = sorted(set(names) - set(ROUTES) - {"eval"})
        if unknown:
            parser.error(f"unknown route(s) {unknown}: choose from {', '.join(ROUTES)}, eval")
        names = ["machine"] + ([] if args.no_smoke else ["pipeline-smoke"]) + names
    budget = args.budget_s or (RERUN_BUDGET_S if args.rerun else BUDGET_S)
    from grpo_kit.system.files import write_text

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in (out / "raw.jsonl", out / "log.txt"):
        path.unlink(missing_ok=True)  # this proof's rows only
    new_mirror = workdir / "raw.jsonl.next"
    new_mirror.unlink(missing_ok=True)
    for row in kept:
        _append(out / "raw.jsonl", json.dumps(row, default=str) + "\n")
        _append(new_mirror, json.dumps(row, default=str) + "\n")
    deadline = time.monotonic() + budget
    rows: list[dict[str, Any]] = list(kept)
    for i, name in enumerate(names):
        left = deadline - time.monotonic()
        if left < MIN_LEFT_S:
            row, output = {"route": name, "skipped": f"the proof's budget ({budget:g} s) is spent"}, ""
        else:
            row, output = run_child(name, args, child_timeout(name, left, names[i + 1:]))
        if args.rerun:
            row["call"] = "rerun"
        rows.append(row)
        for path in (out / "raw.jsonl", new_mirror):
            _append(path, json.dumps(row, default=str) + "\n")
        _append(out / "log.txt", f"== {name}: {json.dumps(row, default=str)[:300]}\n"
                + "\n".join(output.splitlines()[-150:]) + "\n")
        write_text(out / "summary.md", summary(rows))
        print(json.dumps(row, default=str), flush=True)
    os.replace(new_mirror, mirror)
    print(summary(rows))
    return 0 if not any(unfinished(r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
