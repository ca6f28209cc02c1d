"""`make demo` from a fresh clone, timed phase by phase, in wall time and in CPU time: the install (`make install-demo`:
.venv and the packages the demo needs, with uv where it is on PATH, else pip: what `make demo` installs first), the
start (Python, imports, the task), then the demo's own phases (the tiny policy, the baseline evaluation, GRPO, the
evaluation after GRPO), and the whole.

CPU time (user + system, every thread and child) does not grow when other jobs share the cores, where wall time does:
on a busy machine it is the figure to compare, and on 2 quiet cores a phase's wall time is about its CPU time over the
cores it keeps busy (torch's threads: about 1.5 of 2 in the GRPO steps). The load average is printed before and after.

It clones the repository (the committed HEAD of the checkout it runs from) into a temporary folder and runs there,
so nothing of this checkout (its .venv, its .cache) is reused: the installer's own download cache is, as on any
machine that installed Python packages before. The demo runs as `make demo` runs it (`python -m grpo_kit demo` in the
clone's .venv), through a wrapper that reads each phase's CPU time where the demo reads its wall time.
``--venv`` skips the install and runs the demo with an existing virtual environment's Python, to time the demo alone.

Run: python3 benchmarks/demo_phases.py [--venv .venv] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What the clone's Python runs: ``python -m grpo_kit demo``, each demo phase's CPU time read beside its wall time
#: (``grpo_kit.runs.pipeline._timed``), and the start (interpreter to the first phase) as a phase of its own.
_WRAPPER = """
import contextlib, json, os, sys, time
import grpo_kit.runs.pipeline as pipeline

cpu, wall, timed = {}, {}, pipeline._timed

def cpu_s():
    own = os.times()
    return own.user + own.system + own.children_user + own.children_system

@contextlib.contextmanager
def with_cpu(walls, step):
    if not cpu:
        cpu["start (Python, imports, the task)"] = cpu_s()
        wall["start (Python, imports, the task)"] = time.time() - START
    begin = cpu_s()
    with timed(walls, step):
        yield
    cpu[step] = cpu_s() - begin

pipeline._timed = with_cpu
from grpo_kit.cli import main
code = main(["demo"])
print("DEMO_CPU " + json.dumps({"cpu": cpu, "start_wall": wall}), flush=True)
sys.exit(code)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], cwd: Path, env: dict[str, str], capture: bool = False) -> tuple[float, float, str]:
    """Wall and CPU seconds of a command (and its standard output when ``capture``)."""
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.PIPE if capture else None, text=True)
    return time.perf_counter() - start, _children_cpu() - cpu, done.stdout or ""


def machine() -> str:
    """The CPU kind the budget is set per (``AMX``, ``AVX-512`` or ``AVX2``, from /proc/cpuinfo's flags) and its model
    name: ``"AVX-512 (AMD EPYC)"``; ``"unknown CPU"`` without /proc/cpuinfo. `make test`'s last line names the machine
    with it too (the Makefile's CPU_MACHINE)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU"
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split()) if "flags" in text else set()
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    kind = "AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    return f"{kind} ({model.group(1).strip() if model else 'model not named'})"


def demo_walls(report: str) -> dict[str, float]:
    """The demo's ``## Wall times (s)`` section of ``report.md`` as ``{phase: seconds}``.

    >>> demo_walls("## Wall times (s)\\n\\n- warm start: 0.4\\n- GRPO training: 81.0\\n\\n## Versions\\n- torch: 2")
    {'warm start': 0.4, 'GRPO training': 81.0}
    """
    section = report.split("## Wall times (s)", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^- (.+?): ([\d.]+)$", section, re.M)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", help="link this virtual environment instead of installing (times the demo alone)")
    parser.add_argument("--keep", help="clone into this folder and keep it (default: a temporary folder)")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="demo-phases-"))
    work.mkdir(parents=True, exist_ok=True)
    clone = work / "grpo_kit"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    load_before = os.getloadavg()[0]
    rows: dict[str, tuple[float, float | None]] = {}
    total_start, total_cpu = time.perf_counter(), _children_cpu()
    wall, cpu, _ = _timed(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], work, env)
    rows["clone"] = (wall, cpu)
    if args.venv:
        python = str(Path(args.venv).resolve() / "bin" / "python")
        env = {**env, "PYTHONPATH": str(clone)}
    else:
        installer = "uv" if shutil.which("uv") else "pip"
        wall, cpu, _ = _timed(["make", "install-demo"], clone, env)
        rows[f"install (make install-demo, {installer})"] = (wall, cpu)
        python = str(clone / ".venv" / "bin" / "python")
    start = f"START = {time.time()!r}\n"  # the wrapper's clock starts when this process launches it
    wall, cpu, out = _timed([python, "-c", _WRAPPER.replace("import contextlib", start + "import contextlib", 1)],
                            clone, env, capture=True)
    print(out.rsplit("DEMO_CPU ", 1)[0], end="")
    measured = json.loads(out.rsplit("DEMO_CPU ", 1)[1])
    walls = {**measured["start_wall"],
             **demo_walls((clone / "runs" / "demo" / "report.md").read_text(encoding="utf-8"))}
    for name, seconds in walls.items():  # the report's own "total" is its phases'
        label = "the demo's phases in all (its report)" if name == "total" else name
        rows[label] = (seconds, measured["cpu"].get(name))
    rows["demo in all (python -m grpo_kit demo)"] = (wall, cpu)
    rows["total, from the clone to the before/after table"] = (time.perf_counter() - total_start,
                                                                _children_cpu() - total_cpu)
    print("\n| phase | wall s | CPU s |\n| --- | --: | --: |")
    for name, (seconds, used) in rows.items():
        print(f"| {name} | {seconds:.1f} | {'' if used is None else f'{used:.1f}'} |")
    print(f"\n{os.cpu_count()} CPUs of {machine()}; load average {load_before:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
