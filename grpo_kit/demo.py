"""The main job, offline on a CPU: warm start, measure, train with GRPO, measure again, report.

Reads top to bottom in the order of the work (the blog post's story on a tiny policy):
check every setting -> build and warm-start the tiny policy (cached) -> baseline evaluation on
a held-out test slice -> GRPO with the task's rewards, checkpointed -> the same evaluation ->
``report.md``. Everything lands in ``runs/<name>/``; the steps are the ones notebooks 02-04 and
``python -m grpo_kit eval --before | train | eval`` run.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.report import report_markdown
from grpo_kit.policy.generation import TransformersBackend
from grpo_kit.policy.loading import load_policy
from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR, TinyPolicySpec
from grpo_kit.policy.warm_start import TinyPolicy, WarmStart, ship, warm_started_tiny_policy
from grpo_kit.runs.folder import RunFolder
from grpo_kit.runs.measure import EvalPlan, measure_after, measure_before
from grpo_kit.runs.spec import RunSpec
from grpo_kit.runs.train import package_versions, train
from grpo_kit.system.files import write_text
from grpo_kit.tasks import DEFAULT_TASK, TASKS, RewardSet, get_task
from grpo_kit.training.presets import get_preset

__all__ = ["CompareDemoConfig", "DemoConfig", "compare_tasks", "demo_policy", "run_compare_demo", "run_demo",
           "ship_demo_policy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoConfig:
    """Settings of one demo run. Sizes count questions of ``task``; ``grpo_steps`` are optimiser steps."""

    name: str = "demo"
    task: str = DEFAULT_TASK  # or another task with a train split and demonstrations ("countdown")
    runs_dir: str = "runs"
    cache_dir: str = DEFAULT_CACHE_DIR
    eval_size: int = 200
    train_size: int | None = None  # None: every train question whose prompt fits
    grpo_steps: int = 40  # greedy answers take the format by step 40 (docs/get-started/cpu-demo.md)
    eval_max_new_tokens: int = 64
    samples: int = 2  # sampled completions per question for avg@k / pass@k / maj@k (0: greedy only)
    sample_temperature: float = 0.7
    eval_batch_size: int = 64
    warm: WarmStart = WarmStart()
    spec: TinyPolicySpec = TinyPolicySpec()
    preset_overrides: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    progress: bool = True
    resume: bool = False  # continue a killed demo from its newest checkpoint (else start the training afresh)

    def __post_init__(self) -> None:
        if self.name in ("", ".", "..") or Path(self.name).name != self.name or "\\" in self.name:
            raise ValueError(f"the demo's name {self.name!r} must be one folder name (it goes under runs_dir "
                             f"{self.runs_dir!r}): no '/', '..' or absolute path; choose e.g. --name demo-2")


def _fresh(run: RunFolder) -> None:
    """Remove what an earlier demo trained into this folder, so this one starts from step 0."""
    for path in (run.checkpoints, run.model, run.heldout):
        shutil.rmtree(path, ignore_errors=True)
    for path in (run.train_settings, run.alarms, run.finished):
        path.unlink(missing_ok=True)


def run_demo(config: DemoConfig = DemoConfig()) -> dict[str, Any]:
    """Run the whole before/after pipeline on the tiny policy and write ``runs/<name>/``.

    The same steps as notebooks 02-04 and ``python -m grpo_kit eval --before | train | eval``:
    :func:`grpo_kit.runs.measure.measure_before`, :func:`grpo_kit.runs.train.train`,
    :func:`grpo_kit.runs.measure.measure_after`, on the warm-started tiny policy.

    Args:
        config: :class:`DemoConfig`.

    Returns:
        ``{"run_dir": Path, "table": DataFrame, "before": EvalResult, "after": EvalResult,
        "before_sampled", "after_sampled", "log_history": list, "wall": dict}``.

    Raises:
        ValueError: bad settings (checked before any model is built), e.g. a task without a
            train split or warm-start solutions.
        grpo_kit.runs.folder.RunFolderBusy: another process is writing the run folder.
    """
    total_start = time.perf_counter()
    task = get_task(config.task)
    if not task.trains:
        raise ValueError(f"the demo trains, and task {task.name!r} has no train split with solutions: choose one of "
                         + ", ".join(t.name for t in TASKS.values() if t.trains))
    preset = get_preset("cpu-tiny", max_steps=config.grpo_steps, seed=config.seed, **config.preset_overrides)
    plan = EvalPlan(task=task, preset=preset, slice={"n": config.eval_size}, seed=config.seed,
                    max_new_tokens=config.eval_max_new_tokens, samples=config.samples,
                    temperature=config.sample_temperature, batch_size=config.eval_batch_size, backend="transformers",
                    warm=config.warm, tiny_spec=config.spec, cache_dir=config.cache_dir)
    with RunFolder(Path(config.runs_dir) / config.name).lock("demo") as run:
        return _run_demo(config, task, preset, plan, run, total_start)


def _run_demo(config: DemoConfig, task: Any, preset: Any, plan: EvalPlan, run: RunFolder,
              total_start: float) -> dict[str, Any]:
    import torch

    run_dir = run.path
    if not config.resume and any(p.exists() for p in (run.checkpoints, run.model, run.finished)):
        _fresh(run)  # the demo starts afresh: what an earlier demo trained here goes
    spec = RunSpec.resolve(preset, task, run_dir=run_dir, resume=config.resume, train_size=config.train_size,
                           seed=config.seed, warm=config.warm, tiny_spec=config.spec, cache_dir=config.cache_dir,
                           progress="bar" if config.progress else "none")  # every setting, before any model is built
    plan.questions()
    torch.manual_seed(config.seed)
    wall: dict[str, float] = {}

    start = time.perf_counter()
    model, tokenizer, cached = warm_started_tiny_policy(spec.policy.tiny, progress=config.progress)
    wall["warm start"] = time.perf_counter() - start

    samples = f"greedy + {config.samples} samples each" if config.samples else "greedy"
    log.info(f"baseline evaluation on {config.eval_size} {task.name} test questions ({samples})")
    start = time.perf_counter()
    backend = TransformersBackend(model, tokenizer, batch_size=config.eval_batch_size, progress=config.progress)
    backend.route = "transformers"
    before = measure_before(plan, run, backend, replace=True)  # the demo starts afresh
    wall["baseline evaluation"] = time.perf_counter() - start
    print(before["greedy"].summary.to_markdown(floatfmt=".3f"), flush=True)

    start = time.perf_counter()
    trained = train(spec, policy=(model, tokenizer))
    wall["GRPO training"] = time.perf_counter() - start

    log.info(f"evaluation after GRPO on the same {config.eval_size} questions ({samples})")
    start = time.perf_counter()
    trained_model = trained.trainer.model if trained.trainer is not None else load_policy(str(trained.model_dir))[0]
    after_backend = TransformersBackend(trained_model, tokenizer, batch_size=config.eval_batch_size,
                                        progress=config.progress)
    after_backend.route = "transformers"
    measured = measure_after(run, backend=after_backend)
    wall["evaluation after GRPO"] = time.perf_counter() - start
    wall["total"] = time.perf_counter() - total_start
    settings = {
        "task": task.name,
        f"eval questions ({task.name} test, seeded slice)": config.eval_size,
        "GRPO steps": preset.max_steps,
        "num_generations": preset.num_generations,
        "completions per step (per_device_train_batch_size)": preset.per_device_train_batch_size,
        "learning rate": preset.learning_rate,
        "max completion length (tokens)": preset.max_completion_length,
        "temperature (training)": preset.temperature,
        "evaluation decoding": (f"greedy, and {config.samples} samples per question at temperature "
                                f"{config.sample_temperature}; at most {config.eval_max_new_tokens} new tokens"),
        "warm start": (f"{config.warm.steps} SFT steps x {config.warm.batch_size}, {config.warm.xml_share:.0%} "
                       f"of targets in XML, reasoning '{config.warm.reasoning}'"
                       + (" (loaded from cache)" if cached else "")),
        "rewards": ", ".join(spec.rewards.names),
        "resumed from": trained.resumed_from.name if trained.resumed_from else "no (trained from step 0)",
        "seed": config.seed,
    }
    report = report_markdown(measured, f"grpo_kit demo: {config.name}", notes=task.extras.get("notes", ""),
                             settings=settings, wall=wall, versions=package_versions(), algorithm=measured.algorithm)
    report += "\n".join(["## Files", "",
                         "- `baseline.jsonl`, `trained.jsonl`: one record per question, greedy (completion, "
                         "extracted answers, rewards)",
                         "- `baseline_sampled.jsonl`, `trained_sampled.jsonl`: the same for the sampled completions",
                         "- `comparison.csv`: the greedy before/after table with intervals and paired tests",
                         "- `before_after.png`: that table as a chart with 95% intervals",
                         "- `log_history.json`, `training_curves.png`: the GRPO trainer's log and every reward's curve",
                         "- `checkpoints/`, `model/`: checkpoints every save_steps (resume with --resume) and the "
                         "trained policy",
                         "- `eval_settings.json`, `train_settings.json`: what was measured and what was trained",
                         "- `generations.jsonl`: the generation cache (a rerun regenerates nothing it holds)", ""])
    write_text(run.report, report)
    print("\n" + report.split("## Diagnostics")[0].strip() + "\n", flush=True)
    log.info(f"wrote {run.path}/ (report.md, records, comparison.csv, charts, log history) in {wall['total']:.0f} s")
    return {"run_dir": run.path, "table": measured.table, "before": measured.before, "after": measured.after,
            "before_sampled": measured.before_sampled, "after_sampled": measured.after_sampled,
            "log_history": trained.log_history, "wall": wall}



@dataclass(frozen=True)
class CompareDemoConfig:
    """Settings of the compare demo: several reward sets trained from one warm start, against one baseline.

    Defaults are the experiment in docs/tutorials/compare-runs.md ("a reward that changes what is learned"): the task's
    ``compare_rewards`` (:attr:`grpo_kit.tasks.Task.extras`), each trained for ``grpo_steps`` on the same budget, every
    run evaluated greedily (and with ``samples`` samples) on the same ``eval_size`` held-out questions.

    Raises:
        ValueError: a name that is not one folder name.
    """

    name: str | None = None  # default compare-<task>
    task: str | None = None  # a task with compare_rewards (None: the first, compare_tasks()[0])
    runs_dir: str = "runs"
    cache_dir: str = DEFAULT_CACHE_DIR
    eval_size: int = 300
    grpo_steps: int = 60
    learning_rate: float = 1e-4
    num_generations: int = 8
    completions_per_step: int = 32  # per_device_train_batch_size: prompts per step = this / num_generations
    max_completion_length: int = 40
    temperature: float = 1.0  # of GRPO's sampled groups
    eval_max_new_tokens: int = 40
    samples: int = 8
    sample_temperature: float = 0.7
    eval_batch_size: int = 100
    warm: WarmStart = WarmStart(steps=1000, batch_size=32)
    spec: TinyPolicySpec = TinyPolicySpec()
    variants: tuple[str, ...] | None = None  # which of the task's compare_rewards (None: all, in order)
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        name = self.folder_name
        if name in ("", ".", "..") or Path(name).name != name or "\\" in name:
            raise ValueError(f"the compare demo's name {name!r} must be one folder name (it goes under runs_dir "
                             f"{self.runs_dir!r}): no '/', '..' or absolute path")

    @property
    def folder_name(self) -> str:
        """The folder under ``runs_dir``: ``name``, default ``compare-<task>``."""
        return self.name if self.name is not None else f"compare-{get_task(self.task_name).name}"

    def preset_fields(self) -> dict[str, Any]:
        """The ``cpu-tiny`` preset fields every variant trains with (notebook 05 uses them on the tiny policy)."""
        return {"max_steps": self.grpo_steps, "seed": self.seed, "learning_rate": self.learning_rate,
                "num_generations": self.num_generations, "per_device_train_batch_size": self.completions_per_step,
                "max_completion_length": self.max_completion_length, "temperature": self.temperature,
                "save_steps": self.grpo_steps}

    @property
    def task_name(self) -> str:
        """``task``, default the first of :func:`compare_tasks`."""
        return self.task if self.task is not None else compare_tasks()[0]


def compare_tasks() -> list[str]:
    """The tasks whose ``compare_rewards`` (:attr:`grpo_kit.tasks.Task.extras`) the compare demo can train, in order."""
    return [name for name, t in TASKS.items() if t.extras.get("compare_rewards") and t.trains]


def _variants(config: CompareDemoConfig, task: Any) -> dict[str, Any]:
    """The reward sets to train, by name, checked before anything loads."""
    sets = {name: RewardSet(dict(w)) for name, w in task.extras.get("compare_rewards", {}).items()}
    if not sets or task.name not in compare_tasks():
        raise ValueError(f"task {task.name!r} names no reward sets to compare, or cannot warm-start the tiny policy: "
                         "choose one of " + ", ".join(compare_tasks()))
    chosen = list(sets) if config.variants is None else list(config.variants)
    unknown = [v for v in chosen if v not in sets]
    if unknown or len(chosen) != len(set(chosen)) or not chosen:
        raise ValueError(f"variants {chosen} of task {task.name!r}: give distinct names among {', '.join(sets)}")
    return {v: sets[v] for v in chosen}


def run_compare_demo(config: CompareDemoConfig = CompareDemoConfig()) -> dict[str, Any]:
    """Train several reward sets from one warm-started tiny policy against one baseline, and compare them.

    The same steps as notebook 05 (and ``eval --before``, ``train``, ``eval``, ``compare`` on the command line):
    the baseline is measured once (:func:`grpo_kit.runs.measure.measure_before`) and shared by every run folder
    (:func:`grpo_kit.runs.compare.share_baseline`); each variant trains from the same cached weights with the same
    preset, seed and budget and is evaluated on the same questions (:func:`grpo_kit.runs.measure.measure_after`);
    :func:`grpo_kit.runs.compare.compare_runs` gives the paired table with Holm-adjusted exact McNemar tests.

    Args:
        config: :class:`CompareDemoConfig`.

    Returns:
        ``{"root": Path, "report": RunsReport, "measured": {variant: Measured}, "wall": {step: seconds}}``;
        ``runs/<name>/`` holds one run folder per variant, ``report.md`` and the comparison's tables and chart.

    Raises:
        ValueError: bad settings (checked before any model is built): a task without reward sets to compare,
            an unknown variant, a bad preset value.
        grpo_kit.runs.folder.RunFolderBusy: another process is writing one of the run folders.
    """
    import torch

    from grpo_kit.evaluation.summary import sampled_metrics
    from grpo_kit.runs.compare import check_comparison_out, compare_runs, share_baseline

    total_start = time.perf_counter()
    task = get_task(config.task_name)
    variants = _variants(config, task)
    preset = get_preset("cpu-tiny", **config.preset_fields())
    plan = EvalPlan(task=task, preset=preset, slice={"n": config.eval_size}, seed=config.seed,
                    max_new_tokens=config.eval_max_new_tokens, samples=config.samples,
                    temperature=config.sample_temperature, batch_size=config.eval_batch_size, backend="transformers",
                    warm=config.warm, tiny_spec=config.spec, cache_dir=config.cache_dir)
    root = Path(config.runs_dir) / config.folder_name
    folders = {name: RunFolder(root / name) for name in variants}
    previous = root / "report.md"  # an earlier demo's (rewritten at the end); anything else in root is refused
    if previous.is_file() and previous.read_text(encoding="utf-8").startswith("# grpo_kit compare demo:"):
        previous.unlink()
    check_comparison_out(root, [f.path for f in folders.values()])
    for folder in folders.values():  # a fresh experiment: what an earlier one trained or measured goes
        with folder.lock("compare demo"):
            _fresh(folder)
            for path in (folder.baseline, folder.baseline_sampled, folder.eval_settings, folder.trained,
                         folder.trained_sampled, folder.generations, folder.report, folder.comparison,
                         folder.before_after, folder.log_history, folder.curves):
                path.unlink(missing_ok=True)
    specs = {name: RunSpec.resolve(preset, task, rewards=rewards, run_dir=folders[name].path, seed=config.seed,
                                   warm=config.warm, tiny_spec=config.spec, cache_dir=config.cache_dir,
                                   progress="bar" if config.progress else "none")
             for name, rewards in variants.items()}  # every setting, before any model is built
    plan.questions()
    wall: dict[str, float] = {}

    start = time.perf_counter()
    model, tokenizer, cached = warm_started_tiny_policy(plan.source.tiny, progress=config.progress)
    wall["warm start"] = time.perf_counter() - start

    first = next(iter(folders.values()))
    log.info(f"baseline on {config.eval_size} {task.name} test questions (greedy + {config.samples} samples each), "
             f"shared by {', '.join(folders)}")
    start = time.perf_counter()
    backend = TransformersBackend(model, tokenizer, batch_size=config.eval_batch_size, progress=config.progress)
    backend.route = "transformers"
    measure_before(plan, first, backend)
    share_baseline(first, list(folders.values()))
    wall["baseline evaluation"] = time.perf_counter() - start

    measured = {}
    for name, spec in specs.items():
        log.info(f"{name}: GRPO for {preset.max_steps} steps with {spec.rewards}")
        start = time.perf_counter()
        torch.manual_seed(config.seed)
        fresh, _ = load_policy(str(plan.source.tiny.folder), dtype="float32")  # every variant starts from the cache
        trained = train(spec, policy=(fresh, tokenizer))
        wall[f"{name}: GRPO training"] = time.perf_counter() - start
        start = time.perf_counter()
        after = TransformersBackend(trained.trainer.model, tokenizer, batch_size=config.eval_batch_size,
                                    progress=config.progress)
        after.route = "transformers"
        measured[name] = measure_after(spec.folder, backend=after)
        wall[f"{name}: evaluation after GRPO"] = time.perf_counter() - start
    report = compare_runs([f.path for f in folders.values()], out_dir=root, seed=config.seed)
    wall["total"] = time.perf_counter() - total_start

    sampled = []
    if config.samples:
        label = f"pass@{config.samples} (flexible)"
        rows = {"baseline": next(iter(measured.values())).before_sampled,
                **{name: m.after_sampled for name, m in measured.items()}}
        sampled = ["## Sampled", "", f"{config.samples} samples per question at temperature "
                   f"{config.sample_temperature}; 95% bootstrap intervals over questions.", "",
                   "| metric | " + " | ".join(rows) + " |", "|:--|" + "--:|" * len(rows)]
        tables = {name: sampled_metrics(result.records, seed=config.seed) for name, result in rows.items()}
        for metric in (f"avg@{config.samples} (flexible)", label):
            sampled.append(f"| {metric} | " + " | ".join(
                f"{t.loc[metric, 'value']:.3f} [{t.loc[metric, 'ci_low']:.3f}, {t.loc[metric, 'ci_high']:.3f}]"
                for t in tables.values()) + " |")
        sampled.append("")
    settings = {
        "task": task.name,
        "variants (reward sets)": "; ".join(f"{name}: {spec.rewards}" for name, spec in specs.items()),
        "GRPO steps (each variant)": preset.max_steps,
        "prompts x completions per step": f"{preset.per_device_train_batch_size // preset.num_generations} x "
                                          f"{preset.num_generations}",
        "learning rate": preset.learning_rate,
        "temperature (training)": preset.temperature,
        "max completion length (tokens)": preset.max_completion_length,
        "algorithm": preset.algorithm,
        "warm start": (f"{config.warm.steps} SFT steps x {config.warm.batch_size}, learning rate "
                       f"{config.warm.learning_rate}" + (" (loaded from cache)" if cached else "")),
        "evaluation": (f"{config.eval_size} held-out test questions; greedy, and {config.samples} samples at "
                       f"temperature {config.sample_temperature}; at most {config.eval_max_new_tokens} new tokens"),
        "seed": config.seed,
    }
    text = "\n".join([
        f"# grpo_kit compare demo: {config.folder_name}", "", task.extras.get("notes", ""), "",
        report.markdown.split("\n", 1)[1].strip(), "", *sampled, "## Settings", "",
        *[f"- {k}: {v}" for k, v in settings.items()], "", "## Wall time", "",
        *[f"- {k}: {v:.0f} s" for k, v in wall.items()], "",
        "Each variant's folder holds its own report.md (before/after, sampled metrics, training curves); "
        "`runs_comparison.md`, `runs_metrics.csv`, `runs_pairs.csv` and `runs_comparison.png` are the comparison.",
        ""])
    write_text(root / "report.md", text)
    print("\n" + text.split("## Settings")[0].strip() + "\n", flush=True)
    log.info(f"wrote {root}/ (report.md, one run folder per variant, the comparison) in {wall['total']:.0f} s")
    return {"root": root, "report": report, "measured": measured, "wall": wall}


def demo_policy(config: DemoConfig = DemoConfig()) -> TinyPolicy:
    """The tiny policy the demo with ``config`` trains from (its warm start, shape, seed, task and cache folder)."""
    return TinyPolicy(get_task(config.task), config.warm, config.spec, config.seed, config.cache_dir)


def ship_demo_policy(cache_dir: str | Path | None = None) -> Path:
    """Rebuild the default demo's warm-started tiny policy and ship it with the kit (``make tiny-weights``):
    :func:`grpo_kit.policy.warm_start.ship` into :data:`grpo_kit.policy.warm_start.SHIPPED_DIR`, about 3 to 5 minutes
    on 2 cores.

    Args:
        cache_dir: an empty folder to build in (default: a temporary one, removed afterwards).

    Returns:
        The shipped folder.
    """
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        tiny = demo_policy(DemoConfig(cache_dir=str(cache_dir or scratch)))
        return ship(tiny)

