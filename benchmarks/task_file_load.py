"""Loading a large task file: time and peak memory of ``load_task`` on a JSONL of a given size, and how soon a bad
last line is reported.

A task file's rows are read one at a time, checked, and kept as an Arrow table built a batch at a time
(``grpo_kit.tasks.task_file``), so memory holds the kept rows once in Arrow's compact form. Each load runs in a
fresh Python process, so its peak resident memory (``ru_maxrss``) is its own; the memory the process held after
importing the kit (before the file is read) is given apart and taken off.

Run: .venv/bin/python benchmarks/task_file_load.py [--megabytes 200]
Target (issue 34): peak memory of the load at most 2x the rows it keeps (the Arrow table's bytes); a bad line is
reported as soon as it is read.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = """
import json, resource, sys, time
import pyarrow, datasets
from grpo_kit.tasks.task_file import load_task
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
start = time.perf_counter()
try:
    task = load_task(sys.argv[1])
    test = task.load("test")
    kept, rows, error = test.data.table.nbytes, test.num_rows, None
except ValueError as e:
    kept, rows, error = 0, 0, str(e)[:160]
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "imports": before, "peak": peak, "kept": kept, "rows": rows, "error": error}))
"""


def write_jsonl(path: Path, megabytes: float, seed: int = 0) -> int:
    """A JSONL task of about ``megabytes`` MB: number answers, a question and a short worked solution per row."""
    rng = random.Random(seed)
    words = "apples pears boxes each costs how many does she have left total price miles hours".split()
    rows, size, limit = 0, 0, int(megabytes * 1e6)
    with path.open("w", encoding="utf-8") as f:
        while size < limit:
            a, b = rng.randrange(1, 999), rng.randrange(1, 999)
            line = json.dumps({"id": rows, "question": f"{' '.join(rng.choices(words, k=12))}: {a} plus {b}?",
                               "answer": str(a + b), "solution": f"{a} + {b} = {a + b}"}) + "\n"
            f.write(line)
            size += len(line)
            rows += 1
    return rows


def load(task: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(task)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = write_jsonl(folder / "test.jsonl", args.megabytes)
        size = (folder / "test.jsonl").stat().st_size
        (folder / "task.yaml").write_text("test: test.jsonl\nquestion: question\nanswer: answer\nanswer_type: number\n"
                                          "solution: solution\n", encoding="utf-8")
        good = load(folder / "task.yaml")
        with (folder / "test.jsonl").open("a", encoding="utf-8") as f:
            f.write("{not json\n")
        bad = load(folder / "task.yaml")
    mb = 1e6
    print(f"task file: {size / mb:.0f} MB JSONL, {rows} rows (plus, for the second load, a bad last line)")
    print(f"load: {good['seconds']:.1f} s, {good['rows']} rows kept in an Arrow table of {good['kept'] / mb:.0f} MB")
    print(f"peak memory: {good['peak'] / mb:.0f} MB resident, of which {good['imports'] / mb:.0f} MB after imports "
          f"(before reading); the load's own {(good['peak'] - good['imports']) / mb:.0f} MB = "
          f"{(good['peak'] - good['imports']) / max(1, good['kept']):.2f}x the kept rows (target <= 2x)")
    print(f"bad last line reported after {bad['seconds']:.1f} s (reading the {rows} good rows first): {bad['error']}")


if __name__ == "__main__":
    main()
