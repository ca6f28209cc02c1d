"""A task of your own on a CPU, from nothing to the before/after table, timed phase by phase: the commands of
docs/tutorials/your-own-data.md with their defaults (the tiny policy's warm start sized to the task, the completion
budget from its answers, the cpu-tiny preset's GRPO steps), on two tasks:

- ``capitals``: the example shipped in examples/capitals/ (60 train rows, 20 test rows, short text answers);
- ``words``: 300 train rows of "Write the number 265 in words." -> "two hundred and sixty-five" (text answers with
  hyphens) and 60 test rows, written here.

Each task runs in a fresh temporary folder with an empty cache (its warm start included), through
``python -m grpo_kit`` in a subprocess:

    eval --before --task TASK.yaml --run-dir RUN --samples 8
    train --run-dir RUN --eval_strategy steps --eval_steps 10
    eval --run-dir RUN

It prints, per phase, the time each command announced (the kit's estimate for this machine) beside the time it
took, the total against the 10-minute target, and the machine: CPU model, cores, torch threads and the load average
before and after (other work on the machine slows every phase; say so with the numbers).

Run: .venv/bin/python benchmarks/own_task.py [--tasks capitals words] [--threads N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from demo_phases import machine as machine_name  # benchmarks/ is this script's folder: on sys.path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 600

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def in_words(n: int) -> str:
    """A number below 1000 in British English words.

    >>> in_words(265), in_words(40), in_words(7), in_words(300)
    ('two hundred and sixty-five', 'forty', 'seven', 'three hundred')
    """
    hundreds, rest = divmod(n, 100)
    tens, ones = divmod(rest, 10)
    below = _ONES[rest] if rest < 20 else _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if not hundreds:
        return below
    return f"{_ONES[hundreds]} hundred" + (f" and {below}" if rest else "")


def words_task(folder: Path, train: int = 300, test: int = 60, seed: int = 0) -> Path:
    """Write the ``words`` task (CSV data, text answers) into ``folder``; return its task file."""
    import csv
    import random

    numbers = random.Random(seed).sample(range(1, 1000), train + test)
    folder.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.csv", numbers[:train]), ("test.csv", numbers[train:])):
        with open(folder / name, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["question", "answer"])
            writer.writerows([f"Write the number {n} in words.", in_words(n)] for n in part)
    task = folder / "task.yaml"
    task.write_text("name: words\ndescription: a number below 1000 written in words\ntrain: train.csv\n"
                    "test: test.csv\nquestion: question\nanswer: answer\nanswer_type: text\n"
                    "rewards: {text_correctness_reward_func: 2.0, strict_format_reward_func: 0.5, "
                    "xmlcount_reward_func: 0.5}\nvalidation_size: 10\n", encoding="utf-8")
    return task


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


_ANNOUNCED = re.compile(r"\[grpo_kit\] (.+?): (about [\d.]+ (?:s|min|h)|a few seconds) on this machine")


def _run(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, list[tuple[str, str]]]:
    """Run one command, its output into ``log``; return its wall time and the phases it announced."""
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
    wall = time.perf_counter() - start
    text = log.read_text(encoding="utf-8", errors="replace")
    return wall, [(m.group(1)[:90], m.group(2)) for m in _ANNOUNCED.finditer(text)]


def run_task(name: str, task_file: Path, work: Path, env: dict[str, str]) -> dict[str, object]:
    run, cache = work / f"run-{name}", work / f"cache-{name}"
    kit = [sys.executable, "-m", "grpo_kit"]
    steps = {
        "eval --before (warm start, baseline)": [*kit, "eval", "--before", "--task", str(task_file), "--run-dir",
                                                 str(run), "--samples", "8", "--cache-dir", str(cache)],
        "train (GRPO, cpu-tiny defaults)": [*kit, "train", "--run-dir", str(run), "--cache-dir", str(cache),
                                            "--eval_strategy", "steps", "--eval_steps", "10"],
        "eval (after training, report)": [*kit, "eval", "--run-dir", str(run)],
    }
    phases = {}
    for label, argv in steps.items():
        before = _load()
        wall, announced = _run(argv, work, env, work / f"{name}-{label.split()[0]}{len(phases)}.log")
        phases[label] = {"seconds": round(wall, 1), "load_before": before, "load_after": _load(),
                         "announced": announced}
    report = (run / "report.md").read_text(encoding="utf-8")
    table = report.split("## Greedy", 1)[1].split("\n\n")[1]
    return {"task": name, "phases": phases, "total_s": round(sum(p["seconds"] for p in phases.values()), 1),
            "greedy_table": table}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=["capitals", "words"], default=["capitals", "words"])
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS (default: torch's own choice)")
    parser.add_argument("--keep", help="work in this folder and keep it (default: a temporary folder)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="own-task-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    import torch

    machine = {"cpu": machine_name(), "cores": os.cpu_count(), "torch_threads": args.threads or torch.get_num_threads(),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_at_start": _load()}
    print(f"machine: {machine['cpu']}, {machine['cores']} cores, torch threads {machine['torch_threads']}, "
          f"{machine['date']}, load average (1/5/15 min) at start {machine['load_at_start']}", flush=True)
    results = []
    for name in args.tasks:
        task_file = ROOT / "examples" / "capitals" / "task.yaml" if name == "capitals" else \
            words_task(work / "words")
        result = run_task(name, task_file, work, env)
        results.append(result)
        print(f"\n## {name}: {result['total_s']:.0f} s from nothing to the before/after table "
              f"(target {TARGET_S} s on 2 quiet cores)\n", flush=True)
        print("| command | seconds | load before -> after | announced (the kit's estimate here) |")
        print("| --- | --: | --- | --- |")
        for label, p in result["phases"].items():
            said = "; ".join(f"{what}: {how}" for what, how in p["announced"]) or "(nothing over 10 s expected)"
            print(f"| {label} | {p['seconds']:.0f} | {p['load_before']} -> {p['load_after']} | {said} |")
        print("\n" + result["greedy_table"], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=1), encoding="utf-8")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
