"""Notebooks 02-05 run on a task file of your own (``task = "my_task.yaml"``) with nothing else changed: a JSONL of
string answers, measured, checked, trained, measured again and compared."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from tests.test_notebooks import COMPARE, NOTEBOOKS, _check_outputs

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "capitals"


@pytest.mark.slow
def test_notebooks_02_to_05_run_on_a_task_file(tmp_path):
    import papermill

    folder = tmp_path / "my_task"
    shutil.copytree(EXAMPLE, folder)
    task = str(folder / "task.yaml")
    run_dir = str(tmp_path / "runs" / "capitals")
    small = {"per_device_train_batch_size": 8, "max_completion_length": 16}
    tiny = {"warm_start_steps": 6, "batch_size": 8}  # the cpu_demo switch's knobs
    steps = [("02_baseline_eval.ipynb", dict(task=task, run_dir=run_dir, samples=2,
                                             cpu_demo=dict(tiny, eval_size=8, max_new_tokens=16))),
             ("03_train_grpo.ipynb", dict(task=task, run_dir=run_dir, max_steps=2, eval_steps=2,
                                          cpu_demo=dict(tiny, preset_overrides=small))),
             ("04_post_training_eval.ipynb", dict(run_dir=run_dir, export_questions=2)),
             (COMPARE, dict(task=task, run_dir=str(tmp_path / "runs" / "compare"), max_steps=1, eval_size=4,
                            samples=2, cpu_demo=dict(tiny, max_new_tokens=12, preset_overrides=small)))]
    for name, parameters in steps:
        out = tmp_path / name
        papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters, cwd=str(tmp_path),
                                   kernel_name="python3", progress_bar=False)
        _check_outputs(out)
    shown = "".join(str(o.get("data", {})) for c in nbformat.read(tmp_path / "02_baseline_eval.ipynb", 4).cells
                    for o in c.get("outputs", []))
    assert "reward set (weighted total)" in shown  # the reward check, last cell of 02
    run = Path(run_dir)
    assert json.loads((run / "eval_settings.json").read_text())["task"] == str((folder / "task.yaml").resolve())
    settings = json.loads((run / "train_settings.json").read_text())
    assert settings["heldout"]["split"] == "validation" and settings["heldout"]["questions"] == 10
    assert "Text correctness" in (run / "report.md").read_text()
    compared = (tmp_path / "runs" / "compare" / "comparison" / "runs_comparison.md").read_text()
    assert "baseline -> format-only" in compared and "baseline -> correctness" in compared
