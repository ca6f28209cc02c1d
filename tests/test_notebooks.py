"""The notebooks run headless on the CPU preset (01-04 in order, 05 on its own); committed copies carry no outputs, and
the documentation site's copies (docs/notebooks/) carry the outputs of a CPU run of the current code cells."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
DOCS = NOTEBOOKS.parent / "docs" / "notebooks"
ORDER = ["01_explore.ipynb", "02_baseline_eval.ipynb", "03_train_grpo.ipynb", "04_post_training_eval.ipynb"]
COMPARE = "05_compare_runs.ipynb"


@pytest.mark.parametrize("name", [*ORDER, COMPARE])
def test_committed_notebooks_carry_no_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: clear outputs before committing"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), f"{name}: the first code cell must be tagged parameters"
    assert "colab.research.google.com" in nb.cells[0].source


@pytest.mark.parametrize("name", [*ORDER, COMPARE])
def test_the_docs_show_each_notebook_as_it_ran_on_a_cpu(name):
    """docs/notebooks/NAME is NAME run (scripts/notebook_outputs.py): the same code cells, each executed, none failed,
    the cells that show a table, a report or a plot showing it, and a note naming the machine and the date."""
    shown = nbformat.read(DOCS / name, as_version=4)
    source = [c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells if c.cell_type == "code"]
    ran = [c for c in shown.cells if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])]
    assert [c.source for c in ran] == source, f"docs/notebooks/{name} is out of date: run scripts/notebook_outputs.py"
    assert all(c.execution_count is not None for c in ran), f"docs/notebooks/{name}: a cell did not run"
    assert not [o for c in ran for o in c.outputs if o.output_type == "error"], f"docs/notebooks/{name}: a cell failed"
    assert "cores, load average" in shown.cells[1].source and "scripts/notebook_outputs.py" in shown.cells[1].source
    _check_outputs(DOCS / name)


@pytest.mark.parametrize("name", [*ORDER, COMPARE])
def test_each_notebook_says_what_it_needs_and_holds_at_most_12_settings_grouped(name):
    """The opening says GPU or not and that the GPU route has not run on a real GPU; the parameters cell holds at
    most 12 settings under comment headings; the GPU notebooks run on a CPU with one switch, cpu_demo."""
    import ast

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    opening = nb.cells[0].source.split("\n")
    needs = next(line for line in opening[1:] if line.strip())  # the first line under the title
    assert "Needs" in needs and "has not yet run on a real GPU" in needs, needs
    assert ("only a CPU" in needs) == (name == "01_explore.ipynb"), needs
    parameters = next(c for c in nb.cells if c.cell_type == "code").source
    settings = [node.targets[0].id for node in ast.parse(parameters).body if isinstance(node, ast.Assign)]
    assert len(settings) <= 12, f"{name}: {len(settings)} settings: {settings}"
    headings = [line for line in parameters.splitlines()[1:] if line.startswith("# ")]
    assert len(headings) >= 2, f"{name}: group the settings under comment headings"
    assert ("cpu_demo" in settings) == (name not in ("01_explore.ipynb", "04_post_training_eval.ipynb")), settings


def _check_outputs(path: Path) -> None:
    """Every cell tagged `table` shows a table, `markdown` a markdown table, and `plot` an image; no cell shows a
    stray value (a bare True or False), and the kit's information lines are not on standard error, which Jupyter
    draws as an error (issue 46)."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            stray = out.get("output_type") == "execute_result" and set(out.get("data", {})) == {"text/plain"} \
                and out["data"]["text/plain"] in ("True", "False", "None")
            assert not stray, f"{path.name}: a cell ends in a bare {out['data']['text/plain']}:\n{cell.source[-200:]}"
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                info = [line for line in out["text"].splitlines() if line.startswith("[grpo_kit] ")
                        and not line.startswith(("[grpo_kit] WARNING", "[grpo_kit] ERROR"))]
                assert not info, f"{path.name}: information drawn as an error: {info[:2]}"
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
@pytest.mark.parametrize("task", ["countdown"])
def test_notebooks_run_in_order_on_the_cpu_preset(tmp_path, task):
    """Notebooks 01-04 in order on one built-in task, Countdown: its one-line reward swap runs every cell a GSM8K run
    does and the swap besides. A task's default reward set (no `rewards`) goes through notebook 03 in
    tests/test_notebooks_task_file.py, and GSM8K through all five in the docs' executed copies
    (scripts/notebook_outputs.py, checked above). A second run here on GSM8K took 67 CPU seconds of make test."""
    import json

    import papermill

    executed = EXECUTED / task
    shutil.rmtree(executed, ignore_errors=True)
    executed.mkdir(parents=True)
    run_dir = str(executed)
    tiny = {"warm_start_steps": 6, "eval_size": 8, "max_new_tokens": 24, "batch_size": 8}  # the cpu_demo switch's knobs
    # Countdown swaps a reward in one line: the XML tag count becomes a logged, untrained metric.
    rewards = {"strict_format_reward_func": 1.0, "countdown_reward_func": 1.0, "xmlcount_reward_func": 0.0} \
        if task == "countdown" else None
    parameters = {
        "01_explore.ipynb": dict(task=task, preset="cpu-tiny", map_size=500),
        "02_baseline_eval.ipynb": dict(task=task, run_dir=run_dir, samples=2, cpu_demo=tiny),
        "03_train_grpo.ipynb": dict(task=task, run_dir=run_dir, max_steps=2, rewards=rewards, cpu_demo=dict(
            tiny, train_size=32, preset_overrides={"per_device_train_batch_size": 8, "max_completion_length": 16})),
        "04_post_training_eval.ipynb": dict(run_dir=run_dir, export_questions=4),
    }
    walls = {}
    for name in ORDER:
        out = executed / name
        start = time.perf_counter()
        papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters[name], cwd=str(tmp_path),
                                   kernel_name="python3", progress_bar=False)
        walls[name] = time.perf_counter() - start
        _check_outputs(out)
    print(f"notebook wall times (s), {task}:", {k: round(v, 1) for k, v in walls.items()})
    run = Path(run_dir)
    assert {"baseline.jsonl", "trained.jsonl", "eval_settings.json", "log_history.json", "training_curves.png",
            "model", "generations.jsonl", "baseline_sampled.jsonl", "trained_sampled.jsonl", "comparison.csv",
            "before_after.png"} <= {p.name for p in run.iterdir()}
    final = nbformat.read(executed / "04_post_training_eval.ipynb", as_version=4)
    shown = "".join(str(o.get("data", {})) for c in final.cells for o in c.get("outputs", []))
    assert "Strict accuracy" in shown and "pass@2 (strict)" in shown and "McNemar" in shown
    assert "merged export (float32)" in shown and "PASSED" in shown  # the export section, verified
    assert (run / "export" / "merged" / "README.md").is_file()
    assert ("Countdown reward" in shown) == (task == "countdown")
    assert (run / "view.html").is_file() and "the same page, to open in a browser" in shown  # the run viewer, inline
    logged = {k for row in json.loads((run / "log_history.json").read_text()) for k in row}
    if task == "countdown":
        assert {"rewards/countdown_reward_func/mean", "rewards/xmlcount_reward_func/mean"} <= logged


@pytest.mark.slow
def test_compare_notebook_trains_two_variants_on_one_baseline(tmp_path):
    import papermill

    executed = EXECUTED / "compare"
    shutil.rmtree(executed, ignore_errors=True)
    executed.mkdir(parents=True)
    run_dir = executed / "runs"
    out = executed / COMPARE
    start = time.perf_counter()
    papermill.execute_notebook(
        str(NOTEBOOKS / COMPARE), str(out), cwd=str(tmp_path), kernel_name="python3", progress_bar=False,
        parameters=dict(task="sum3", run_dir=str(run_dir), max_steps=2, eval_size=8, samples=2, cpu_demo=dict(
            warm_start_steps=6, max_new_tokens=16, batch_size=8,
            preset_overrides={"per_device_train_batch_size": 8, "max_completion_length": 16})))
    print(f"notebook 05 wall time: {time.perf_counter() - start:.1f} s")
    _check_outputs(out)
    variants = ["format-only", "correctness"]  # the sum3 task's reward sets, in order
    for name in variants:
        assert {"baseline.jsonl", "baseline_sampled.jsonl", "eval_settings.json", "trained.jsonl", "model",
                "report.md"} <= {p.name for p in (run_dir / name).iterdir()}
    assert (run_dir / "format-only" / "baseline.jsonl").read_text() == \
        (run_dir / "correctness" / "baseline.jsonl").read_text()  # one baseline, shared
    assert {"runs_comparison.md", "runs_pairs.csv", "runs_comparison.png"} <= \
        {p.name for p in (run_dir / "comparison").iterdir()}
    cells = nbformat.read(out, as_version=4).cells
    shown = "".join(str(o.get("data", {})) for c in cells for o in c.get("outputs", []))
    assert "baseline -> format-only" in shown and "baseline -> correctness" in shown
    assert "format-only -> correctness" in shown and "Holm" in shown
    assert "reward correctness_reward_func" in shown  # the settings that differ: its weight, 0 against 2
    assert (run_dir / "comparison" / "view.html").is_file() and "the same page, to open in a browser" in shown
