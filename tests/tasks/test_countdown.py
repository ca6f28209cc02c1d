"""Countdown: the safe evaluator, the solver, TinyZero's reward, the puzzle generator and the bundled data."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grpo_kit
from grpo_kit.tasks import BUILTIN_REWARDS, Reward, RewardSet
from grpo_kit.tasks.countdown import (
    MAX_LENGTH,
    countdown_reward,
    countdown_reward_func,
    countdown_score,
    load_countdown,
    make_puzzles,
    safe_eval,
    solve,
)


@pytest.mark.parametrize("expression, value", [
    ("1 + 2 * 3", 7.0), ("(1 + 2) * 3", 9.0), ("7 / 2", 3.5), ("-3 + 5", 2.0), ("1/3*3", 1.0),
    ("((((4))))", 4.0), ("2.5 * 2", 5.0),
])
def test_safe_eval_computes_arithmetic(expression, value):
    assert safe_eval(expression) == value


@pytest.mark.parametrize("expression", [
    "__import__('os').system('true')",  # a call
    "x + 1",  # a name
    "(1).real",  # an attribute
    "2 ** 10",  # exponent
    "9 ** 9 ** 9 ** 9",  # an exponent tower
    "7 // 2", "7 % 2", "1 < 2", "'a' * 3", "[1, 2]", "lambda: 1", "1; 2", "1 if 1 else 2", "1e999",
    "1 / 0", "1 / (2 - 2)",  # division by zero
    "", "   ", "1 +", "(1 + 2",
    "1" + "+1" * MAX_LENGTH,  # too long
    "(1+" * 40 + "1" + ")" * 40,  # within the length but nested too deep
])
def test_safe_eval_rejects_everything_else_quickly(expression):
    start = time.perf_counter()
    with pytest.raises(ValueError):
        safe_eval(expression)
    assert time.perf_counter() - start < 0.1


@pytest.mark.parametrize("bad", [None, 3, b"1+1", ["1"]])
def test_safe_eval_rejects_non_strings(bad):
    with pytest.raises(ValueError):
        safe_eval(bad)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_safe_eval_raises_only_value_error(text):
    try:
        assert isinstance(safe_eval(text), float)
    except ValueError:
        pass


NUMS, TARGET = [79, 17, 60], 36


@pytest.mark.parametrize("completion, expected", [
    ("<reasoning>\n79-60=19\n</reasoning>\n<answer>\n79 - 60 + 17\n</answer>", 1.0),
    ("<answer>(79 - 60) + 17</answer>", 1.0),
    ("<answer>17 + 79 - 60</answer> trailing text", 1.0),
    ("<answer>first</answer> then <answer>79-60+17</answer>", 1.0),  # the last answer counts (TinyZero)
    ("79 - 60 + 17", 0.0),  # no <answer>
    ("<answer>79 + 17</answer>", 0.1),  # a number unused
    ("<answer>79 - 60 + 17 + 17 - 17</answer>", 0.1),  # a number used twice
    ("<answer>79 - 60 + 18</answer>", 0.1),  # a number not given
    ("<answer>79 + 60 + 17</answer>", 0.1),  # wrong value
    ("<answer>79 - 60 + 17 = 36</answer>", 0.1),  # '=' is outside the grammar
    ("<answer>__import__('os')</answer>", 0.1),
    ("<answer></answer>", 0.1),
    ("<answer>79 - 60 + 17.0</answer>", 0.1),  # 17.0 is not the integer 17
])
def test_countdown_reward_on_hand_made_cases(completion, expected):
    assert countdown_score(completion, NUMS, TARGET) == expected
    chat = [{"role": "assistant", "content": completion}]
    assert countdown_reward_func(prompts=[None], completions=[chat], nums=[NUMS], target=[TARGET]) == [expected]


def test_countdown_reward_never_raises_on_malformed_columns():
    completions = ["<answer>1+2</answer>"] * 4
    assert countdown_reward_func(completions=completions, nums=[None, "12", [1, 2], [1, 2]],
                                 target=[3, 3, None, "x"]) == [0.0, 0.0, 0.0, 0.0]
    assert countdown_reward_func(completions=completions) == [0.0] * 4


def test_parameterised_countdown_reward_is_named_after_its_scores():
    reward = countdown_reward(format_score=0.0, score=2.0)
    assert reward.__name__ == "countdown_reward_func_format0_score2"
    assert reward(completions=["<answer>79+17</answer>", "<answer>79-60+17</answer>"], nums=[NUMS] * 2,
                  target=[TARGET] * 2) == [0.0, 2.0]
    # a parameterised product passes through as an object: it is not known by name
    assert reward.__name__ not in BUILTIN_REWARDS and BUILTIN_REWARDS["countdown_reward_func"] is countdown_reward_func
    assert RewardSet([reward]).funcs == [reward] and RewardSet([reward]).names == [reward.__name__]
    assert Reward.of(reward).max_value == 2.0 and Reward.of(reward).columns == ("nums", "target")


def test_every_shared_puzzle_is_solved_and_its_solution_earns_the_full_reward():
    """All 11,024 bundled puzzles (TinyZero's data): the solver finds a solution and the reward accepts it."""
    failures = []
    for split in ("train", "test"):
        for row in load_countdown(split).select_columns(["nums", "target"]):
            solution = solve(row["nums"], row["target"])
            if solution is None or countdown_score(f"<answer>{solution.expression}</answer>", row["nums"],
                                                   row["target"]) != 1.0:
                failures.append(row)
    assert failures == []


def test_solver_steps_replay_to_the_target():
    solution = solve([75, 19, 28, 53], 55)
    assert safe_eval(solution.expression) == 55
    assert len(solution.steps) == 3 and solution.steps[-1].endswith("=55")
    assert solve([1, 1], 5) is None and solve([2, 2], 4).expression in {"2+2", "2*2"}


def test_generated_puzzles_are_seeded_and_solvable():
    puzzles = make_puzzles(30, seed=3)
    assert puzzles == make_puzzles(30, seed=3) and puzzles != make_puzzles(30, seed=4)
    assert {len(p["nums"]) for p in puzzles} <= {3, 4}
    for p in puzzles:
        assert 10 <= p["target"] <= 100 and all(1 <= n <= 99 for n in p["nums"])
        assert countdown_score(f"<answer>{p['solution']}</answer>", p["nums"], p["target"]) == 1.0
    with pytest.raises(ValueError):
        make_puzzles(3, sizes=(1,))
    generated = load_countdown("train", source="generated", n=5, seed=3)
    assert generated.column_names == ["nums", "target", "question", "prompt"] and len(generated) == 5


def test_public_names():
    from grpo_kit.tasks import countdown, get_task

    assert countdown.safe_eval("1+1") == 2.0
    assert countdown.countdown_reward_func(completions=["<answer>1+1</answer>"], nums=[[1, 1]], target=[2]) == [1.0]
    assert grpo_kit.BUILTIN_REWARDS["countdown_reward_func"] is countdown.countdown_reward_func  # known by name
    assert get_task("countdown").reward_set().funcs[-1] is countdown.countdown_reward_func
