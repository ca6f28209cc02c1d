"""The pipeline the three front doors share: one resolved run through the same steps, in the order of the work.

The steps, each over a run resolved once at the door (:class:`grpo_kit.runs.spec.RunSpec`: what is trained;
:class:`grpo_kit.runs.measure.EvalPlan`: what is measured): baseline (:func:`grpo_kit.runs.measure.measure_before`)
-> reward check (:func:`grpo_kit.runs.reward_check.reward_check`) -> train (:func:`grpo_kit.runs.train.train`) ->
after (:func:`grpo_kit.runs.measure.measure_after`) -> compare (:func:`grpo_kit.runs.compare.compare_runs`) -> export
(:func:`export_steps`). ``python -m grpo_kit`` (``grpo_kit.cli``), the notebooks' calls (``grpo_kit.notebook``) and
the demo (``grpo_kit.demo``) stand side by side on top of it and import none of each other.

Here, what the doors would otherwise each translate: :func:`baseline_plan` (a door's evaluation settings as an
``EvalPlan``, whose defaults are the only ones), :func:`export_steps`, and the demos: the shipped ``cpu-tiny``
recipe and a task run through the same steps on the kit's warm-started tiny policy (:func:`run_demo`,
:func:`run_compare_demo`).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.report import report_markdown
from grpo_kit.policy.loading import load_policy
from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR, TinyPolicySpec
from grpo_kit.policy.warm_start import TinyPolicy, WarmStart, completion_budget, ship, warm_started_tiny_policy
from grpo_kit.runs.folder import RunFolder
from grpo_kit.runs.measure import EvalPlan, measure_after, measure_before
from grpo_kit.runs.spec import RunSpec
from grpo_kit.runs.train import package_versions, train
from grpo_kit.system.files import write_text
from grpo_kit.system.logs import counted
from grpo_kit.tasks import DEFAULT_TASK, TASKS, RewardSet, Task, get_task
from grpo_kit.training.checks import check_model_code
from grpo_kit.training.presets import Recipe, get_preset

__all__ = ["CompareDemoConfig", "DemoConfig", "baseline_plan", "compare_tasks", "demo_policy", "demo_tasks",
           "export_steps", "run_compare_demo", "run_demo", "ship_demo_policy"]

log = logging.getLogger(__name__)


def baseline_plan(task: str | Task, preset: Recipe, *, eval_size: int | None = None,
                  eval_fraction: float | None = None, max_new_tokens: int | None = None, warm_steps: int | None = None,
                  trust_remote_code: bool = False, **settings: Any) -> EvalPlan:
    """What a baseline measures (:class:`grpo_kit.runs.measure.EvalPlan`), from a front door's settings (``eval
    --before``, notebook 02); nothing loads.

    Args:
        task: a task name, file or :class:`grpo_kit.tasks.Task`.
        preset: the recipe whose model and route are measured.
        eval_size, eval_fraction: test questions as a number or a share of the split (neither: the plan's default
            share).
        max_new_tokens: each completion's budget (``None``: for a task file on the tiny policy, from its longest
            answer (:func:`grpo_kit.policy.warm_start.completion_budget`, said in one line), else the plan's).
        warm_steps: the tiny policy's warm-start steps (``None``: the kit's, sized to the task).
        trust_remote_code: a task file may import and run Python of its own
            (:func:`grpo_kit.tasks.task_file.check_task_code`), and so may the model of a recipe that says
            ``trust_remote_code`` (:func:`grpo_kit.training.checks.check_model_code`).
        settings: the plan's other fields (``model``, ``samples``, ``temperature``, ``batch_size``,
            ``backend``, ``seed``, ``cache_dir``, ...); a ``None`` value keeps its default.

    Raises:
        ValueError: whatever :class:`EvalPlan` refuses; a budget beyond the policy's context window
            (:meth:`EvalPlan.check_context`); a slice out of the test split's range; a recipe's
            ``trust_remote_code`` the command did not say.
    """
    check_model_code(preset, trust_remote_code)
    task = get_task(task, trust_remote_code=trust_remote_code)
    settings = {k: v for k, v in {**settings, "max_new_tokens": max_new_tokens}.items() if v is not None}
    if eval_size or eval_fraction:
        settings["slice"] = {"n": eval_size} if eval_size else {"fraction": eval_fraction}
    if warm_steps:
        settings["warm"] = WarmStart(steps=warm_steps)
    said = max_new_tokens is None and settings.get("model") is None and preset.model is None \
        and task.file is not None and task.trains  # a task file on the tiny policy
    if said:
        settings["max_new_tokens"] = completion_budget(task)
    plan = EvalPlan(task=task, preset=preset, **settings)
    plan.check_context()  # a budget beyond the policy's context window, before anything else is said
    log.info(f"baseline: {plan.describe()}")  # a slice out of range is refused here, before anything else is said
    if said:
        log.info(f"completions of up to {plan.max_new_tokens} new tokens, from the longest answer the tiny policy is "
                 "warm-started on (--max-new-tokens changes it)")
    return plan


def export_steps(run_dir: str | Path, formats: Sequence[str], *, out: str | Path | None = None,
                 quant: str | None = None, push_to_hub: str | None = None, private: bool = True,
                 **settings: Any) -> Iterator[str]:
    """The export step: each format of the run's trained policy exported and verified against it
    (:func:`grpo_kit.runs.export.export`), then one of them uploaded to the Hub; one line per export as it is done.

    Args:
        run_dir: the run folder.
        formats: export formats (:data:`grpo_kit.runs.export_formats.FORMATS`), in order.
        out: the export folder (several formats: one folder per format under it); default ``<run_dir>/export/<fmt>``.
        quant: the GGUF type (a GGUF only).
        push_to_hub: ``owner/name``: upload the verified export (the only one, or the merged one of several).
        private: the Hub repository's visibility when created.
        settings: :func:`grpo_kit.runs.export.export`'s ``questions``, ``threshold``, ``base``,
            ``trust_remote_code``.

    Yields:
        ``"<folder>: <verification summary>"`` per format, then the upload's address.

    Raises:
        ValueError: an unknown format, ``quant`` without a GGUF, a bad ``quant``
            (:func:`grpo_kit.runs.export_formats.check_formats`), a malformed ``push_to_hub``, or an upload with
            several formats and none merged; ImportError / FileNotFoundError: a format's tools are missing (checked
            for every format first); PermissionError / ConnectionError: an upload without a token or with
            ``HF_HUB_OFFLINE``; all before any export. Whatever :func:`grpo_kit.runs.export.export` and
            ``push_to_hub`` raise.
    """
    from grpo_kit.runs.export import export
    from grpo_kit.runs.export import push_to_hub as upload
    from grpo_kit.runs.export_formats import FORMATS, check_formats
    from grpo_kit.system.hub import upload_token

    quants = check_formats(formats, quant)  # names, --quant and each format's tools: before any export
    hub = formats[0] if len(formats) == 1 else next((f for f in formats if FORMATS[f].for_the_hub), None)
    if push_to_hub:
        upload_token(push_to_hub, option="--push-to-hub (hub_repo)")  # name, offline mode, token: before any export
        if hub is None:
            raise ValueError("--push-to-hub (hub_repo) uploads one export: give one format, or add merged")
    done = {}
    for format in formats:
        folder = out if out is None or len(formats) == 1 else Path(out) / format
        done[format], verification = export(run_dir, format=format, quant=quants[format], out=folder, **settings)
        yield f"{done[format]}: {verification.summary()}"
    if push_to_hub:
        yield str(upload(done[hub], push_to_hub, private=private))


# --- the demos: the shipped cpu-tiny recipe and a task, through the same steps ------------------------------------


def demo_tasks() -> list[str]:
    """The tasks the demo can train: those with a train split (its solutions warm-start the tiny policy)."""
    return [name for name, t in TASKS.items() if t.trains]


def compare_tasks() -> list[str]:
    """The tasks whose ``compare_rewards`` (:attr:`grpo_kit.tasks.Task.extras`) the compare demo can train, in
    order."""
    return [name for name in demo_tasks() if TASKS[name].extras.get("compare_rewards")]


def _one_folder_name(name: str, runs_dir: str, what: str) -> None:
    if name in ("", ".", "..") or Path(name).name != name or "\\" in name:
        raise ValueError(f"{what}'s name {name!r} must be one folder name (it goes under runs_dir {runs_dir!r}): no "
                         "'/', '..' or absolute path; choose e.g. --name demo-2")


@dataclass(frozen=True, kw_only=True)  # keyword-only: each demo's own fields keep their places (name first)
class _DemoSettings:
    """The settings both demos share: where they write, the sampled evaluation's temperature, the tiny policy's
    shape, the seed, the progress bars and whether a task file's own Python may run."""

    runs_dir: str = "runs"
    cache_dir: str = DEFAULT_CACHE_DIR
    sample_temperature: float = EvalPlan.temperature
    spec: TinyPolicySpec = TinyPolicySpec()
    seed: int = 0
    progress: bool = True
    trust_remote_code: bool = False  # a task file may import and run Python of its own (tasks.task_file)


@dataclass(frozen=True)
class DemoConfig(_DemoSettings):
    """Settings of one demo run. Sizes count questions of ``task``; ``grpo_steps`` are optimiser steps.

    Raises:
        ValueError: a name that is not one folder name.
    """

    name: str = "demo"
    task: str = DEFAULT_TASK  # or another of demo_tasks() ("countdown"), or a task file with solutions
    eval_size: int = 200
    train_size: int | None = None  # None: every train question whose prompt fits
    grpo_steps: int = 40  # greedy answers take the format by step 40 (docs/get-started/cpu-demo.md)
    eval_max_new_tokens: int = 64
    samples: int = 2  # sampled completions per question for avg@k / pass@k / maj@k (0: greedy only)
    eval_batch_size: int = 64
    warm: WarmStart = WarmStart()
    preset_overrides: dict[str, Any] = field(default_factory=dict)
    resume: bool = False  # continue a killed demo from its newest checkpoint (else start the training afresh)

    def __post_init__(self) -> None:
        _one_folder_name(self.name, self.runs_dir, "the demo")


@dataclass(frozen=True)
class CompareDemoConfig(_DemoSettings):
    """Settings of the compare demo: several reward sets trained from one warm start, against one baseline.

    Defaults are the experiment in docs/tutorials/compare-runs.md ("a reward that changes what is learned"): the task's
    ``compare_rewards`` (:attr:`grpo_kit.tasks.Task.extras`), each trained for ``grpo_steps`` on the same budget, every
    run evaluated greedily (and with ``samples`` samples) on the same ``eval_size`` held-out questions.

    Raises:
        ValueError: a name that is not one folder name.
    """

    name: str | None = None  # default compare-<task>
    task: str | None = None  # a task with compare_rewards (None: the first, compare_tasks()[0])
    eval_size: int = 300
    grpo_steps: int = 60
    learning_rate: float = 1e-4
    num_generations: int = 8
    completions_per_step: int = 32  # per_device_train_batch_size: prompts per step = this / num_generations
    max_completion_length: int = 40
    temperature: float = 1.0  # of GRPO's sampled groups
    eval_max_new_tokens: int = 40
    samples: int = 8
    eval_batch_size: int = 100
    warm: WarmStart = WarmStart(steps=1000, batch_size=32)
    variants: tuple[str, ...] | None = None  # which of the task's compare_rewards (None: all, in order)

    def __post_init__(self) -> None:
        _one_folder_name(self.folder_name, self.runs_dir, "the compare demo")

    @property
    def folder_name(self) -> str:
        """The folder under ``runs_dir``: ``name``, default ``compare-<task>``."""
        return self.name if self.name is not None else \
            f"compare-{get_task(self.task_name, trust_remote_code=self.trust_remote_code).name}"

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


def _tiny_plan(config: DemoConfig | CompareDemoConfig, task: Task, preset: Recipe) -> EvalPlan:
    """The demos' baseline plan: a seeded slice of the test split, greedy and sampled, through transformers."""
    return EvalPlan(task=task, preset=preset, slice={"n": config.eval_size}, seed=config.seed,
                    max_new_tokens=config.eval_max_new_tokens, samples=config.samples,
                    temperature=config.sample_temperature, batch_size=config.eval_batch_size, backend="transformers",
                    warm=config.warm, tiny_spec=config.spec, cache_dir=config.cache_dir)


def _backend(model: Any, tokenizer: Any, config: DemoConfig | CompareDemoConfig) -> Any:
    """A transformers backend over a policy in memory, for the baseline and after steps."""
    from grpo_kit.policy.generation import TransformersBackend

    backend = TransformersBackend(model, tokenizer, batch_size=config.eval_batch_size, progress=config.progress)
    backend.route = "transformers"
    return backend


@contextmanager
def _timed(wall: dict[str, float], step: str) -> Iterator[None]:
    """Record the step's wall time (seconds) in ``wall``."""
    start = time.perf_counter()
    yield
    wall[step] = time.perf_counter() - start


def _fresh(run: RunFolder, *measured: Path) -> None:
    """Remove what an earlier demo trained (and ``measured``) into this folder, so this one starts from step 0."""
    for path in (run.checkpoints, run.model, run.heldout):
        shutil.rmtree(path, ignore_errors=True)
    for path in (run.train_settings, run.alarms, run.finished, *measured):
        path.unlink(missing_ok=True)


def _warm_line(warm: WarmStart, cached: bool, detail: str) -> str:
    return f"{warm.steps} SFT steps x {warm.batch_size}, {detail}" + (" (loaded from cache)" if cached else "")


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
    import torch

    total_start, wall = time.perf_counter(), {}
    task = get_task(config.task, trust_remote_code=config.trust_remote_code)
    if not task.trains:
        raise ValueError(f"the demo trains, and task {task.name!r} has no train split with solutions: choose one of "
                         + ", ".join(demo_tasks()))
    preset = get_preset("cpu-tiny", max_steps=config.grpo_steps, seed=config.seed, **config.preset_overrides)
    plan = _tiny_plan(config, task, preset)
    with RunFolder(Path(config.runs_dir) / config.name).lock("demo") as run:
        if not config.resume and any(p.exists() for p in (run.checkpoints, run.model, run.finished)):
            _fresh(run)  # the demo starts afresh: what an earlier demo trained here goes
        spec = RunSpec.resolve(preset, task, run_dir=run.path, resume=config.resume, train_size=config.train_size,
                               seed=config.seed, warm=config.warm, tiny_spec=config.spec, cache_dir=config.cache_dir,
                               progress="bar" if config.progress else "none")  # every setting, before any model loads
        plan.questions()
        torch.manual_seed(config.seed)
        with _timed(wall, "warm start"):
            model, tokenizer, cached = warm_started_tiny_policy(spec.policy.tiny, progress=config.progress)
        samples = f"greedy + {counted(config.samples, 'sample')} each" if config.samples else "greedy"
        log.info(f"baseline evaluation on {counted(config.eval_size, f'{task.name} test question')} ({samples})")
        with _timed(wall, "baseline evaluation"):  # the demo starts afresh: an earlier demo's baseline is replaced
            before = measure_before(plan, run, _backend(model, tokenizer, config), replace=True)
        print(before["greedy"].summary.to_markdown(floatfmt=".3f"), flush=True)
        with _timed(wall, "GRPO training"):
            trained = train(spec, policy=(model, tokenizer))
        log.info(f"evaluation after GRPO on the same {counted(config.eval_size, 'question')} ({samples})")
        with _timed(wall, "evaluation after GRPO"):
            if trained.trainer is not None:
                model = trained.trainer.model
            else:  # a resumed demo that had finished: its saved model
                model = load_policy(str(trained.model_dir))[0]
            measured = measure_after(run, backend=_backend(model, tokenizer, config),
                                     trust_remote_code=config.trust_remote_code)
        wall["total"] = time.perf_counter() - total_start
        return _demo_report(config, task, preset, run, measured, trained, cached, ", ".join(spec.rewards.names), wall)


def _demo_report(config: DemoConfig, task: Task, preset: Recipe, run: RunFolder, measured: Any, trained: Any,
                 cached: bool, rewards: str, wall: dict[str, float]) -> dict[str, Any]:
    """Write and print the demo's ``report.md``; the demo's result."""
    settings = {
        "task": task.name,
        f"eval questions ({task.name} test, seeded slice)": config.eval_size,
        "GRPO steps": preset.max_steps,
        "num_generations": preset.num_generations,
        "completions per step (per_device_train_batch_size)": preset.per_device_train_batch_size,
        "learning rate": preset.learning_rate,
        "max completion length (tokens)": preset.max_completion_length,
        "temperature (training)": preset.temperature,
        "evaluation decoding": (f"greedy, and {counted(config.samples, 'sample')} per question at temperature "
                                f"{config.sample_temperature}; at most {config.eval_max_new_tokens} new tokens"),
        "warm start": _warm_line(config.warm, cached, f"{config.warm.xml_share:.0%} of targets in XML, reasoning "
                                 f"'{config.warm.reasoning}'"),
        "rewards": rewards,
        "resumed from": trained.resumed_from.name if trained.resumed_from else "no (trained from step 0)",
        "seed": config.seed,
    }
    report = report_markdown(measured, f"grpo_kit demo: {config.name}", notes=task.extras.get("notes", ""),
                             settings=settings, wall=wall, versions=package_versions(), algorithm=measured.algorithm)
    files = ("baseline", "trained", "baseline_sampled", "trained_sampled", "comparison", "before_after", "log_history",
             "curves", "checkpoints", "model", "eval_settings", "train_settings", "generations")  # RunFolder's paths
    report += "\n".join(["## Files", "", *[f"- `{getattr(run, name).name}`: {getattr(RunFolder, name).__doc__}"
                                          for name in files], ""])
    write_text(run.report, report)
    print("\n" + report.split("## Diagnostics")[0].strip() + "\n", flush=True)
    log.info(f"wrote {run.path}/ (report.md, records, comparison.csv, charts, log history) in {wall['total']:.0f} s")
    return {"run_dir": run.path, "table": measured.table, "before": measured.before, "after": measured.after,
            "before_sampled": measured.before_sampled, "after_sampled": measured.after_sampled,
            "log_history": trained.log_history, "wall": wall}


def _variants(config: CompareDemoConfig, task: Task) -> dict[str, Any]:
    """The reward sets to train, by name, checked before anything loads."""
    sets = {name: RewardSet(dict(w)) for name, w in task.extras.get("compare_rewards", {}).items()}
    if not sets or task.name not in compare_tasks():
        raise ValueError(f"task {task.name!r} names no reward sets to compare, or cannot warm-start the tiny policy: "
                         "choose one of " + ", ".join(compare_tasks()))
    chosen = list(sets) if config.variants is None else list(config.variants)
    if not chosen or not set(chosen) <= sets.keys() or len(chosen) != len(set(chosen)):
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
    from grpo_kit.runs.compare import compare_runs, share_baseline

    total_start, wall = time.perf_counter(), {}
    task = get_task(config.task_name, trust_remote_code=config.trust_remote_code)
    variants = _variants(config, task)
    preset = get_preset("cpu-tiny", **config.preset_fields())
    plan = _tiny_plan(config, task, preset)
    root = Path(config.runs_dir) / config.folder_name
    folders = _fresh_variant_folders(root, variants)
    specs = {name: RunSpec.resolve(preset, task, rewards=rewards, run_dir=folders[name].path, seed=config.seed,
                                   warm=config.warm, tiny_spec=config.spec, cache_dir=config.cache_dir,
                                   progress="bar" if config.progress else "none")
             for name, rewards in variants.items()}  # every setting, before any model is built
    plan.questions()
    with _timed(wall, "warm start"):
        model, tokenizer, cached = warm_started_tiny_policy(plan.source.tiny, progress=config.progress)
    first = next(iter(folders.values()))
    log.info(f"baseline on {counted(config.eval_size, f'{task.name} test question')} "
             f"(greedy + {counted(config.samples, 'sample')} each), "
             f"shared by {', '.join(folders)}")
    with _timed(wall, "baseline evaluation"):
        measure_before(plan, first, _backend(model, tokenizer, config))
        share_baseline(first, list(folders.values()))
    measured = _train_variants(config, specs, plan.source.tiny.folder, tokenizer, wall)
    report = compare_runs([f.path for f in folders.values()], out_dir=root, seed=config.seed,
                          trust_remote_code=config.trust_remote_code)
    wall["total"] = time.perf_counter() - total_start
    settings = _compare_demo_settings(config, task, preset, specs, cached)
    _write_compare_demo_report(config, task, root, report.markdown, measured, settings, wall)
    return {"root": root, "report": report, "measured": measured, "wall": wall}


def _fresh_variant_folders(root: Path, variants: dict[str, Any]) -> dict[str, RunFolder]:
    """One run folder per variant under ``root``, emptied of what an earlier compare demo trained or measured there;
    ``root`` holding anything else is refused (:func:`grpo_kit.runs.compare.check_comparison_out`)."""
    from grpo_kit.runs.compare import check_comparison_out

    folders = {name: RunFolder(root / name) for name in variants}
    previous = root / "report.md"  # an earlier demo's (rewritten at the end); anything else in root is refused
    if previous.is_file() and previous.read_text(encoding="utf-8").startswith("# grpo_kit compare demo:"):
        previous.unlink()
    check_comparison_out(root, [f.path for f in folders.values()])
    for folder in folders.values():  # a fresh experiment: what an earlier one trained or measured goes
        with folder.lock("compare demo"):
            _fresh(folder, folder.baseline, folder.baseline_sampled, folder.eval_settings, folder.trained,
                   folder.trained_sampled, folder.generations, folder.report, folder.comparison,
                   folder.before_after, folder.log_history, folder.curves)
    return folders


def _train_variants(config: CompareDemoConfig, specs: dict[str, RunSpec], warm_start: Path, tokenizer: Any,
                    wall: dict[str, float]) -> dict[str, Any]:
    """Train each variant from the warm start's cached weights (``warm_start``, the same seed for each) and measure
    it after, on the baseline's questions; ``{variant: Measured}``."""
    import torch

    measured = {}
    for name, spec in specs.items():
        log.info(f"{name}: GRPO for {counted(config.grpo_steps, 'step')} with {spec.rewards}")
        with _timed(wall, f"{name}: GRPO training"):
            torch.manual_seed(config.seed)
            fresh, _ = load_policy(str(warm_start), dtype="float32")  # every variant starts from the cache
            trained = train(spec, policy=(fresh, tokenizer))
        with _timed(wall, f"{name}: evaluation after GRPO"):
            measured[name] = measure_after(spec.folder, backend=_backend(trained.trainer.model, tokenizer, config),
                                           trust_remote_code=config.trust_remote_code)
    return measured


def _compare_demo_settings(config: CompareDemoConfig, task: Task, preset: Recipe, specs: dict[str, RunSpec],
                           cached: bool) -> dict[str, Any]:
    """The compare demo's settings as its ``report.md`` lists them."""
    return {
        "task": task.name,
        "variants (reward sets)": "; ".join(f"{name}: {spec.rewards}" for name, spec in specs.items()),
        "GRPO steps (each variant)": preset.max_steps,
        "prompts x completions per step": f"{preset.prompts_per_step} x {preset.num_generations}",
        "learning rate": preset.learning_rate,
        "temperature (training)": preset.temperature,
        "max completion length (tokens)": preset.max_completion_length,
        "algorithm": preset.algorithm,
        "warm start": _warm_line(config.warm, cached, f"learning rate {config.warm.learning_rate}"),
        "evaluation": (f"{counted(config.eval_size, 'held-out test question')}; "
                       f"greedy, and {counted(config.samples, 'sample')} at "
                       f"temperature {config.sample_temperature}; at most {config.eval_max_new_tokens} new tokens"),
        "seed": config.seed,
    }


def _sampled_section(config: CompareDemoConfig, measured: dict[str, Any]) -> list[str]:
    """The report's sampled metrics (avg@k, pass@k) of the baseline and each variant, with their intervals; none
    without samples."""
    from grpo_kit.evaluation.compare import intervals_markdown
    from grpo_kit.evaluation.summary import sampled_metrics

    if not config.samples:
        return []
    metrics = [f"avg@{config.samples} (flexible)", f"pass@{config.samples} (flexible)"]
    rows = {"baseline": next(iter(measured.values())).before_sampled,
            **{name: m.after_sampled for name, m in measured.items()}}
    return ["## Sampled", "", f"{counted(config.samples, 'sample')} per question at temperature "
            f"{config.sample_temperature}; 95% bootstrap intervals over questions.", "",
            intervals_markdown({name: sampled_metrics(result.records, seed=config.seed).loc[metrics]
                                for name, result in rows.items()}), ""]


def _write_compare_demo_report(config: CompareDemoConfig, task: Task, root: Path, comparison: str,
                               measured: dict[str, Any], settings: dict[str, Any], wall: dict[str, float]) -> None:
    """Write and print the compare demo's ``report.md``: the comparison's tables (``comparison``, the markdown
    :func:`grpo_kit.runs.compare.compare_runs` wrote), the sampled metrics, the settings and the wall times."""
    text = "\n".join([
        f"# grpo_kit compare demo: {config.folder_name}", "", task.extras.get("notes", ""), "",
        comparison.split("\n", 1)[1].strip(), "", *_sampled_section(config, measured), "## Settings", "",
        *[f"- {k}: {v}" for k, v in settings.items()], "", "## Wall time", "",
        *[f"- {k}: {v:.0f} s" for k, v in wall.items()], "",
        "Each variant's folder holds its own report.md (before/after, sampled metrics, training curves); "
        "`runs_comparison.md`, `runs_metrics.csv`, `runs_pairs.csv` and `runs_comparison.png` are the comparison.",
        ""])
    write_text(root / "report.md", text)
    print("\n" + text.split("## Settings")[0].strip() + "\n", flush=True)
    log.info(f"wrote {root}/ (report.md, one run folder per variant, the comparison) in {wall['total']:.0f} s")


def demo_policy(config: DemoConfig | CompareDemoConfig = DemoConfig()) -> TinyPolicy:
    """The tiny policy the demo (or the compare demo) with ``config`` trains from (its warm start, shape, seed, task and
    cache folder)."""
    task = config.task_name if isinstance(config, CompareDemoConfig) else config.task
    return TinyPolicy(get_task(task, trust_remote_code=config.trust_remote_code), config.warm, config.spec,
                      config.seed, config.cache_dir)


def ship_demo_policy(cache_dir: str | Path | None = None,
                     config: DemoConfig | CompareDemoConfig = DemoConfig()) -> Path:
    """Rebuild a demo's warm-started tiny policy and ship it with the kit (``make tiny-weights`` ships the default
    demo's and the default compare demo's): :func:`grpo_kit.policy.warm_start.ship` into
    :data:`grpo_kit.policy.warm_start.SHIPPED_DIR`, about 3 to 5 minutes on 2 cores (the compare demo's 1000 steps: 4
    to 5).

    Args:
        cache_dir: an empty folder to build in (default: a temporary one, removed afterwards).
        config: the demo whose policy is shipped (its ``cache_dir`` is replaced by ``cache_dir``).

    Returns:
        The shipped folder.
    """
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        return ship(demo_policy(replace(config, cache_dir=str(cache_dir or scratch))))
