"""A reward function of your own shows in the before/after table and report under its own name, with its maximum
from a ``max_value`` attribute or from what it returned, and nothing is registered globally."""

from __future__ import annotations

import csv
import math
import shutil
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
    assert main(["eval", "--run-dir", str(run)]) == 0
    rows = {r["metric"]: r for r in csv.DictReader((run / "comparison.csv").open())}
    assert float(rows["polite"]["max"]) == 0.5
    assert "short_answer" in rows and float(rows["short_answer"]["max"]) in (0.0, 0.3)
    report = (run / "report.md").read_text()
    assert "short_answer" in report and "polite" in report
    assert "short_answer" not in BUILTIN_REWARDS
    # the runs' table scores the shared baseline with the run's own rewards too
    assert main(["compare", str(run), "--out", str(tmp_path / "cmp")]) == 0
    assert "polite" in (tmp_path / "cmp" / "runs_comparison.md").read_text()
