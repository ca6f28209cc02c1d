"""GRPO training around TRL's ``GRPOTrainer``: named presets, overrides, checks before loading.

A preset is the whole recipe as plain values (model, LoRA, optimiser, GRPO sampling,
rewards). :func:`build_grpo_config` turns a preset plus overrides into a ``GRPOConfig``;
:func:`build_trainer` adds the policy and the data. Every setting is checked by
:func:`check_settings` before any model is loaded, so a typo costs a second, not a download.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_kit.models import LORA_TARGETS
from grpo_kit.rewards import SEED_REWARDS, RewardFunc, RewardMix

__all__ = [
    "PRESETS",
    "Preset",
    "build_grpo_config",
    "build_trainer",
    "check_settings",
    "get_preset",
    "load_eval_backend",
    "load_preset_policy",
    "load_preset_tokenizer",
    "quiet_progress",
    "reward_mix",
    "save_policy",
    "setup_wandb",
]

@dataclass(frozen=True)
class Preset:
    """A GRPO recipe as plain values. Field defaults are TRL's where TRL has one.

    Lengths are in tokens; ``learning_rate`` is the peak rate of the schedule;
    ``per_device_train_batch_size`` counts completions (TRL), so each optimiser step sees
    ``per_device_train_batch_size * gradient_accumulation_steps / num_generations`` prompts.
    ``lora_rank=None`` means full fine-tuning.
    """

    name: str
    model: str | None  # Hub id or path; None: the kit's tiny offline policy
    description: str = ""
    use_unsloth: bool = False
    load_in_4bit: bool = False
    fast_inference: bool = False  # Unsloth only: vLLM colocated with shared weights (LoRA only)
    use_vllm: bool = False  # plain transformers path: TRL's own vLLM in colocate mode
    lora_rank: int | None = 32
    lora_alpha: int = 32
    lora_target_modules: tuple[str, ...] = LORA_TARGETS
    max_seq_length: int = 512
    max_prompt_tokens: int = 256
    max_completion_length: int = 256
    num_generations: int = 8
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_steps: int = 250
    learning_rate: float = 5e-6
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    weight_decay: float = 0.1
    warmup_ratio: float = 0.1
    lr_scheduler_type: str = "cosine"
    optim: str = "paged_adamw_8bit"
    max_grad_norm: float = 0.1
    temperature: float = 1.0
    beta: float = 0.0
    logging_steps: int = 1
    save_steps: int = 250
    bf16: bool = True
    use_cpu: bool = False
    gradient_checkpointing: bool = True
    gpu_memory_utilization: float = 0.6
    rewards: tuple[str, ...] = SEED_REWARDS
    reward_weights: tuple[float, ...] | None = None
    seed: int = 3407
    report_to: str = "none"  # "wandb" to log there (see setup_wandb)
    extra: dict[str, Any] = field(default_factory=dict)  # further GRPOConfig fields, passed as is


PRESETS: dict[str, Preset] = {
    "a100": Preset(
        name="a100",
        # Unsloth's ungated copy of the seed's model; the gated original is
        # "meta-llama/Llama-3.1-8B-Instruct" (pass model=..., with a Hub token).
        model="unsloth/Meta-Llama-3.1-8B-Instruct",
        description=("Seed 002's recipe on one A100 40/80 GB (REFERENCE section 3): Llama-3.1-8B-Instruct, "
                     "Unsloth 4-bit LoRA rank 32 with colocated vLLM generation, num_generations 8, 250 steps."),
        use_unsloth=True,
        load_in_4bit=True,
        fast_inference=True,
        lora_rank=32,
        lora_alpha=32,
        max_seq_length=512,
        max_prompt_tokens=256,
        max_completion_length=256,
        num_generations=8,
        per_device_train_batch_size=8,  # Unsloth sets the per-device batch to num_generations
        gradient_accumulation_steps=2,
        max_steps=250,
        save_steps=250,
    ),
    "colab-t4": Preset(
        name="colab-t4",
        model="unsloth/Qwen2.5-3B-Instruct",
        description=("Colab free tier (T4, 16 GB), after Unsloth's Qwen2.5-3B GRPO notebook: 4-bit LoRA rank 64 "
                     "with colocated vLLM, fp16 (a T4 has no bfloat16), num_generations 6."),
        use_unsloth=True,
        load_in_4bit=True,
        fast_inference=True,
        lora_rank=64,
        lora_alpha=64,
        max_seq_length=1024,
        max_prompt_tokens=256,
        max_completion_length=256,
        num_generations=6,
        per_device_train_batch_size=6,
        gradient_accumulation_steps=1,
        optim="adamw_8bit",
        gpu_memory_utilization=0.5,
        bf16=False,
        extra={"fp16": True},
    ),
    "full-80gb": Preset(
        name="full-80gb",
        model="Qwen/Qwen2.5-1.5B-Instruct",
        description=("Full fine-tuning of a 1.5B instruct model on one 80 GB card (A100/H100): plain "
                     "transformers with TRL's own vLLM colocated (Unsloth cannot pair full fine-tuning with "
                     "fast_inference), bfloat16, AdamW."),
        lora_rank=None,
        use_vllm=True,
        gpu_memory_utilization=0.3,
        max_seq_length=1024,
        max_prompt_tokens=256,
        max_completion_length=512,
        num_generations=8,
        per_device_train_batch_size=16,
        gradient_accumulation_steps=1,
        learning_rate=1e-6,
        optim="adamw_torch",
        max_grad_norm=1.0,
    ),
    "cpu-tiny": Preset(
        name="cpu-tiny",
        model=None,
        description=("The kit's tiny offline policy on a CPU (REFERENCE section 6): full fine-tuning, "
                     "short completions, a constant learning rate high enough to move a 1M-parameter model."),
        lora_rank=None,
        max_seq_length=320,
        max_prompt_tokens=200,
        max_completion_length=64,
        num_generations=8,
        per_device_train_batch_size=32,
        gradient_accumulation_steps=1,
        max_steps=100,
        learning_rate=3e-5,
        weight_decay=0.0,
        warmup_ratio=0.0,
        lr_scheduler_type="constant",
        optim="adamw_torch",
        max_grad_norm=1.0,
        temperature=1.0,
        save_steps=10_000,
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        seed=0,
    ),
}


def get_preset(name: str | Preset, **overrides: Any) -> Preset:
    """Return a preset by name with fields replaced by ``overrides``.

    Raises:
        ValueError: unknown preset name; an override that is not a preset field (the message
            lists them); ``max_prompt_length``, which TRL removed (use ``max_prompt_tokens``).

    >>> get_preset("a100", max_steps=350).max_steps
    350
    """
    preset = name if isinstance(name, Preset) else PRESETS.get(name)
    if preset is None:
        raise ValueError(f"unknown preset {name!r}: choose from {', '.join(PRESETS)}")
    if "max_prompt_length" in overrides:
        raise ValueError("max_prompt_length is gone from TRL's GRPOConfig (removed in 0.28; passing it is a "
                         "TypeError): set max_prompt_tokens instead, and the kit drops longer prompts "
                         "from the dataset")
    fields = {f.name for f in dataclasses.fields(Preset)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown preset field(s) {unknown}: choose from {sorted(fields)}")
    for key in ("rewards", "lora_target_modules", "reward_weights"):
        if isinstance(overrides.get(key), list):
            overrides[key] = tuple(overrides[key])
    return dataclasses.replace(preset, **overrides)


def check_settings(preset: Preset, dataset_columns: Sequence[str] | None = None,
                   rewards: RewardMix | None = None) -> None:
    """Check a preset (and the dataset's columns) before any model is loaded.

    Args:
        preset: the recipe.
        dataset_columns: the training dataset's column names, when known.
        rewards: the rewards to train with, when not the preset's (:func:`reward_mix`).

    Raises:
        ValueError: ``num_generations < 2``; the generation batch
            (``per_device_train_batch_size * gradient_accumulation_steps``) not divisible by
            ``num_generations`` (TRL's rule); an unknown reward name; reward weights of the
            wrong length; a dataset without ``prompt``, or without a column a reward reads
            (``answer`` for correctness, ``nums``/``target`` for Countdown); non-positive
            lengths or steps; GPU routes that cannot work (Unsloth full fine-tuning with
            ``fast_inference``, ``fast_inference`` without Unsloth, ``use_vllm`` with Unsloth).
    """
    if preset.use_unsloth and preset.fast_inference and preset.lora_rank is None:
        raise ValueError("Unsloth cannot combine full fine-tuning with fast_inference (unsloth #2846, #3577): set "
                         "fast_inference=False (Unsloth, generation without vLLM), or use_unsloth=False with "
                         "use_vllm=True (transformers + TRL's colocated vLLM), or a lora_rank")
    if preset.fast_inference and not preset.use_unsloth:
        raise ValueError("fast_inference is Unsloth's colocated vLLM: with use_unsloth=False set use_vllm=True "
                         "for TRL's own vLLM instead")
    if preset.use_unsloth and preset.use_vllm:
        raise ValueError("use_vllm is for the plain transformers path; with Unsloth set fast_inference=True")
    if preset.num_generations < 2:
        raise ValueError(f"num_generations must be at least 2 (GRPO compares completions within a group), "
                         f"got {preset.num_generations}")
    generation_batch = preset.per_device_train_batch_size * preset.gradient_accumulation_steps
    if generation_batch % preset.num_generations:
        raise ValueError(
            f"per_device_train_batch_size * gradient_accumulation_steps = {generation_batch} completions is "
            f"not divisible by num_generations = {preset.num_generations}: TRL needs whole groups. "
            f"Make per_device_train_batch_size a multiple of {preset.num_generations}.")
    for name in ("max_completion_length", "max_prompt_tokens", "max_steps"):
        if getattr(preset, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(preset, name)}")
    mix = rewards if rewards is not None else reward_mix(preset)  # unknown names or bad weights raise here
    if dataset_columns is not None:
        if "prompt" not in dataset_columns:
            raise ValueError(f"the training dataset has no 'prompt' column (it has {list(dataset_columns)}); "
                             "build it with a task's loader (grpo_kit.tasks.get_task(...).load) or add "
                             "conversational prompts")
        for func in mix.funcs:
            missing = [c for c in getattr(func, "columns", ()) if c not in dataset_columns]
            if missing:
                raise ValueError(f"reward {func.__name__} reads the dataset column(s) {missing}, which are missing "
                                 f"(columns: {list(dataset_columns)}): use that task's data, or the task's "
                                 "rewards (grpo_kit.tasks.get_task(task).reward_mix())")


def reward_mix(preset: Preset, reward_funcs: RewardMix | Sequence[str | RewardFunc] | None = None) -> RewardMix:
    """The rewards a run trains with: ``reward_funcs`` (a mix, or names/functions with the preset's
    ``reward_weights`` when their count matches, else weight 1 each), or the preset's ``rewards``.

    Raises:
        ValueError: unknown reward names, or ``reward_weights`` of the wrong length.
    """
    if isinstance(reward_funcs, RewardMix):
        return reward_funcs
    rewards = list(reward_funcs) if reward_funcs is not None else list(preset.rewards)
    weights = preset.reward_weights
    if weights is not None and len(weights) != len(rewards):
        raise ValueError(f"reward_weights has {len(weights)} entries for {len(rewards)} reward functions: give one "
                         "weight per reward, or pass a grpo_kit.rewards.RewardMix")
    return RewardMix(rewards, weights)


def build_grpo_config(preset: str | Preset, output_dir: str, **overrides: Any) -> Any:
    """Build TRL's ``GRPOConfig`` from a preset plus overrides, after :func:`check_settings`.

    Args:
        preset: a name in :data:`PRESETS` or a :class:`Preset`.
        output_dir: where TRL writes checkpoints and logs.
        **overrides: preset fields to replace (e.g. ``max_steps=10``).

    Returns:
        ``trl.GRPOConfig``. Works with TRL 1.15 (GPU stack) and 1.16 (CPU stack).

    Raises:
        ValueError: see :func:`get_preset` and :func:`check_settings`.
    """
    p = get_preset(preset, **overrides)
    check_settings(p)
    return _grpo_config(p, output_dir)


def _grpo_config(p: Preset, output_dir: str, mix: RewardMix | None = None) -> Any:
    from trl import GRPOConfig

    mix = mix or reward_mix(p)
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
        save_steps=p.save_steps,
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
        kwargs.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=p.gpu_memory_utilization)
    kwargs.update(p.extra)
    return GRPOConfig(**kwargs)


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
    """Build a ``GRPOTrainer`` on the transformers path (optionally LoRA through peft).

    Args:
        model: a loaded ``PreTrainedModel`` (see :mod:`grpo_kit.models`).
        tokenizer: its tokenizer, with a chat template.
        train_dataset: a ``datasets.Dataset`` with ``prompt`` and the columns the rewards read.
        preset: a name in :data:`PRESETS` or a :class:`Preset`.
        output_dir: TRL's output folder.
        reward_funcs: a :class:`grpo_kit.rewards.RewardMix` (its weights become
            ``GRPOConfig.reward_weights``; weight 0 = logged, not trained), or names and/or
            functions (see :func:`reward_mix`); default the preset's ``rewards``.
        callbacks: ``transformers.TrainerCallback`` objects.
        **overrides: preset fields to replace.

    Returns:
        ``trl.GRPOTrainer``; call ``.train()``. Logged metrics include
        ``rewards/<function name>/mean`` for every reward.

    Raises:
        ValueError: see :func:`check_settings` (raised before TRL touches the model).
    """
    p = get_preset(preset, **overrides)
    mix = reward_mix(p, reward_funcs)
    check_settings(p, train_dataset.column_names, rewards=mix)
    if p.use_unsloth and p.lora_rank is not None and not hasattr(model, "peft_config"):
        raise ValueError(f"preset {p.name!r} trains through Unsloth: load the policy with "
                         "grpo_kit.training.load_preset_policy (it applies Unsloth's LoRA), or pass use_unsloth=False")
    from trl import GRPOTrainer

    config = _grpo_config(p, output_dir, mix)
    peft_config = None
    if p.lora_rank is not None and not p.use_unsloth:  # Unsloth's loader already added the adapter
        from peft import LoraConfig

        peft_config = LoraConfig(r=p.lora_rank, lora_alpha=p.lora_alpha, target_modules=list(p.lora_target_modules),
                                 task_type="CAUSAL_LM")
    return GRPOTrainer(model=model, reward_funcs=mix.funcs, args=config, train_dataset=train_dataset,
                       processing_class=tokenizer, peft_config=peft_config, callbacks=list(callbacks))


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


def setup_wandb(project: str | None, mode: str | None = None) -> str:
    """Prepare Weights & Biases logging without ever prompting for a login.

    Args:
        project: the wandb project; ``None`` turns wandb off.
        mode: ``"online"``, ``"offline"`` or ``"disabled"``; default online when ``WANDB_API_KEY``
            is set, else offline (runs are kept locally; ``wandb sync`` uploads them later).

    Returns:
        The value for the preset's ``report_to``: ``"wandb"`` or ``"none"``.
    """
    import os

    if project is None or mode == "disabled":
        return "none"
    os.environ["WANDB_PROJECT"] = project
    os.environ["WANDB_MODE"] = mode or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    return "wandb"


def load_preset_policy(preset: str | Preset, model: str | None = None, cache_dir: str = ".cache/grpo_kit",
                       warm_start_steps: int | None = None, progress: bool = True,
                       task: str = "gsm8k") -> tuple[Any, Any]:
    """Load the policy a preset trains: the warm-started tiny policy, or a model by Hub id or path.

    Args:
        preset: a name in :data:`PRESETS` or a :class:`Preset`.
        model: a Hub id or path that replaces the preset's model.
        cache_dir: where the tiny policy is cached (presets without a model).
        warm_start_steps: the tiny policy's warm-start steps (default :class:`grpo_kit.warm_start.WarmStart`'s).
        progress: show the warm start's progress bar.
        task: the task the tiny policy is warm-started on (presets without a model).

    Returns:
        ``(model, tokenizer)``. Unsloth presets load through
        :func:`grpo_kit.models.load_unsloth_policy` (LoRA applied, vLLM colocated when
        ``fast_inference``); other Hub models load with transformers in bfloat16 on the GPU
        (``device_map="auto"``), or float32 on a CPU.

    Raises:
        ValueError: unknown preset or inconsistent settings (before anything loads).
        RuntimeError: an Unsloth preset on a machine without a CUDA GPU (the message names
            the CPU alternative).
    """
    p = get_preset(preset)
    check_settings(p)
    name = model or p.model
    if name is None:
        from grpo_kit.warm_start import WarmStart, warm_started_tiny_policy

        settings = WarmStart() if warm_start_steps is None else WarmStart(steps=warm_start_steps)
        policy, tokenizer, _ = warm_started_tiny_policy(cache_dir, settings, progress=progress, task=task)
        return policy, tokenizer
    if p.use_unsloth:
        from grpo_kit.models import load_unsloth_policy

        return load_unsloth_policy(name, max_seq_length=p.max_seq_length, load_in_4bit=p.load_in_4bit,
                                   lora_rank=p.lora_rank, lora_alpha=p.lora_alpha,
                                   target_modules=p.lora_target_modules, fast_inference=p.fast_inference,
                                   gpu_memory_utilization=p.gpu_memory_utilization, seed=p.seed)
    from grpo_kit.models import load_policy, placement

    return load_policy(name, **placement())


def load_eval_backend(preset: str | Preset, model: str | None = None, trained: str | Path | None = None,
                      batch_size: int = 32, warm_start_steps: int | None = None, task: str = "gsm8k") -> Any:
    """The fastest generation backend for evaluating a preset's model, before or after training.

    Routes, the same for the baseline (``trained=None``) and the trained model:

    - Unsloth with ``fast_inference`` (``a100``, ``colab-t4``): the colocated vLLM engine, with the
      base weights before training and the saved adapter as a LoRA request after.
    - ``use_vllm`` (``full-80gb``) where vLLM is installed and a GPU is visible: ``vllm.LLM`` in a
      subprocess on the model, then on the saved checkpoint (an adapter is merged first).
    - Anything else (``cpu-tiny``, ``use_unsloth=False``): batched transformers (+ peft for an adapter).

    Before and after go through the same route, so a difference between them is the training's,
    not the backend's.

    Args:
        preset: a name in :data:`PRESETS` or a :class:`Preset`.
        model: a Hub id or path that replaces the preset's model (the base of a trained adapter).
        trained: the folder written by :func:`save_policy` (a LoRA adapter or a full model).
        batch_size: prompts per ``generate`` call (transformers route).
        warm_start_steps, task: the tiny policy's warm-start steps and task (presets without a model).

    Returns:
        a :class:`grpo_kit.generation.Backend`.

    Raises:
        ValueError: bad settings (before anything loads); a trained LoRA adapter that is all
            zeros (it would evaluate the base model).
        FileNotFoundError: ``trained`` does not exist.
        RuntimeError: an Unsloth preset without a CUDA GPU.
    """
    from grpo_kit.generation import TransformersBackend
    from grpo_kit.models import check_adapter_trained, load_policy, placement

    p = get_preset(preset)
    check_settings(p)
    adapter = False
    if trained is not None:
        trained = Path(trained)
        if not trained.is_dir():
            raise FileNotFoundError(f"no trained model at {trained}: run notebook 03 (or save_policy) first")
        adapter = (trained / "adapter_config.json").is_file()
        if adapter:
            check_adapter_trained(trained)
    if p.use_unsloth and p.fast_inference and (trained is None or adapter):
        from grpo_kit.vllm_backend import UnslothVLLMBackend

        policy, tokenizer = load_preset_policy(p, model)
        return UnslothVLLMBackend(policy, tokenizer, lora_path=trained)
    if p.use_vllm and _vllm_usable():
        from grpo_kit.vllm_backend import SubprocessVLLMBackend

        name = model or p.model
        if trained is not None:
            name = str(trained)
            if adapter:
                merged = trained.parent / f"{trained.name}-merged"
                if not (merged / "config.json").is_file():
                    from grpo_kit.models import save_merged

                    save_merged(*load_policy(trained, **placement()), merged)
                name = str(merged)
        return SubprocessVLLMBackend(name, gpu_memory_utilization=0.85, max_model_len=p.max_seq_length)
    if trained is not None:
        policy, tokenizer = load_policy(trained, **placement())
    else:
        policy, tokenizer = load_preset_policy(p, model, warm_start_steps=warm_start_steps, task=task)
    return TransformersBackend(policy, tokenizer, batch_size=batch_size)


def _vllm_usable() -> bool:
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def load_preset_tokenizer(preset: str | Preset, model: str | None = None, task: str = "gsm8k") -> Any:
    """The tokenizer of the policy a preset trains, without loading the model.

    For the tiny policy (presets without a model) this trains the same deterministic
    tokenizer as :func:`grpo_kit.warm_start.warm_started_tiny_policy` (a few seconds).
    """
    p = get_preset(preset)
    name = model or p.model
    if name is None:
        from grpo_kit.models import train_tiny_tokenizer
        from grpo_kit.tasks import get_task

        spec = get_task(task)
        return train_tiny_tokenizer(spec.texts(spec.load("train")))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def save_policy(trainer: Any, tokenizer: Any, path: str | Path) -> Path:
    """Save the trained policy and its tokenizer: the LoRA adapter for a peft model, else the full model.

    :func:`grpo_kit.models.load_policy` loads either kind back. Returns the folder.
    """
    path = Path(path)
    trainer.save_model(str(path))
    tokenizer.save_pretrained(str(path))
    return path
