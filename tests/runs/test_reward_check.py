"""``reward-check``: from the baseline's sampled completions, whether a reward set can teach, with numbers a reader can
recompute from ``baseline_sampled.jsonl``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.evaluation.reward_check import check_rewards, pearson, zero_variance_share
from grpo_kit.evaluation.scoring import score
from grpo_kit.tasks import RewardSet, get_task
from grpo_kit.tasks.answer_format import render
from grpo_kit.tasks.sum3 import sloppy, worked

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "capitals"


def _sum3_records(samples: int = 4) -> list[dict]:
    """Sampled records of the sum3 experiment's shape: every completion in the answer format, the first sample of
    each question worked (right), the others sloppy (wrong whenever the sum is 10 or more)."""
    task = get_task("sum3")
    rows = list(task.load("test"))[:30]
    completions = []
    for row in rows:
        a, b, c = (row[k] for k in "abc")
        completions.append([render(*worked(a, b, c))] + [render(*sloppy(a, b, c))] * (samples - 1))
    return score(rows, completions, rewards=["xmlcount_reward_func", "strict_format_reward_func", "int_reward_func",
                                            "correctness_reward_func"], task=task)


def test_the_check_tells_a_format_only_set_from_a_correctness_set():
    task = get_task("sum3")
    records = _sum3_records()
    format_only = check_rewards(records, task, RewardSet(dict(task.extras["compare_rewards"]["format-only"])))
    correctness = check_rewards(records, task, RewardSet(dict(task.extras["compare_rewards"]["correctness"])))
    # every completion is formatted: the format rewards are the same in every group, so is their total
    assert format_only.rewards["strict_format_reward_func"]["zero_variance_share"] == 1.0
    assert format_only.reward_set["zero_variance_share"] == 1.0 and format_only.reward_set["correlation"] is None
    assert format_only.rewards["strict_format_reward_func"]["max_on_wrong_share"] > 0.3
    assert "can teach the format but not solving" in format_only.markdown()
    # correctness differs within the groups whose sloppy answers are wrong
    assert correctness.reward_set["zero_variance_share"] < 1.0 and correctness.reward_set["correlation"] > 0.9
    assert correctness.rewards["correctness_reward_func"]["max_on_wrong_share"] == 0.0
    assert correctness.reward_set["weights"] == {"xmlcount_reward_func": 1.0, "strict_format_reward_func": 1.0,
                                                 "correctness_reward_func": 2.0}
    assert "not solving" not in correctness.markdown()


def test_the_numbers_are_the_definitions():
    rows = [{"id": "a", "r": 1.0}, {"id": "a", "r": None}, {"id": "b", "r": None}, {"id": "c", "r": 0.0},
            {"id": "c", "r": 0.5}]
    assert zero_variance_share(rows, lambda r: r["r"]) == pytest.approx(2 / 3)  # a (one value), b (none)
    assert pearson([1, 0, 1, 0], [1, 0, 0, 0]) == pytest.approx(0.57735, abs=1e-5)
    assert pearson([], []) is None and pearson([0, 1], [1, 1]) is None


@pytest.mark.slow
def test_reward_check_on_a_sampled_baseline_can_be_recomputed_from_its_records(tmp_path, capsys):
    folder = tmp_path / "capitals"
    shutil.copytree(EXAMPLE, folder)
    run = tmp_path / "run"
    assert main(["eval", "--before", "--run-dir", str(run), "--task", str(folder / "task.yaml"), "--preset",
                 "cpu-tiny", "--eval-size", "6", "--max-new-tokens", "12", "--samples", "4", "--temperature", "1.5",
                 "--warm-steps", "20", "--cache-dir", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    assert main(["reward-check", str(run), "--json", "--rewards", "xmlcount_reward_func=1",
                 "text_correctness_reward_func=2"]) == 0
    out = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in (run / "baseline_sampled.jsonl").read_text().splitlines()]
    by_question: dict[str, list[dict]] = {}
    for r in records:
        by_question.setdefault(r["id"], []).append(r)
    assert len(by_question) == 6 and all(len(v) == 4 for v in by_question.values())

    def share(value) -> float:
        return sum(len({value(r) for r in group}) == 1 for group in by_question.values()) / len(by_question)

    assert out["rewards"]["xmlcount_reward_func"]["zero_variance_share"] == share(lambda r: r["xmlcount_reward_func"])
    assert out["reward_set"]["zero_variance_share"] == share(
        lambda r: r["xmlcount_reward_func"] + 2 * r["text_correctness_reward_func"])
    assert out["reward_set"]["weights"] == {"xmlcount_reward_func": 1.0, "text_correctness_reward_func": 2.0}
    assert set(out["rewards"]["xmlcount_reward_func"]) >= {"mean", "zero_variance_share", "correlation",
                                                           "max_on_wrong_share"}
    assert main(["reward-check", str(run)]) == 0  # the task file's own set, as a table
    assert "| **reward set (weighted total)** |" in capsys.readouterr().out
    assert main(["reward-check", str(run), "--rewards", "no_such_reward"]) == 2
    assert "unknown reward 'no_such_reward'" in capsys.readouterr().err


def test_reward_check_needs_a_sampled_baseline(tmp_path, capsys):
    assert main(["reward-check", str(tmp_path / "nowhere")]) == 2
    assert "no run folder at" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval_settings.json").write_text(json.dumps({"task": "sum3", "samples": 0, "slice": {"n": 4}, "seed": 0,
                                                        "max_new_tokens": 8, "temperature": 0.7, "preset": "cpu-tiny"}))
    assert main(["reward-check", str(run)]) == 2
    err = capsys.readouterr().err
    assert "has no sampled completions" in err and len(err.strip().splitlines()) == 1


def _sampled_run(tmp_path: Path, right: bool) -> Path:
    """A run folder holding a sum3 baseline of 4 questions x 3 samples, all right or all wrong, without a model."""
    from grpo_kit.system.files import write_jsonl
    from grpo_kit.runs.measure import plan_from_settings

    settings = {"task": "sum3", "samples": 3, "slice": {"n": 4}, "seed": 0, "max_new_tokens": 8, "temperature": 0.7,
                "preset": "cpu-tiny"}
    rows = list(plan_from_settings(settings).questions())
    task = get_task("sum3")
    completions = [[render("x", str(int(row["answer"]) + (0 if right else 1))) for _ in range(3)] for row in rows]
    run = tmp_path / "run"
    write_jsonl(run / "baseline_sampled.jsonl", score(rows, completions, task=task))
    (run / "eval_settings.json").write_text(json.dumps(settings))
    return run


def one_for_the_batch(completions=None, **kwargs):
    return [1.0]


def a_word(completions=None, **kwargs):
    return ["good"] * len(completions)


def guess_length(completions=None, answer=None, **kwargs):
    return [float(len(c[0]["content"]) % 2) for c in completions]


@pytest.mark.parametrize("reward, said", [(one_for_the_batch, "returned [1.0] for 2 completions"),
                                          (a_word, "returned ['good', 'good'] for 2 completions")])
def test_reward_check_refuses_what_train_refuses_naming_the_reward(tmp_path, reward, said):
    from grpo_kit.runs.reward_check import reward_check

    run = _sampled_run(tmp_path, right=False)
    with pytest.raises(ValueError, match=f"reward {reward.__name__} {said.replace('[', '.').replace(']', '.')}"):
        reward_check(run, [reward])


def test_verdicts_say_only_what_the_numbers_support(tmp_path):
    from grpo_kit.runs.reward_check import reward_check

    nothing_right = reward_check(_sampled_run(tmp_path, right=False), {guess_length: 1.0}).markdown()
    assert "no right answers" in nothing_right and "cannot be measured" in nothing_right
    assert "format" not in nothing_right.split("\n\n")[-1]  # guess_length reads the answer: not a format reward
    task = get_task("sum3")
    records = _sum3_records()
    for r in records:
        r["guess_length"] = float(r["index"] % 2)  # reads the answer (its signature says so), follows nothing
    graded = check_rewards(records, task, RewardSet({guess_length: 1.0}))
    assert graded.format_only is False and "can teach the format" not in graded.markdown()
    formats = check_rewards(records, task, RewardSet({"xmlcount_reward_func": 1.0, "correctness_reward_func": 0.0}))
    assert formats.format_only and "can teach the format but not solving" in formats.markdown()
def _worked_run(folder: Path) -> Path:
    """A run folder whose sampled baseline is :func:`_sum3_records`' completions of its questions (nothing generated)."""
    from grpo_kit.runs.measure import plan_from_settings

    settings = {"task": "sum3", "samples": 4, "slice": {"n": 6}, "seed": 0, "max_new_tokens": 8, "temperature": 0.7,
                "preset": "cpu-tiny"}
    rows = list(plan_from_settings(settings).questions())
    completions = [[render(*worked(r["a"], r["b"], r["c"]))] + [render(*sloppy(r["a"], r["b"], r["c"]))] * 3
                   for r in rows]
    folder.mkdir()
    records = score(rows, completions, task=get_task("sum3"))
    (folder / "baseline_sampled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "eval_settings.json").write_text(json.dumps(settings))
    return folder


def test_reward_check_says_in_one_line_which_reward_raises_and_json_stays_json(tmp_path, monkeypatch, capsys):
    """A raising reward gave a 25-line traceback (or 'error: ...' without its name), and a
    reward that prints broke --json."""
    (tmp_path / "mine.py").write_text(
        "def broken(completions, **kwargs):\n"
        "    raise ValueError('bad gold')\n"
        "def chatty(completions, **kwargs):\n"
        "    print('scoring', len(completions))\n"
        "    return [1.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = _worked_run(tmp_path / "run")
    assert main(["reward-check", str(run), "--rewards", "mine:broken"]) == 2
    err = capsys.readouterr().err
    assert "reward broken raised ValueError: bad gold" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert main(["reward-check", str(run), "--json", "--rewards", "mine:chatty", "xmlcount_reward_func"]) == 0
    captured = capsys.readouterr()
    assert set(json.loads(captured.out)["rewards"]) == {"chatty", "xmlcount_reward_func"}
    assert "scoring" in captured.err
