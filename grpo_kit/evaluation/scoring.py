"""Evaluation: generate completions for a dataset, score them, keep the records.

One evaluation is a set of records, one per (question, sample). Every record carries the task's
metric rewards (for GSM8K the blog post's six) and its two named extraction rules, ``strict`` (the
answer of a completion in the exact layout) and ``flexible`` (the answer however it is written; for
GSM8K the last number anywhere, lm-evaluation-harness's flexible-extract), so a gain in format
compliance is never mistaken for a gain in reasoning (see :mod:`grpo_kit.tasks.task`). The summary
(:mod:`grpo_kit.evaluation.summary`) gives each metric a seeded bootstrap interval over questions;
before/after comparisons are in :mod:`grpo_kit.evaluation.compare`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.evaluation.summary import TOTAL, diagnostics, metrics, sampled_metrics, summarize
from grpo_kit.policy.generation import Backend, Sampling
from grpo_kit.system.files import read_jsonl, write_jsonl
from grpo_kit.tasks import DEFAULT_TASK, TASKS, Reward, RewardSet, Task, get_task
from grpo_kit.tasks.rewards import guarded

if TYPE_CHECKING:
    import pandas as pd

    from grpo_kit.policy.cache import GenerationCache

__all__ = ["EvalResult", "evaluate", "question_id", "score", "with_rewards"]


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


def _rewarded(func: Any, example: dict[str, Any], texts: Sequence[str]) -> list[Any]:
    """One reward function's values for completions of one question, called as TRL's trainer calls it: each
    completion a conversation of one assistant message, the prompt and the dataset's columns one per completion."""
    columns = {key: [value] * len(texts) for key, value in example.items() if key != "prompt"}
    return func(prompts=[example["prompt"]] * len(texts),
                completions=[[{"role": "assistant", "content": text}] for text in texts], **columns)


def _metric_rewards(rewards: Sequence[Any] | None, task: Task) -> list[Reward]:
    """The rewards an evaluation scores with: ``rewards`` (names, functions or :class:`grpo_kit.tasks.Reward`),
    default the task's metrics."""
    return RewardSet(list(rewards)).rewards if rewards is not None else task.metric_rewards()


def score(examples: Sequence[dict[str, Any]], completions: Sequence[Sequence[Any]],
          rewards: Sequence[Any] | None = None, task: str | Task = DEFAULT_TASK) -> list[dict[str, Any]]:
    """Score completions with reward functions and extraction rules, one record per (example, sample).

    Args:
        examples: dataset rows of ``task`` (``prompt`` plus the columns its rewards read, e.g.
            ``answer`` or ``nums``/``target``). Reward functions get every column but ``prompt``,
            as TRL passes them.
        completions: for each example, its completions: ``str`` or
            :class:`grpo_kit.policy.generation.Generation` (whose token count and truncation are kept).
        rewards: reward names, functions or :class:`grpo_kit.tasks.Reward` objects; default the task's metrics
            (:attr:`grpo_kit.tasks.Task.metrics`).
        task: a :class:`grpo_kit.tasks.Task` or its name (its extraction rules, gold answer and record fields).

    Returns:
        ``list[dict]`` with keys ``id`` (:func:`question_id`; a question that appears again in
        ``examples`` gets ``#2``, ``#3``, ...), ``index``, ``sample``, ``task``, ``question``,
        ``answer`` (the gold answer as text), ``completion``, the task's fields (e.g. ``extracted``, the
        text inside ``<answer>``), ``strict_answer`` / ``flexible_answer`` (each rule's answer, ``None``
        when it reads none), ``strict_correct`` / ``flexible_correct`` (1.0 or 0.0), one key per reward
        (``None`` where a reward skipped the sample), ``total`` (the sum of the rewards given),
        ``num_tokens`` and ``truncated``.

    Raises:
        ValueError: ``examples`` and ``completions`` differ in length; an unknown task or reward.
    """
    if len(examples) != len(completions):
        raise ValueError(f"{len(examples)} examples but {len(completions)} lists of completions")
    spec = get_task(task)
    funcs = [guarded(r.func) for r in _metric_rewards(rewards, spec)]
    records = []
    seen: Counter[str] = Counter()
    for index, (example, samples) in enumerate(zip(examples, completions)):
        qid = question_id(example["prompt"], spec.gold(example))
        seen[qid] += 1
        qid = f"{qid}#{seen[qid]}" if seen[qid] > 1 else qid
        texts = [getattr(s, "text", s) for s in samples]
        values = {f.__name__: _rewarded(f, example, texts) for f in funcs}
        for sample, (text, raw) in enumerate(zip(texts, samples)):
            record = {"id": qid, "index": index, "sample": sample, "task": spec.name,
                      "question": example.get("question", ""), "answer": spec.gold(example), "completion": text,
                      **spec.fields(text)}
            for name, rule in spec.rules.items():
                answer = record[f"{name}_answer"] = rule.extract(text)
                record[f"{name}_correct"] = 1.0 if answer is not None and rule.correct(answer, example) else 0.0
            record.update({name: v[sample] for name, v in values.items()})
            record[TOTAL] = sum(v[sample] for v in values.values() if v[sample] is not None)
            record.update(num_tokens=getattr(raw, "num_tokens", None), truncated=getattr(raw, "truncated", None))
            records.append(record)
    return records


@dataclass
class EvalResult:
    """An evaluation: per-completion records, the summary table, the task and rewards it was scored with, the
    decoding settings and the wall time (s)."""

    records: list[dict[str, Any]]
    summary: pd.DataFrame
    sampling: Sampling
    wall_s: float
    task: Task = field(default_factory=lambda: get_task(DEFAULT_TASK))
    rewards: list[Reward] = field(default_factory=list)

    def to_jsonl(self, path: str | Path) -> Path:
        """Write one JSON object per record to ``path``, whole or not at all (parents created); returns the path."""
        return write_jsonl(path, self.records)

    def to_frame(self) -> pd.DataFrame:
        """The records as a ``pandas.DataFrame`` (one row per completion)."""
        import pandas as pd

        return pd.DataFrame(self.records)

    def sampled(self, ks: Sequence[int] | None = None) -> pd.DataFrame:
        """:func:`grpo_kit.evaluation.summary.sampled_metrics` of these records."""
        return sampled_metrics(self.records, ks)

    def diagnostics(self) -> dict[str, float]:
        """:func:`grpo_kit.evaluation.summary.diagnostics` of these records."""
        return diagnostics(self.records)

    def metrics(self) -> list[Any]:
        """:func:`grpo_kit.evaluation.summary.metrics` of these records (key, label, maximum, right/wrong)."""
        return metrics(self.records, self.task, self.rewards)

    @classmethod
    def from_jsonl(cls, path: str | Path, sampling: Sampling | None = None, task: Task | None = None,
                   rewards: Sequence[Reward] = ()) -> EvalResult:
        """Read records written by :meth:`to_jsonl`; the summary is recomputed, ``wall_s`` is 0.

        Args:
            path: the file.
            sampling: the decoding settings it was generated with (default greedy).
            task: the task it belongs to (default: the one its records name).
            rewards: the rewards it was scored with, where not built in (labels and maxima).

        Raises:
            FileNotFoundError: no file at ``path``.
            ValueError: the file holds no records, a line that is not JSON, records without question ids (an
                older grpo_kit), or a task that is not known (pass ``task=``); the message names the file.
        """
        records = read_jsonl(path, skip_torn=False)
        if not records:
            raise ValueError(f"{path} holds no records: evaluate again")
        if any("id" not in r for r in records):
            raise ValueError(f"{path} holds records without question ids (written by an older grpo_kit): evaluate "
                             "again so before and after can be paired by question")
        if task is None:
            if records[0].get("task") not in TASKS:
                raise ValueError(f"{path} holds records of task {records[0].get('task')!r}, which this kit does not "
                                 "know: pass task= when reading it")
            task = TASKS[records[0]["task"]]
        return cls(records=records, summary=summarize(records, task, rewards), sampling=sampling or Sampling(),
                   wall_s=0.0, task=task, rewards=list(rewards))

    def correct(self, metric: str | None = None) -> dict[str, bool]:
        """Per-question success under ``metric`` (a record key; first sample of each question; value > 0), by
        question id. The default is the task's headline metric (:attr:`grpo_kit.tasks.Task.headline`)."""
        metric = metric or self.task.headline
        return {r["id"]: (r[metric] or 0) > 0 for r in self.records if r["sample"] == 0}


def with_rewards(result: EvalResult, examples: Sequence[dict[str, Any]], rewards: Sequence[Any]) -> EvalResult:
    """``result`` with more reward functions scored on its completions (nothing is generated again): a run's own
    rewards, shown in its tables under their own names beside the task's metrics.

    Args:
        result: an evaluation of ``examples`` (its records' ``index`` is the row of ``examples``).
        examples: the dataset rows it evaluated, in order (the columns the rewards read).
        rewards: reward functions or :class:`grpo_kit.tasks.Reward` objects; one the records already hold is skipped.

    Returns:
        A new :class:`EvalResult` whose records also hold one key per reward (added to ``total``) and whose summary
        shows them (label and maximum: :func:`grpo_kit.evaluation.summary.metrics`).
    """
    new = [r for r in RewardSet(list(rewards)).rewards if r.name not in result.records[0]] if rewards else []
    if not new:
        return result
    records = [dict(r) for r in result.records]
    by_index: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        by_index.setdefault(record["index"], []).append(record)
    for reward in new:
        func = guarded(reward.func)
        for index, group in by_index.items():
            values = _rewarded(func, examples[index], [r["completion"] for r in group])
            for record, value in zip(group, values):
                record[reward.name] = value
                record[TOTAL] = record[TOTAL] + (value or 0.0)
    scored = [*result.rewards, *new]
    return EvalResult(records=records, summary=summarize(records, result.task, scored), sampling=result.sampling,
                      wall_s=result.wall_s, task=result.task, rewards=scored)


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


def evaluate(backend: Backend, dataset: Any, sampling: Sampling = Sampling(), rewards: Sequence[Any] | None = None,
             cache: GenerationCache | str | Path | None = None, confidence: float = 0.95, seed: int = 0,
             task: str | Task = DEFAULT_TASK) -> EvalResult:
    """Generate completions for every row of ``dataset`` through ``backend`` and score them.

    Args:
        backend: e.g. :class:`grpo_kit.policy.generation.TransformersBackend`.
        dataset: rows of ``task`` (a ``datasets.Dataset`` or a list of dicts).
        sampling: decoding settings (default greedy, 256 new tokens); ``n`` samples per question.
        rewards: reward names, functions or :class:`grpo_kit.tasks.Reward` objects to score with (default the
            task's metrics; for GSM8K the blog post's six).
        cache: a :class:`grpo_kit.policy.cache.GenerationCache` or the path of its JSONL file. Each
            completion is appended as soon as it exists and only missing ones are generated, so a
            killed evaluation resumes where it stopped. A resumed sampled run draws its missing
            samples afresh (the random stream depends on the batch), which leaves them unbiased.
        confidence, seed: of the bootstrap intervals in the summary.
        task: a :class:`grpo_kit.tasks.Task` or its name: how answers are read and checked.

    Returns:
        :class:`EvalResult`.

    Raises:
        ValueError: an unknown task or reward name (before anything is generated).
    """
    from grpo_kit.policy.cache import GenerationCache

    spec = get_task(task)
    examples = list(dataset)
    scoring = _metric_rewards(rewards, spec)  # an unknown reward fails before anything is generated
    if isinstance(cache, (str, Path)):
        cache = GenerationCache(cache)
    start = time.perf_counter()
    generations = _generate(backend, [e["prompt"] for e in examples], sampling, cache)
    records = score(examples, generations, scoring, spec)
    return EvalResult(records=records, summary=summarize(records, spec, scoring, confidence, seed), sampling=sampling,
                      wall_s=time.perf_counter() - start, task=spec, rewards=scoring)
