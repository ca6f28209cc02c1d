"""Training presets: each GRPO recipe as plain values.

A preset is the whole recipe but the task and its rewards (those belong to the run): the model, how
it loads (Unsloth, 4-bit, LoRA, vLLM), the optimiser, GRPO's sampling and checkpoints.
:func:`get_preset` resolves a name and applies overrides; :func:`grpo_kit.training.checks.check_settings`
rejects every value that would fail late or train nothing, before anything loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from grpo_kit.policy.devices import Gpu, first_gpu
from grpo_kit.policy.loading import LORA_TARGETS, Loading

__all__ = ["PRESETS", "RESUMABLE_FIELDS", "Preset", "device_preset", "get_preset", "preset_for_device"]


@dataclass(frozen=True)
class Preset:
    """A GRPO recipe as plain values. Field defaults are TRL's where TRL has one (``beta`` and the loss: see the
    presets' own values).

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
    vllm_mode: str = "colocate"  # with use_vllm: "colocate" (same GPU) or "server" (vLLM's own `vllm serve`)
    vllm_server_host: str = "127.0.0.1"  # vllm_mode="server": where the vLLM server listens
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
    seed: int = 3407
    report_to: str = "none"  # "wandb" to log there (see grpo_kit.tracking.setup_wandb)
    extra: dict[str, Any] = field(default_factory=dict)  # further GRPOConfig fields, passed as is

    @property
    def vllm_max_model_len(self) -> int:
        """vLLM's context length for this recipe, in tokens: the longest prompt kept plus the completion budget.

        TRL passes ``GRPOConfig.vllm_max_model_length`` to its colocated engine; left unset, vLLM takes the
        model's own maximum (131,072 tokens for Llama-3.1-8B, whose KV cache is 128 KiB a token in bfloat16:
        16 GiB for one such sequence), and refuses to start when its memory share cannot hold one. A server
        (``vllm_mode="server"``) takes it as ``--max-model-len``.

        >>> PRESETS["multi-gpu-lora"].vllm_max_model_len
        512
        """
        return self.max_prompt_tokens + self.max_completion_length

    @property
    def loading(self) -> Loading:
        """How this recipe loads its policy (what the policy wing needs of it)."""
        return Loading(use_unsloth=self.use_unsloth, load_in_4bit=self.load_in_4bit,
                       fast_inference=self.fast_inference, lora_rank=self.lora_rank, lora_alpha=self.lora_alpha,
                       lora_target_modules=self.lora_target_modules, max_seq_length=self.max_seq_length,
                       gpu_memory_utilization=self.gpu_memory_utilization, seed=self.seed)


#: Fields a resumed run may change: how long it runs and how it saves and logs, not what it trains.
RESUMABLE_FIELDS = frozenset({"max_steps", "save_steps", "save_total_limit", "logging_steps", "report_to",
                              "description"})

PRESETS: dict[str, Preset] = {
    "a100": Preset(
        name="a100",
        # Unsloth's ungated copy of the post's model; the gated original is
        # "meta-llama/Llama-3.1-8B-Instruct" (pass model=..., with a Hub token).
        model="unsloth/Meta-Llama-3.1-8B-Instruct",
        description=("The blog post's recipe on one A100 40/80 GB: Llama-3.1-8B-Instruct, Unsloth 4-bit LoRA rank "
                     "32 with colocated vLLM generation, num_generations 8, 250 steps."),
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
                     "generation on a separate GPU running vLLM's server (vllm_mode='server', host and port as "
                     "settings; `python -m grpo_kit plan --preset multi-gpu-full` prints its command)."),
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
        description=("The kit's tiny offline policy on a CPU: full fine-tuning, short completions, a constant "
                     "learning rate high enough to move a 1M-parameter model."),
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


def preset_for_device(gpu: Gpu | None) -> str:
    """The preset that fits a card: ``colab-t4`` on a GPU without bfloat16 (T4, V100), ``a100`` on one
    with it (A100, H100, L4), ``cpu-tiny`` without a GPU.

    >>> preset_for_device(Gpu("Tesla T4", 15.0, bf16=False)), preset_for_device(Gpu("NVIDIA A100-SXM4-40GB", 40, True))
    ('colab-t4', 'a100')
    >>> preset_for_device(None)
    'cpu-tiny'
    """
    if gpu is None:
        return "cpu-tiny"
    return "a100" if gpu.bf16 else "colab-t4"


def device_preset() -> str:
    """The preset that fits this machine's first GPU (:func:`preset_for_device`)."""
    return preset_for_device(first_gpu())


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
    if isinstance(overrides.get("lora_target_modules"), list):
        overrides["lora_target_modules"] = tuple(overrides["lora_target_modules"])
    return dataclasses.replace(preset, **overrides)
