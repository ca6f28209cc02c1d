"""A small synthetic task for learning tests: single-digit addition, asked three ways.

A ~1M-parameter policy warm-started on it knows the sums, so GRPO has something real to teach (the
answer format of the blog post "LLM Reinforcement Learning with GRPO", 2025-03-03) and something real
to destroy (the sums).
"""

from __future__ import annotations

import dataclasses
import random

from grpo_kit.tasks import Task, get_task
from grpo_kit.tasks.data import build_prompt

SYSTEM = "Reply with <reasoning> and <answer> tags."
PHRASES = ["What is {a} plus {b}?", "Add {a} and {b}.", "Compute {a}+{b}."]


def addition_rows(pairs):
    rows = []
    for a, b in pairs:
        for phrase in PHRASES:
            s = a + b
            rows.append({"question": phrase.format(a=a, b=b), "answer": str(s),
                         "solution": f"{a}+{b} = <<{a}+{b}={s}>>{s}\n#### {s}",
                         "prompt": build_prompt(phrase.format(a=a, b=b), SYSTEM)})
    return rows


def split_pairs(seed: int = 0):
    """70 (a, b) pairs to train on, 30 held out."""
    pairs = [(a, b) for a in range(10) for b in range(10)]
    random.Random(seed).shuffle(pairs)
    return addition_rows(pairs[:70]), addition_rows(pairs[70:])


def addition_task(train_rows, test_rows) -> Task:
    """GSM8K's rules and metrics (a number in <answer>; the last number) on the addition rows."""
    from datasets import Dataset

    rows = {"train": train_rows, "test": test_rows}
    return dataclasses.replace(get_task("gsm8k"), name="addition", description="single-digit addition",
                               loader=lambda split, **kwargs: Dataset.from_list(rows[split]))
