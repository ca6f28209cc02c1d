"""A reward function of your own shows in the before/after table and report under its own name, with its maximum
from a ``max_value`` attribute or from what it returned, and nothing is registered globally."""

from __future__ import annotations

import csv
import math
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.evaluation.scoring import score, with_rewards
from grpo_kit.evaluation.summary import metrics, summarize
from grpo_kit.tasks import BUILTIN_REWARDS, Reward, get_task

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "capitals"


def _length(completions=None, **kwargs):
    return [min(len(c if isinstance(c, str) else c[-1]["content"]), 40) / 100 for c in completions]


def _bounded(completions=None, **kwargs):
    return [0.1] * len(completions)


_bounded.max_value = 0.25


def test_an_own_reward_gets_its_name_and_a_maximum_from_its_attribute_or_what_it_returned():
    task = get_task("sum3")
    rows = list(task.load("test"))[:2]
    result = score(rows, [["<answer>\n1\n</answer>", "12345"], ["x"]], task=task)
    from grpo_kit.evaluation.scoring import EvalResult
    from grpo_kit.policy.generation import Sampling

    base = EvalResult(records=result, summary=summarize(result, task), sampling=Sampling(), wall_s=0.0, task=task)
    scored = with_rewards(base, rows, [_length, _bounded])
    found = {m.key: m for m in scored.metrics()}
    # max_value: len("<answer>\\n1\\n</answer>") / 100
    assert found["_length"].label == "_length" and found["_length"].max_value == pytest.approx(0.2)
    assert found["_bounded"].max_value == 0.25
    assert "_length" in scored.summary.index and "_bounded" in scored.summary.index
    totals = [r["total"] - r["_length"] - r["_bounded"] for r in scored.records]
    assert totals == pytest.approx([r["total"] for r in result])
    assert "_length" not in BUILTIN_REWARDS and "_bounded" not in BUILTIN_REWARDS
    assert not math.isnan(metrics(scored.records, task, [Reward.of(_length)])[-1].max_value)  # the total's max


@pytest.mark.slow
def test_a_users_reward_from_the_command_line_shows_in_the_before_after_table(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "capitals"
    shutil.copytree(EXAMPLE, folder)
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent("""
        def short_answer(completions=None, **kwargs):
            return [0.3 if len(c[-1]["content"]) < 20 else 0.0 for c in completions]

        def polite(completions=None, **kwargs):
            return [0.5 * ("please" in c[-1]["content"]) for c in completions]
        polite.max_value = 0.5
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    tiny = ["--warm-steps", "3", "--cache-dir", str(tmp_path / "cache")]
    assert main(["eval", "--before", "--run-dir", str(run), "--task", str(folder / "task.yaml"), "--preset",
                 "cpu-tiny", "--eval-size", "4", "--max-new-tokens", "8", *tiny]) == 0
    assert main(["train", "--run-dir", str(run), "--preset", "cpu-tiny", "--max-steps", "1", "--num_generations", "2",
                 "--per_device_train_batch_size", "4", "--max_completion_length", "8",
                 "--rewards", "my_rewards:short_answer", "my_rewards:polite=0.5", "text_correctness_reward_func=2",
                 *tiny]) == 0
    assert main(["eval", "--run-dir", str(run), "--trust-task-code"]) == 0  # the run records my_rewards
    rows = {r["metric"]: r for r in csv.DictReader((run / "comparison.csv").open())}
    assert float(rows["polite"]["max"]) == 0.5
    assert "short_answer" in rows and float(rows["short_answer"]["max"]) in (0.0, 0.3)
    report = (run / "report.md").read_text()
    assert "short_answer" in report and "polite" in report
    assert "short_answer" not in BUILTIN_REWARDS
    # the runs' table scores the shared baseline with the run's own rewards too
    assert main(["compare", str(run), "--out", str(tmp_path / "cmp"), "--trust-task-code"]) == 0
    assert "polite" in (tmp_path / "cmp" / "runs_comparison.md").read_text()


class _Echo:
    """A generation backend without a model: every prompt's completions are one fixed text."""

    route = "transformers"

    def generate(self, prompts, sampling, on_result=None):
        from grpo_kit.policy.generation import Generation

        out = [[Generation("<reasoning>\nr\n</reasoning>\n<answer>\n7\n</answer>", 9, False)] * sampling.n
               for _ in prompts]
        for i, generations in enumerate(out):
            if on_result:
                on_result(i, generations)
        return out

    def identity(self):
        return "echo"


def test_a_reward_module_a_run_folder_records_runs_only_when_trusted(tmp_path, monkeypatch, capsys):
    """A run folder's train_settings.json names its own rewards as module:function; a downloaded folder could name a
    module that runs as it is imported. eval, compare, view and a resume import it only with --trust-task-code
    (trust_remote_code=True), as a task file's Python; without it each says so in one line, before anything runs."""
    import json

    from grpo_kit.runs.folder import RunFolder
    from grpo_kit.runs.measure import measure_after
    from grpo_kit.runs.spec import RunSpec
    from tests.viewer_run import write_run

    run = write_run(tmp_path / "run", n=8, steps=1, samples=2)
    (tmp_path / "marking_rewards.py").write_text(textwrap.dedent("""
        from pathlib import Path

        Path("imported.marker").write_text("ran")  # what any module may do as it is imported

        def answer_length(completions=None, **kwargs):
            return [min(1.0, len(c[-1]["content"]) / 100) for c in completions]
        """))
    settings = json.loads((run / "train_settings.json").read_text())
    settings.update(reward_functions={"answer_length": "marking_rewards:answer_length"}, base_model="tiny",
                    task="gsm8k", system_prompt="S")  # trained from what the baseline measured
    (run / "train_settings.json").write_text(json.dumps(settings))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "marking_rewards", raising=False)  # imported again by the next test, if any
    marker = tmp_path / "imported.marker"
    for args in (["eval", "--run-dir", str(run)], ["compare", str(run), "--out", str(tmp_path / "cmp")],
                 ["view", str(run)], ["train", "--run-dir", str(run), "--resume", "--preset", "cpu-tiny"]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert (f"{run / 'train_settings.json'} names Python that reading its rewards would import and run (reward "
                f"answer_length: marking_rewards:answer_length; marking_rewards: {tmp_path / 'marking_rewards.py'}), "
                "and nothing was imported: read that code, and if you trust it pass --trust-task-code (in Python and "
                "the notebooks: trust_remote_code=True)") in err, (args, err)
        assert not marker.exists(), args
    assert not (tmp_path / "cmp").exists() and not (run / "view.html").exists()
    with pytest.raises(ValueError, match="marking_rewards:answer_length"):
        RunSpec.resolve("cpu-tiny", None, run_dir=run, resume=True)
    # the rewards given again by this command name their modules themselves: nothing recorded is imported
    with pytest.raises(ValueError) as given:
        RunSpec.resolve("cpu-tiny", None, run_dir=run, resume=True, rewards=["strict_format_reward_func"])
    assert "marking_rewards" not in str(given.value) and not marker.exists()
    measured = measure_after(RunFolder(run), backend=_Echo(), trust_remote_code=True)
    assert marker.read_text() == "ran"
    assert "answer_length" in set(measured.table["metric"]) and "answer_length" in (run / "report.md").read_text()
    assert main(["compare", str(run), "--out", str(tmp_path / "cmp"), "--trust-task-code"]) == 0
    assert main(["view", str(run), "--trust-task-code"]) == 0


def test_every_command_printed_for_a_run_with_its_own_rewards_passes_trust_task_code(tmp_path, monkeypatch, capsys):
    """A run folder that records a reward of your own as module:function is read only with --trust-task-code: each
    next command the kit prints for it (eval again, train --resume, the resume after Ctrl-C, the resume a changed
    setting is refused with) carries the option, or the user pastes a command that is refused."""
    import json

    import grpo_kit.cli
    import grpo_kit.training.checkpoints
    from grpo_kit.runs.folder import RunFolder
    from grpo_kit.runs.spec import _resume_command
    from tests.viewer_run import write_run

    run = write_run(tmp_path / "my run", n=8, steps=1, samples=2)  # records tests.viewer_run:answer_length
    settings = json.loads((run / "train_settings.json").read_text())
    settings.update(base_model="tiny", task="gsm8k", system_prompt="S")  # trained from what the baseline measured
    (run / "train_settings.json").write_text(json.dumps(settings))
    folder = RunFolder(run, write=False)
    pasted = f"--run-dir '{run}'"
    # the option comes with the Python it lets run and where from (issue 57, S2)
    trust = ("--trust-task-code (read first the Python it runs: reward answer_length: tests.viewer_run:answer_length; "
             f"tests.viewer_run: {Path(__file__).parents[1] / 'viewer_run.py'})")
    assert folder.needs_trust() and folder.command("train --resume") == \
        f"python -m grpo_kit train {pasted} --resume {trust}"
    (run / "evaluated.json").unlink()
    assert f"run python -m grpo_kit eval {pasted} {trust} again" in folder.stale_results()
    assert _resume_command(run, {"model": "tiny:x"}, {"max_steps": 3}).endswith(
        f"{pasted} --resume --max_steps 3 {trust}")

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(grpo_kit.cli, "_train", interrupted)
    monkeypatch.setattr(grpo_kit.training.checkpoints, "latest_complete", lambda folder: folder / "checkpoint-2")
    assert main(["train", "--run-dir", str(run), "--preset", "cpu-tiny"]) == 130
    assert f"(python -m grpo_kit train {pasted} --resume {trust} continues" in capsys.readouterr().err
    (run / "finished.json").unlink()  # training did not finish: export and eval say how to resume it
    for args in (["export", str(run)], ["eval", "--run-dir", str(run), "--trust-task-code"]):
        assert main(args) == 2, args
        assert f"python -m grpo_kit train {pasted} --resume {trust}" in capsys.readouterr().err, args
    (run / "train_settings.json").write_text(json.dumps({**settings, "reward_functions": {}}))  # built-ins only
    assert not folder.needs_trust() and "--trust-task-code" not in folder.command("eval")
    task = tmp_path / "rows.yaml"  # a task file whose loader is Python of its own: the same consent
    task.write_text("loader: my_rows:load\nanswer_type: number\n")
    evaluated = json.loads((run / "eval_settings.json").read_text())
    (run / "eval_settings.json").write_text(json.dumps({**evaluated, "task": str(task)}))
    assert folder.command("eval").endswith(f"--trust-task-code (read first the Python it runs: task file {task}'s "
                                           "loader: my_rows:load; my_rows: not found from here)")
