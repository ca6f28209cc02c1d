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
    """Time one test's setup, call and teardown; append ``{"id", "self", "children", "wall"}`` (seconds), the xdist
    ``worker`` that ran it and when it ``started`` (Unix time, seconds), from which :func:`idle` reads each worker's
    time between tests."""
    (own, children), start, started = _cpu_s(), time.perf_counter(), time.time()
    yield
    (own_after, children_after), wall = _cpu_s(), time.perf_counter() - start
    path = os.environ.get("GRPO_KIT_TEST_CPU")
    if path:
        row = {"id": item.nodeid, "self": round(own_after - own, 2), "children": round(children_after - children, 2),
               "wall": round(wall, 2), "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
               "started": round(started, 2)}
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


def idle(rows: list[dict]) -> dict[str, tuple[float, float, float]]:
    """Per worker ``(before its first test, between tests, after its last test until the last worker's end)``, in
    seconds: what a worker spent starting (collecting), between tests, and waiting for the other at the end.

    >>> idle([{"worker": "gw0", "started": 10, "wall": 5}, {"worker": "gw0", "started": 16, "wall": 4},
    ...       {"worker": "gw1", "started": 12, "wall": 20}])
    {'gw0': (0, 1, 12), 'gw1': (2, 0, 0)}
    """
    workers: dict[str, list[dict]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: r["started"]):
        workers[row["worker"]].append(row)
    first = min(r["started"] for r in rows)
    end = max(r["started"] + r["wall"] for r in rows)
    result = {}
    for worker, own in sorted(workers.items()):
        between = sum(b["started"] - (a["started"] + a["wall"]) for a, b in zip(own, own[1:]))
        result[worker] = (round(own[0]["started"] - first, 2), round(between, 2),
                          round(end - own[-1]["started"] - own[-1]["wall"], 2))
    return result


def main(path: str, top: int = 20) -> None:
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    own, children = sum(r["self"] for r in rows), sum(r["children"] for r in rows)
    print(f"{len(rows)} tests: {own + children:.0f} CPU s ({own:.0f} in the test processes, {children:.0f} in their "
          f"children), {sum(r['wall'] for r in rows):.0f} s of wall time summed over tests")
    print("\n| file | CPU s | in-process | children | wall s | tests |\n| --- | --: | --: | --: | --: | --: |")
    for name, own, children, wall, count in by_file(rows)[:top]:
        print(f"| `{name}` | {own + children:.1f} | {own:.1f} | {children:.1f} | {wall:.1f} | {count} |")
    if all("started" in row for row in rows):
        print("\nper worker, seconds: after the first worker's first test until its own first, between its tests, "
              "after its last test until the last worker ended")
        for worker, (before, between, after) in idle(rows).items():
            print(f"  {worker}: {before:.1f}, {between:.1f}, {after:.1f}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
