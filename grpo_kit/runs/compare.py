"""Several trained runs in one paired table: ``python -m grpo_kit compare RUN_DIR RUN_DIR [...]`` and notebook 05.

Each run folder holds its baseline (notebook 02 / ``eval --before``), its training (``train_settings.json``) and its
evaluation after training (notebook 04 / ``eval``). Runs compare only when they were measured as one experiment: the
same questions, base model and weights, task, prompt, decoding and evaluation route in every ``eval_settings.json``
(and the same baseline records); otherwise :func:`compare_runs` refuses, naming what differs. The settings that
differ between the runs' trainings (algorithm, rewards, learning rate, ...) are listed above the table, so the table
says what was varied. The statistics are :func:`grpo_kit.evaluation.compare.compare_runs_results`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.compare import RunsComparison, compare_runs_results, runs_markdown
from grpo_kit.evaluation.scoring import EvalResult, with_rewards
from grpo_kit.evaluation.viewer import written_by_view
from grpo_kit.runs.folder import AFTER_STEP, BASELINE_STEP, TRAIN_STEP, RunFolder, enclosing_run
from grpo_kit.runs.measure import evaluated_with, plan_from_settings, run_rewards
from grpo_kit.system.files import write_text
from grpo_kit.system.logs import counted
from grpo_kit.tasks import Task, get_task

__all__ = ["BASELINE_KEYS", "COMPARISON_FILES", "RunsReport", "check_comparison_out", "check_run_names",
           "compare_runs", "comparison_folder", "differing_settings", "existing_runs", "share_baseline"]

#: What :func:`compare_runs` writes into its ``out_dir``; ``runs_comparison.md`` begins with this heading.
COMPARISON_FILES = ("runs_comparison.md", "runs_metrics.csv", "runs_pairs.csv", "runs_comparison.png")
_HEADING = re.compile(r"# \d+ runs? against their shared baseline$")  # "1 run"; "1 runs" as earlier versions wrote

#: What a shared baseline means: these ``eval_settings.json`` entries are equal in every run folder.
BASELINE_KEYS = (("task", "task"), ("slice", "question slice"), ("seed", "slice seed"), ("questions", "questions"),
                 ("base_model", "base model"), ("base_fingerprint", "base weights"), ("system_prompt", "system prompt"),
                 ("max_new_tokens", "completion budget"), ("samples", "sampled completions"),
                 ("temperature", "sampling temperature"), ("route", "evaluation route"),
                 ("warm", "tiny policy's warm start"), ("tiny_spec", "tiny policy's shape"))


@dataclass
class RunsReport:
    """:func:`compare_runs`'s result: the comparison, the settings that differ, and the markdown report.

    Attributes:
        comparison: the tables (:class:`grpo_kit.evaluation.compare.RunsComparison`).
        differences: ``{setting: {run name: value}}`` for each training setting that differs between runs.
        markdown: the report (settings that differ, both tables).
        chart: the chart's path, when ``out_dir`` was given.
    """

    comparison: RunsComparison
    differences: dict[str, dict[str, Any]]
    markdown: str
    chart: Path | None = None


def share_baseline(source: str | Path | RunFolder, targets: Sequence[str | Path | RunFolder]) -> list[RunFolder]:
    """Give other run folders the baseline measured in ``source``, so every run is compared on one baseline.

    Copies ``eval_settings.json``, ``baseline.jsonl`` and (when measured) ``baseline_sampled.jsonl``, each file whole
    or not at all, ``eval_settings.json`` last (as :func:`grpo_kit.runs.measure.measure_before` writes it). The targets
    then train from the baseline's policy (notebook 03 / ``python -m grpo_kit train``) and are evaluated after training
    (notebook 04 / ``python -m grpo_kit eval``) on exactly its questions and decoding; :func:`compare_runs` pairs them.

    Args:
        source: a run folder whose baseline has finished (``eval_settings.json`` written).
        targets: run folders to receive it (created if missing); ``source`` itself is skipped.

    Returns:
        The target :class:`grpo_kit.runs.folder.RunFolder` objects.

    Raises:
        FileNotFoundError: ``source`` has no finished baseline (the message names the step to run).
        grpo_kit.runs.folder.RunFolderBusy: another process is writing a target folder.
    """
    source = source if isinstance(source, RunFolder) else RunFolder(source)
    source.require(source.eval_settings, BASELINE_STEP)
    files = [source.baseline, source.baseline_sampled, source.eval_settings]
    folders = []
    for target in targets:
        folder = target if isinstance(target, RunFolder) else RunFolder(target)
        folders.append(folder)
        if folder.path.resolve() == source.path.resolve():
            continue
        with folder.lock("share the baseline"):
            folder.baseline_sampled.unlink(missing_ok=True)  # a sampled baseline the source does not have
            for path in files:
                if path.is_file():
                    write_text(folder.path / path.name, path.read_text(encoding="utf-8"))
    return folders


def _flat(settings: dict[str, Any]) -> dict[str, Any]:
    """A ``train_settings.json`` as ``setting -> value``: the preset's fields, the algorithm's, the rewards, the
    size."""
    identity = settings.get("identity", {})
    flat = {k: v for k, v in identity.get("preset", {}).items() if k not in ("description", "name")}
    flat["preset"] = identity.get("preset", {}).get("name")
    flat.update({f"reward {name}": weight for name, weight in identity.get("rewards", {}).items()})
    if "algorithm" in settings:
        flat["algorithm"] = settings["algorithm"]["name"]
        flat.update(settings["algorithm"]["fields"])
    flat["train questions"] = settings.get("train_questions")
    flat["max_steps"] = settings.get("max_steps")
    return flat


def differing_settings(trained: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The training settings whose values are not the same in every run.

    Args:
        trained: ``{run name: its train_settings.json}``.

    Returns:
        ``{setting: {run name: value}}``, a reward a run does not use shown as ``None``.

    >>> differing_settings({"a": {"identity": {"preset": {"beta": 0.0, "seed": 0}}},
    ...                     "b": {"identity": {"preset": {"beta": 0.04, "seed": 0}}}})
    {'beta': {'a': 0.0, 'b': 0.04}}
    """
    flat = {name: _flat(settings) for name, settings in trained.items()}
    keys = dict.fromkeys(k for values in flat.values() for k in values)
    columns = {key: {name: values.get(key) for name, values in flat.items()} for key in keys}
    return {key: values for key, values in columns.items()
            if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1}


def check_comparison_out(out: str | Path, run_dirs: Sequence[str | Path]) -> Path:
    """Refuse a folder for :func:`compare_runs`' tables that would overwrite what is not a comparison, before any work.

    ``out`` may be new, empty, or a folder that holds only a previous comparison (:data:`COMPARISON_FILES`, its
    ``runs_comparison.md`` written by the kit, whose files are replaced), the page ``view`` writes beside it
    (``view.html``) and the compared run folders themselves. It
    may not be, or lie inside, a run folder (one holding ``train_settings.json``, ``eval_settings.json`` or
    ``finished.json``): a run folder holds only what its own steps write, and a file added to ``model/`` makes
    ``export`` and ``eval`` refuse the run.

    Args:
        out: the folder asked for (``--out``).
        run_dirs: the run folders compared.

    Returns:
        ``out`` as a path.

    Raises:
        ValueError: a file, a link, a folder inside a run folder or one holding files a comparison does not write;
            the message names the path and what to choose instead.
    """
    out = Path(out)
    fix = "choose a new or empty folder for --out (or one a previous compare wrote, whose tables are replaced)"
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ValueError(f"--out {out} is a file{' or a link' if out.is_symlink() else ''}: give a folder for the "
                         "tables and the chart")
    run = enclosing_run(out)
    if run is not None:
        where = f"is the run folder {run[0]}" if not run[1] else f"lies inside the run folder {run[0]} (its {run[1]})"
        raise ValueError(f"--out {out} {where}, which holds only what the run's own steps write: {fix}")
    folder = next((p for p in (out.resolve(), *out.resolve().parents) if p.exists()), None)
    if folder is not None and not os.access(folder, os.W_OK):  # read-only run folders are still compared
        raise ValueError(f"cannot write {out} ({folder} is read-only to you): give --out a folder where you can write")
    if not out.is_dir():
        return out
    runs = {Path(d).resolve() for d in run_dirs}
    foreign = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir()
                     if p.resolve() not in runs and p.name not in COMPARISON_FILES
                     and not (p.name == "view.html" and written_by_view(p)))
    ours = out / COMPARISON_FILES[0]
    if not foreign and any((out / name).exists() for name in COMPARISON_FILES):
        try:
            heading = ours.read_text(encoding="utf-8").partition("\n")[0]
        except (OSError, UnicodeDecodeError):
            heading = ""
        if not _HEADING.match(heading):
            foreign = sorted(name for name in COMPARISON_FILES if (out / name).exists())
    if foreign:
        raise ValueError(f"--out: {out} holds files that are not a comparison compare wrote ({', '.join(foreign[:5])}"
                         f"{', ...' if len(foreign) > 5 else ''}), which compare would overwrite or mix with: {fix}")
    return out


def comparison_folder(run_dirs: Sequence[str | Path]) -> Path:
    """Where a comparison of ``run_dirs`` goes when no ``--out`` is given: ``comparison/`` beside the first run folder
    (that folder resolved first, so ``compare . ../other`` from inside a run folder puts it beside it, not in it)."""
    return Path(run_dirs[0]).resolve().parent / "comparison"


def existing_runs(run_dirs: Sequence[str | Path], command: str) -> list[RunFolder]:
    """The run folders ``command`` (``compare``, ``view``) reads; no folder, or a missing one, is refused (a mistyped
    path is named, not created)."""
    if not run_dirs:
        raise ValueError(f"give at least one run folder (python -m grpo_kit {command} RUN_DIR [RUN_DIR ...])")
    return [RunFolder.existing(d, write=False) for d in run_dirs]


def check_run_names(names: Sequence[str] | None, folders: Sequence[RunFolder]) -> list[str]:
    """The runs' names in tables and the viewer: ``names`` (``--names``) checked, or the folders' names.

    Raises:
        ValueError: not one distinct name per folder, or a name holding ``|`` or a line break (names go into markdown
            tables) or nothing.
    """
    if names is None:
        names = [f.path.resolve().name for f in folders]  # "." is the folder's own name
        return names if len(set(names)) == len(names) else [str(f.path) for f in folders]
    names = list(names)
    if len(names) != len(folders) or len(set(names)) != len(names):
        raise ValueError(f"give one distinct name per run folder: {len(folders)} folders, names {names}")
    if any("|" in n or "\n" in n or not n.strip() for n in names):
        raise ValueError(f"run names go into markdown tables: give names without '|' or line breaks, got {names}")
    return names


def compare_runs(run_dirs: Sequence[str | Path], out_dir: str | Path | None = None, names: Sequence[str] | None = None,
                 seed: int = 0, trust_remote_code: bool = False) -> RunsReport:
    """Compare trained runs that share one baseline: one table of metrics, one of paired tests (Holm-adjusted).

    Args:
        run_dirs: two or more run folders (one is allowed: it is then only measured against the baseline), each
            evaluated after training (``trained.jsonl``).
        out_dir: where to write ``runs_comparison.md``, ``runs_metrics.csv``, ``runs_pairs.csv`` and
            ``runs_comparison.png`` (nothing written when ``None``).
        names: the runs' names in the tables (default the folders' names).
        seed: the bootstrap's seed.
        trust_remote_code: the runs' task file, and the rewards of your own they record, may import and run
            Python of their own (:func:`grpo_kit.tasks.user_code.check_trusted`).

    Returns:
        :class:`RunsReport`.

    Raises:
        FileNotFoundError: a run folder lacks its baseline, training or evaluation after training (the message names
            the step to run).
        ValueError: the runs do not share a baseline (the message names each setting that differs, with each run's
            value); the same folder given twice, or two folders holding the same trained weights; ``names`` of the
            wrong length or holding ``|``; a run's evaluation after training is not of the model it holds now (it was
            trained further or its model/ edited: ``RunFolder.stale_results``); ``out_dir`` is a file, lies in a run
            folder or holds what is not a comparison (:func:`check_comparison_out`).
        grpo_kit.runs.folder.RunFolderBusy: another process is writing one of the run folders (they are locked
            while compared).
    """
    folders = existing_runs(run_dirs, "compare")
    if out_dir is not None:
        check_comparison_out(out_dir, run_dirs)
    if len({f.path.resolve() for f in folders}) != len(folders):
        raise ValueError("the same run folder is given twice: compare different runs")
    names = check_run_names(names, folders)
    with contextlib.ExitStack() as locks:  # no training or evaluation rewrites a run while it is compared
        for folder in folders:
            locks.enter_context(folder.lock("compare", reading=True))
        return _compare_runs(folders, names, out_dir, seed, trust_remote_code)


def _compare_runs(folders: list[RunFolder], names: list[str], out_dir: str | Path | None, seed: int,
                  trust_remote_code: bool) -> RunsReport:
    """:func:`compare_runs` with the run folders locked: the shared baseline checked, each run's evaluation after
    training checked, the comparison, its report and (with ``out_dir``) the files."""
    evaluated = {n: f.read_json(f.eval_settings, BASELINE_STEP) for n, f in zip(names, folders)}
    trained = {n: f.read_json(f.train_settings, TRAIN_STEP) for n, f in zip(names, folders)}
    task, baseline = _shared_baseline(folders, names, evaluated, trust_remote_code)
    run_by_digest = {}  # the trained weights' digest -> the run holding them
    for n, f in zip(names, folders):
        f.require(f.trained, AFTER_STEP)
        if (stale := f.stale_results(evaluated_with(evaluated[n]))) is not None:
            raise ValueError(f"{n}: {stale} (its results are not of the model it now holds, so they are not compared)")
        digest = f.check_model()
        if digest is not None and digest in run_by_digest:
            raise ValueError(f"{run_by_digest[digest]} and {n} hold the same trained weights (a copy of one run, or "
                             "one training repeated exactly), so their results are the same: compare different runs")
        run_by_digest[digest] = n
    afters = {n: EvalResult.from_jsonl(f.trained, task=task) for n, f in zip(names, folders)}
    own_rewards = {getattr(f, "__name__", ""): f for n, folder in zip(names, folders)
                   for f in run_rewards(trained[n], source=folder.train_settings, trust_remote_code=trust_remote_code)}
    if own_rewards:  # the runs' rewards of their own, scored on the baseline's completions too, so the table pairs them
        questions = plan_from_settings(evaluated[names[0]], trust_remote_code=trust_remote_code).questions()
        baseline = with_rewards(baseline, list(questions), list(own_rewards.values()))
    comparison = compare_runs_results(baseline, afters, seed=seed)
    differences = differing_settings(trained)
    markdown = _report_markdown(task.name, names, comparison, differences)
    chart = None
    if out_dir is not None:
        import matplotlib.pyplot as plt

        from grpo_kit.evaluation.plots import plot_runs

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "runs_comparison.md", markdown)
        write_text(out / "runs_metrics.csv", comparison.metrics.to_csv(index=False))
        write_text(out / "runs_pairs.csv", comparison.pairs.to_csv(index=False))
        chart = out / "runs_comparison.png"
        plt.close(plot_runs(comparison.metrics, chart, title=f"{task.name}: runs against their shared baseline"))
    return RunsReport(comparison=comparison, differences=differences, markdown=markdown, chart=chart)


def _shared_baseline(folders: list[RunFolder], names: list[str], evaluated: dict[str, dict[str, Any]],
                     trust_remote_code: bool) -> tuple[Task, EvalResult]:
    """The runs' task and the baseline they share (the first run's), once every ``eval_settings.json``
    (``evaluated``, by run name) agrees on :data:`BASELINE_KEYS` and every ``baseline.jsonl`` holds the same
    questions and completions.

    Raises:
        ValueError: the runs do not share one baseline; the message names each setting that differs, with each run's
            value.
    """
    first = names[0]
    problems = [f"{label} ({key}): " + ", ".join(f"{n} {evaluated[n].get(key)!r}" for n in names)
                for key, label in BASELINE_KEYS
                if len({json.dumps(evaluated[n].get(key), sort_keys=True) for n in names}) > 1]
    if not problems:
        task = get_task(evaluated[first]["task"], digest=evaluated[first].get("task_digest"),
                        trust_remote_code=trust_remote_code)
        baselines = {n: EvalResult.from_jsonl(f.check_baseline(f.baseline), task=task) for n, f in zip(names, folders)}
        reference = [(r["id"], r["completion"]) for r in baselines[first].records]
        problems += [f"baseline records: {n}'s baseline.jsonl holds other questions or completions than {first}'s"
                     for n in names[1:] if [(r["id"], r["completion"]) for r in baselines[n].records] != reference]
    if problems:
        raise ValueError("these runs do not share one baseline, so a paired table would pair different things:\n  "
                         + "\n  ".join(problems) + "\nMeasure every run's baseline with the same settings (notebook "
                         "02 / python -m grpo_kit eval --before), e.g. by copying one run folder's baseline files "
                         "(eval_settings.json, baseline*.jsonl) into the others before training.")
    return task, baselines[first]


def _report_markdown(task_name: str, names: list[str], comparison: RunsComparison,
                     differences: dict[str, dict[str, Any]]) -> str:
    """``runs_comparison.md``: what was measured and how, the training settings that differ, then both tables."""
    holm = len(comparison.pairs) // max(1, comparison.pairs["key"].nunique())  # comparisons per metric
    lines = [f"# {counted(len(names), 'run')} against their shared baseline", "",
             f"{task_name}: {counted(comparison.questions, 'question')}, greedy, paired by question id. Values with "
             "95% bootstrap intervals over questions; differences with paired intervals; exact McNemar tests on the "
             f"flips, p-values adjusted by Holm over the {counted(holm, 'comparison')} of each metric.", "",
             "## Settings that differ", ""]
    if differences:
        lines += ["| setting | " + " | ".join(names) + " |", "|:--|" + "--:|" * len(names)]
        lines += [f"| {key} | " + " | ".join(str(values[n]) for n in names) + " |"
                  for key, values in differences.items()]
    else:
        lines.append("None: the runs trained with the same recorded settings, seeds included, into different "
                     "weights (training that is not deterministic, e.g. on a GPU).")
    lines += ["", "## Results", "", runs_markdown(comparison), ""]
    return "\n".join(lines)
