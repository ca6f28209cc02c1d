"""Where `make test`'s CPU goes, test by test: a pytest plugin, and a summary of what it wrote by file.

Around each test it reads ``getrusage`` of the test process (``self``: the test's own work, in-process training
included) and of the children that process waited for (``children``: `python -m grpo_kit` subprocesses, launches,
notebook kernels, pip, llama.cpp), and appends one JSON line per test to the file ``GRPO_KIT_TEST_CPU`` names (every
xdist worker appends to the same file). A child nobody waits for (vLLM's engine processes, a process killed in another
session) is not counted, and a test that shares its cores with others (``-n 2`` beside the stack suite) counts the CPU
it got, not what it waited for: wall time minus CPU time is that wait.

Run, then summarise:
    GRPO_KIT_TEST_CPU=runs/test-cpu.jsonl PYTHONPATH=benchmarks make test-main PYTEST_ARGS="-p pytest_cpu"
    python3 benchmarks/pytest_cpu.py runs/test-cpu.jsonl
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict

import pytest


def _cpu_s() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its waited-for children, so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Time one test's setup, call and teardown; append ``{"id", "self", "children", "wall"}`` (seconds)."""
    (own, children), start = _cpu_s(), time.perf_counter()
    yield
    (own_after, children_after), wall = _cpu_s(), time.perf_counter() - start
    path = os.environ.get("GRPO_KIT_TEST_CPU")
    if path:
        row = {"id": item.nodeid, "self": round(own_after - own, 2), "children": round(children_after - children, 2),
               "wall": round(wall, 2)}
        with open(path, "a", encoding="utf-8") as out:  # one short line per write: appends do not interleave
            out.write(json.dumps(row) + "\n")


def by_file(rows: list[dict]) -> list[tuple[str, float, float, float, int]]:
    """``(file, self, children, wall, tests)`` per test file, the most CPU first.

    >>> by_file([{"id": "a.py::t", "self": 1, "children": 2, "wall": 4}, {"id": "b.py::u", "self": 5, "children": 0,
    ...          "wall": 5}, {"id": "a.py::v", "self": 1, "children": 0, "wall": 1}])
    [('b.py', 5, 0, 5, 1), ('a.py', 2, 2, 5, 2)]
    """
    files: dict[str, list] = defaultdict(lambda: [0, 0, 0, 0])
    for row in rows:
        total = files[row["id"].split("::")[0]]
        for i, key in enumerate(("self", "children", "wall")):
            total[i] += row[key]
        total[3] += 1
    return sorted(((name, *totals) for name, totals in files.items()), key=lambda r: -(r[1] + r[2]))


def main(path: str, top: int = 20) -> None:
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    own, children = sum(r["self"] for r in rows), sum(r["children"] for r in rows)
    print(f"{len(rows)} tests: {own + children:.0f} CPU s ({own:.0f} in the test processes, {children:.0f} in their "
          f"children), {sum(r['wall'] for r in rows):.0f} s of wall time summed over tests")
    print("\n| file | CPU s | in-process | children | wall s | tests |\n| --- | --: | --: | --: | --: | --: |")
    for name, own, children, wall, count in by_file(rows)[:top]:
        print(f"| `{name}` | {own + children:.1f} | {own:.1f} | {children:.1f} | {wall:.1f} | {count} |")


if __name__ == "__main__":
    main(*sys.argv[1:2])
