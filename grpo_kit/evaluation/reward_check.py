"""Whether a reward set can teach anything, read from the baseline's sampled completions before any GPU time.

GRPO's advantage is a completion's reward minus its group's mean (scaled): a prompt whose ``num_generations``
completions all score the same gives every one of them advantage 0, so nothing is learned from it (TRL logs the
share of such groups as ``frac_reward_zero_std``; DAPO's dynamic sampling, Yu et al. 2025, drops them). And a reward
that wrong answers satisfy as well as right ones teaches the format, not the solving. From ``k`` sampled completions
per question (``eval --before --samples k``) this module computes, per reward:

- ``mean``: over every sample it judged (``None``: skipped);
- ``zero_variance_share``: the share of questions whose ``k`` samples all got the same value (a question whose
  samples were all skipped counts as such);
- ``correlation``: Pearson's r over all samples between the reward and the task's headline correctness (1 right,
  0 wrong), ``None`` when either is constant;
- ``max``, ``at_max`` and ``max_on_wrong_share``: its largest value (its ``max_value`` attribute, else the largest it
  returned), how many samples reached it and the share of those whose answer was wrong;

and for the reward set (the weights given, TRL's ``reward_weights``): the same for the weighted total, whose
``zero_variance_share`` is the share of prompts from which GRPO would learn nothing at step 0. Every number can be
recomputed from the sampled records (``baseline_sampled.jsonl``): each holds its question ``id``, the rewards'
values and the headline.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grpo_kit.system.logs import counted
from grpo_kit.tasks import RewardSet, Task

__all__ = ["RewardCheck", "check_rewards", "pearson", "zero_variance_share"]

#: Values closer than this count as the same (rewards are sums of a few binary or graded terms).
_SAME = 1e-9


def zero_variance_share(records: Sequence[dict[str, Any]], value: Any) -> float:
    """The share of questions (record ``id``) whose samples all got the same ``value(record)`` (``None`` skipped).

    >>> rows = [{"id": "a", "r": 1.0}, {"id": "a", "r": 1.0}, {"id": "b", "r": 0.0}, {"id": "b", "r": 1.0}]
    >>> zero_variance_share(rows, lambda r: r["r"])
    0.5
    """
    groups: dict[str, list[float]] = {}
    for record in records:
        v = value(record)
        groups.setdefault(record["id"], [])
        if v is not None:
            groups[record["id"]].append(float(v))
    same = sum(1 for values in groups.values() if not values or max(values) - min(values) <= _SAME)
    return same / len(groups) if groups else math.nan


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's correlation of two equally long series (:func:`statistics.correlation`); ``None`` when either is
    constant or there are fewer than two values. Values are rounded to 9 decimals first, so sums of rewards that
    differ only in floating-point rounding count as the same.

    >>> pearson([0, 1, 2], [0, 2, 4]), pearson([1, 1], [0, 1]), pearson([0.1 + 0.2, 0.3], [0, 1])
    (1.0, None, None)
    """
    try:
        return statistics.correlation([round(x, 9) for x in xs], [round(y, 9) for y in ys])
    except statistics.StatisticsError:
        return None


def _stats(records: Sequence[dict[str, Any]], value: Any, correct: Any, max_value: float) -> dict[str, Any]:
    judged = [(float(v), correct(r)) for r in records if (v := value(r)) is not None]
    values = [v for v, _ in judged]
    top = max_value if not math.isnan(max_value) else (max(values) if values else math.nan)
    at_max = [c for v, c in judged if not math.isnan(top) and v >= top - _SAME]
    r = pearson(values, [1.0 if c else 0.0 for _, c in judged])
    wrong = sum(1 for c in at_max if not c) / len(at_max) if at_max else None
    return {"mean": sum(values) / len(values) if values else None,
            "zero_variance_share": zero_variance_share(records, value), "correlation": r if r is None else round(r, 6),
            "max": None if math.isnan(top) else top, "at_max": len(at_max), "max_on_wrong_share": wrong,
            "judged": len(values)}


@dataclass
class RewardCheck:
    """What :func:`check_rewards` found: ``rewards`` (per reward), ``reward_set`` (the weighted total), what it
    was computed from (``headline``, ``questions``, ``samples``, ``source``), how many samples were right by the
    headline (``right`` of ``judged``), and whether none of the set's trained rewards reads a dataset column
    (``format_only``: it cannot know the gold answer)."""

    rewards: dict[str, dict[str, Any]]
    reward_set: dict[str, Any]
    headline: str
    questions: int
    samples: int
    source: str = ""
    right: int = 0
    judged: int = 0
    format_only: bool = False

    def to_json(self) -> dict[str, Any]:
        """The check as one JSON object: its fields (``{"rewards": {NAME: {...}}, "reward_set": {"weights": {...},
        ...}, ...}``) and ``verdicts``."""
        return {**dataclasses.asdict(self), "verdicts": self.verdicts()}

    def markdown(self) -> str:
        """The check as a markdown table, one row per reward and one for the reward set, with what it means."""
        def number(v: Any, digits: int = 3) -> str:
            return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"

        weights = self.reward_set["weights"]
        lines = [f"| reward | weight | mean | zero-variance share | correlation with {self.headline} | max | "
                 "samples at max | share of them wrong |", "|:--|--:|--:|--:|--:|--:|--:|--:|"]
        for name, s in self.rewards.items():
            lines.append(f"| {name} | {weights[name]:g} | {number(s['mean'])} | {number(s['zero_variance_share'])} | "
                         f"{number(s['correlation'])} | {number(s['max'], 2)} | {s['at_max']} | "
                         f"{number(s['max_on_wrong_share'])} |")
        t = self.reward_set
        lines.append(f"| **reward set (weighted total)** | | {number(t['mean'])} | "
                     f"**{number(t['zero_variance_share'])}** | {number(t['correlation'])} | {number(t['max'], 2)} | "
                     f"{t['at_max']} | {number(t['max_on_wrong_share'])} |")
        share = t["zero_variance_share"]
        lines += ["", f"From {counted(self.samples, 'sampled completion')} of each of "
                      f"{counted(self.questions, 'question')} ({self.source}): "
                      f"at step 0 GRPO would learn nothing from {share:.0%} of the prompts (every completion of "
                      "the group scored the same weighted total: each reward times its weight, summed, what GRPO's "
                      "advantage is computed from)."]
        lines += self.verdicts()
        return "\n".join(lines)

    def verdicts(self) -> list[str]:
        """What the numbers support, one sentence each: no correlation is read where the baseline got nothing right
        (or everything), and a set is called a format reward only when none of its trained rewards reads the gold
        answer (``format_only``)."""
        t = self.reward_set
        if self.right == 0 or self.right == self.judged:
            which = "no right answers" if self.right == 0 else "only right answers"
            return [f"The baseline's samples hold {which} ({self.headline}): the correlation with it cannot be "
                    "measured, so this check cannot tell whether the set pays right answers more than wrong ones."
                    + (" GRPO's correctness rewards need some right answers among a group's completions to have "
                       "anything to reward: start from a stronger policy or an easier slice, or warm-start longer."
                       if self.right == 0 else "")]
        format_only = (["None of its trained rewards reads the gold answer, so it can teach the format but not "
                        "solving."] if self.format_only else [])
        if t["correlation"] is None:
            return ["Every sample got the same weighted total: at step 0 this set gives GRPO nothing to learn from.",
                    *format_only]
        if t["correlation"] >= 0.1:
            return [f"The weighted total follows {self.headline} (r = {t['correlation']:.2f}): it pays right answers "
                    "more than wrong ones on these samples."]
        return [f"The weighted total does not follow {self.headline} (r = {t['correlation']:.2f}): on these samples "
                "it pays wrong answers as much as right ones.", *format_only]

    def _repr_markdown_(self) -> str:
        return self.markdown()


def check_rewards(records: Sequence[dict[str, Any]], task: Task, rewards: RewardSet, source: str = ""
                  ) -> RewardCheck:
    """Compute the reward check of ``rewards`` on sampled records (see the module docstring).

    Args:
        records: sampled evaluation records, each holding the value of every reward of ``rewards`` (e.g.
            :func:`grpo_kit.evaluation.scoring.with_rewards` of the baseline's sampled evaluation) and the task's
            headline (:attr:`grpo_kit.tasks.Task.headline`).
        task: their task.
        rewards: the rewards and weights to check.
        source: where the records came from, for the text.

    Returns:
        :class:`RewardCheck`.

    Raises:
        ValueError: no records, or a reward or the headline missing from them.
    """
    if not records:
        raise ValueError("no sampled records to check the rewards on: measure the baseline with samples "
                         "(eval --before --samples 8)")
    missing = [key for key in [*rewards.names, task.headline] if key not in records[0]]
    if missing:
        raise ValueError(f"the sampled records hold no {', '.join(missing)}")

    def correct(record: dict[str, Any]) -> bool:
        return (record[task.headline] or 0) > 0

    out = {reward.name: _stats(records, lambda r, n=reward.name: r[n], correct, reward.max_value)
           for reward in rewards.rewards}
    weights = dict(zip(rewards.names, rewards.weights))

    def total(record: dict[str, Any]) -> float:
        return sum(w * (record[n] or 0.0) for n, w in weights.items())

    top = sum(w * out[n]["max"] for n, w in weights.items() if w and out[n]["max"] is not None) \
        if all(out[n]["max"] is not None for n, w in weights.items() if w) else math.nan
    reward_set = {"weights": weights, **_stats(records, total, correct, top)}
    per_question = {r["id"] for r in records}
    return RewardCheck(rewards=out, reward_set=reward_set, headline=task.headline, questions=len(per_question),
                       samples=len(records) // max(1, len(per_question)), source=source,
                       right=sum(1 for r in records if correct(r)), judged=len(records),
                       format_only=all(not r.columns for r, w in zip(rewards.rewards, rewards.weights) if w))
