"""GRPO step time on one process against two (DDP, gloo) on the same global batch, on this machine's CPU.

Both runs train the same tiny policy (random weights, built here) with `python -m grpo_kit train`:
one process with ``--global-batch`` completions per step, and two processes launched with
``accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 2`` with half each. The
step time is TRL's logged ``step_time`` (median over the steps after the first). On a GPU machine the
same comparison with ``--preset multi-gpu-lora`` is the one that matters; a 2-core CPU shows only that
the route works and what it costs.

Run: .venv/bin/python benchmarks/ddp_step.py [--steps 8 --global-batch 32 --completion 32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_policy(folder: Path) -> None:
    from grpo_kit.data import load_gsm8k, tokenizer_texts
    from grpo_kit.models import build_tiny_policy

    model, tokenizer = build_tiny_policy(tokenizer_texts(load_gsm8k("train").select(range(500))), seed=0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def run(processes: int, model: Path, run_dir: Path, args: argparse.Namespace) -> float:
    """Train and return the median step time in seconds."""
    per_device = args.global_batch // processes
    train = ["-m", "grpo_kit", "train", "--preset", "cpu-tiny", "--model", str(model), "--run-dir", str(run_dir),
             "--max-steps", str(args.steps), "--save-steps", "1000", "--train-size", "256",
             "--rewards", "xmlcount_reward_func", "strict_format_reward_func",
             "--set", f"per_device_train_batch_size={per_device}", "--set", f"max_completion_length={args.completion}"]
    if processes == 1:
        command = [sys.executable, *train]
    else:
        accelerate = str(Path(sys.executable).with_name("accelerate"))
        command = [accelerate, "launch", "--config_file", str(ROOT / "configs/accelerate/ddp.yaml"),
                   "--num_processes", str(processes), "--mixed_precision", "no", *train]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True)
    history = json.loads((run_dir / "log_history.json").read_text())
    times = [row["step_time"] for row in history if "step_time" in row]
    return statistics.median(times[1:] or times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--global-batch", type=int, default=32, help="completions per optimiser step, in all")
    parser.add_argument("--completion", type=int, default=32, help="completion length in tokens")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "policy"
        build_policy(model)
        one = run(1, model, Path(tmp) / "one", args)
        two = run(2, model, Path(tmp) / "two", args)
    print(f"tiny policy, {args.global_batch} completions of up to {args.completion} tokens per step, "
          f"{args.steps} steps")
    print(f"1 process            median step {one:.3f} s")
    print(f"2 processes (DDP)    median step {two:.3f} s   ({one / two:.2f}x the single process)")


if __name__ == "__main__":
    main()
