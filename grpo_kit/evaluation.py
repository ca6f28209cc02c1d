"""Evaluation: generate completions for a dataset, score them, summarise with intervals, compare.

One evaluation is a set of records, one per (question, sample). Every record carries the
task's metric rewards (for GSM8K the seed's six) and its two named extraction rules,
``strict`` (the answer inside the ``<answer>`` tags of a strictly formatted completion) and
``flexible`` (the answer however it is written; for GSM8K the last number anywhere,
lm-evaluation-harness's flexible-extract), so a gain in format compliance is never mistaken
for a gain in reasoning (see :mod:`grpo_kit.tasks`). Aggregates come with seeded bootstrap intervals over
questions; before/after comparisons are paired (same questions) with a bootstrap interval of
the difference, an exact McNemar test and the flip counts. Sampled plans (``n > 1``) add
avg@n, unbiased pass@k and maj@n.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.answers import EXTRACTION_RULES, extract_final_answer, extract_xml_answer
from grpo_kit.generation import Backend, Sampling
from grpo_kit.rewards import REWARD_FUNCS, RewardFunc, get_reward_funcs, reward_max
from grpo_kit.stats import bootstrap_ci, maj_at_k, mcnemar_exact, paired_bootstrap_ci, pass_at_k
from grpo_kit.tasks import Task, get_task

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
    "paired_ids",
    "pass_at_k",
    "question_id",
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
    "countdown_reward_func": "Countdown reward",
    "math_verify_reward_func": "math-verify correctness",
}
#: Record keys of the extraction rules' correctness, and their labels.
RULE_LABELS: dict[str, str] = {f"{rule}_correct": f"{rule.capitalize()} accuracy" for rule in EXTRACTION_RULES}
TOTAL = "total"
# Record keys that are neither a rule nor a reward.
_FIELDS = {"id", "index", "sample", "task", "question", "answer", "completion", "extracted", "final_answer", TOTAL,
           "num_tokens", "truncated", *(f"{rule}_answer" for rule in EXTRACTION_RULES)}
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


def question_id(prompt: Any, gold: str) -> str:
    """A stable id for one question: 16 hex digits of a SHA-256 of its prompt (all messages) and gold answer.

    Before/after tables pair records by it, so two evaluations pair only on the same questions
    asked the same way.

    >>> question_id([{"role": "user", "content": "2+2?"}], "4")
    'a9a000374e1e33b1'
    >>> question_id([{"role": "user", "content": "2+2?"}], "5")
    '88615bcb3cb18bee'
    """
    payload = json.dumps([prompt, gold], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def score(examples: Sequence[dict[str, Any]], completions: Sequence[Sequence[Any]],
          rewards: Sequence[str | RewardFunc] | None = None, task: str | Task = "gsm8k") -> list[dict[str, Any]]:
    """Score completions with reward functions and extraction rules, one record per (example, sample).

    Args:
        examples: dataset rows of ``task`` (``prompt`` plus the columns its rewards read, e.g.
            ``answer`` or ``nums``/``target``). Reward functions get every column but ``prompt``,
            as TRL passes them.
        completions: for each example, its completions: ``str`` or
            :class:`grpo_kit.generation.Generation` (whose token count and truncation are kept).
        rewards: reward names or functions; default the task's metrics
            (:attr:`grpo_kit.tasks.Task.metrics`).
        task: a name in :data:`grpo_kit.tasks.TASKS` (its extraction rules and gold answer).

    Returns:
        ``list[dict]`` with keys ``id`` (:func:`question_id`; a question that appears again in
        ``examples`` gets ``#2``, ``#3``, ...), ``index``, ``sample``, ``task``, ``question``,
        ``answer`` (the gold answer as text), ``completion``, ``extracted`` (text inside ``<answer>``),
        ``final_answer`` (its first number), ``strict_answer`` / ``flexible_answer`` (each rule's
        answer, ``None`` when it reads none), ``strict_correct`` / ``flexible_correct`` (1.0 or
        0.0), one key per reward (``None`` where a reward skipped the sample), ``total`` (the sum
        of the rewards given), ``num_tokens`` and ``truncated``.

    Raises:
        ValueError: ``examples`` and ``completions`` differ in length; an unknown task or reward.
    """
    if len(examples) != len(completions):
        raise ValueError(f"{len(examples)} examples but {len(completions)} lists of completions")
    spec = get_task(task)
    funcs = get_reward_funcs(list(rewards) if rewards is not None else list(spec.metrics))
    records = []
    seen: dict[str, int] = {}
    for index, (example, samples) in enumerate(zip(examples, completions)):
        qid = question_id(example["prompt"], spec.gold(example))
        seen[qid] = seen.get(qid, 0) + 1
        if seen[qid] > 1:
            qid = f"{qid}#{seen[qid]}"
        texts = [getattr(s, "text", s) for s in samples]
        n = len(texts)
        columns = {key: [value] * n for key, value in example.items() if key != "prompt"}
        values = {f.__name__: f(prompts=[example["prompt"]] * n, completions=texts, **columns) for f in funcs}
        for sample, (text, raw) in enumerate(zip(texts, samples)):
            record = {
                "id": qid,
                "index": index,
                "sample": sample,
                "task": spec.name,
                "question": example.get("question", ""),
                "answer": spec.gold(example),
                "completion": text,
                "extracted": extract_xml_answer(text),
                "final_answer": extract_final_answer(text),
            }
            for name, rule in spec.rules.items():
                answer = rule.extract(text)
                record[f"{name}_answer"] = answer
                record[f"{name}_correct"] = 1.0 if answer is not None and rule.correct(answer, example) else 0.0
            record.update({name: v[sample] for name, v in values.items()})
            record[TOTAL] = sum(v[sample] for v in values.values() if v[sample] is not None)
            record["num_tokens"] = getattr(raw, "num_tokens", None)
            record["truncated"] = getattr(raw, "truncated", None)
            records.append(record)
    return records


def _per_question(records: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    """Mean of ``key`` over each question's samples, by question id in first-seen order; a skipped sample
    (``None``) does not count, and a question whose samples were all skipped counts 0."""
    sums: dict[str, list[float]] = {}
    for r in records:
        values = sums.setdefault(r["id"], [])
        if r[key] is not None:
            values.append(float(r[key]))
    return {qid: sum(v) / len(v) if v else 0.0 for qid, v in sums.items()}


def paired_ids(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> list[str]:
    """The question ids two evaluations share, in ``before``'s order, when they cover the same questions.

    Raises:
        ValueError: records without ids (written by grpo_kit before ids existed), or the two sets of
            questions differ (the message says how many match).
    """
    if any("id" not in r for r in (*before, *after)):
        raise ValueError("these records carry no question ids (written by an older grpo_kit): evaluate again so "
                         "before and after can be paired by question")
    ids_before = list(dict.fromkeys(r["id"] for r in before))
    ids_after = set(r["id"] for r in after)
    if set(ids_before) != ids_after:
        common = len(ids_after.intersection(ids_before))
        raise ValueError(f"before and after are not the same questions: {common} match, {len(ids_before) - common} "
                         f"only before, {len(ids_after) - common} only after. Evaluate both on the same slice, "
                         "prompt and task (the run folder's eval_settings.json).")
    return ids_before


def _reward_keys(records: Sequence[dict[str, Any]]) -> list[str]:
    """The reward names in ``records``, in the order they were scored (the task's metrics order)."""
    return [k for k in records[0] if k not in _FIELDS and k not in RULE_LABELS]


def _is_binary(key: str) -> bool:
    """Right/wrong metrics get flips and McNemar; graded ones (XML tag count, Countdown, total) do not."""
    return key in RULE_LABELS or bool(getattr(REWARD_FUNCS.get(key), "binary", False))


def _metric_rows(records: Sequence[dict[str, Any]]) -> dict[str, tuple[str, float]]:
    """``{record key: (label, max)}`` for the metrics present in ``records`` (max NaN when unknown)."""
    present = records[0].keys()
    rows = {key: (label, 1.0) for key, label in RULE_LABELS.items() if key in present}
    rewards = _reward_keys(records)
    rows.update({name: (METRIC_LABELS.get(name, name), reward_max(name)) for name in rewards})
    rows[TOTAL] = ("Total", sum(reward_max(name) for name in rewards))
    return rows


def summarize(records: Sequence[dict[str, Any]], confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """The metric table: strict and flexible accuracy, then the rewards (seed 002's for GSM8K), with intervals.

    Each value is the mean over questions of the per-question mean over samples (with one
    greedy sample, plain accuracy; with n samples, avg@n). Intervals are seeded percentile
    bootstraps resampling questions (:func:`grpo_kit.stats.bootstrap_ci`).

    Returns:
        ``pandas.DataFrame`` indexed by metric label with columns ``value``, ``ci_low``,
        ``ci_high`` and ``max``: Strict accuracy, Flexible accuracy, the rewards in the order
        they were scored (labelled by :data:`METRIC_LABELS`, other rewards by name), then ``Total``.

    Raises:
        ValueError: no records.
    """
    import pandas as pd

    if not records:
        raise ValueError("no records to summarise")
    rows = {}
    for key, (label, maximum) in _metric_rows(records).items():
        values = list(_per_question(records, key).values())
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
        rule's answers (for GSM8K normalised numbers); ties go to the answer sampled first
        (:func:`grpo_kit.stats.maj_at_k`), and the winner is right when the records holding it are.

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
    for rule in EXTRACTION_RULES:
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
            ValueError: the file holds no records, or records without question ids (an older grpo_kit).
        """
        with Path(path).open(encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        if records and any("id" not in r for r in records):
            raise ValueError(f"{path} holds records without question ids (written by an older grpo_kit): evaluate "
                             "again so before and after can be paired by question")
        return cls(records=records, summary=summarize(records), sampling=sampling or Sampling(), wall_s=0.0)

    def correct(self, metric: str | None = None) -> dict[str, bool]:
        """Per-question success under ``metric`` (first sample of each question; reward > 0), by question id.

        The default is the headline metric: hard correctness where it was scored (GSM8K), else
        strict accuracy.
        """
        metric = metric or _headline(self.records)
        return {r["id"]: (r[metric] or 0) > 0 for r in self.records if r["sample"] == 0}


def _headline(records: Sequence[dict[str, Any]]) -> str:
    return "correctness_reward_func" if records and "correctness_reward_func" in records[0] else "strict_correct"


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
             rewards: Sequence[str | RewardFunc] | None = None, cache: GenerationCache | str | Path | None = None,
             confidence: float = 0.95, seed: int = 0, task: str | Task = "gsm8k") -> EvalResult:
    """Generate completions for every row of ``dataset`` through ``backend`` and score them.

    Args:
        backend: e.g. :class:`grpo_kit.generation.TransformersBackend`.
        dataset: rows of ``task`` (a ``datasets.Dataset`` or a list of dicts).
        sampling: decoding settings (default greedy, 256 new tokens); ``n`` samples per question.
        rewards: reward names or functions to score with (default the task's metrics; for
            GSM8K the seed's six).
        cache: a :class:`grpo_kit.cache.GenerationCache` or the path of its JSONL file. Each
            completion is appended as soon as it exists and only missing ones are generated, so a
            killed evaluation resumes where it stopped. A resumed sampled run draws its missing
            samples afresh (the random stream depends on the batch), which leaves them unbiased.
        confidence, seed: of the bootstrap intervals in the summary.
        task: a name in :data:`grpo_kit.tasks.TASKS`: how answers are read and checked.

    Returns:
        :class:`EvalResult`.

    Raises:
        ValueError: an unknown task or reward name (before anything is generated).
    """
    from grpo_kit.cache import GenerationCache

    spec = get_task(task)
    examples = list(dataset)
    get_reward_funcs(list(rewards) if rewards is not None else list(spec.metrics))  # fail before generating
    if isinstance(cache, (str, Path)):
        cache = GenerationCache(cache)
    start = time.perf_counter()
    generations = _generate(backend, [e["prompt"] for e in examples], sampling, cache)
    records = score(examples, generations, rewards, spec)
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


def paired_test(before: EvalResult, after: EvalResult, metric: str | None = None) -> dict[str, Any]:
    """Paired comparison of per-question success under ``metric`` (reward > 0 counts as success).

    Questions are paired by id (:func:`question_id`). ``metric`` defaults to the headline: hard
    correctness (GSM8K), else strict accuracy.

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

    ``metric`` defaults to the headline: hard correctness (GSM8K), else strict accuracy.

    Returns:
        ``pandas.DataFrame`` with ``change`` (``"wrong -> right"`` or ``"right -> wrong"``),
        ``index``, ``question``, ``answer``, ``before``, ``after`` (the completions) and
        ``extracted_before`` / ``extracted_after``; wrong-to-right rows first.

    Raises:
        ValueError: the evaluations cover different questions (:func:`paired_ids`).
    """
    import pandas as pd

    metric = metric or _headline(before.records)
    ids = paired_ids(before.records, after.records)
    b = {r["id"]: r for r in before.records if r["sample"] == 0}
    a = {r["id"]: r for r in after.records if r["sample"] == 0}
    rows = []
    for qid in ids:
        rb, ra = b[qid], a[qid]
        was, now = (rb[metric] or 0) > 0, (ra[metric] or 0) > 0
        if was != now:
            rows.append({"change": "wrong -> right" if now else "right -> wrong", "index": rb["index"],
                         "question": rb["question"], "answer": rb["answer"], "before": rb["completion"],
                         "after": ra["completion"], "extracted_before": rb["extracted"],
                         "extracted_after": ra["extracted"]})
    columns = ["change", "index", "question", "answer", "before", "after", "extracted_before", "extracted_after"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values("change", ascending=False, kind="stable").reset_index(drop=True)


def compare(before: EvalResult, after: EvalResult, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Paired before/after table over the same questions, paired by question id (:func:`question_id`).

    Columns: ``metric``, ``before``, ``after``, ``delta``, ``max``; each value's interval
    (``before_low``/``before_high``, ``after_low``/``after_high``); the paired bootstrap
    interval of the difference (``delta_low``/``delta_high``); and, for right/wrong metrics,
    ``wrong_to_right``, ``right_to_wrong`` and the exact McNemar ``mcnemar_p`` (NaN for graded
    metrics such as the XML tag count and the total). ``attrs`` holds the headline test (hard
    correctness for GSM8K, strict accuracy otherwise: ``metric``, ``wrong_to_right``,
    ``right_to_wrong``, ``mcnemar_p``) and ``format_only_gain``: the part
    of the strict-accuracy gain that flexible accuracy does not show
    (``delta strict - delta flexible``), i.e. the gain from format compliance alone.

    Raises:
        ValueError: the evaluations cover different questions (the message says how many match),
            or their records carry no question ids.
    """
    import math

    import pandas as pd

    ids = paired_ids(before.records, after.records)
    rows = []
    after_rows = _metric_rows(after.records)
    for key, (label, maximum) in _metric_rows(before.records).items():
        if key not in after_rows:
            continue
        by_b, by_a = _per_question(before.records, key), _per_question(after.records, key)
        b, a = [by_b[i] for i in ids], [by_a[i] for i in ids]
        row = {"metric": label, "before": sum(b) / len(b), "after": sum(a) / len(a)}
        row["delta"] = row["after"] - row["before"]
        row["max"] = maximum
        row["before_low"], row["before_high"] = bootstrap_ci(b, confidence, seed=seed)
        row["after_low"], row["after_high"] = bootstrap_ci(a, confidence, seed=seed)
        row["delta_low"], row["delta_high"] = paired_bootstrap_ci(b, a, confidence, seed=seed)
        if _is_binary(key):
            test = paired_test(before, after, key)
            row.update(test)
        else:
            row.update(wrong_to_right=math.nan, right_to_wrong=math.nan, mcnemar_p=math.nan)
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs.update(paired_test(before, after), metric=_headline(before.records))
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
