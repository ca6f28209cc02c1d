"""Evaluation: generate completions for a dataset, score them, summarise with intervals, compare.

One evaluation is a set of records, one per (question, sample). Every record carries the
seed's six rewards and two named extraction rules, ``strict`` (the number inside the
``<answer>`` tags of a strictly formatted completion) and ``flexible`` (the last number
anywhere, lm-evaluation-harness's flexible-extract), so a gain in format compliance is never
mistaken for a gain in reasoning. Aggregates come with seeded bootstrap intervals over
questions; before/after comparisons are paired (same questions) with a bootstrap interval of
the difference, an exact McNemar test and the flip counts. Sampled plans (``n > 1``) add
avg@n, unbiased pass@k and maj@n.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.answers import (
    EXTRACTION_RULES,
    extract_final_answer,
    extract_xml_answer,
    normalize_number,
)
from grpo_kit.generation import Backend, Sampling
from grpo_kit.rewards import REWARD_MAX, get_reward_funcs
from grpo_kit.stats import bootstrap_ci, maj_at_k, mcnemar_exact, paired_bootstrap_ci, pass_at_k

if TYPE_CHECKING:
    import pandas as pd

    from grpo_kit.cache import GenerationCache

__all__ = [
    "METRIC_LABELS",
    "EvalResult",
    "bootstrap_ci",
    "compare",
    "compare_markdown",
    "intervals_markdown",
    "diagnostics",
    "evaluate",
    "evaluate_answers",
    "flipped",
    "flips",
    "maj_at_k",
    "mcnemar_exact",
    "paired_test",
    "pass_at_k",
    "sampled_metrics",
    "score",
    "summarize",
]

#: Table rows in seed 002's order: reward function -> label.
METRIC_LABELS: dict[str, str] = {
    "correctness_reward_func": "Hard correctness",
    "soft_correctness_reward_func": "Soft correctness",
    "int_reward_func": "Integer",
    "soft_format_reward_func": "Soft format",
    "strict_format_reward_func": "Strict format",
    "xmlcount_reward_func": "XML tag count",
}
#: Record keys of the extraction rules' correctness, and their labels.
RULE_LABELS: dict[str, str] = {f"{rule}_correct": f"{rule.capitalize()} accuracy" for rule in EXTRACTION_RULES}
TOTAL = "total"
# Per-question metrics that are right/wrong (for flips and McNemar); xmlcount and total are graded.
_BINARY = [*RULE_LABELS, "correctness_reward_func", "soft_correctness_reward_func", "int_reward_func",
           "soft_format_reward_func", "strict_format_reward_func"]
_TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")


def evaluate_answers(trues: Sequence[Any], preds: Sequence[Any]) -> float:
    """Accuracy: the share of positions where ``preds[i] == trues[i]`` (seed 002's helper).

    Raises:
        ValueError: the lists differ in length or are empty.

    >>> evaluate_answers(["72", "10"], ["72", "9"])
    0.5
    """
    if len(trues) != len(preds) or not trues:
        raise ValueError(f"need two non-empty lists of equal length, got {len(trues)} and {len(preds)}")
    return sum(t == p for t, p in zip(trues, preds)) / len(trues)


def score(examples: Sequence[dict[str, Any]], completions: Sequence[Sequence[Any]],
          rewards: Sequence[str] = tuple(METRIC_LABELS)) -> list[dict[str, Any]]:
    """Score completions with reward functions and extraction rules, one record per (example, sample).

    Args:
        examples: dataset rows with ``prompt`` and ``answer`` (and optionally ``question``).
        completions: for each example, its completions: ``str`` or
            :class:`grpo_kit.generation.Generation` (whose token count and truncation are kept).
        rewards: reward function names (see :data:`grpo_kit.rewards.REWARD_FUNCS`).

    Returns:
        ``list[dict]`` with keys ``index``, ``sample``, ``question``, ``answer``,
        ``completion``, ``extracted`` (text inside ``<answer>``), ``final_answer`` (its first
        number), ``strict_answer`` / ``flexible_answer`` (each rule's normalised number),
        ``strict_correct`` / ``flexible_correct`` (1.0 or 0.0), one key per reward, ``total``,
        ``num_tokens`` and ``truncated``.

    Raises:
        ValueError: ``examples`` and ``completions`` differ in length.
    """
    if len(examples) != len(completions):
        raise ValueError(f"{len(examples)} examples but {len(completions)} lists of completions")
    funcs = get_reward_funcs(list(rewards))
    records = []
    for index, (example, samples) in enumerate(zip(examples, completions)):
        texts = [getattr(s, "text", s) for s in samples]
        n = len(texts)
        gold = normalize_number(example["answer"])
        values = {f.__name__: f(prompts=[example["prompt"]] * n, completions=texts,
                                answer=[example["answer"]] * n) for f in funcs}
        for sample, (text, raw) in enumerate(zip(texts, samples)):
            record = {
                "index": index,
                "sample": sample,
                "question": example.get("question", ""),
                "answer": example["answer"],
                "completion": text,
                "extracted": extract_xml_answer(text),
                "final_answer": extract_final_answer(text),
            }
            for rule, extract in EXTRACTION_RULES.items():
                answer = extract(text)
                record[f"{rule}_answer"] = answer
                record[f"{rule}_correct"] = 1.0 if answer is not None and answer == gold else 0.0
            record.update({name: v[sample] for name, v in values.items()})
            record[TOTAL] = sum(v[sample] for v in values.values())
            record["num_tokens"] = getattr(raw, "num_tokens", None)
            record["truncated"] = getattr(raw, "truncated", None)
            records.append(record)
    return records


def _per_question(records: Sequence[dict[str, Any]], key: str) -> list[float]:
    """Mean of ``key`` over each question's samples, in question order."""
    sums: dict[int, list[float]] = {}
    for r in records:
        sums.setdefault(r["index"], []).append(float(r[key]))
    return [sum(v) / len(v) for _, v in sorted(sums.items())]


def _metric_rows(records: Sequence[dict[str, Any]]) -> dict[str, tuple[str, float]]:
    """``{record key: (label, max)}`` for the metrics present in ``records``."""
    present = records[0].keys()
    rows = {key: (label, 1.0) for key, label in RULE_LABELS.items() if key in present}
    rows.update({name: (label, REWARD_MAX[name]) for name, label in METRIC_LABELS.items() if name in present})
    rows[TOTAL] = ("Total", sum(REWARD_MAX[n] for n in METRIC_LABELS if n in present))
    return rows


def summarize(records: Sequence[dict[str, Any]], confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """The metric table: strict and flexible accuracy, then seed 002's metrics, with intervals.

    Each value is the mean over questions of the per-question mean over samples (with one
    greedy sample, plain accuracy; with n samples, avg@n). Intervals are seeded percentile
    bootstraps resampling questions (:func:`grpo_kit.stats.bootstrap_ci`).

    Returns:
        ``pandas.DataFrame`` indexed by metric label with columns ``value``, ``ci_low``,
        ``ci_high`` and ``max``: Strict accuracy, Flexible accuracy, the rewards present in
        :data:`METRIC_LABELS` order, then ``Total``.

    Raises:
        ValueError: no records.
    """
    import pandas as pd

    if not records:
        raise ValueError("no records to summarise")
    rows = {}
    for key, (label, maximum) in _metric_rows(records).items():
        values = _per_question(records, key)
        low, high = bootstrap_ci(values, confidence, seed=seed)
        rows[label] = (sum(values) / len(values), low, high, maximum)
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
        rule's normalised answers; ties go to the answer sampled first
        (:func:`grpo_kit.stats.maj_at_k`).

    Raises:
        ValueError: questions with different sample counts, or a k above n.
    """
    import pandas as pd

    by_question: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_question.setdefault(r["index"], []).append(r)
    counts = {len(v) for v in by_question.values()}
    if len(counts) != 1:
        raise ValueError(f"questions have different sample counts {sorted(counts)}")
    n = counts.pop()
    ks = sorted({*(2 ** i for i in range(n.bit_length()) if 2 ** i <= n), n}) if ks is None else list(ks)
    if any(not 1 <= k <= n for k in ks):
        raise ValueError(f"every k must be between 1 and n={n}, got {ks}")
    groups = [sorted(v, key=lambda r: r["sample"]) for _, v in sorted(by_question.items())]
    rows = {}
    for rule in EXTRACTION_RULES:
        correct = [sum(r[f"{rule}_correct"] > 0 for r in g) for g in groups]
        per_metric = {f"avg@{n} ({rule})": [c / n for c in correct]}
        per_metric.update({f"pass@{k} ({rule})": [pass_at_k(n, c, k) for c in correct] for k in ks})
        per_metric[f"maj@{n} ({rule})"] = [maj_at_k([r[f"{rule}_answer"] for r in g], normalize_number(g[0]["answer"]))
                                           for g in groups]
        for name, values in per_metric.items():
            rows[name] = (sum(values) / len(values), *bootstrap_ci(values, confidence, seed=seed))
    return pd.DataFrame.from_dict(rows, orient="index", columns=["value", "ci_low", "ci_high"]).rename_axis("metric")


def diagnostics(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Signs of reward hacking and format-only gains: completion length, truncation, tag use.

    Returns:
        ``{"mean_tokens", "max_tokens", "truncation_rate"}`` (lengths in tokens; the rate is the
        share of completions that hit ``max_new_tokens``; NaN when unknown) and
        ``"has <tag>"`` for each XML tag: the share of completions containing it.
    """
    import math

    tokens = [r["num_tokens"] for r in records if r.get("num_tokens") is not None]
    truncated = [bool(r["truncated"]) for r in records if r.get("truncated") is not None]
    out = {
        "mean_tokens": sum(tokens) / len(tokens) if tokens else math.nan,
        "max_tokens": float(max(tokens)) if tokens else math.nan,
        "truncation_rate": sum(truncated) / len(truncated) if truncated else math.nan,
    }
    out.update({f"has {tag}": sum(tag in r["completion"] for r in records) / len(records) for tag in _TAGS})
    return out


@dataclass
class EvalResult:
    """An evaluation: per-completion records, the summary table, settings and wall time (s)."""

    records: list[dict[str, Any]]
    summary: pd.DataFrame
    sampling: Sampling
    wall_s: float

    def to_jsonl(self, path: str | Path) -> Path:
        """Write one JSON object per record to ``path`` (parents created); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for record in self.records:
                f.write(json.dumps(record) + "\n")
        return path

    def to_frame(self) -> pd.DataFrame:
        """The records as a ``pandas.DataFrame`` (one row per completion)."""
        import pandas as pd

        return pd.DataFrame(self.records)

    def sampled(self, ks: Sequence[int] | None = None) -> pd.DataFrame:
        """:func:`sampled_metrics` of these records."""
        return sampled_metrics(self.records, ks)

    def diagnostics(self) -> dict[str, float]:
        """:func:`diagnostics` of these records."""
        return diagnostics(self.records)

    def log_to_wandb(self, key: str) -> bool:
        """Log the records as a ``wandb.Table`` under ``key`` when a wandb run is active.

        Returns:
            Whether anything was logged (``False`` without wandb or without an active run).
        """
        try:
            import wandb
        except ImportError:
            return False
        if wandb.run is None:
            return False
        wandb.log({key: wandb.Table(dataframe=self.to_frame().astype({"final_answer": str}))})
        return True

    @classmethod
    def from_jsonl(cls, path: str | Path, sampling: Sampling | None = None) -> EvalResult:
        """Read records written by :meth:`to_jsonl`; the summary is recomputed, ``wall_s`` is 0.

        Raises:
            FileNotFoundError: no file at ``path``.
            ValueError: the file holds no records.
        """
        with Path(path).open(encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        return cls(records=records, summary=summarize(records), sampling=sampling or Sampling(), wall_s=0.0)

    def correct(self, metric: str = "correctness_reward_func") -> list[bool]:
        """Per-question success under ``metric`` (first sample of each question; reward > 0)."""
        return [r[metric] > 0 for r in self.records if r["sample"] == 0]


def _generate(backend: Backend, prompts: list[Any], sampling: Sampling, cache: GenerationCache | None) -> list[Any]:
    if cache is None:
        return backend.generate(prompts, sampling)
    model_id = backend.identity()
    keys = [[cache.key(model_id, p, sampling, i) for i in range(sampling.n)] for p in prompts]
    missing = [q for q, ks in enumerate(keys) if any(cache.get(k) is None for k in ks)]
    if missing:
        def store(i: int, generations: list[Any]) -> None:
            for k, generation in zip(keys[missing[i]], generations):
                cache.add(k, generation)

        backend.generate([prompts[q] for q in missing], sampling, on_result=store)
    return [[cache.get(k) for k in ks] for ks in keys]


def evaluate(backend: Backend, dataset: Any, sampling: Sampling = Sampling(),
             rewards: Sequence[str] = tuple(METRIC_LABELS), cache: GenerationCache | str | Path | None = None,
             confidence: float = 0.95, seed: int = 0) -> EvalResult:
    """Generate completions for every row of ``dataset`` through ``backend`` and score them.

    Args:
        backend: e.g. :class:`grpo_kit.generation.TransformersBackend`.
        dataset: rows with ``prompt`` and ``answer`` (a ``datasets.Dataset`` or a list of dicts).
        sampling: decoding settings (default greedy, 256 new tokens); ``n`` samples per question.
        rewards: reward names to score with (default the seed's six).
        cache: a :class:`grpo_kit.cache.GenerationCache` or the path of its JSONL file. Each
            completion is appended as soon as it exists and only missing ones are generated, so a
            killed evaluation resumes where it stopped. A resumed sampled run draws its missing
            samples afresh (the random stream depends on the batch), which leaves them unbiased.
        confidence, seed: of the bootstrap intervals in the summary.

    Returns:
        :class:`EvalResult`.
    """
    from grpo_kit.cache import GenerationCache

    examples = list(dataset)
    get_reward_funcs(list(rewards))  # bad names fail before generating
    if isinstance(cache, (str, Path)):
        cache = GenerationCache(cache)
    start = time.perf_counter()
    generations = _generate(backend, [e["prompt"] for e in examples], sampling, cache)
    records = score(examples, generations, rewards)
    return EvalResult(records=records, summary=summarize(records, confidence, seed), sampling=sampling,
                      wall_s=time.perf_counter() - start)


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


def paired_test(before: EvalResult, after: EvalResult, metric: str = "correctness_reward_func") -> dict[str, Any]:
    """Paired comparison of per-question success under ``metric`` (reward > 0 counts as success).

    Returns:
        ``{"wrong_to_right": int, "right_to_wrong": int, "mcnemar_p": float}``.

    Raises:
        ValueError: the evaluations cover different numbers of questions.
    """
    gained, lost = flips(before.correct(metric), after.correct(metric))
    return {"wrong_to_right": gained, "right_to_wrong": lost, "mcnemar_p": mcnemar_exact(gained, lost)}


def flipped(before: EvalResult, after: EvalResult, metric: str = "correctness_reward_func") -> pd.DataFrame:
    """The questions whose success under ``metric`` changed, with both completions (first sample).

    Returns:
        ``pandas.DataFrame`` with ``change`` (``"wrong -> right"`` or ``"right -> wrong"``),
        ``index``, ``question``, ``answer``, ``before``, ``after`` (the completions) and
        ``extracted_before`` / ``extracted_after``; wrong-to-right rows first.

    Raises:
        ValueError: the evaluations cover different numbers of questions.
    """
    import pandas as pd

    b = [r for r in before.records if r["sample"] == 0]
    a = [r for r in after.records if r["sample"] == 0]
    if len(b) != len(a):
        raise ValueError(f"paired results need the same questions: {len(b)} before, {len(a)} after")
    rows = []
    for rb, ra in zip(b, a):
        was, now = rb[metric] > 0, ra[metric] > 0
        if was != now:
            rows.append({"change": "wrong -> right" if now else "right -> wrong", "index": rb["index"],
                         "question": rb["question"], "answer": rb["answer"], "before": rb["completion"],
                         "after": ra["completion"], "extracted_before": rb["extracted"],
                         "extracted_after": ra["extracted"]})
    columns = ["change", "index", "question", "answer", "before", "after", "extracted_before", "extracted_after"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values("change", ascending=False, kind="stable").reset_index(drop=True)


def compare(before: EvalResult, after: EvalResult, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Paired before/after table over the same questions.

    Columns: ``metric``, ``before``, ``after``, ``delta``, ``max``; each value's interval
    (``before_low``/``before_high``, ``after_low``/``after_high``); the paired bootstrap
    interval of the difference (``delta_low``/``delta_high``); and, for right/wrong metrics,
    ``wrong_to_right``, ``right_to_wrong`` and the exact McNemar ``mcnemar_p`` (NaN for graded
    metrics such as the XML tag count and the total). ``attrs`` holds the hard-correctness test
    (``wrong_to_right``, ``right_to_wrong``, ``mcnemar_p``) and ``format_only_gain``: the part
    of the strict-accuracy gain that flexible accuracy does not show
    (``delta strict - delta flexible``), i.e. the gain from format compliance alone.

    Raises:
        ValueError: the evaluations cover different questions (counts differ).
    """
    import math

    import pandas as pd

    rows = []
    after_rows = _metric_rows(after.records)
    for key, (label, maximum) in _metric_rows(before.records).items():
        if key not in after_rows:
            continue
        b, a = _per_question(before.records, key), _per_question(after.records, key)
        if len(b) != len(a):
            raise ValueError(f"paired results need the same questions: {len(b)} before, {len(a)} after")
        row = {"metric": label, "before": sum(b) / len(b), "after": sum(a) / len(a)}
        row["delta"] = row["after"] - row["before"]
        row["max"] = maximum
        row["before_low"], row["before_high"] = bootstrap_ci(b, confidence, seed=seed)
        row["after_low"], row["after_high"] = bootstrap_ci(a, confidence, seed=seed)
        row["delta_low"], row["delta_high"] = paired_bootstrap_ci(b, a, confidence, seed=seed)
        if key in _BINARY:
            test = paired_test(before, after, key)
            row.update(test)
        else:
            row.update(wrong_to_right=math.nan, right_to_wrong=math.nan, mcnemar_p=math.nan)
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs.update(paired_test(before, after))
    deltas = frame.set_index("metric")["delta"]
    if {"Strict accuracy", "Flexible accuracy"} <= set(deltas.index):
        frame.attrs["format_only_gain"] = float(deltas["Strict accuracy"] - deltas["Flexible accuracy"])
    return frame


def compare_markdown(table: pd.DataFrame, digits: int = 3) -> str:
    """A compact markdown table of :func:`compare`: values with 95% intervals, flips and McNemar p."""
    import math

    def interval(value: float, low: float, high: float) -> str:
        return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    lines = ["| metric | before | after | delta | max | wrong->right | right->wrong | McNemar p |",
             "|:--|--:|--:|--:|--:|--:|--:|--:|"]
    for r in table.to_dict("records"):
        paired = ("", "", "") if math.isnan(r["mcnemar_p"]) else (
            f"{int(r['wrong_to_right'])}", f"{int(r['right_to_wrong'])}", f"{r['mcnemar_p']:.3g}")
        lines.append(f"| {r['metric']} | {interval(r['before'], r['before_low'], r['before_high'])} | "
                     f"{interval(r['after'], r['after_low'], r['after_high'])} | "
                     f"{interval(r['delta'], r['delta_low'], r['delta_high'])} | {r['max']:g} | "
                     + " | ".join(paired) + " |")
    return "\n".join(lines)


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
        cells = []
        for name in names:
            frame = frames[name]
            if metric in frame.index:
                r = frame.loc[metric]
                cells.append(f"{r['value']:.{digits}f} [{r['ci_low']:.{digits}f}, {r['ci_high']:.{digits}f}]")
            else:
                cells.append("")
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
