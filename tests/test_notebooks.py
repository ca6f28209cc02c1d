"""The notebooks run headless on the CPU preset, 01 to 05 in order on a task file of your own, and their calls on
Countdown in this process; committed copies carry no outputs, and the documentation site's copies (docs/notebooks/)
carry the outputs of a CPU run of the current code cells."""

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
EXAMPLE = NOTEBOOKS.parent / "examples" / "capitals"


@pytest.mark.slow
def test_notebooks_01_to_05_run_in_order_on_a_task_file(tmp_path):
    """Notebooks 01-05 in order, each in a kernel of its own, on a task file of your own (``task = "task.yaml"``: a
    JSONL of text answers; a built-in task takes the same ``get_task``): explored, measured, trained with its
    rewards swapped in one line (a reward at weight 0 logged, not trained on), measured again, exported, viewed,
    and two variants compared on one shared baseline. A task's default reward set (no ``rewards``) and what only
    Countdown shows (its reward in the report and the training log) go through the notebooks' calls in
    :func:`test_notebook_calls_train_and_measure_countdown_with_its_default_rewards`; GSM8K through all five in the
    docs' executed copies (scripts/notebook_outputs.py, checked above)."""
    import json

    import papermill

    shutil.rmtree(EXECUTED, ignore_errors=True)
    EXECUTED.mkdir(parents=True)
    folder = EXECUTED / "my_task"
    shutil.copytree(EXAMPLE, folder)
    task = str(folder / "task.yaml")
    run, compared = EXECUTED / "runs" / "capitals", EXECUTED / "runs" / "compare"
    small = {"per_device_train_batch_size": 8, "max_completion_length": 16}
    tiny = {"warm_start_steps": 6, "batch_size": 8, "max_new_tokens": 16}  # the cpu_demo switch's knobs
    # The task file's rewards swapped in one line: soft format for strict; the XML tag count logged, not trained on.
    rewards = {"text_correctness_reward_func": 2.0, "soft_format_reward_func": 0.5, "xmlcount_reward_func": 0.0}
    parameters = {
        "01_explore.ipynb": dict(task=task, preset="cpu-tiny"),
        "02_baseline_eval.ipynb": dict(task=task, run_dir=str(run), samples=2, cpu_demo=dict(tiny, eval_size=8)),
        "03_train_grpo.ipynb": dict(task=task, run_dir=str(run), max_steps=2, eval_steps=2, rewards=rewards,
                                    cpu_demo=dict(tiny, preset_overrides=small)),
        "04_post_training_eval.ipynb": dict(run_dir=str(run), export_questions=2),
        COMPARE: dict(task=task, run_dir=str(compared), max_steps=1, eval_size=4, samples=2,
                      cpu_demo=dict(tiny, max_new_tokens=12, preset_overrides=small)),
    }
    walls, shown = {}, {}
    for name in [*ORDER, COMPARE]:
        out = EXECUTED / name
        start = time.perf_counter()
        papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters[name], cwd=str(tmp_path),
                                   kernel_name="python3", progress_bar=False)
        walls[name] = time.perf_counter() - start
        _check_outputs(out)
        shown[name] = "".join(str(o.get("data", {})) for c in nbformat.read(out, as_version=4).cells
                              for o in c.get("outputs", []))
    print("notebook wall times (s):", {k: round(v, 1) for k, v in walls.items()})

    assert "reward set (weighted total)" in shown["02_baseline_eval.ipynb"]  # the reward check, last cell of 02
    assert json.loads((run / "eval_settings.json").read_text())["task"] == str(Path(task).resolve())
    assert {"baseline.jsonl", "trained.jsonl", "eval_settings.json", "log_history.json", "training_curves.png",
            "model", "generations.jsonl", "baseline_sampled.jsonl", "trained_sampled.jsonl", "comparison.csv",
            "before_after.png"} <= {p.name for p in run.iterdir()}
    settings = json.loads((run / "train_settings.json").read_text())
    assert settings["heldout"]["split"] == "validation" and settings["heldout"]["questions"] == 10
    logged = {k for row in json.loads((run / "log_history.json").read_text()) for k in row}
    assert {"rewards/text_correctness_reward_func/mean", "rewards/soft_format_reward_func/mean",
            "rewards/xmlcount_reward_func/mean"} <= logged  # the swap trained on; weight 0 still logged
    assert "rewards/strict_format_reward_func/mean" not in logged  # the task file's reward, swapped out
    after = shown["04_post_training_eval.ipynb"]
    assert "Text correctness" in (run / "report.md").read_text()
    assert "Strict accuracy" in after and "pass@2 (strict)" in after and "McNemar" in after
    assert "merged export (float32)" in after and "PASSED" in after  # the export section, verified
    assert (run / "export" / "merged" / "README.md").is_file()
    assert (run / "view.html").is_file() and "the same page, to open in a browser" in after  # the run viewer, inline

    _assert_compared(compared, shown[COMPARE])


def _assert_compared(compared: Path, five: str) -> None:
    """What notebook 05 wrote into ``compared`` and showed (``five``, its outputs' text): two variants trained on one
    shared baseline, their paired table with Holm's adjustment, the settings that differ, and the viewer's page."""
    variants = ["format-only", "correctness"]  # a task file's reward sets for notebook 05, in order
    for name in variants:
        assert {"baseline.jsonl", "baseline_sampled.jsonl", "eval_settings.json", "trained.jsonl", "model",
                "report.md"} <= {p.name for p in (compared / name).iterdir()}
    assert (compared / "format-only" / "baseline.jsonl").read_text() == \
        (compared / "correctness" / "baseline.jsonl").read_text()  # one baseline, shared
    assert {"runs_comparison.md", "runs_pairs.csv", "runs_comparison.png"} <= \
        {p.name for p in (compared / "comparison").iterdir()}
    table = (compared / "comparison" / "runs_comparison.md").read_text()
    assert "baseline -> format-only" in table and "baseline -> correctness" in table
    assert "baseline -> format-only" in five and "baseline -> correctness" in five
    assert "format-only -> correctness" in five and "Holm" in five
    assert "reward text_correctness_reward_func" in five  # the settings that differ: its weight, 0 against 2
    assert (compared / "comparison" / "view.html").is_file() and "the same page, to open in a browser" in five


def test_notebook_calls_train_and_measure_countdown_with_its_default_rewards(tiny_policy_files, tmp_path,
                                                                            kit_log_on_stderr):
    """What the chain above cannot show on a task file of text answers, through the calls notebooks 02-04 make, in
    this process, with a policy of your own (the notebooks' ``model``, a folder): notebook 03's default reward set
    (the task's, no ``rewards``) with its commented swap line (the XML tag count at weight 0), Countdown's reward
    reaching TRL with its ``nums`` and ``target`` columns and logged beside the untrained metric, and Countdown's
    reward in notebook 04's report."""
    import json

    from grpo_kit.notebook import gpu_check, plan_baseline, plan_training
    from grpo_kit.runs.measure import measure_after, measure_before
    from grpo_kit.runs.train import train
    from grpo_kit.tasks import get_task

    task, model, run_dir = "countdown", str(tiny_policy_files), str(tmp_path / "countdown")
    config = gpu_check("cpu-tiny", {"per_device_train_batch_size": 8, "max_completion_length": 16,
                                    "max_prompt_tokens": 240})  # its prompts in this tokenizer: about 220
    plan, run = plan_baseline(task, config, model=model, eval_questions=4, max_new_tokens=16, samples=0,
                              batch_size=4, run_dir=run_dir)
    measure_before(plan, run)
    reward_set = get_task(task).reward_set()  # notebook 03's cell without rewards, then its commented line:
    reward_set = reward_set.with_weight("xmlcount_reward_func", 0.0)  # log it, don't train on it
    train(plan_training(config, task, model=model, rewards=reward_set, max_steps=1, train_size=8, run_dir=run_dir))
    logged = {k for row in json.loads(run.log_history.read_text()) for k in row}
    assert {"rewards/countdown_reward_func/mean", "rewards/xmlcount_reward_func/mean"} <= logged
    measure_after(run)
    assert "Countdown reward" in run.report.read_text(encoding="utf-8")
