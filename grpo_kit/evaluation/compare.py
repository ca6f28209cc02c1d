"""Before and after on the same questions: paired intervals, flips and exact McNemar tests, and their tables; and
several trained runs against their shared baseline and each other, with Holm-adjusted p-values
(:func:`compare_runs_results`).

A comparison never pairs what is not paired: records are matched by question id
(:func:`grpo_kit.evaluation.scoring.question_id`, a hash of the prompt and the gold answer), and two
evaluations that do not cover the same questions are refused, saying how many match.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpo_kit.evaluation.scoring import EvalResult
from grpo_kit.evaluation.stats import bootstrap_ci, holm, mcnemar_exact, paired_bootstrap_ci
from grpo_kit.evaluation.summary import per_question

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RunsComparison", "compare", "compare_markdown", "compare_runs_results", "flipped", "flips",
           "intervals_markdown", "paired_ids", "paired_test", "runs_markdown"]


def paired_ids(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> list[str]:
    """The question ids two evaluations share, in ``before``'s order, when they cover the same questions.

    Records without ids (written by grpo_kit before ids existed) are refused where they are read
    (:meth:`grpo_kit.evaluation.scoring.EvalResult.from_jsonl`).

    Raises:
        ValueError: the two sets of questions differ (the message says how many match).
    """
    ids_before = list(dict.fromkeys(r["id"] for r in before))
    ids_after = set(r["id"] for r in after)
    if set(ids_before) != ids_after:
        common = len(ids_after.intersection(ids_before))
        raise ValueError(f"before and after are not the same questions: {common} match, {len(ids_before) - common} "
                         f"only before, {len(ids_after) - common} only after. Evaluate both on the same slice, "
                         "prompt and task (the run folder's eval_settings.json).")
    return ids_before


def flips(before: Sequence[bool], after: Sequence[bool]) -> tuple[int, int]:
    """Count per-question changes: ``(wrong -> right, right -> wrong)``.

    Raises:
        ValueError: the lists differ in length (they must be the same questions in order).

    >>> flips([False, False, True, True], [True, False, False, True])
    (1, 1)
    """
    if len(before) != len(after):
        raise ValueError(f"paired results need the same questions: {len(before)} before, {len(after)} after")
    gained = sum(1 for b, a in zip(before, after) if not b and a)
    lost = sum(1 for b, a in zip(before, after) if b and not a)
    return gained, lost


def paired_test(before: EvalResult, after: EvalResult, metric: str | None = None) -> dict[str, Any]:
    """Paired comparison of per-question success under ``metric`` (reward > 0 counts as success).

    Questions are paired by id (:func:`grpo_kit.evaluation.scoring.question_id`). ``metric`` (a record key)
    defaults to the task's headline metric (:attr:`grpo_kit.tasks.Task.headline`).

    Returns:
        ``{"wrong_to_right": int, "right_to_wrong": int, "mcnemar_p": float}``.

    Raises:
        ValueError: the evaluations cover different questions (:func:`paired_ids`).
    """
    ids = paired_ids(before.records, after.records)
    was, now = before.correct(metric), after.correct(metric)
    gained, lost = flips([was[i] for i in ids], [now[i] for i in ids])
    return {"wrong_to_right": gained, "right_to_wrong": lost, "mcnemar_p": mcnemar_exact(gained, lost)}


def flipped(before: EvalResult, after: EvalResult, metric: str | None = None) -> pd.DataFrame:
    """The questions whose success under ``metric`` changed, with both completions (first sample).

    ``metric`` defaults to the task's headline metric (:attr:`grpo_kit.tasks.Task.headline`).

    Returns:
        ``pandas.DataFrame`` with ``change`` (``"wrong -> right"`` or ``"right -> wrong"``),
        ``index``, ``question``, ``answer``, ``before``, ``after`` (the completions) and
        ``extracted_before`` / ``extracted_after``; wrong-to-right rows first.

    Raises:
        ValueError: the evaluations cover different questions (:func:`paired_ids`).
    """
    import pandas as pd

    ids = paired_ids(before.records, after.records)
    was, now = before.correct(metric), after.correct(metric)
    b = {r["id"]: r for r in before.records if r["sample"] == 0}
    a = {r["id"]: r for r in after.records if r["sample"] == 0}
    rows = [{"change": "wrong -> right" if now[i] else "right -> wrong", "index": b[i]["index"],
             "question": b[i]["question"], "answer": b[i]["answer"], "before": b[i]["completion"],
             "after": a[i]["completion"], "extracted_before": b[i].get("extracted"),
             "extracted_after": a[i].get("extracted")} for i in ids if was[i] != now[i]]
    columns = ["change", "index", "question", "answer", "before", "after", "extracted_before", "extracted_after"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values("change", ascending=False, kind="stable").reset_index(drop=True)


def compare(before: EvalResult, after: EvalResult, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Paired before/after table over the same questions, paired by question id.

    Columns: ``metric``, ``before``, ``after``, ``delta``, ``max``; each value's interval
    (``before_low``/``before_high``, ``after_low``/``after_high``); the paired bootstrap
    interval of the difference (``delta_low``/``delta_high``); and, for right/wrong metrics,
    ``wrong_to_right``, ``right_to_wrong`` and the exact McNemar ``mcnemar_p`` (NaN for graded
    metrics such as the XML tag count and the total). ``attrs`` holds the headline test (the task's
    headline metric, :attr:`grpo_kit.tasks.Task.headline`: ``metric``, ``label``, ``wrong_to_right``,
    ``right_to_wrong``, ``mcnemar_p``), and where both accuracies exist ``format_only_gain``: the part of the
    strict-accuracy gain that flexible accuracy does not show, i.e. the gain from format compliance alone:
    ``delta strict - min(max(delta flexible, 0), delta strict)`` when strict accuracy rose, else 0, so it lies in
    ``[0, delta strict]`` (a flexible accuracy that fell does not make the format's part larger than the gain), and
    ``format_only_questions``: the questions strict match turned wrong->right whose answer flexible extract already
    read right before (at most ``strict_wrong_to_right``), with ``strict_gain`` and ``flexible_gain`` (the deltas).

    Raises:
        ValueError: the evaluations cover different questions (the message says how many match).
    """
    import pandas as pd

    ids = paired_ids(before.records, after.records)
    after_keys = {m.key for m in after.metrics()}
    rows, values, deltas = [], {}, {}
    for metric in (m for m in before.metrics() if m.key in after_keys):
        b, a = values[metric.key] = _values(before, metric.key, ids), _values(after, metric.key, ids)
        pair = _paired(b, a, metric.binary, confidence, seed)
        deltas[metric.key] = pair["delta"]
        rows.append({"metric": metric.label, "before": sum(b) / len(b), "after": sum(a) / len(a),
                     "delta": pair["delta"], "max": metric.max_value,
                     **dict(zip(("before_low", "before_high"), bootstrap_ci(b, confidence, seed=seed))),
                     **dict(zip(("after_low", "after_high"), bootstrap_ci(a, confidence, seed=seed))), **pair})
    frame = pd.DataFrame(rows)
    headline = before.task.headline
    label = next((m.label for m in before.metrics() if m.key == headline), headline)
    frame.attrs.update(paired_test(before, after), metric=headline, label=label)
    if {"strict_correct", "flexible_correct"} <= set(values):
        strict, flexible = deltas["strict_correct"], deltas["flexible_correct"]
        (s_b, s_a), f_b = values["strict_correct"], values["flexible_correct"][0]
        turned = [f for was, now, f in zip(s_b, s_a, f_b) if not was and now]  # strict: wrong -> right
        frame.attrs.update(format_only_gain=float(strict - min(max(flexible, 0.0), strict)) if strict > 0 else 0.0,
                           format_only_questions=sum(1 for f in turned if f), strict_gain=float(strict),
                           flexible_gain=float(flexible), strict_wrong_to_right=len(turned))
    return frame


def _values(result: EvalResult, key: str, ids: Sequence[str]) -> list[float]:
    """Each question's value of ``key`` (:func:`grpo_kit.evaluation.summary.per_question`), in the order of ``ids``."""
    by_id = per_question(result.records, key)
    return [by_id[i] for i in ids]


def _paired(a: Sequence[float], b: Sequence[float], binary: bool, confidence: float, seed: int) -> dict[str, Any]:
    """``b`` against ``a``, per-question values of the same questions in one order: ``delta`` (the difference of the
    means) with its paired bootstrap interval ``delta_low``/``delta_high``, and for a right/wrong metric (a value
    above 0 is right) ``wrong_to_right``, ``right_to_wrong`` and the exact McNemar ``mcnemar_p`` (NaN for graded
    metrics)."""
    low, high = paired_bootstrap_ci(a, b, confidence, seed=seed)
    gained, lost = flips([v > 0 for v in a], [v > 0 for v in b]) if binary else (math.nan, math.nan)
    return {"delta": sum(b) / len(b) - sum(a) / len(a), "delta_low": low, "delta_high": high,
            "wrong_to_right": gained, "right_to_wrong": lost,
            "mcnemar_p": mcnemar_exact(gained, lost) if binary else math.nan}


def compare_markdown(table: pd.DataFrame, digits: int = 3) -> str:
    """A compact markdown table of :func:`compare`: values with 95% intervals, flips and McNemar p."""

    lines = ["| metric | before | after | delta | max | wrong->right | right->wrong | McNemar p |",
             "|:--|--:|--:|--:|--:|--:|--:|--:|"]
    for r in table.to_dict("records"):
        paired = ("", "", "") if math.isnan(r["mcnemar_p"]) else (
            f"{int(r['wrong_to_right'])}", f"{int(r['right_to_wrong'])}", f"{r['mcnemar_p']:.3g}")
        lines.append(f"| {r['metric']} | {_ci(r['before'], r['before_low'], r['before_high'], digits)} | "
                     f"{_ci(r['after'], r['after_low'], r['after_high'], digits)} | "
                     f"{_ci(r['delta'], r['delta_low'], r['delta_high'], digits)} | {r['max']:g} | "
                     + " | ".join(paired) + " |")
    return "\n".join(lines)


def _ci(value: float, low: float, high: float, digits: int) -> str:
    """A value and its interval as the tables show them: ``0.500 [0.250, 0.750]``."""
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def intervals_markdown(frames: dict[str, pd.DataFrame], digits: int = 3) -> str:
    """Markdown of several ``value``/``ci_low``/``ci_high`` frames side by side, one column per name.

    E.g. ``intervals_markdown({"before": a.sampled(), "after": b.sampled()})``; a metric
    missing from one frame shows as blank.
    """
    names = list(frames)
    metrics = list(dict.fromkeys(m for f in frames.values() for m in f.index))
    lines = ["| metric | " + " | ".join(f"{n} [95% CI]" for n in names) + " |",
             "|:--|" + "--:|" * len(names)]
    for metric in metrics:
        cells = [_ci(*frames[n].loc[metric, ["value", "ci_low", "ci_high"]], digits) if metric in frames[n].index
                 else "" for n in names]
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass
class RunsComparison:
    """Several trained runs against their shared baseline and against each other, on the same questions.

    Attributes:
        names: ``"baseline"`` then each run's name, in order.
        metrics: one row per (run, metric): ``run``, ``metric`` (label), ``key``, ``value``, ``low``, ``high`` (the
            95% bootstrap interval over questions), ``max``.
        pairs: one row per (comparison, right/wrong metric): ``a``, ``b`` (``b`` is measured against ``a``; ``a`` is
            the baseline in the first comparisons, then each pair of runs), ``metric``, ``key``, ``a_value``,
            ``b_value`` (their means, as in ``metrics``), ``delta`` (``b - a``) with its paired interval
            ``delta_low``/``delta_high``, ``wrong_to_right`` (wrong under ``a``, right under ``b``), ``right_to_wrong``,
            ``mcnemar_p`` (exact) and ``holm_p``: the McNemar p-values adjusted by Holm over all comparisons of that
            metric.
        headline: the record key of the task's headline metric.
        questions: how many questions every evaluation shares.
    """

    names: list[str]
    metrics: pd.DataFrame
    pairs: pd.DataFrame
    headline: str
    questions: int


def compare_runs_results(baseline: EvalResult, runs: Mapping[str, EvalResult], confidence: float = 0.95,
                         seed: int = 0) -> RunsComparison:
    """Compare several evaluations of trained runs with their shared baseline and with each other, paired by question.

    Every right/wrong metric (the extraction rules and binary rewards) gets a paired bootstrap interval of each
    difference, the flips and an exact McNemar test for the baseline against every run and for every pair of runs;
    the p-values of one metric are adjusted together by Holm (:func:`grpo_kit.evaluation.stats.holm`), since with
    ``r`` runs there are ``r + r(r-1)/2`` comparisons. Graded metrics (XML tag count, total) get values and intervals.

    Args:
        baseline: the greedy evaluation before training that every run shares.
        runs: ``{name: greedy evaluation after training}``, at least one; names must not be ``"baseline"``.
        confidence: the intervals' level.
        seed: the bootstrap's seed.

    Returns:
        :class:`RunsComparison`.

    Raises:
        ValueError: no runs; a run named ``"baseline"``; an evaluation that does not cover the baseline's questions
            (:func:`paired_ids`, naming the run).
    """
    import itertools

    import pandas as pd

    if not runs:
        raise ValueError("compare at least one trained run with the baseline")
    if "baseline" in runs:
        raise ValueError("'baseline' names the shared evaluation before training: give the runs other names")
    ids = list(dict.fromkeys(r["id"] for r in baseline.records))
    for name, result in runs.items():
        try:
            paired_ids(baseline.records, result.records)
        except ValueError as e:
            raise ValueError(f"run {name!r}: {e}") from None
    results = {"baseline": baseline, **runs}
    shared = [m for m in baseline.metrics() if all(m.key in {x.key for x in r.metrics()} for r in runs.values())]
    values: dict[tuple[str, str], list[float]] = {}
    rows = []
    for name, result in results.items():
        for m in shared:
            v = values[name, m.key] = _values(result, m.key, ids)
            low, high = bootstrap_ci(v, confidence, seed=seed)
            rows.append({"run": name, "metric": m.label, "key": m.key, "value": sum(v) / len(v), "low": low,
                         "high": high, "max": m.max_value})
    comparisons = [("baseline", name) for name in runs] + list(itertools.combinations(list(runs), 2))
    pairs = []
    for m in (m for m in shared if m.binary):
        family = [{"a": a, "b": b, "metric": m.label, "key": m.key, "a_value": sum(values[a, m.key]) / len(ids),
                   "b_value": sum(values[b, m.key]) / len(ids),
                   **_paired(values[a, m.key], values[b, m.key], True, confidence, seed)} for a, b in comparisons]
        for row, adjusted in zip(family, holm([row["mcnemar_p"] for row in family])):
            row["holm_p"] = adjusted
        pairs += family
    return RunsComparison(names=list(results), metrics=pd.DataFrame(rows), pairs=pd.DataFrame(pairs),
                          headline=baseline.task.headline, questions=len(ids))


def runs_markdown(comparison: RunsComparison, keys: Sequence[str] | None = None, digits: int = 3) -> str:
    """Two markdown tables of :func:`compare_runs_results`: each run's metrics with 95% intervals, then every
    comparison (baseline -> run, run -> run) with its paired interval, flips, exact McNemar p and Holm-adjusted p.

    Args:
        comparison: the comparison.
        keys: the metrics (record keys) of the second table; default the task's headline metric and the two
            extraction rules' accuracies.
        digits: decimals shown.
    """
    metrics = comparison.metrics.rename(columns={"low": "ci_low", "high": "ci_high"})
    runs = {name: metrics[metrics["run"] == name].set_index("metric") for name in comparison.names}
    lines = [intervals_markdown(runs, digits)]
    keys = list(keys) if keys is not None else list(dict.fromkeys([comparison.headline, "strict_correct",
                                                                   "flexible_correct"]))
    lines += ["", "| comparison | metric | a | b | b - a [95% CI] | a wrong, b right | a right, b wrong | McNemar p | "
              "Holm p |", "|:--|:--|--:|--:|--:|--:|--:|--:|--:|"]
    pairs = comparison.pairs
    for key in keys:
        for r in pairs[pairs["key"] == key].to_dict("records") if len(pairs) else []:
            lines.append(f"| {r['a']} -> {r['b']} | {r['metric']} | {r['a_value']:.{digits}f} | "
                         f"{r['b_value']:.{digits}f} | {r['delta']:+.{digits}f} [{r['delta_low']:+.{digits}f}, "
                         f"{r['delta_high']:+.{digits}f}] | {r['wrong_to_right']} | {r['right_to_wrong']} | "
                         f"{r['mcnemar_p']:.3g} | {r['holm_p']:.3g} |")
    return "\n".join(lines)
