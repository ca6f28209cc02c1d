"""GRPO training around TRL's ``GRPOTrainer``: a preset becomes a ``GRPOConfig`` and a trainer.

:func:`build_grpo_config` turns a :class:`grpo_kit.presets.Preset` into TRL's config;
:func:`build_trainer` adds the policy and the data, after :func:`grpo_kit.presets.check_settings`,
and checks afterwards that the trainer trains what was asked (LoRA: only the adapter; full: every
weight). The whole run (checkpoints, resume, held-out evaluation, the run folder) is
:func:`grpo_kit.pipeline.train`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grpo_kit.presets import Preset, check_settings, get_preset, reward_mix
from grpo_kit.rewards import RewardMix

__all__ = [
    "build_grpo_config",
    "build_trainer",
    "check_trains_as_asked",
    "is_unsloth_trainer",
    "num_processes",
    "quiet_progress",
    "save_policy",
]


def build_grpo_config(preset: str | Preset, output_dir: str, rewards: RewardMix | None = None,
                      **overrides: Any) -> Any:
    """Build TRL's ``GRPOConfig`` from a preset plus overrides, after :func:`grpo_kit.presets.check_settings`.

    Args:
        preset: a name in :data:`grpo_kit.presets.PRESETS` or a :class:`grpo_kit.presets.Preset`.
        output_dir: where TRL writes checkpoints (``checkpoint-<step>``) and logs.
        rewards: the rewards (their weights become ``reward_weights``); default the preset's.
        **overrides: preset fields to replace (e.g. ``max_steps=10``).

    Returns:
        ``trl.GRPOConfig`` (Unsloth's ``UnslothGRPOConfig`` where Unsloth has patched TRL). Works
        with TRL 1.15 (GPU stack) and 1.16 (CPU stack).

    Raises:
        ValueError: see :func:`grpo_kit.presets.get_preset` and :func:`grpo_kit.presets.check_settings`;
            a key of ``extra`` that ``GRPOConfig`` does not take.
    """
    p = get_preset(preset, **overrides)
    mix = reward_mix(p, rewards)
    check_settings(p, rewards=mix, num_processes=num_processes())
    return _grpo_config(p, output_dir, mix)


def num_processes() -> int:
    """Processes in this run (``accelerate launch`` / torchrun set ``WORLD_SIZE``; 1 otherwise)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _grpo_config(p: Preset, output_dir: str, mix: RewardMix) -> Any:
    from trl import GRPOConfig

    kwargs: dict[str, Any] = dict(
        output_dir=output_dir,
        learning_rate=p.learning_rate,
        adam_beta1=p.adam_beta1,
        adam_beta2=p.adam_beta2,
        weight_decay=p.weight_decay,
        # transformers 5 folded warmup_ratio into warmup_steps: a float in [0, 1) is a ratio.
        warmup_steps=p.warmup_ratio if p.warmup_ratio > 0 else 0,
        lr_scheduler_type=p.lr_scheduler_type,
        optim=p.optim,
        logging_steps=p.logging_steps,
        per_device_train_batch_size=p.per_device_train_batch_size,
        gradient_accumulation_steps=p.gradient_accumulation_steps,
        num_generations=p.num_generations,
        max_completion_length=p.max_completion_length,
        max_steps=p.max_steps,
        save_strategy="steps",
        save_steps=p.save_steps,
        save_total_limit=p.save_total_limit,
        max_grad_norm=p.max_grad_norm,
        temperature=p.temperature,
        beta=p.beta,
        bf16=p.bf16,
        use_cpu=p.use_cpu,
        gradient_checkpointing=p.gradient_checkpointing,
        reward_weights=mix.weights,
        report_to=p.report_to,
        seed=p.seed,
    )
    if p.use_vllm:
        kwargs.update(use_vllm=True, vllm_mode=p.vllm_mode)
        if p.vllm_mode == "colocate":
            kwargs.update(vllm_gpu_memory_utilization=p.gpu_memory_utilization)
        else:
            kwargs.update(vllm_server_host=p.vllm_server_host, vllm_server_port=p.vllm_server_port)
    kwargs.update(p.extra)
    try:
        return GRPOConfig(**kwargs)
    except TypeError as e:  # an unknown key in `extra` (checked earlier where TRL could be imported)
        raise ValueError(f"GRPOConfig refused the settings ({e}): check the keys of the preset's extra") from None


def is_unsloth_trainer(trainer_class: type) -> bool:
    """Whether ``trainer_class`` is Unsloth's generated trainer (what ``from trl import GRPOTrainer`` gives
    once Unsloth has patched TRL in this process)."""
    return any(c.__name__.startswith(("Unsloth", "_Unsloth")) for c in trainer_class.__mro__)


def build_trainer(
    model: Any,
    tokenizer: Any,
    train_dataset: Any,
    preset: str | Preset,
    output_dir: str,
    reward_funcs: RewardMix | Sequence[str | Callable] | None = None,
    callbacks: Sequence[Any] = (),
    **overrides: Any,
) -> Any:
    """Build a ``GRPOTrainer`` for the preset's route: Unsloth, or plain transformers (+ peft LoRA).

    Args:
        model: a loaded ``PreTrainedModel`` (see :func:`grpo_kit.routes.load_preset_policy`).
        tokenizer: its tokenizer, with a chat template.
        train_dataset: a ``datasets.Dataset`` with ``prompt`` and the columns the rewards read.
        preset: a name in :data:`grpo_kit.presets.PRESETS` or a :class:`grpo_kit.presets.Preset`.
        output_dir: TRL's output folder (checkpoints).
        reward_funcs: a :class:`grpo_kit.rewards.RewardMix` (its weights become
            ``GRPOConfig.reward_weights``; weight 0 = logged, not trained), or names and/or
            functions (see :func:`grpo_kit.presets.reward_mix`); default the preset's ``rewards``.
        callbacks: ``transformers.TrainerCallback`` objects.
        **overrides: preset fields to replace.

    Returns:
        ``trl.GRPOTrainer`` (Unsloth's generated one on an Unsloth preset); call ``.train()``.
        Logged metrics include ``rewards/<function name>/mean`` for every reward.

    Raises:
        ValueError: see :func:`grpo_kit.presets.check_settings` (raised before TRL touches the
            model); an Unsloth preset with a model that has no adapter; a plain-TRL preset
            (``use_unsloth=False``) in a process where Unsloth has replaced TRL's trainer (Unsloth's
            trainer drops ``peft_config`` and needs an Unsloth-loaded model: it would train every
            weight or fail at the first step).
        RuntimeError: the trainer does not train what the preset asks (a LoRA run whose model is
            not a peft model or trains more than the adapter; a full run with frozen weights).
    """
    p = get_preset(preset, **overrides)
    mix = reward_mix(p, reward_funcs)
    check_settings(p, getattr(train_dataset, "features", None) or train_dataset.column_names, rewards=mix,
                   num_processes=num_processes())
    if p.use_unsloth and p.lora_rank is not None and not hasattr(model, "peft_config"):
        raise ValueError(f"preset {p.name!r} trains through Unsloth: load the policy with "
                         "grpo_kit.routes.load_preset_policy (it applies Unsloth's LoRA), or pass use_unsloth=False")
    from trl import GRPOTrainer

    if is_unsloth_trainer(GRPOTrainer) and not p.use_unsloth:
        raise ValueError(
            f"preset {p.name!r} asks for plain TRL (use_unsloth=False), but Unsloth was imported in this process "
            "and replaced TRL's GRPOTrainer with its own, which ignores peft_config (it would train every weight) "
            "and needs an Unsloth-loaded model. Run this preset in a fresh Python process or notebook kernel that "
            "does not import unsloth, or use an Unsloth preset (use_unsloth=True).")
    config = _grpo_config(p, output_dir, mix)
    peft_config = None
    if p.lora_rank is not None and not p.use_unsloth:  # Unsloth's loader already added the adapter
        from peft import LoraConfig

        peft_config = LoraConfig(r=p.lora_rank, lora_alpha=p.lora_alpha, target_modules=list(p.lora_target_modules),
                                 task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=mix.funcs, args=config, train_dataset=train_dataset,
                          processing_class=tokenizer, peft_config=peft_config, callbacks=list(callbacks))
    check_trains_as_asked(trainer.model, p)
    return trainer


def check_trains_as_asked(model: Any, preset: Preset) -> None:
    """Check that ``model``'s trainable weights are what ``preset`` asks for.

    Raises:
        RuntimeError: LoRA (``lora_rank`` set) but the model is not a peft model, or weights outside
            the adapter are trainable; full fine-tuning but some weights are frozen.
    """
    params = dict(model.named_parameters())
    trainable = [n for n, t in params.items() if t.requires_grad]
    if preset.lora_rank is not None:
        outside = [n for n in trainable if "lora_" not in n]
        if not hasattr(model, "peft_config") or outside or not trainable:
            raise RuntimeError(f"preset {preset.name!r} asks for LoRA rank {preset.lora_rank}, but the trainer's model "
                               f"is {type(model).__name__} with {len(trainable)} of {len(params)} tensors trainable "
                               f"(outside the adapter: {outside[:3]}): it would not train an adapter")
    elif len(trainable) != len(params):
        frozen = [n for n, t in params.items() if not t.requires_grad]
        raise RuntimeError(f"preset {preset.name!r} asks for full fine-tuning, but {len(frozen)} of {len(params)} "
                           f"tensors are frozen (e.g. {frozen[:3]})")


def quiet_progress(trainer: Any) -> Any:
    """Keep ``trainer``'s progress bar but stop it printing a dict of metrics at every logging step.

    The metrics still reach ``trainer.state.log_history`` (and wandb when enabled).
    Returns the trainer.
    """
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class _QuietProgress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            return None

    trainer.pop_callback(PrinterCallback)  # used instead of the bar when tqdm is disabled
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(_QuietProgress())
    return trainer


def save_policy(trainer: Any, tokenizer: Any, path: str | Path) -> Path:
    """Save the trained policy and its tokenizer: the LoRA adapter for a peft model, else the full model.

    :func:`grpo_kit.models.load_policy` loads either kind back. Under several processes every
    process must call this (the weights may be sharded); only the main one writes. Returns the folder.
    """
    path = Path(path)
    trainer.save_model(str(path))
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(str(path))
    return path
