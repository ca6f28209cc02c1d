"""GRPO step time on one process against two (DDP, DeepSpeed ZeRO-2, ZeRO-3; gloo) on the same global batch,
on this machine's CPU.

Every run trains the same tiny policy (random weights, built here) with `python -m grpo_kit train`: one
process with ``--global-batch`` completions per step, and two processes launched with
``accelerate launch --config_file configs/accelerate/<config>.yaml --num_processes 2`` with half each. The
step time is TRL's logged ``step_time`` (median over the steps after the first). DeepSpeed comes from
``make install-deepspeed`` (``.deepspeed/``, or the folder GRPO_KIT_DEEPSPEED names); without it the ZeRO
rows are left out. On a GPU machine the same comparison with ``--preset multi-gpu-lora`` / ``multi-gpu-full``
is the one that matters; a 2-core CPU shows only that each route works and what it costs.

Run: .venv/bin/python benchmarks/multi_process_step.py [--steps 8 --global-batch 32 --completion 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEEPSPEED = Path(os.environ.get("GRPO_KIT_DEEPSPEED", ROOT / ".deepspeed"))


def build_policy(folder: Path) -> None:
    from grpo_kit.policy.tiny import build_tiny_policy
    from grpo_kit.tasks.gsm8k import load_gsm8k, tokenizer_texts

    model, tokenizer = build_tiny_policy(tokenizer_texts(load_gsm8k("train").select(range(500))), seed=0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def run(config: str | None, model: Path, run_dir: Path, args: argparse.Namespace) -> float:
    """Train on one process (``config=None``) or two under ``configs/accelerate/<config>.yaml``; return the
    median step time in seconds."""
    processes = 1 if config is None else 2
    train = ["-m", "grpo_kit", "train", "--preset", "cpu-tiny", "--run-dir", str(run_dir), "--train-size", "256",
             "--rewards", "xmlcount_reward_func", "strict_format_reward_func", "--model_name_or_path", str(model),
             "--max_steps", str(args.steps), "--save_steps", "1000",
             "--per_device_train_batch_size", str(args.global_batch // processes),
             "--max_completion_length", str(args.completion)]
    env = dict(os.environ)
    if config is None:
        command = [sys.executable, *train]
    else:
        accelerate = str(Path(sys.executable).with_name("accelerate"))
        command = [accelerate, "launch", "--config_file", str(ROOT / f"configs/accelerate/{config}.yaml"),
                   "--num_processes", "2", "--mixed_precision", "no", *train]
        if config.startswith("zero"):
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(DEEPSPEED), env.get("PYTHONPATH")]))
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True, env=env)
    history = json.loads((run_dir / "log_history.json").read_text())
    times = [row["step_time"] for row in history if "step_time" in row]
    return statistics.median(times[1:] or times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--global-batch", type=int, default=32, help="completions per optimiser step, in all")
    parser.add_argument("--completion", type=int, default=32, help="completion length in tokens")
    args = parser.parse_args()
    configs = ["ddp"] + (["zero2", "zero3"] if (DEEPSPEED / "deepspeed").is_dir() else [])
    print(f"tiny policy, {args.global_batch} completions of up to {args.completion} tokens per step, "
          f"{args.steps} steps")
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "policy"
        build_policy(model)
        one = run(None, model, Path(tmp) / "one", args)
        print(f"1 process              median step {one:.3f} s")
        for config in configs:
            two = run(config, model, Path(tmp) / config, args)
            print(f"2 processes ({config + ')':6} median step {two:.3f} s   ({one / two:.2f}x the single process)")
    if len(configs) == 1:
        print(f"(no ZeRO rows: DeepSpeed is not in {DEEPSPEED}; make install-deepspeed)")


if __name__ == "__main__":
    main()
