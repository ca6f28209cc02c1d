"""What a task is: its data, the rewards it trains with, and how evaluation reads and checks its answers.

A task declares everything that differs from one task to another, so evaluation, training and the
demo never name one: its loader and splits, its training and metric rewards, its two extraction
rules, its headline metric and the fields its evaluation records carry. Every task, the kit's own
included, is declared in a task file (:mod:`grpo_kit.tasks.task_file`); what only the demo, the tiny
policy or notebook 01 read stays with the file as :attr:`Task.extras`.

Every task names two extraction rules, as lm-evaluation-harness does for GSM8K: ``strict`` reads the
answer only from a completion in the exact layout, ``flexible`` reads it however it is written, so a
gain in format is never mistaken for a gain in solving.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grpo_kit.tasks.answer_format import Example, ExtractionRule, extract_xml_answer
from grpo_kit.tasks.reward_registry import RewardSet
from grpo_kit.tasks.rewards import Reward

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["Task"]


def _answer_field(text: str) -> dict[str, Any]:
    return {"extracted": extract_xml_answer(text)}


@dataclass(frozen=True)
class Task:
    """A verifiable task.

    Attributes:
        name: the task's name (``--task``, ``task = ...``).
        description: one line.
        loader: ``loader(split, **kwargs) -> datasets.Dataset`` with a conversational ``prompt``.
        splits: the splits it has (a task without ``"train"`` is evaluation only).
        rewards: the reward names GRPO trains with by default (weight 1 each).
        metrics: the reward names in the evaluation table, in table order.
        rules: ``{"strict": ExtractionRule, "flexible": ExtractionRule}``.
        headline: the record key of the metric a before/after comparison leads with (a rule's
            ``<rule>_correct`` or a reward's name).
        gold: the gold answer of an example as text (tables and flip lists show it).
        fields: extra fields an evaluation record carries, read from a completion's text (default: the
            text inside ``<answer>`` as ``extracted``).
        weights: the weight of each of :attr:`rewards` (``None``: 1 each).
        validation_size: questions held out of the train split to measure accuracy on during training (``None``: the
            run's ``eval_size``).
        file: the task file it was declared in (absolute), ``None`` for a task of the kit's own.
        digest: ``{file: SHA-256}`` of the task file and its data files (``None`` for a task of the kit's own): what a
            run folder records, so that a later step refuses changed data.
        extras: what only the demo, the tiny policy or notebook 01 read, as the task file declares it (the keys
            of :data:`grpo_kit.tasks.task_file.EXTRAS`; the Python a key names already imported):
            ``demonstration`` (``(example, style) -> (reasoning, final answer) | None``: the tiny policy's warm
            start; ``style`` is :attr:`grpo_kit.policy.warm_start.WarmStart.reasoning`), ``tokenizer_texts``
            (``train rows -> list[str]``: what the tiny policy's tokenizer is trained on), ``notes`` (what a tiny
            policy trained for minutes on a CPU can show, for the demo's report), ``warm_xml_share`` (the share of
            warm-start targets in the answer format when the task fixes it), ``compare_rewards`` (``{name:
            {reward: weight}}``, the reward sets the compare demo trains) and ``answer_value`` (the column whose
            number is the size of an answer, for notebook 01). A key the file leaves out is absent.
    """

    name: str
    description: str
    loader: Callable[..., Dataset]
    splits: tuple[str, ...]
    rewards: tuple[str, ...]
    metrics: tuple[str, ...]
    rules: Mapping[str, ExtractionRule]
    headline: str
    gold: Callable[[Example], str]
    fields: Callable[[str], dict[str, Any]] = _answer_field
    weights: tuple[float, ...] | None = None
    validation_size: int | None = None
    file: str | None = None
    digest: Mapping[str, str] | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        """How run folders record the task, and what :func:`grpo_kit.tasks.get_task` reads back: its task file's
        path, or its name."""
        return self.file if self.file is not None else self.name

    def load(self, split: str = "test", **kwargs: Any) -> Dataset:
        """Load a split (keyword arguments go to the loader, e.g. ``source=``).

        Raises:
            ValueError: a split the task does not have.
        """
        if split not in self.splits:
            raise ValueError(f"task {self.name!r} has no {split!r} split (it has {', '.join(self.splits)})"
                             + ("; it is for evaluation only" if "train" not in self.splits else ""))
        return self.loader(split, **kwargs)

    @property
    def trains(self) -> bool:
        """Whether the task has a train split."""
        return "train" in self.splits

    def reward_set(self) -> RewardSet:
        """The training rewards, with :attr:`weights` (default 1 each)."""
        return RewardSet(list(self.rewards), list(self.weights) if self.weights is not None else None)

    def metric_rewards(self) -> list[Reward]:
        """The rewards its evaluation table shows, in order."""
        return RewardSet(list(self.metrics)).rewards
