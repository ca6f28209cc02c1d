"""Where a policy runs: the GPU this machine has (if any), where its weights go, and the processes of a launch.

:class:`Launch` is the one place that reads what ``accelerate launch`` (or torchrun) tells each
process: how many there are, which one this is, and whether the weights are sharded (FSDP, DeepSpeed
ZeRO-3). :func:`placement` turns a machine and a launch into ``from_pretrained`` arguments.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CARDS", "Gpu", "Launch", "card", "cuda_available", "first_gpu", "gpu_of", "gpus", "known_card",
           "nearest_cards", "placement", "require_cuda", "unsloth_problem", "zero3_loading"]


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (imports torch, not transformers: safe before Unsloth)."""
    import torch

    return torch.cuda.is_available()


def require_cuda(what: str) -> None:
    """Raise a clear error when ``what`` (an Unsloth or vLLM feature) is asked for without a CUDA GPU. Unlike
    :func:`unsloth_problem` it does not let ``UNSLOTH_ALLOW_CPU=1`` through: that switch lets Unsloth import on a CPU,
    but its loader still reads the GPU (unsloth ``models/loader.py``).

    Raises:
        RuntimeError: no CUDA device; the message names the CPU alternative.
    """
    if not cuda_available():
        raise RuntimeError(f"{what} needs an NVIDIA GPU with CUDA, and none is visible here. On a CPU use the "
                           "transformers + peft path: preset 'cpu-tiny', or any preset with use_unsloth=False, "
                           "and grpo_kit.policy.generation.TransformersBackend for evaluation.")


def unsloth_problem(tiny_policy: bool) -> str | None:
    """Why the Unsloth route cannot run here (``None``: it can), so that a run asking for it is refused before
    anything loads instead of training another route while recording Unsloth.

    Args:
        tiny_policy: whether the policy is the kit's tiny offline one (it always loads through transformers).

    Unsloth needs CUDA; ``UNSLOTH_ALLOW_CPU=1`` (Unsloth's own switch, used by the kit's stack tests) lets it
    import on a CPU.
    """
    if tiny_policy:
        return ("the kit's tiny offline policy loads through transformers, never Unsloth: set use_unsloth false, "
                "or give a model for Unsloth (--model_name_or_path)")
    if not cuda_available() and os.environ.get("UNSLOTH_ALLOW_CPU") != "1":
        return ("use_unsloth needs an NVIDIA GPU with CUDA, and none is visible here: on a CPU use preset "
                "'cpu-tiny' or --use_unsloth false (transformers + peft)")
    return None


@dataclass(frozen=True)
class Gpu:
    """One CUDA device: its name as torch reports it, its memory in GiB, whether it computes in bfloat16 in hardware
    (compute capability 8.0 and above) and its memory bandwidth in GB/s (``None``: a card :data:`CARDS` does not
    know, whose time is then not scaled by bandwidth)."""

    name: str
    memory_gib: float
    bf16: bool
    bandwidth_gbs: float | None = None


#: The kit's one table of GPU cards, by the name ``plan --device`` takes: each card's name as torch reports it
#: (``get_device_properties(0).name``), the memory torch reports (``total_memory``, about nvidia-smi's MiB over 1024,
#: a little under the GB of the card's name; the H200's as measured, ``benchmarks/results/gpu-2026-11-27``), whether it
#: computes in bfloat16 (compute capability 8.0 and above: Ampere, Ada, Hopper; a T4 is 7.5) and its memory bandwidth
#: from NVIDIA's data sheets (A100 SXM4 40 and 80 GB, H100 SXM5, H200 SXM, L4, T4), which the time estimates scale by
#: (:mod:`grpo_kit.policy.speed`). A card found on this machine takes its bandwidth from here by name
#: (:func:`gpus`). A new card is a row here; a recipe for it is a file in ``grpo_kit/recipes/`` and a line in
#: :func:`grpo_kit.training.presets.preset_for_device` (docs/development/layout.md).
CARDS: dict[str, Gpu] = {
    "a100-40gb": Gpu("NVIDIA A100-SXM4-40GB", 39.4, bf16=True, bandwidth_gbs=1555),
    "a100-80gb": Gpu("NVIDIA A100-SXM4-80GB", 79.2, bf16=True, bandwidth_gbs=2039),
    "h100-80gb": Gpu("NVIDIA H100 80GB HBM3", 79.1, bf16=True, bandwidth_gbs=3350),
    "h200-141gb": Gpu("NVIDIA H200", 139.8, bf16=True, bandwidth_gbs=4800),
    "l4-24gb": Gpu("NVIDIA L4", 22.0, bf16=True, bandwidth_gbs=300),
    "t4-16gb": Gpu("Tesla T4", 14.7, bf16=False, bandwidth_gbs=320),
}


def card(name: str) -> Gpu:
    """A card of :data:`CARDS` by name.

    Raises:
        ValueError: an unknown name; the message names the nearest (:func:`nearest_cards`) and lists the known ones.

    >>> card("t4-16gb").bf16
    False
    >>> card("t4")
    Traceback (most recent call last):
    ...
    ValueError: unknown card 't4': did you mean t4-16gb? --device takes a100-40gb, a100-80gb, h100-80gb, \
h200-141gb, l4-24gb, t4-16gb
    """
    if name not in CARDS:
        near = nearest_cards(name)
        raise ValueError(f"unknown card {name!r}: " + (f"did you mean {' or '.join(near)}? " if near else "")
                         + f"--device takes {', '.join(CARDS)}")
    return CARDS[name]


def nearest_cards(name: str) -> list[str]:
    """The cards of :data:`CARDS` an unknown name most likely meant: those whose name or torch name starts with it or
    holds it (``"a100"``: both A100s; ``"NVIDIA L4"``: ``l4-24gb``), else the closest spellings (difflib).

    >>> nearest_cards("a100"), nearest_cards("NVIDIA H200"), nearest_cards("l4-22gb"), nearest_cards("mi300x")
    (['a100-40gb', 'a100-80gb'], ['h200-141gb'], ['l4-24gb'], [])
    """
    import difflib

    asked = name.strip().lower()
    held = [key for key, gpu in CARDS.items() if asked and (asked in key or asked == gpu.name.lower()
                                                            or key.split("-")[0] in asked.split())]
    return held or difflib.get_close_matches(asked, list(CARDS), n=2, cutoff=0.6)


def known_card(torch_name: str) -> str | None:
    """The key in :data:`CARDS` of a card torch (or nvidia-smi) names so, or ``None`` for a card the table lacks.

    >>> known_card("NVIDIA L4"), known_card("NVIDIA A100-PCIE-40GB")
    ('l4-24gb', None)
    """
    return next((key for key, gpu in CARDS.items() if gpu.name == torch_name), None)


def gpus() -> list[Gpu]:
    """Every CUDA device of this machine as torch reports it (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():  # not device_count(): NVML counts GPUs a too-old driver cannot run
        return []
    # bfloat16 in hardware from compute capability 8.0 (Ampere). Not torch.cuda.is_bf16_supported(): it also
    # answers yes where bfloat16 is only emulated (a T4, 7.5: torch/cuda/__init__.py, including_emulation=True)
    return [Gpu(p.name, p.total_memory / 2**30, (p.major, p.minor) >= (8, 0),
                CARDS[key].bandwidth_gbs if (key := known_card(p.name)) else None)
            for p in map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))]


def gpu_of(device: Any) -> Gpu | None:
    """The :class:`Gpu` a torch ``device`` is (``None`` for a CPU or another accelerator).

    >>> import torch
    >>> gpu_of(torch.device("cpu")) is None
    True
    """
    if getattr(device, "type", str(device)) != "cuda":
        return None
    found = gpus()
    index = getattr(device, "index", None) or 0
    return found[index] if index < len(found) else None


def first_gpu() -> Gpu | None:
    """The first CUDA device of this machine, or ``None`` without one."""
    return next(iter(gpus()), None)


@dataclass(frozen=True)
class Launch:
    """The processes of one run, as the launcher's environment variables say (one process without a launcher).

    Attributes:
        world_size: processes in the run (``WORLD_SIZE``).
        rank: this process's rank (``RANK``); rank 0 is the main process, the only one that writes files.
        local_rank: its rank on this machine (``LOCAL_RANK``): the GPU it uses.
        fsdp: ``accelerate launch`` was configured for FSDP (``ACCELERATE_USE_FSDP``).
        zero_stage: DeepSpeed's ZeRO stage (``ACCELERATE_DEEPSPEED_ZERO_STAGE``), or ``None`` without DeepSpeed.
    """

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    fsdp: bool = False
    zero_stage: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Launch:
        """This process's launch (default: read from ``os.environ``).

        >>> Launch.from_env({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}).is_main
        False
        >>> Launch.from_env({}).world_size
        1
        """
        env = os.environ if env is None else env
        stage = env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE")
        return cls(world_size=int(env.get("WORLD_SIZE", "1")), rank=int(env.get("RANK", "0")),
                   local_rank=int(env.get("LOCAL_RANK", "0")), zero_stage=int(stage) if stage else None,
                   fsdp=env.get("ACCELERATE_USE_FSDP", "false").lower() == "true")

    @property
    def is_main(self) -> bool:
        """Whether this is the main process (rank 0)."""
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        """Whether the weights are sharded over the processes (FSDP, or DeepSpeed ZeRO-3)."""
        return self.fsdp or self.zero_stage == 3


def placement(trains_all_weights: bool = False, launch: Launch | None = None,
              gpu: Gpu | None | bool = True) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments for this process: the dtype and where the weights go.

    The dtype: full fine-tuning (``trains_all_weights``) keeps float32 master weights and training
    autocasts (``GRPOConfig.bf16``/``fp16``), as TRL does by default: AdamW at the recipes' learning
    rates (1e-6 .. 5e-6) on bfloat16 weights rounds most updates away (8 bits of mantissa: an update
    below about 0.4% of a weight is lost). LoRA keeps its frozen base in 16 bits (peft holds the adapter
    in float32): bfloat16 where the card has it, float16 on one without (a T4 or V100 has no bfloat16).
    Without CUDA: float32 on the CPU.

    Where the weights go depends on the launch (accelerate 1.15, ``Accelerator.prepare_model``, refuses
    a model loaded with ``device_map="auto"`` in any distributed mode):

    - one process: ``"auto"`` (over this machine's GPUs);
    - several processes, each a full replica (DDP, ZeRO-1/2): ``{"": LOCAL_RANK}``, this process's GPU;
    - weights sharded (FSDP, ZeRO-3): ``None``: the engine places the shards. ZeRO-3 loads partitioned only
      when DeepSpeed's config is known before ``from_pretrained`` (transformers' ``HfDeepSpeedConfig``,
      which ``TrainingArguments`` sets from ``ACCELERATE_USE_DEEPSPEED``): :func:`zero3_loading` does that.

    Args:
        trains_all_weights: full fine-tuning (no adapter).
        launch: the processes (default: read from the launcher's environment, :meth:`Launch.from_env`).
        gpu: the card to place on; ``True`` (default) asks torch for this machine's first GPU; ``None`` or
            ``False``: no GPU.

    Returns:
        ``{"dtype": "float32" | "bfloat16" | "float16", "device_map": "auto" | {"": int} | None}``.

    >>> placement(trains_all_weights=True, gpu=None)
    {'dtype': 'float32', 'device_map': None}
    >>> placement(launch=Launch(world_size=2, rank=1, local_rank=1), gpu=Gpu("NVIDIA A100", 79.2, bf16=True))
    {'dtype': 'bfloat16', 'device_map': {'': 1}}
    >>> placement(gpu=Gpu("Tesla T4", 14.7, bf16=False))["dtype"]
    'float16'
    """
    if gpu is True:
        gpu = first_gpu()
    if not gpu:
        return {"dtype": "float32", "device_map": None}
    launch = Launch.from_env() if launch is None else launch
    dtype = "float32" if trains_all_weights else ("bfloat16" if gpu.bf16 else "float16")
    device_map = "auto" if launch.world_size == 1 else None if launch.sharded else {"": launch.local_rank}
    return {"dtype": dtype, "device_map": device_map}


def zero3_loading(launch: Launch | None = None) -> Any:
    """Make ``from_pretrained`` load partitioned under DeepSpeed ZeRO-3 (each process materialises only its shard).

    transformers reads ZeRO-3 from a live ``HfDeepSpeedConfig``; ``TrainingArguments`` creates it (through
    accelerate's ``DeepSpeedPlugin.set_deepspeed_weakref``) when ``ACCELERATE_USE_DEEPSPEED`` is set, but the
    trainer's arguments are built after the model loads. Call this before loading; keep the returned object
    alive while loading (transformers holds only a weak reference). Elsewhere it does nothing.

    Returns:
        the ``DeepSpeedPlugin`` (keep it), or ``None`` when this launch is not ZeRO-3.
    """
    launch = Launch.from_env() if launch is None else launch
    if launch.zero_stage != 3:
        return None
    from accelerate.utils import DeepSpeedPlugin

    plugin = DeepSpeedPlugin()
    plugin.set_deepspeed_weakref()
    return plugin
