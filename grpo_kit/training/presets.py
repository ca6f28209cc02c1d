"""Training presets: each GRPO recipe as plain values.

A preset is the whole recipe but the task and its rewards (those belong to the run): the model, how
it loads (Unsloth, 4-bit, LoRA, vLLM), the optimiser, GRPO's sampling and checkpoints.
:func:`get_preset` resolves a name and applies overrides; :func:`grpo_kit.training.checks.check_settings`
rejects every value that would fail late or train nothing, before anything loads.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

from grpo_kit.policy.devices import Gpu, first_gpu
from grpo_kit.policy.loading import LORA_TARGETS, Loading
from grpo_kit.training.algorithms import get_algorithm

__all__ = ["PLAN_FIELDS", "PRESETS", "RESUMABLE_FIELDS", "Preset", "device_preset", "get_preset", "preset_for_device",
           "read_value", "variant", "with_algorithm"]


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
    # The algorithm (grpo_kit.training.algorithms): its name and every GRPOConfig field it sets. Defaults are trl
    # 1.15/1.16's; each preset below sets them all through its named variant.
    algorithm: str = "trl_default"
    loss_type: str = "dapo"
    beta: float = 0.0
    scale_rewards: str = "group"
    importance_sampling_level: str = "token"
    epsilon: float = 0.2
    epsilon_high: float | None = 0.2  # TRL's None means "= epsilon"; written out (see algorithms._bundle)
    num_iterations: int = 1
    mask_truncated_completions: bool = False
    top_entropy_quantile: float = 1.0
    use_bias_correction_kl: bool = True
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
#: Of those, the run's plan: recorded in ``train_settings.json`` and kept by a resume that does not change them.
PLAN_FIELDS = ("max_steps", "save_steps", "save_total_limit", "logging_steps")

def variant(name: str) -> dict[str, Any]:
    """Preset fields of a named algorithm (:data:`grpo_kit.training.algorithms.ALGORITHMS`): its name and every field.

    >>> variant("dapo")["epsilon_high"]
    0.28
    """
    return {"algorithm": name, **get_algorithm(name).fields}


def with_algorithm(preset: Preset, name: str) -> Preset:
    """``preset`` running the named algorithm instead of its own (every algorithm field replaced).

    Raises:
        ValueError: an unknown name (:func:`grpo_kit.training.algorithms.get_algorithm`).

    >>> with_algorithm(PRESETS["a100"], "gspo").importance_sampling_level
    'sequence'
    """
    return dataclasses.replace(preset, **variant(name))


PRESETS: dict[str, Preset] = {
    "a100": Preset(
        name="a100",
        # Unsloth's ungated copy of the post's model; the gated original is
        # "meta-llama/Llama-3.1-8B-Instruct" (pass model=..., with a Hub token).
        model="unsloth/Meta-Llama-3.1-8B-Instruct",
        description=("The blog post's recipe on one A100 40/80 GB: Llama-3.1-8B-Instruct, Unsloth 4-bit LoRA rank "
                     "32 with colocated vLLM generation, num_generations 8, 250 steps; GRPO as trl 0.15 ran it for "
                     "the Unsloth notebook of early 2025 (beta 0.04, per-sequence loss averaging, sampling at "
                     "temperature 0.9)."),
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
        # trl 0.15.2 sampled at 0.9 and scored log-probabilities undivided by the temperature; trl 1.15 divides by
        # `temperature`, so the sampling temperature goes to generation_kwargs and the scoring one stays 1.0.
        temperature=1.0,
        **variant("grpo"),
        extra={"generation_kwargs": {"temperature": 0.9}},
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
        **variant("trl_default"),
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
        **variant("trl_default"),
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
        **variant("trl_default"),
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
        **variant("trl_default"),
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
        **variant("trl_default"),
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


def get_preset(name: str | Preset | None, /, **overrides: Any) -> Preset:
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
    types = {f.name: f.type for f in dataclasses.fields(Preset)}
    if "reward_weights" in overrides or "rewards" in overrides:
        raise ValueError("rewards and their weights belong to the run, not the preset: give them with --rewards "
                         "NAME=WEIGHT (notebook 03: rewards = {name: weight})")
    unknown = sorted(set(overrides) - set(types))
    if unknown:
        close = sorted({c for u in unknown for c in difflib.get_close_matches(u, types, n=2)})
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"unknown preset field(s) {unknown}{hint}: choose from {', '.join(sorted(types))}")
    if "name" in overrides and overrides["name"] != preset.name:
        raise ValueError("name is the preset's own name: choose a recipe with --preset (python -m grpo_kit presets "
                         "lists them) and change its fields, not its name")
    typed = {name: read_value(name, value, types[name]) for name, value in overrides.items()}
    return dataclasses.replace(preset, **typed)


_TRUE, _FALSE = ("true", "1", "yes", "y", "on"), ("false", "0", "no", "n", "off")


def read_value(field: str, value: Any, kind: str) -> Any:
    """``value`` as the preset field ``field`` of type ``kind`` holds it (the dataclass annotation, e.g.
    ``"int | None"``): text from the command line is read as written, never by Python's truthiness.

    Booleans accept ``True``/``False``, 1/0 and the words true/false, yes/no, on/off (any case); whole numbers
    accept ints and whole floats (``1e3``); ``None`` (or the text ``none``, except in a text field, where it is
    the text) only where the field admits it.

    Raises:
        ValueError: the value cannot be read as that type; the message names the field and what it takes.

    >>> read_value("bf16", "false", "bool"), read_value("max_steps", 1e3, "int")
    (False, 1000)
    >>> read_value("lora_rank", "none", "int | None") is None
    True
    """
    base, optional = kind.removesuffix(" | None"), kind.endswith(" | None")
    said_none = isinstance(value, str) and value.strip().lower() in ("none", "null")
    if value is None or (said_none and base != "str"):  # the text "none" is a str field's value (report_to)
        if optional:
            return None
        raise ValueError(f"{field} cannot be None: give a {base}")
    text = value.strip().lower() if isinstance(value, str) else None
    if base == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(f"{field} = {value!r} is not a boolean: write true/false (also yes/no, on/off, 1/0)")
    if base == "int":
        number = value
        if isinstance(value, str):
            try:
                number = float(value) if any(c in text for c in ".e") else int(text, 10)
            except ValueError:
                number = None
        if isinstance(number, float) and number.is_integer() and abs(number) < 2 ** 63:
            number = int(number)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
        raise ValueError(f"{field} = {value!r} is not a whole number: give one such as 25")
    if base == "float":
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return float(number)
        raise ValueError(f"{field} = {value!r} is not a number: give one such as 1e-5")
    if base == "str":
        if isinstance(value, str):
            return value
        raise ValueError(f"{field} = {value!r} is not text: give a name, e.g. {field}=...")
    if base.startswith("tuple"):
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        if isinstance(value, str):
            return value  # "all-linear" and other single names: checks.py says which are allowed
        raise ValueError(f"{field} = {value!r}: give a list of names, e.g. {field}='(\"q_proj\", \"v_proj\")'")
    if base.startswith("dict"):
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return value
        raise ValueError(f"{field} = {value!r}: give a dict of GRPOConfig fields, e.g. {field}='{{\"top_p\": 0.9}}'")
    return value
