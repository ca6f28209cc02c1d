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
from grpo_kit.policy.warm_start import WarmStart, warm_started_tiny_policy
from grpo_kit.runs.folder import RunFolder
from grpo_kit.runs.measure import EvalPlan, measure_after, measure_before
from grpo_kit.runs.spec import RunSpec
from grpo_kit.runs.train import package_versions, train
from grpo_kit.system.files import write_text
from grpo_kit.tasks import DEFAULT_TASK, TASKS, get_task
from grpo_kit.training.presets import get_preset

__all__ = ["DemoConfig", "run_demo"]

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
    grpo_steps: int = 100
    eval_max_new_tokens: int = 64
    samples: int = 4  # sampled completions per question for avg@k / pass@k / maj@k (0: greedy only)
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
    if not task.trains or task.demonstration is None:
        raise ValueError(f"the demo trains, and task {task.name!r} has no train split with solutions: choose one of "
                         + ", ".join(t.name for t in TASKS.values() if t.trains and t.demonstration is not None))
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
    if not config.resume and (run_dir / "checkpoints").is_dir():
        _fresh(run)
    spec = RunSpec.resolve(preset, task, run_dir=run_dir, resume=config.resume, train_size=config.train_size,
                           seed=config.seed, warm=config.warm, tiny_spec=config.spec, cache_dir=config.cache_dir,
                           progress="bar" if config.progress else "none")  # every setting, before any model is built
    plan.questions()
    torch.manual_seed(config.seed)
    wall: dict[str, float] = {}

    log.info(f"warm start of the tiny policy (cached in {spec.policy.tiny.folder})")
    start = time.perf_counter()
    model, tokenizer, cached = warm_started_tiny_policy(spec.policy.tiny, progress=config.progress)
    wall["warm start"] = time.perf_counter() - start
    log.info("warm start " + ("loaded from cache" if cached else f"trained in {wall['warm start']:.0f} s"))

    samples = f"greedy + {config.samples} samples each" if config.samples else "greedy"
    log.info(f"baseline evaluation on {config.eval_size} {task.name} test questions ({samples})")
    start = time.perf_counter()
    backend = TransformersBackend(model, tokenizer, batch_size=config.eval_batch_size, progress=config.progress)
    backend.route = "transformers"
    before = measure_before(plan, run, backend)
    wall["baseline evaluation"] = time.perf_counter() - start
    print(before["greedy"].summary.to_markdown(floatfmt=".3f"), flush=True)

    log.info(f"GRPO: {preset.max_steps} steps, rewards: {', '.join(spec.rewards.names)}; checkpoints every "
             f"{preset.save_steps} steps in {run.checkpoints}")
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
    report = report_markdown(measured, f"grpo_kit demo: {config.name}", notes=task.notes,
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

