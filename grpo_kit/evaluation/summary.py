"""The numbers of one evaluation: its metrics, each with a seeded bootstrap interval over questions; sampled
metrics (avg@n, pass@k, maj@n); diagnostics.

An evaluation is a list of records, one per (question, sample) (:func:`grpo_kit.evaluation.scoring.score`).
Its metrics are the task's extraction rules (``<rule>_correct``: strict and flexible accuracy), the
rewards it was scored with, and their total. What a metric is called, its maximum and whether it is
right/wrong come from its :class:`grpo_kit.tasks.Reward`, so nothing here knows a task or a reward by name.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpo_kit.evaluation.stats import bootstrap_ci, maj_at_k, pass_at_k
from grpo_kit.tasks import BUILTIN_REWARDS, Reward, Task
from grpo_kit.tasks.answer_format import TAGS

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TOTAL", "TOTAL_LABEL", "Metric", "diagnostics", "metrics", "per_question", "rule_label", "rules_of",
           "sampled_metrics", "summarize"]

#: The record key of the sum of a completion's rewards, each with weight 1.
TOTAL = "total"
#: Its row label in tables: unweighted, so that it never reads as the weighted total GRPO trains on (TRL's ``reward``,
#: ``reward-check``'s and the viewer's "weighted total"), which weights each reward as the run does.
TOTAL_LABEL = "Sum of rewards (unweighted)"
#: Record keys every evaluation has that are not metrics.
_BASE_FIELDS = frozenset({"id", "index", "sample", "task", "question", "answer", "completion", TOTAL, "num_tokens",
                          "truncated"})


@dataclass(frozen=True)
class Metric:
    """One row of a metric table: its record key, label, largest value, whether it takes two values (flips and
    McNemar apply to those only) and whether it judges the answer against the gold one (``correctness``: the
    extraction rules' accuracies and the rewards that read a dataset column) rather than the answer's format."""

    key: str
    label: str
    max_value: float
    binary: bool
    correctness: bool = False


def rule_label(rule: str) -> str:
    """The table label of an extraction rule's accuracy.

    >>> rule_label("strict")
    'Strict accuracy'
    """
    return f"{rule.capitalize()} accuracy"


def rules_of(records: Sequence[dict[str, Any]]) -> list[str]:
    """The extraction rules the records were scored with (``strict``, ``flexible``), in order."""
    return [k.removesuffix("_correct") for k in records[0] if k.endswith("_correct")]


def metrics(records: Sequence[dict[str, Any]], task: Task, rewards: Sequence[Reward] = ()) -> list[Metric]:
    """The metrics of ``records``: the rules' accuracies, the rewards in the order they were scored, their unweighted
    sum (:data:`TOTAL_LABEL`).

    A reward is described by ``rewards`` where it is among them, else by the built-in reward of its name, else
    by its name alone (graded). A reward whose maximum is not known (a function of your own without a
    ``max_value`` attribute) gets the largest value it returned in these records.

    >>> from grpo_kit.tasks import get_task
    >>> def mine(completions=None, **kwargs): return [len(c) / 10 for c in completions]
    >>> records = [{"id": "q", "sample": 0, "strict_correct": 1.0, "mine": 0.3}, {"id": "q", "sample": 1,
    ...            "strict_correct": 0.0, "mine": 0.7}]
    >>> [(m.label, m.max_value) for m in metrics(records, get_task("gsm8k"), [Reward.of(mine)])][1]
    ('mine', 0.7)
    """
    rules = rules_of(records)
    skip = _BASE_FIELDS | {f"{r}_answer" for r in rules} | {f"{r}_correct" for r in rules} | set(task.fields(""))
    given = {r.name: r for r in rewards}
    found = []
    for key in records[0]:
        if key in skip:
            continue
        reward = given.get(key) or (Reward.of(BUILTIN_REWARDS[key]) if key in BUILTIN_REWARDS else None)
        metric = Metric(key, reward.label, reward.max_value, reward.binary, bool(reward.columns)) \
            if reward is not None else Metric(key, key, math.nan, False)
        if math.isnan(metric.max_value):
            returned = [r[key] for r in records if isinstance(r.get(key), (int, float))]
            metric = dataclasses.replace(metric, max_value=max(returned) if returned else math.nan)
        found.append(metric)
    return [Metric(f"{r}_correct", rule_label(r), 1.0, True, True) for r in rules] + found + [
        Metric(TOTAL, TOTAL_LABEL, sum(m.max_value for m in found), False)]


def per_question(records: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    """Mean of ``key`` over each question's samples, by question id in first-seen order; a skipped sample
    (``None``) does not count, and a question whose samples were all skipped counts 0."""
    sums: dict[str, list[float]] = {}
    for r in records:
        values = sums.setdefault(r["id"], [])
        if r[key] is not None:
            values.append(float(r[key]))
    return {qid: sum(v) / len(v) if v else 0.0 for qid, v in sums.items()}


def summarize(records: Sequence[dict[str, Any]], task: Task, rewards: Sequence[Reward] = (), confidence: float = 0.95,
              seed: int = 0) -> pd.DataFrame:
    """The metric table: strict and flexible accuracy, then the rewards, with intervals.

    Each value is the mean over questions of the per-question mean over samples (with one
    greedy sample, plain accuracy; with n samples, avg@n). Intervals are seeded percentile
    bootstraps resampling questions (:func:`grpo_kit.evaluation.stats.bootstrap_ci`).

    Args:
        records: the records of one evaluation.
        task: the task they belong to (which record fields are not metrics).
        rewards: the rewards they were scored with (labels and maxima; see :func:`metrics`).
        confidence, seed: of the bootstrap.

    Returns:
        ``pandas.DataFrame`` indexed by metric label with columns ``value``, ``ci_low``,
        ``ci_high`` and ``max``: Strict accuracy, Flexible accuracy, the rewards in the order
        they were scored, then :data:`TOTAL_LABEL` (their sum, each with weight 1).

    Raises:
        ValueError: no records.
    """
    import pandas as pd

    if not records:
        raise ValueError("no records to summarise")
    rows = {}
    for metric in metrics(records, task, rewards):
        values = list(per_question(records, metric.key).values())
        rows[metric.label] = (sum(values) / len(values), *bootstrap_ci(values, confidence, seed=seed), metric.max_value)
    return pd.DataFrame.from_dict(rows, orient="index", columns=["value", "ci_low", "ci_high", "max"]).rename_axis(
        "metric")


def sampled_metrics(records: Sequence[dict[str, Any]], ks: Sequence[int] | None = None, confidence: float = 0.95,
                    seed: int = 0) -> pd.DataFrame:
    """avg@n, unbiased pass@k and maj@n for each extraction rule, with bootstrap intervals.

    Args:
        records: records of a sampled evaluation (the same number n of samples per question).
        ks: the k of pass@k; default 1, 2, 4, ... up to n, and n.
        confidence, seed: of the bootstrap over questions.

    Returns:
        ``pandas.DataFrame`` indexed by metric (``"avg@8 (strict)"``, ``"pass@4 (flexible)"``,
        ``"maj@8 (strict)"``, ...) with ``value``, ``ci_low``, ``ci_high``. maj@n votes over the
        rule's answers (strings, e.g. normalised numbers); ties go to the answer sampled first
        (:func:`grpo_kit.evaluation.stats.maj_at_k`), and the winner is right when the records holding it are.

    Raises:
        ValueError: questions with different sample counts, or a k above n.
    """
    import pandas as pd

    by_question: dict[Any, list[dict[str, Any]]] = {}
    for r in records:
        by_question.setdefault(r.get("id", r["index"]), []).append(r)
    counts = {len(v) for v in by_question.values()}
    if len(counts) != 1:
        raise ValueError(f"questions have different sample counts {sorted(counts)}")
    n = counts.pop()
    ks = sorted({*(2 ** i for i in range(n.bit_length()) if 2 ** i <= n), n}) if ks is None else list(ks)
    if any(not 1 <= k <= n for k in ks):
        raise ValueError(f"every k must be between 1 and n={n}, got {ks}")
    groups = [sorted(v, key=lambda r: r["sample"]) for v in by_question.values()]
    rows = {}
    for rule in rules_of(records):
        correct = [sum(r[f"{rule}_correct"] > 0 for r in g) for g in groups]
        per_metric = {f"avg@{n} ({rule})": [c / n for c in correct]}
        per_metric.update({f"pass@{k} ({rule})": [pass_at_k(n, c, k) for c in correct] for k in ks})
        per_metric[f"maj@{n} ({rule})"] = [_majority_correct(g, rule) for g in groups]
        for name, values in per_metric.items():
            rows[name] = (sum(values) / len(values), *bootstrap_ci(values, confidence, seed=seed))
    return pd.DataFrame.from_dict(rows, orient="index", columns=["value", "ci_low", "ci_high"]).rename_axis("metric")


def _majority_correct(group: Sequence[dict[str, Any]], rule: str) -> float:
    right = {r[f"{rule}_answer"]: r[f"{rule}_correct"] > 0 for r in group}
    return maj_at_k([r[f"{rule}_answer"] for r in group], None, equal=lambda winner, _: right[winner])


def diagnostics(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Signs of reward hacking and format-only gains: completion length, truncation, tag use.

    Returns:
        ``{"mean_tokens", "max_tokens", "truncation_rate"}`` (lengths in tokens; the rate is the
        share of completions that hit ``max_new_tokens``; NaN when unknown) and
        ``"has <tag>"`` for each tag of the answer format: the share of completions containing it.
    """
    tokens = [r["num_tokens"] for r in records if r.get("num_tokens") is not None]
    truncated = [bool(r["truncated"]) for r in records if r.get("truncated") is not None]
    return {"mean_tokens": sum(tokens) / len(tokens) if tokens else math.nan,
            "max_tokens": float(max(tokens)) if tokens else math.nan,
            "truncation_rate": sum(truncated) / len(truncated) if truncated else math.nan,
            **{f"has {tag}": sum(tag in r["completion"] for r in records) / len(records) for tag in TAGS}}
