"""Run the five notebooks on a CPU with the kit's tiny policy and write them, outputs included, into docs/notebooks/:
what the documentation site shows, so a reader sees what each cell prints before spending GPU time.

01-04 run in order on GSM8K into one run folder (``cpu_demo``: the shipped tiny policy, 100 test questions, 64-token
completions, notebook 02's default samples; 40 GRPO steps, the CPU demo's, by which greedy answers take the format),
05 on the ``sum3`` experiment with the compare demo's settings (a 1000-step warm start, 60 GRPO steps per reward set,
300 questions: docs/tutorials/compare-runs.md), where the correctness set moves accuracy and the format-only set
does not. Each copy opens with
a note naming the machine, its load and the date. ``tests/test_notebooks.py`` checks that every copy holds the
notebook's current code cells, each run: edit a notebook, then run this again (about 15 minutes on 2 quiet cores,
most of it 05's warm start).

Run: .venv/bin/python scripts/notebook_outputs.py [--work DIR] [--only NAME ...]
(``--only 05_compare_runs.ipynb`` renders that page again and leaves the others as they are; 02-04 read the run
folder 02 writes, so they are rendered together.)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DOCS = ROOT / "docs" / "notebooks"
ORDER = ["01_explore.ipynb", "02_baseline_eval.ipynb", "03_train_grpo.ipynb", "04_post_training_eval.ipynb"]
COMPARE = "05_compare_runs.ipynb"


def _machine() -> str:
    cpu = platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} cores, load average {load} (1, 5, 15 min)"


def main() -> int:
    import nbformat
    import papermill

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", help="run folders go here (default: a temporary folder)")
    parser.add_argument("--only", nargs="+", choices=[*ORDER, COMPARE], help="render these pages only")
    args = parser.parse_args()
    names = [n for n in [*ORDER, COMPARE] if n in (args.only or [*ORDER, COMPARE])]
    if any(n in names for n in ORDER[1:]) and not set(ORDER[1:]) <= set(names):
        parser.error(f"--only: {', '.join(ORDER[1:])} share one run folder: render them together")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="notebooks-"))
    run_dir, compare_dir = work / "gsm8k", work / "compare"
    parameters = {
        "01_explore.ipynb": dict(preset="cpu-tiny", map_size=500),
        "02_baseline_eval.ipynb": dict(run_dir=str(run_dir), cpu_demo=True),
        "03_train_grpo.ipynb": dict(run_dir=str(run_dir), max_steps=40, cpu_demo=True),
        "04_post_training_eval.ipynb": dict(run_dir=str(run_dir)),
        COMPARE: dict(task="sum3", run_dir=str(compare_dir), max_steps=60, eval_size=300, samples=2,
                      cpu_demo=dict(warm_start_steps=1000, max_new_tokens=40)),
    }
    staging = work / "executed"
    staging.mkdir(parents=True, exist_ok=True)
    for name in names:
        start = time.perf_counter()
        out = staging / name
        papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters[name], cwd=str(work),
                                   kernel_name="python3", progress_bar=False)
        wall = time.perf_counter() - start
        nb = nbformat.read(out, as_version=4)
        note = nbformat.v4.new_markdown_cell(
            f"*This page is the notebook as it ran on a CPU with the kit's tiny policy (the parameters papermill "
            f"injected are the cell tagged `injected-parameters`): {_machine()}, "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}, {wall:.0f} s. On a GPU its numbers differ; what each "
            "cell prints is the same. `scripts/notebook_outputs.py` made it.*")
        note.metadata["tags"] = ["cpu-run-note"]
        nb.cells.insert(1, note)
        for cell in nb.cells:  # papermill's timings change at every run: kept out of the committed copy
            cell.metadata.pop("papermill", None)
            cell.metadata.pop("execution", None)
        nb.metadata.pop("papermill", None)
        nbformat.write(nb, out)
        print(f"{name}: {wall:.0f} s", flush=True)
    if args.only is None:
        shutil.rmtree(DOCS, ignore_errors=True) if DOCS.is_dir() and not DOCS.is_symlink() else \
            DOCS.unlink(missing_ok=True)
    DOCS.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(staging / name, DOCS / name)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
