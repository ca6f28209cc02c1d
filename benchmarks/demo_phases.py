"""`make demo` from a fresh clone, timed phase by phase: the install (`make install-demo`: .venv and the packages
the demo needs, what `make demo` installs first), then
the demo's own phases as its report records them (the tiny policy, the baseline evaluation, GRPO, the evaluation
after GRPO), and the whole.

It clones the repository (the committed HEAD of the checkout it runs from) into a temporary folder and runs there,
so nothing of this checkout (its .venv, its .cache) is reused: pip's own download cache is, as on any machine that
installed Python packages before. ``--venv`` skips the install and runs the demo with an existing virtual
environment's Python (``python -m grpo_kit demo``, what ``make demo`` runs after installing), to time the demo alone.

Run: python3 benchmarks/demo_phases.py [--venv .venv] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True)
    return time.perf_counter() - start


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
    phases: dict[str, float] = {}
    total_start = time.perf_counter()
    phases["clone"] = _timed(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], work, env)
    if args.venv:
        python = str(Path(args.venv).resolve() / "bin" / "python")
        phases["demo (python -m grpo_kit demo, install skipped)"] = _timed(
            [python, "-m", "grpo_kit", "demo"], clone, {**env, "PYTHONPATH": str(clone)})
    else:
        phases["install (make install-demo: .venv and the demo's packages)"] = _timed(["make", "install-demo"], clone,
                                                                                       env)
        phases["demo (make demo once installed)"] = _timed(["make", "demo"], clone, env)
    phases["total"] = time.perf_counter() - total_start
    walls = demo_walls((clone / "runs" / "demo" / "report.md").read_text(encoding="utf-8"))
    print("\n| phase | seconds |\n| --- | --: |")
    for name, seconds in phases.items():
        print(f"| {name} | {seconds:.1f} |")
    print("\nInside `make demo` (the demo's report):\n\n| demo phase | seconds |\n| --- | --: |")
    for name, seconds in walls.items():
        print(f"| {name} | {seconds:.1f} |")
    print(f"\n{os.cpu_count()} CPUs; load average before the end: {os.getloadavg()[0]:.1f}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
