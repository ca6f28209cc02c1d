"""Tasks by name: the dataset, the rewards to train with, and how evaluation reads and checks answers.

A task is one name in the notebooks' parameters cell and in the CLI (``--task``):

- ``gsm8k``: grade-school word problems (seed 002); numeric answers.
- ``countdown``: reach a target with 3-4 numbers (TinyZero / oat, seeds 001 and 003); many
  right answers, checked by evaluating the expression.
- ``math500``: competition problems (MATH-500), evaluation only, checked with math-verify; for
  measuring whether GSM8K training transfers.

Each task names two extraction rules, as for GSM8K: ``strict`` reads the answer only from a
completion in the exact XML layout, ``flexible`` reads it however it is written, so a gain in
format is never mistaken for a gain in solving.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpo_kit.answers import (
    EXTRACTION_RULES,
    extract_xml_answer,
    is_strict_format,
    normalize_number,
)
from grpo_kit.countdown import countdown_answer, countdown_score, solve
from grpo_kit.data import (
    SYSTEM_PROMPT,
    load_countdown,
    load_gsm8k,
    load_math500,
    solution_reasoning,
    tokenizer_texts,
)
from grpo_kit.rewards import SEED_REWARDS, RewardMix
from grpo_kit.verify import math_verifier

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["TASKS", "ExtractionRule", "Task", "get_task"]

Example = Mapping[str, Any]


@dataclass(frozen=True)
class ExtractionRule:
    """How one rule reads an answer (``extract(text) -> str | None``; ``None``: nothing to read) and
    checks it against an example (``correct(answer, example) -> bool``). Answers are strings, so
    equal answers vote together in maj@k."""

    extract: Callable[[str], str | None]
    correct: Callable[[str, Example], bool]


@dataclass(frozen=True)
class Task:
    """A verifiable task: data, training rewards, evaluation metrics and answer rules.

    Attributes:
        name: the task's name (``--task``, ``task = ...``).
        description: one line.
        loader: ``loader(split, **kwargs) -> datasets.Dataset`` with a conversational ``prompt``.
        splits: the splits it has (a task without ``"train"`` is evaluation only).
        rewards: reward names GRPO trains with by default.
        metrics: reward names in the evaluation table, in table order.
        rules: ``{"strict": ExtractionRule, "flexible": ExtractionRule}``.
        gold: the gold answer of an example as text (tables and flip lists show it).
        demonstration: ``(example, style) -> (reasoning steps, final answer) | None`` for the tiny
            policy's supervised warm start (``style``: :attr:`grpo_kit.warm_start.WarmStart.reasoning`);
            ``None`` where the task has none.
        texts: the text the tiny policy's tokenizer is trained on, from a train split.
    """

    name: str
    description: str
    loader: Callable[..., Dataset]
    splits: tuple[str, ...]
    rewards: tuple[str, ...]
    metrics: tuple[str, ...]
    rules: Mapping[str, ExtractionRule]
    gold: Callable[[Example], str]
    demonstration: Callable[[Example, str], tuple[str, str] | None] | None = None
    texts: Callable[[Dataset], list[str]] | None = None

    def load(self, split: str = "test", **kwargs: Any) -> Dataset:
        """Load a split (keyword arguments go to the loader, e.g. ``source=``).

        Raises:
            ValueError: a split the task does not have.
        """
        if split not in self.splits:
            raise ValueError(f"task {self.name!r} has no {split!r} split (it has {', '.join(self.splits)})"
                             + ("; it is for evaluation only" if "train" not in self.splits else ""))
        return self.loader(split, **kwargs)

    def reward_mix(self) -> RewardMix:
        """The training rewards, weight 1 each."""
        return RewardMix(list(self.rewards))


# --- GSM8K -------------------------------------------------------------------------------------


def _strictly(extract: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """``extract``, but only from a completion in the strict XML layout (else ``None``)."""
    return lambda text: extract(text) if is_strict_format(text) else None


def _gsm8k_rule(extract: Callable[[str], str | None]) -> ExtractionRule:
    return ExtractionRule(extract, lambda answer, example: answer == normalize_number(example["answer"]))


def _gsm8k_demonstration(example: Example, style: str = "equations") -> tuple[str, str]:
    return solution_reasoning(example["solution"], style), example["answer"]


# --- Countdown ---------------------------------------------------------------------------------


def _countdown_solves(answer: str, example: Example) -> bool:
    return countdown_score(f"<answer>{answer}</answer>", example["nums"], example["target"]) == 1.0


def _countdown_demonstration(example: Example, style: str = "equations") -> tuple[str, str] | None:
    return _solved(tuple(example["nums"]), example["target"])


@functools.cache
def _solved(nums: tuple[int, ...], target: int) -> tuple[str, str] | None:
    """Solver steps and expression, remembered: the tokenizer texts, the warm start and notebook 01
    each need all 10,000 train puzzles solved (about 20 s once)."""
    solution = solve(nums, target)
    return None if solution is None else ("\n".join(solution.steps), solution.expression)


def _countdown_texts(dataset: Dataset) -> list[str]:
    demos = [_countdown_demonstration(row) for row in dataset]
    return [SYSTEM_PROMPT] * 50 + list(dataset["question"]) + [f"{s}\n{e}" for s, e in filter(None, demos)]


# --- MATH-500 ----------------------------------------------------------------------------------

_BOXED_OPEN = re.compile(r"\s*\{")
#: Longest ``\boxed{...}`` content the flexible rule reads, in characters.
MAX_BOXED_CHARS = 4096


def _last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces matched within :data:`MAX_BOXED_CHARS`), or ``None``."""
    end = len(text)
    while (at := text.rfind("\\boxed", 0, end)) >= 0:
        brace = _BOXED_OPEN.match(text, at + len("\\boxed"))
        if brace is not None:
            break
        end = at
    else:
        return None
    depth, start = 1, brace.end()
    for i in range(start, min(len(text), start + MAX_BOXED_CHARS)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i].strip()
    return None


def _math_correct(answer: str, example: Example) -> bool:
    return math_verifier()(example["answer"], answer) is True


TASKS: dict[str, Task] = {
    "gsm8k": Task(
        name="gsm8k",
        description="GSM8K grade-school math (seed 002): numeric answers in <answer> tags",
        loader=load_gsm8k,
        splits=("train", "test"),
        rewards=SEED_REWARDS,
        metrics=("correctness_reward_func", "soft_correctness_reward_func", "int_reward_func",
                 "soft_format_reward_func", "strict_format_reward_func", "xmlcount_reward_func"),
        rules={rule: _gsm8k_rule(extract) for rule, extract in EXTRACTION_RULES.items()},
        gold=lambda example: example["answer"],
        demonstration=_gsm8k_demonstration,
        texts=tokenizer_texts,
    ),
    "countdown": Task(
        name="countdown",
        description="Countdown (TinyZero): an expression that reaches the target using each number once",
        loader=load_countdown,
        splits=("train", "test"),
        rewards=("xmlcount_reward_func", "strict_format_reward_func", "countdown_reward_func"),
        metrics=("countdown_reward_func", "soft_format_reward_func", "strict_format_reward_func",
                 "xmlcount_reward_func"),
        rules={"strict": ExtractionRule(_strictly(countdown_answer), _countdown_solves),
               "flexible": ExtractionRule(countdown_answer, _countdown_solves)},
        gold=lambda example: f"{example['target']} from {list(example['nums'])}",
        demonstration=_countdown_demonstration,
        texts=_countdown_texts,
    ),
    "math500": Task(
        name="math500",
        description="MATH-500 (evaluation only): competition math checked with math-verify",
        loader=load_math500,
        splits=("test",),
        rewards=("xmlcount_reward_func", "strict_format_reward_func", "math_verify_reward_func"),
        metrics=("math_verify_reward_func", "soft_format_reward_func", "strict_format_reward_func",
                 "xmlcount_reward_func"),
        rules={"strict": ExtractionRule(_strictly(extract_xml_answer), _math_correct),
               "flexible": ExtractionRule(lambda t: _last_boxed(t) or extract_xml_answer(t) or None, _math_correct)},
        gold=lambda example: example["answer"],
    ),
}


def get_task(task: str | Task) -> Task:
    """A task by name (a :class:`Task` passes through).

    Raises:
        ValueError: unknown name (the message lists the tasks).

    >>> get_task("countdown").rewards[-1]
    'countdown_reward_func'
    """
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: choose from {', '.join(TASKS)}")
    return TASKS[task]

