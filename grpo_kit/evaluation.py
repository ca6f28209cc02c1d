"""Evaluation: generate completions for a dataset, score them, summarise, compare before/after.

The summary is seed 002's table (hard correctness, soft correctness, integer, soft format,
strict format), plus the XML tag count and the total of the six rewards, each with its
maximum. :func:`compare` puts two summaries side by side with the per-question flips and
an exact McNemar test on hard correctness, so a before/after gain can be checked for chance.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.answers import extract_final_answer, extract_xml_answer
from grpo_kit.generation import Backend, Sampling
from grpo_kit.rewards import REWARD_MAX, get_reward_funcs

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "METRIC_LABELS",
    "EvalResult",
    "compare",
    "evaluate",
    "evaluate_answers",
    "flipped",
    "flips",
    "mcnemar_exact",
    "paired_test",
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
TOTAL = "total"


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
    """Score completions with reward functions, one record per (example, sample).

    Args:
        examples: dataset rows with ``prompt`` and ``answer`` (and optionally ``question``).
        completions: for each example, its completions: ``str`` or
            :class:`grpo_kit.generation.Generation` (whose token count and truncation are kept).
        rewards: reward function names (see :data:`grpo_kit.rewards.REWARD_FUNCS`).

    Returns:
        ``list[dict]`` with keys ``index``, ``sample``, ``question``, ``answer``,
        ``completion``, ``extracted`` (text inside ``<answer>``), ``final_answer`` (its first
        number), one key per reward, ``total``, ``num_tokens`` and ``truncated``.

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
            record.update({name: v[sample] for name, v in values.items()})
            record[TOTAL] = sum(v[sample] for v in values.values())
            record["num_tokens"] = getattr(raw, "num_tokens", None)
            record["truncated"] = getattr(raw, "truncated", None)
            records.append(record)
    return records


def summarize(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Seed 002's metric table: the mean of each reward over all records, with its maximum.

    Returns:
        ``pandas.DataFrame`` indexed by metric label with columns ``value`` and ``max``, rows
        in :data:`METRIC_LABELS` order (rewards present in the records), then ``Total``.

    Raises:
        ValueError: no records.
    """
    import pandas as pd

    if not records:
        raise ValueError("no records to summarise")
    frame = pd.DataFrame(list(records))
    rows = {label: (frame[name].mean(), REWARD_MAX[name]) for name, label in METRIC_LABELS.items()
            if name in frame}
    rows["Total"] = (frame[TOTAL].mean(), sum(REWARD_MAX[n] for n in METRIC_LABELS if n in frame))
    return pd.DataFrame.from_dict(rows, orient="index", columns=["value", "max"]).rename_axis("metric")


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
        """Per-question correctness under ``metric`` (first sample of each question)."""
        return [r[metric] > 0 for r in self.records if r["sample"] == 0]


def evaluate(backend: Backend, dataset: Any, sampling: Sampling = Sampling(),
             rewards: Sequence[str] = tuple(METRIC_LABELS)) -> EvalResult:
    """Generate completions for every row of ``dataset`` through ``backend`` and score them.

    Args:
        backend: e.g. :class:`grpo_kit.generation.TransformersBackend`.
        dataset: rows with ``prompt`` and ``answer`` (a ``datasets.Dataset`` or a list of dicts).
        sampling: decoding settings (default greedy, 256 new tokens).
        rewards: reward names to score with (default the seed's six).

    Returns:
        :class:`EvalResult`.
    """
    examples = list(dataset)
    get_reward_funcs(list(rewards))  # bad names fail before generating
    start = time.perf_counter()
    generations = backend.generate([e["prompt"] for e in examples], sampling)
    records = score(examples, generations, rewards)
    return EvalResult(records=records, summary=summarize(records), sampling=sampling,
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


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the two discordant counts.

    Under no change each discordant pair is equally likely to go either way, so
    ``min(b, c)`` is Binomial(b + c, 1/2); the p-value is scipy's exact two-sided binomial
    test (McNemar 1947; the exact form as in Fagerland et al. 2013).

    Args:
        b: questions wrong before and right after.
        c: questions right before and wrong after.

    Returns:
        p-value in [0, 1]; 1.0 when there are no discordant pairs.

    >>> round(mcnemar_exact(10, 2), 4)
    0.0386
    """
    if b < 0 or c < 0:
        raise ValueError(f"counts must be non-negative, got {b} and {c}")
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(b, b + c, 0.5).pvalue)


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


def compare(before: EvalResult, after: EvalResult) -> pd.DataFrame:
    """Before/after table: ``metric``, ``before``, ``after``, ``delta``, ``max``.

    Both results must cover the same questions in the same order. The frame's ``attrs``
    holds :func:`paired_test` on hard correctness (``wrong_to_right``, ``right_to_wrong``,
    ``mcnemar_p``). ``frame.to_markdown(index=False)`` gives the markdown table.

    Raises:
        ValueError: the evaluations cover different numbers of questions.
    """
    import pandas as pd

    frame = pd.DataFrame({"before": before.summary["value"], "after": after.summary["value"],
                          "max": before.summary["max"]})
    frame["delta"] = frame["after"] - frame["before"]
    frame = frame[["before", "after", "delta", "max"]].reset_index()
    frame.attrs.update(paired_test(before, after))
    return frame
