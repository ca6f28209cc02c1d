"""The four notebooks run headless, in order, on the CPU preset; committed copies carry no outputs."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ORDER = ["01_explore.ipynb", "02_baseline_eval.ipynb", "03_train_grpo.ipynb", "04_post_training_eval.ipynb"]


@pytest.mark.parametrize("name", ORDER)
def test_committed_notebooks_carry_no_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: clear outputs before committing"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), f"{name}: the first code cell must be tagged parameters"
    assert "colab.research.google.com" in nb.cells[0].source


def _check_outputs(path: Path) -> None:
    """Every cell tagged `table` shows a table, `markdown` a markdown table, and `plot` an image."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        kinds = {k for out in cell.get("outputs", []) for k in out.get("data", {})}
        if "table" in tags:
            assert "text/html" in kinds, f"{path.name}: a table cell shows no table:\n{cell.source[:200]}"
        if "markdown" in tags:
            assert "text/markdown" in kinds, f"{path.name}: a markdown cell shows nothing:\n{cell.source[:200]}"
        if "plot" in tags:
            assert "image/png" in kinds, f"{path.name}: a plot cell shows no plot:\n{cell.source[:200]}"


# Executed copies land here (git-ignored) so they can be opened after `make test`.
EXECUTED = NOTEBOOKS.parent / "runs" / "notebooks-cpu"


@pytest.mark.slow
def test_notebooks_run_in_order_on_the_cpu_preset(tmp_path):
    import shutil

    import papermill

    shutil.rmtree(EXECUTED, ignore_errors=True)
    EXECUTED.mkdir(parents=True)
    run_dir = str(EXECUTED)
    common = dict(preset="cpu-tiny", run_dir=run_dir, warm_start_steps=6)
    parameters = {
        "01_explore.ipynb": dict(preset="cpu-tiny", map_size=500),
        "02_baseline_eval.ipynb": dict(common, eval_size=8, max_new_tokens=24, batch_size=8, samples=2),
        "03_train_grpo.ipynb": dict(common, max_steps=2, train_size=32,
                                    preset_overrides={"per_device_train_batch_size": 8, "max_completion_length": 16}),
        "04_post_training_eval.ipynb": dict(run_dir=run_dir, batch_size=8),
    }
    walls = {}
    for name in ORDER:
        out = EXECUTED / name
        start = time.perf_counter()
        papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters[name], cwd=str(tmp_path),
                                   kernel_name="python3", progress_bar=False)
        walls[name] = time.perf_counter() - start
        _check_outputs(out)
    print("notebook wall times (s):", {k: round(v, 1) for k, v in walls.items()})
    run = Path(run_dir)
    assert {"baseline.jsonl", "trained.jsonl", "eval_settings.json", "log_history.json", "training_curves.png",
            "model", "generations.jsonl", "baseline_sampled.jsonl", "trained_sampled.jsonl", "comparison.csv",
            "before_after.png"} <= {p.name for p in run.iterdir()}
    executed = nbformat.read(EXECUTED / "04_post_training_eval.ipynb", as_version=4)
    shown = "".join(str(o.get("data", {})) for c in executed.cells for o in c.get("outputs", []))
    assert "Strict accuracy" in shown and "pass@2 (strict)" in shown and "McNemar" in shown
