"""Dataset exploration helpers (notebook 01)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from datasets import Dataset

from grpo_kit.evaluation import explore
from grpo_kit.tasks import get_task
from grpo_kit.tasks.gsm8k import load_gsm8k

ROWS = Dataset.from_list([
    {"question": "Tom has 3 apples and buys 2 more apples. How many apples?", "solution": "3+2=5\n#### 5",
     "answer": "5"},
    {"question": "A train goes 60 miles per hour for 2 hours. How far?", "solution": "60*2=120\nSo 120.\n#### 120",
     "answer": "120"},
    {"question": "Sara saves $1,000 a year for 3 years. How much?", "solution": "1000*3=3000\n#### 3000",
     "answer": "-3000"},
])


def test_describe_counts_steps_lengths_and_magnitudes():
    frame = explore.describe(ROWS, tokenizer=None, split="toy")
    assert list(frame["steps"]) == [1, 2, 1]
    assert list(frame["answer"]) == [5.0, 120.0, -3000.0]
    assert math.isclose(frame["log10_answer"][2], math.log10(3001))
    assert frame["question_tokens"][0] == 12
    assert set(frame["split"]) == {"toy"}
    assert frame.equals(explore.describe(ROWS, None, "toy", task=get_task("gsm8k")))  # the task, named or given


def test_describe_with_a_tokenizer(tiny_policy):
    _, tokenizer = tiny_policy
    frame = explore.describe(ROWS, tokenizer)
    assert (frame["question_tokens"] > 0).all() and (frame["solution_tokens"] > 0).all()


def test_near_duplicates_finds_exact_and_near_copies():
    train = ["Tom has 3 apples and buys 2 more. How many apples?", "A cat sleeps all day long.", "Unrelated words"]
    test = ["Tom has 3 apples and buys 2 more. How many apples?", "Tom has 4 apples and buys 2 more. How many apples?",
            "What is the capital of France?"]
    pairs = explore.near_duplicates(train, test, threshold=0.6, top=3)
    assert pairs.attrs["n_exact"] == 1
    assert pairs.attrs["n_near"] == 2
    assert pairs.iloc[0]["exact"] and pairs.iloc[0]["similarity"] == 1.0
    assert pairs.iloc[1]["train_index"] == 0


def test_gsm8k_test_split_does_not_leak_into_train():
    train, test = load_gsm8k("train"), load_gsm8k("test")
    pairs = explore.near_duplicates(list(train["question"]), list(test["question"]), top=5)
    assert pairs.attrs["n_exact"] == 0


def test_question_map_and_plots():
    test = load_gsm8k("test").select(range(200))
    points = explore.question_map({"a": test.select(range(100)), "b": test.select(range(100, 200))}, n=150)
    assert len(points) == 150 and set(points["split"]) == {"a", "b"}
    assert list(points.columns) == ["x", "y", "split", "steps", "question"]
    plt.close(explore.plot_question_map(points))
    features = explore.describe(test, None, "test")
    plt.close(explore.plot_distributions(features))


def test_countdown_steps_come_from_its_solver_and_its_answer_is_the_target():
    """Notebook 01 on a task without worked solutions (Countdown): a puzzle's steps are its solver's lines (3-4
    numbers: 2 or 3 operations), its answer the target; the map colours the same steps."""
    countdown = get_task("countdown")
    rows = countdown.load("test").select(range(6))
    frame = explore.describe(rows, None, "test", countdown)
    assert set(frame["steps"]) <= {2, 3} and (frame["solution_tokens"] > 0).all()
    assert list(frame["answer"]) == [float(target) for target in rows["target"]]
    points = explore.question_map({"test": rows}, n=None, task=countdown)
    assert list(points["steps"]) == list(frame["steps"])
