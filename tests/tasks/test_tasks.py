"""Tasks by name, math-verify correctness under a timeout, MATH-500, and evaluation across tasks."""

from __future__ import annotations

import time

import pytest

from grpo_kit.evaluation.compare import compare
from grpo_kit.evaluation.scoring import score
from grpo_kit.evaluation.summary import summarize
from grpo_kit.tasks import BUILTIN_REWARDS, TASKS, RewardSet, get_task
from grpo_kit.tasks.math500 import load_math500
from grpo_kit.tasks.math_verify import MathVerifier, math_verify_reward, math_verify_reward_func


def slow_check(gold, prediction):
    """Stands in for a sympy call that never ends."""
    if prediction == "hang":
        time.sleep(60)
    return gold == prediction


def test_math_verify_reward_right_wrong_and_unparseable_gold():
    completions = ["<answer>\n0.5\n</answer>", "<answer>\n\\frac{1}{3}\n</answer>", "no tags: \\boxed{1/2}",
                   "<answer>\n2\n</answer>"]
    gold = ["\\frac{1}{2}", "\\frac{1}{2}", "\\frac{1}{2}", ""]
    assert math_verify_reward_func(completions=completions, answer=gold) == [1.0, 0.0, 1.0, None]
    assert math_verify_reward_func(completions=["<answer>(3, \\frac{\\pi}{2})</answer>"],
                                   answer=["\\left( 3, \\frac{\\pi}{2} \\right)"]) == [1.0]


def test_math_verify_timeout_counts_as_wrong_and_the_next_check_answers():
    verifier = MathVerifier(timeout_s=1.0, check=slow_check)
    assert verifier("7", "7") is True
    start = time.perf_counter()
    assert verifier("7", "hang") is False
    assert time.perf_counter() - start < 10 and verifier.timeouts == 1
    assert verifier("7", "7") is True and verifier("7", "8") is False
    assert math_verify_reward(timeout_s=1.0).__name__ == "math_verify_reward_func_timeout1s"
    with pytest.raises(ValueError):
        MathVerifier(timeout_s=0)


def test_a_pathological_answer_ends_at_the_timeout_and_is_counted():
    """math-verify's parse caught the timeout itself and the check parsed on, unbounded: a 1 s check took 8 s."""
    verifier = MathVerifier(timeout_s=1.0)
    verifier("1", "1")  # imports untimed
    start = time.perf_counter()
    assert verifier("5", "1+" * 300_000 + "1") is False
    assert time.perf_counter() - start < 5 and verifier.timeouts == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_timeout_that_lands_in_a_finalizer_fires_again():
    """Python ignores an exception raised in a finalizer or a gc callback: math-verify's one-shot alarm landed in
    hypothesis's gc callback and a 1 s check ran 66 s, uncounted. The timer fires again until the check ends."""
    class SleepsWhenCollected:
        def __del__(self):
            time.sleep(3)  # the timeout's first firing lands here and is ignored

    def check(gold, prediction):
        SleepsWhenCollected()  # collected at once: its finalizer runs past the timeout
        end = time.perf_counter() + 8
        while time.perf_counter() < end:
            pass
        return True

    verifier = MathVerifier(timeout_s=1.0, check=check)
    verifier.checks = 1  # skip the untimed first parse (math-verify's imports): this check is its own
    start = time.perf_counter()
    assert verifier("7", "7") is False and verifier.timeouts == 1
    assert time.perf_counter() - start < 5


def test_tasks_by_name():
    assert set(TASKS) == {"gsm8k", "countdown", "math500", "sum3"}
    for task in TASKS.values():
        assert all(name in BUILTIN_REWARDS for name in (*task.rewards, *task.metrics))  # every name is built in
        assert task.reward_set().names == list(task.rewards) and task.reward_set().weights == [1.0] * len(task.rewards)
        assert [r.name for r in task.metric_rewards()] == list(task.metrics)
        assert set(task.rules) == {"strict", "flexible"}
    with pytest.raises(ValueError, match="choose from gsm8k, countdown, math500"):
        get_task("gsm9k")
    with pytest.raises(ValueError, match="evaluation only"):
        get_task("math500").load("train")


def test_math500_is_bundled_and_scored():
    data = load_math500()
    assert len(data) == 500 and {"answer", "level", "subject", "prompt"} <= set(data.column_names)
    rows = list(data.select(range(2)))
    right = f"<reasoning>\nwork\n</reasoning>\n<answer>\n{rows[0]['answer']}\n</answer>"
    records = score(rows, [[right, "I think \\boxed{7}"], [right, f"\\boxed{{{rows[1]['answer']}}}"]], task="math500")
    assert [(r["strict_correct"], r["flexible_correct"]) for r in records] == [(1.0, 1.0), (0.0, 0.0), (0.0, 0.0),
                                                                                (0.0, 1.0)]
    assert records[0]["math_verify_reward_func"] == 1.0


def test_countdown_evaluation_rules_and_table():
    rows = list(get_task("countdown").load("test").select(range(3)))
    strict = "<reasoning>\nsteps\n</reasoning>\n<answer>\n{}\n</answer>"
    solutions = [get_task("countdown").extras["demonstration"](r, "equations")[1] for r in rows]
    before = score(rows, [["no answer"], [f"<answer>{solutions[1]}</answer>"], [strict.format("1+1")]],
                   task="countdown")
    after = score(rows, [[strict.format(s)] for s in solutions], task="countdown")
    assert [r["flexible_correct"] for r in before] == [0.0, 1.0, 0.0]
    assert [r["strict_correct"] for r in before] == [0.0, 0.0, 0.0]
    assert [r["countdown_reward_func"] for r in before] == [0.0, 1.0, 0.1]
    assert all(r["strict_correct"] == 1.0 for r in after) and after[0]["answer"].startswith(str(rows[0]["target"]))
    countdown = get_task("countdown")
    table = summarize(before, countdown)
    assert list(table.index) == ["Strict accuracy", "Flexible accuracy", "Countdown reward", "Soft format",
                                 "Strict format", "XML tag count", "Sum of rewards (unweighted)"]
    assert table.loc["Sum of rewards (unweighted)", "max"] == 2.5

    from grpo_kit.evaluation.scoring import EvalResult
    from grpo_kit.policy.generation import Sampling

    def result(records):
        return EvalResult(records, summarize(records, countdown), Sampling(), 0.0, task=countdown)

    comparison = compare(result(before), result(after))
    assert comparison.attrs["metric"] == "strict_correct" and comparison.attrs["wrong_to_right"] == 3
    assert comparison.attrs["label"] == "Strict accuracy"
    graded = comparison.set_index("metric").loc["Countdown reward"]
    assert graded["mcnemar_p"] != graded["mcnemar_p"]  # graded: no McNemar


def test_reward_set_swaps_and_rejects():
    mix = get_task("gsm8k").reward_set().replace("correctness_reward_func", "math_verify_reward_func")
    assert "math_verify_reward_func" in mix.names and mix.weights == [1.0] * 6
    assert mix.with_weight("xmlcount_reward_func", 0).trained == [n for n in mix.names if n != "xmlcount_reward_func"]

    def correctness_reward_func(completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match="named"):
        RewardSet(["correctness_reward_func", correctness_reward_func])
    with pytest.raises(ValueError, match="one weight per reward"):
        RewardSet(["int_reward_func"], [1.0, 2.0])
    with pytest.raises(ValueError, match="not in this set"):
        mix.with_weight("int_reward_funk", 0)


def test_before_after_plot_tolerates_rounding_outside_the_interval():
    import matplotlib.pyplot as plt
    import pandas as pd

    from grpo_kit.evaluation.plots import plot_before_after

    table = pd.DataFrame([{"metric": "Countdown reward", "before": 0.1, "before_low": 0.1 + 1e-17,
                           "before_high": 0.1, "after": 0.3, "after_low": 0.2, "after_high": 0.3 - 1e-17, "max": 1.0}])
    plt.close(plot_before_after(table))


def test_sum3_splits_are_disjoint_and_its_warm_start_shows_both_styles_in_the_answer_format():
    from grpo_kit.tasks.answer_format import render

    task = TASKS["sum3"]
    train, test = task.load("train"), task.load("test")
    assert len(train) == 2100 and len(test) == 300
    assert [r["style"] for r in train][:3] == ["worked", "sloppy", "sloppy"]
    triple = lambda row: (row["a"], row["b"], row["c"])  # noqa: E731
    assert not {triple(r) for r in train} & {triple(r) for r in test}
    assert task.extras["warm_xml_share"] == 1.0
    worked, sloppy = (next(r for r in train if r["style"] == s and r["a"] + r["b"] + r["c"] >= 10)
                      for s in ("worked", "sloppy"))
    demonstrate = task.extras["demonstration"]
    good, bad = render(*demonstrate(worked, "equations")), render(*demonstrate(sloppy, "equations"))
    assert task.rules["strict"].correct(task.rules["strict"].extract(good), worked)
    assert not task.rules["flexible"].correct(task.rules["flexible"].extract(bad), sloppy)  # drops the carry
    assert task.rules["strict"].extract("the sum is 12") is None and task.rules["flexible"].extract("is 12") == "12"


@pytest.mark.parametrize("minus", ["\u2212", "\u2013", "-"], ids=["minus sign", "en dash", "hyphen-minus"])
def test_gsm8k_reads_a_minus_sign_and_an_en_dash_as_negative(minus):
    from grpo_kit.tasks.answer_format import render
    from grpo_kit.tasks.rewards import soft_correctness_reward_func

    gsm8k = get_task("gsm8k")
    text = render("3 - 6", f"{minus}3")
    chat = [[{"role": "assistant", "content": text}]]
    for gold, right in (("-3", 1.0), ("3", 0.0)):
        record = score([{"id": "q", "question": "q", "answer": gold, "prompt": []}], [[text]], task=gsm8k)[0]
        assert (record["strict_correct"], record["flexible_correct"]) == (right, right), (gold, record)
        assert (soft_correctness_reward_func(completions=chat, answer=[gold])[0] > 0) == bool(right)
