"""The GPU proof's parts that are not GRPO routes, each run in a child process of its own by
``benchmarks/gpu_proof.py``: the machine (:func:`machine`), the pipeline smoke (:func:`run_smoke`) and the
evaluation's throughput (:func:`run_eval`). The helpers they share with the routes are in ``benchmarks/gpu_parts.py``.

The smoke: on a random-weights model of a real architecture (Qwen2.5-1.5B's ``config.json``) with the kit's own
tokenizer, the notebooks' calls in order: notebook 02's baseline evaluation (through Unsloth without vLLM on a GPU:
the route of a runtime without vLLM), notebook 03's two GRPO steps on ``a100``'s route with GSM8K's rewards plus
:func:`distinct_characters` (so the adapter moves on a random model), notebook 04's evaluation after and its merged
export from the local 16-bit base (``base=``) with its verification, each step's result, seconds and peak memory
recorded.
"""

from __future__ import annotations

import json
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_parts import (
    MINIATURE,
    ROUTES,
    Progress,
    model_config,
    peak,
    prompts,
    reset_peak,
    save_random,
    seconds_left,
    word_tokenizer,
)

#: The smoke's architecture (its shipped config.json), with the kit's own tokenizer.
SMOKE_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
#: The smoke's notebook calls, in order.
SMOKE_STEPS = ["02 plan_baseline", "02 measure_before", "03 plan_training", "03 train", "04 open_run",
               "04 measure_after", "04 export_run (merged, verified)"]


def machine() -> dict[str, Any]:
    """The device, driver and versions this proof ran on, and on a GPU its measured copy bandwidth
    (:func:`copy_bandwidth`)."""
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
        info["copy_bandwidth_gb_s"] = copy_bandwidth()
    return info


def copy_bandwidth(gib: int = 4, repeats: int = 10) -> float:
    """The GPU's memory bandwidth in GB/s as a device-to-device copy of ``gib`` GiB moves it, counting the bytes read
    and written (the measure the lent machine's notes give: about 4,300 GB/s on an H200), the mean of ``repeats``
    copies after three warm-ups, timed with CUDA events. The memory-bound limit of a decoding step is the bytes it
    reads over this rate (``benchmarks/gpu_report.py``)."""
    import torch

    source = torch.empty(gib * 2**30, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        target.copy_(source)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000
    del source, target
    torch.cuda.empty_cache()
    return round(2 * gib * 2**30 * repeats / seconds / 1e9, 1)


def run_eval(miniature: bool, questions: int, new_tokens: int, batch_size: int, progress: Progress | None = None,
             deadline: float | None = None) -> dict[str, Any]:
    """Greedy evaluation throughput of the transformers backend at the 1.5B shape (questions per second), a batch
    at a time so that a part cut short keeps the batches it finished; with a ``deadline``, a batch starts only when
    the last one's seconds are left."""
    import torch

    from grpo_kit.policy.generation import Sampling, TransformersBackend
    from grpo_kit.policy.shapes import build_random

    progress = progress or Progress(None, {"route": "eval"})
    progress.note(model_shape="Qwen/Qwen2.5-1.5B-Instruct", questions=questions, max_new_tokens=new_tokens,
                  batch_size=batch_size, phase="building the model")
    config = model_config(ROUTES["full-80gb"], miniature)
    model = build_random(config, "cpu" if miniature else "cuda", "float32" if miniature else "bfloat16").eval()
    reset_peak()
    progress.note(peak_covers="from the built model on: its weights and the evaluation's generation")
    tokenizer = word_tokenizer(config["vocab_size"], config["eos_token_id"])
    chats = [[{"role": "user", "content": p}] for p in prompts(config["vocab_size"], 8 if miniature else 128,
                                                                 questions)]
    backend = TransformersBackend(model, tokenizer, batch_size=batch_size, progress=False)
    seconds, done, tokens, last = 0.0, 0, 0, 0.0
    for first in range(0, questions, batch_size):
        if seconds_left(deadline) < last:
            progress.note(stopped=f"at its deadline after {done} questions: a batch takes about {last:.0f} s")
            break
        progress.note(phase=f"generating: batch {first // batch_size + 1}")
        start = time.perf_counter()
        results = backend.generate(chats[first:first + batch_size], Sampling(temperature=0.0,
                                                                             max_new_tokens=new_tokens))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        last = time.perf_counter() - start
        seconds += last
        done += len(results)
        tokens += sum(g.num_tokens for row in results for g in row)
        progress.note(questions_done=done, seconds=round(seconds, 2), questions_per_s=round(done / seconds, 2),
                      generated_tokens_per_s=round(tokens / seconds, 1), **peak())
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
    from grpo_kit.policy.shapes import model_config as shipped

    tokenizer = kit_tokenizer()
    config = shipped(SMOKE_MODEL)
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


class SmokeSteps:
    """Runs the smoke's notebook calls one at a time into ``progress``'s row (``steps``): each step's seconds, its
    peak memory from its start (the peak is reset as each begins) and its error. A step starts only before
    ``deadline``; one that fails, or a deadline passed, ends the smoke (:class:`StopSmoke`)."""

    def __init__(self, progress: Progress, deadline: float | None) -> None:
        self.progress, self.deadline = progress, deadline

    def __call__(self, name: str, call: Any) -> Any:
        row = self.progress.row
        if seconds_left(self.deadline) <= 0:
            self.progress.note(stopped=f"at its deadline, before {name}")
            raise StopSmoke(name)
        entry: dict[str, Any] = {"step": name}
        row["steps"].append(entry)
        self.progress.note(phase=name)
        reset_peak()
        start = time.perf_counter()
        try:
            done = call()
        except Exception as e:
            entry.update(ok=False, seconds=round(time.perf_counter() - start, 2),
                         error=f"{type(e).__name__}: {e}"[:600], **peak())
            self.progress.note()
            raise StopSmoke(name) from e
        entry.update(ok=True, seconds=round(time.perf_counter() - start, 2), **peak())
        self.progress.note()
        return done


class StopSmoke(Exception):
    """The smoke ends at the step named (it failed, or the deadline came first): said in the row."""


def run_smoke(miniature: bool, workdir: Path, progress: Progress | None = None,
              deadline: float | None = None) -> dict[str, Any]:
    """The notebooks' calls in order on :func:`smoke_base`'s model (see the module docstring); each step's result,
    seconds and peak. ``a100``'s route on a GPU (Unsloth, 4-bit LoRA; no vLLM here, so without ``fast_inference``,
    as on a runtime without one), ``cpu-tiny``'s with ``--miniature``; GSM8K's rewards plus
    :func:`distinct_characters`. A step that fails ends the smoke, named in the row; so does the ``deadline``, checked
    before each step."""
    from grpo_kit import notebook

    preset = "cpu-tiny" if miniature else "a100"
    small = {"max_steps": 2, "save_steps": 2, "num_generations": 4, "per_device_train_batch_size": 4,
             "gradient_accumulation_steps": 1, "max_completion_length": 8 if miniature else 32,
             "max_prompt_tokens": 200, "max_seq_length": 256, "logging_steps": 1}
    config = notebook.gpu_check(preset, small)  # first: Unsloth before transformers on its route
    base = smoke_base(workdir, miniature)
    progress = progress or Progress(None, {"route": "pipeline-smoke"})
    progress.note(preset=preset, model_shape=SMOKE_MODEL, steps=[],
                  peak_covers="each step's own, from its start (the peak is reset as it begins; the random model's "
                              "build and save before the steps excluded); the row's is the largest")
    try:
        _smoke_steps(SmokeSteps(progress, deadline), config, base, workdir, miniature)
    except StopSmoke:
        pass
    steps = progress.row["steps"]
    largest = {key: max(s[key] for s in steps if key in s)
               for key in ("peak_allocated_gib", "peak_reserved_gib") if any(key in s for s in steps)}
    progress.note(ok=all(s.get("ok") for s in steps) and len(steps) == len(SMOKE_STEPS), phase="done",
                  seconds=round(sum(s["seconds"] for s in steps if "seconds" in s), 2), **largest)
    return progress.row


def _smoke_steps(step: SmokeSteps, config: Any, base: Path, workdir: Path, miniature: bool) -> None:
    """Notebooks 02, 03 and 04's calls through ``step``, in order (:data:`SMOKE_STEPS`)."""
    import shutil

    from grpo_kit import notebook
    from grpo_kit.runs.export import ExportRefused
    from grpo_kit.runs.measure import measure_after, measure_before
    from grpo_kit.runs.train import train
    from grpo_kit.tasks import RewardSet, get_task

    run_dir = workdir / "smoke-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    task_rewards = get_task("gsm8k").reward_set()
    rewards = RewardSet([*task_rewards.rewards, distinct_characters], weights=[*task_rewards.weights, 1.0])
    steps = step.progress.row["steps"]
    plan, run = step(SMOKE_STEPS[0], lambda: notebook.plan_baseline(
        "gsm8k", config, run_dir=str(run_dir), model=str(base), eval_questions=8,
        max_new_tokens=8 if miniature else 32))
    step(SMOKE_STEPS[1], lambda: measure_before(plan, run))
    steps[-1]["route"] = json.loads(run.eval_settings.read_text())["route"]
    spec = step(SMOKE_STEPS[2], lambda: notebook.plan_training(config, "gsm8k", run_dir=str(run_dir),
                                                               model=str(base), max_steps=2, rewards=rewards))
    trained = step(SMOKE_STEPS[3], lambda: train(spec))
    steps[-1].update(finished_step=run.finished_step(), fast_inference=spec.preset.fast_inference,
                     rewards=[h.get("reward") for h in trained.log_history if "reward" in h])
    opened, _ = step(SMOKE_STEPS[4], lambda: notebook.open_run(str(run_dir)))
    # the smoke's own reward (distinct_characters, recorded as benchmarks.gpu_pipeline's) is this proof's code
    step(SMOKE_STEPS[5], lambda: measure_after(opened, trust_remote_code=True))
    steps[-1]["report"] = opened.report.is_file()

    def export() -> str:
        try:
            return notebook.export_run(opened, ["merged"], questions=4,
                                       base=str(base) if config.use_unsloth else None, trust_remote_code=True)
        except ExportRefused as e:  # the pipeline ran; the check said no (a random policy's answers)
            return f"REFUSED: {e}".splitlines()[0]

    said = step(SMOKE_STEPS[6], export)
    steps[-1]["verification"] = said[:600]
