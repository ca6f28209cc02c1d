"""``python -m grpo_kit view RUN_DIR [RUN_DIR ...]``: one self-contained HTML page of what runs did.

The page (:func:`grpo_kit.evaluation.viewer.viewer_html`) holds the before/after table with intervals; every
question with its greedy completion before and after side by side, its gold answer, each reward and the
strict/flexible verdicts, filterable by flip, metric and text; the training curves and held-out accuracy by step
with the alarms marked; the training groups kept by step (:mod:`grpo_kit.training.groups`) with their rewards and
advantages, zero-variance groups marked; reward-check's table; and for several runs sharing a baseline,
``compare``'s tables and each run's verdict per question. It needs no network and no server: it opens from a file
manager, Drive or ``IPython.display``.

Everything is read from the run folders; a section whose files are missing (no training yet, no sampled
baseline) says what writes them instead.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.compare import compare
from grpo_kit.evaluation.scoring import EvalResult, with_rewards
from grpo_kit.evaluation.viewer import viewer_html, written_by_view
from grpo_kit.runs.compare import check_run_names, compare_runs, comparison_folder, existing_runs
from grpo_kit.runs.folder import BASELINE_STEP, RunFolder, enclosing_run
from grpo_kit.runs.measure import plan_from_settings, run_rewards
from grpo_kit.system.files import write_text
from grpo_kit.tasks import RewardSet, get_task
from grpo_kit.training.groups import read_groups

__all__ = ["view_data", "write_view"]

#: A group whose totals spread less than this has zero variance: GRPO's advantage is 0 for each of its completions.
ZERO_STD = 1e-9


def _number(value: Any, digits: int = 4) -> float | None:
    """A JSON-safe rounded number (``None`` for NaN, infinity or a missing value): ``digits`` decimals, or
    ``digits`` significant figures below 0.001, where decimals would turn a McNemar p of 1.91e-06 into 0."""
    try:
        value = float(value)
    except (TypeError, ValueError):  # None, or not a number
        return None
    if not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}") if 0 < abs(value) < 1e-3 else round(value, digits)


def _table(rows: Any) -> list[dict[str, Any]]:
    """A DataFrame (or a list of dicts) as rows of JSON-safe values: text kept, numbers rounded, anything else None."""
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    return [{k: (v if isinstance(v, str) else _number(v)) for k, v in row.items()} for row in rows]


def _evaluation(run: RunFolder, path: Path, trust_remote_code: bool, rewards: Sequence[Any] = ()
                ) -> EvalResult | None:
    """The evaluation ``path`` holds, with ``rewards`` scored on its completions where its records lack them."""
    if not path.is_file():
        return None
    settings = run.read_json(run.eval_settings, BASELINE_STEP)
    task = get_task(settings["task"], digest=settings.get("task_digest"), trust_remote_code=trust_remote_code)
    result = EvalResult.from_jsonl(path, task=task)
    if rewards and any(getattr(f, "__name__", None) not in result.records[0] for f in rewards):
        questions = plan_from_settings(settings, trust_remote_code=trust_remote_code).questions()
        result = with_rewards(result, list(questions), rewards)
    return result


def _answers(result: EvalResult, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The first sample of each question, by id: its completion, the answer each of the task's rules read from it
    (``{"strict": ..., "flexible": ...}``, ``None`` where a rule found none: the record's ``<rule>_answer``, what the
    accuracy rows judged) and each metric's value. Not the record's ``extracted``: the reward functions' rule
    (``extract_xml_answer``) gives back the whole completion when it has no answer tags."""
    rules = list(result.task.rules)
    return {r["id"]: {"completion": r["completion"], "extracted": {rule: r.get(f"{rule}_answer") for rule in rules},
                      "values": {k: _number(r.get(k)) for k in keys}} for r in result.records if r["sample"] == 0}


def _curves(run: RunFolder) -> dict[str, Any]:
    from grpo_kit.evaluation.plots import training_curves

    history = run.read_json(run.log_history, "train") if run.log_history.is_file() else []
    curves = {k: [s, [_number(v) for v in vals]] for k, (s, vals) in training_curves(history).items()}
    return {"curves": curves, "alarms": _table(run.read_alarms())}


def _groups(run: RunFolder) -> dict[str, Any]:
    """The kept training groups, column-wise per group (the page's largest part, inflated only when shown), and per
    kept step the share of groups whose completions all scored the same total (they teach nothing); a step's damaged
    file (torn by a kill, edited) is left out and named under ``damaged``, and the other steps are shown."""
    damaged: list[str] = []
    frame = read_groups(run.groups, damaged=damaged)
    rewards = [c for c in frame.columns if c.startswith("reward/")]
    out = [{"step": int(step), "group": int(group), "prompt": rows["prompt"].iloc[0],
            "std": _number(rows["group_std"].iloc[0]), "completions": rows["completion"].tolist(),
            "rewards": {c.removeprefix("reward/"): [_number(v, 3) for v in rows[c]] for c in rewards},
            "total": [_number(v, 3) for v in rows["total"]], "advantage": [_number(v, 3) for v in rows["advantage"]]}
           for (step, group), rows in frame.groupby(["step", "group"], sort=True)]
    zero = frame.groupby(["step", "group"])["group_std"].first().fillna(0.0).lt(ZERO_STD).groupby("step").mean()
    return {"rewards": [c.removeprefix("reward/") for c in rewards], "steps": [int(s) for s in zero.index],
            "zero_share": [_number(v) for v in zero], "groups": out, "damaged": damaged}


def _reward_check(run: RunFolder, trained: dict[str, Any] | None, trust_remote_code: bool) -> dict[str, Any] | None:
    """reward-check's table on the run's sampled baseline, of the reward set the run trained with (before training:
    the task's)."""
    if not run.baseline_sampled.is_file():
        return None
    from grpo_kit.runs.reward_check import reward_check

    try:
        rewards = RewardSet.from_record(trained, "the trained reward", run.train_settings, trust_remote_code) \
            if trained and trained.get("rewards") else None
        check = reward_check(run, rewards, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        return {"error": str(e)}
    data = check.to_json()
    total = {k: v for k, v in data["reward_set"].items() if k != "weights"}
    return {"headline": data["headline"], "questions": data["questions"], "samples": data["samples"],
            "weights": data["reward_set"]["weights"],
            "which": "the reward set this run trained with" if rewards is not None else
                     "the task's reward set (the run folder records no training)",
            "rows": _table([*({"reward": n, **s} for n, s in data["rewards"].items()),
                            {"reward": "reward set (weighted total)", **total}])}


def view_data(run_dirs: Sequence[str | Path], names: Sequence[str] | None = None, seed: int = 0,
              trust_remote_code: bool = False) -> dict[str, Any]:
    """What the viewer page shows, as one JSON-safe dict (:func:`grpo_kit.evaluation.viewer.viewer_html` draws it).

    Args:
        run_dirs: one or more run folders; several must share one baseline (``compare``'s rule).
        names: the runs' names (default the folders' names).
        seed: the bootstrap's seed for the intervals.
        trust_remote_code: the runs' task file, and the rewards of your own they record, may import and run
            Python of their own (:func:`grpo_kit.tasks.user_code.check_trusted`).

    Returns:
        ``{"runs": [...], "questions": [...], "metrics": [...], "headline": str, "compare": ... | None}``: per
        run its before/after table, curves, alarms, groups and reward check; per question (first sample) the
        gold answer, the completion before and after each run and each metric's value.

    Raises:
        FileNotFoundError: a run folder is missing, or has no baseline (the message names the step that writes it).
        ValueError: several runs that do not share a baseline (the message names what differs).
    """
    folders = existing_runs(run_dirs, "view")
    names = check_run_names(names, folders)  # refused as compare refuses them, not replaced silently
    comparison = None
    if len(folders) > 1:
        report = compare_runs([f.path for f in folders], names=names, seed=seed, trust_remote_code=trust_remote_code)
        comparison = {"metrics": _table(report.comparison.metrics), "pairs": _table(report.comparison.pairs),
                      "differences": {k: {n: str(v) for n, v in d.items()} for k, d in report.differences.items()}}
    trained = [run.read_settings(run.train_settings, "train", ("identity",)) if run.train_settings.is_file() else None
               for run in folders]  # None: not trained yet
    rewards = list({getattr(f, "__name__", ""): f for run, record in zip(folders, trained) if record is not None
                    for f in run_rewards(record, source=run.train_settings, trust_remote_code=trust_remote_code)
                    }.values())  # every reward a run trained with, as eval scores them
    before = _evaluation(folders[0], folders[0].check_baseline(folders[0].baseline), trust_remote_code, rewards)
    metrics = before.metrics()
    keys = [m.key for m in metrics]
    base = _answers(before, keys)
    runs, afters = [], []
    for name, run, record in zip(names, folders, trained):
        after = _evaluation(run, run.trained, trust_remote_code, rewards)
        entry: dict[str, Any] = {"name": name, "path": str(run.path), "table": None, "stale": None}
        if after is not None:
            frame = compare(before, after, seed=seed)  # refuses what is not paired
            entry.update(table=_table(frame), format_only_gain=_number(frame.attrs.get("format_only_gain")))
            with contextlib.suppress(OSError, ValueError):
                entry["stale"] = run.stale_results()
        afters.append(_answers(after, keys) if after is not None else None)
        entry.update(_curves(run), groups=_groups(run), reward_check=_reward_check(run, record, trust_remote_code))
        runs.append(entry)
    questions = [{"id": r["id"], "index": r["index"], "question": r["question"], "answer": r["answer"],
                  "before": base[r["id"]], "after": [a.get(r["id"]) if a is not None else None for a in afters]}
                 for r in before.records if r["sample"] == 0]
    return {"runs": runs, "questions": questions, "headline": before.task.headline, "task": before.task.name,
            "metrics": [{"key": m.key, "label": m.label, "binary": m.binary, "correctness": m.correctness,
                         "max": _number(m.max_value)} for m in metrics], "compare": comparison}


def write_view(run_dirs: Sequence[str | Path], out: str | Path | None = None, names: Sequence[str] | None = None,
               seed: int = 0, trust_remote_code: bool = False) -> Path:
    """Write the viewer page of ``run_dirs`` (:func:`view_data`) as one HTML file, whole or not at all.

    Args:
        run_dirs: one or more run folders.
        out: the file (default ``view.html`` in the run folder; for several runs ``comparison/view.html`` beside the
            first, where ``compare`` writes its tables).
        names: the runs' names.
        seed: the bootstrap's seed.
        trust_remote_code: see :func:`view_data`.

    Returns:
        the file's path.

    Raises:
        FileNotFoundError, ValueError: see :func:`view_data`; ``out`` is a folder, a file that this command did
            not write (it is not replaced), or lies inside a run folder's own folders (``model/``, ``checkpoints/``,
            ...: a run folder holds only what its steps write, and a file added to ``model/`` makes ``eval`` and
            ``export`` refuse the run; ``export --out`` and ``compare --out`` follow the same rule).
    """
    existing_runs(run_dirs, "view")
    if out is None:  # several runs: beside compare's tables (its default --out)
        out = RunFolder(run_dirs[0], write=False).view if len(run_dirs) == 1 else \
            comparison_folder(run_dirs) / "view.html"
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder: give a file name ending in .html")
    inside = enclosing_run(out)
    if inside is not None and inside[1] != out.name:
        raise ValueError(f"--out {out} lies inside the run folder {inside[0]}'s own {inside[1]}/, which holds only "
                         "what the run's steps write (a file added to model/ makes eval and export refuse the run): "
                         f"give a file outside it, e.g. {Path(inside[0]) / 'view.html'} (the default)")
    if out.exists() and not written_by_view(out):
        raise ValueError(f"{out} exists and was not written by python -m grpo_kit view: give another --out")
    folder = next((p for p in out.resolve().parents if p.exists()), None)
    if folder is not None and not os.access(folder, os.W_OK):  # a read-only run folder is still read
        raise ValueError(f"cannot write {out} ({folder} is read-only to you): give --out a file where you can write, "
                         "e.g. --out view.html")
    data = view_data(run_dirs, names, seed, trust_remote_code)
    write_text(out, viewer_html(data))
    return out
