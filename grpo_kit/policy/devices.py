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

__all__ = ["Gpu", "Launch", "cuda_available", "first_gpu", "placement", "require_cuda", "unsloth_problem"]


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (imports torch, not transformers: safe before Unsloth)."""
    import torch

    return torch.cuda.is_available()


def require_cuda(what: str) -> None:
    """Raise a clear error when ``what`` (an Unsloth or vLLM feature) is asked for without a CUDA GPU.

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
        return ("the kit's tiny offline policy loads through transformers, never Unsloth: set use_unsloth=False, "
                "or give --model a model for Unsloth")
    if not cuda_available() and os.environ.get("UNSLOTH_ALLOW_CPU") != "1":
        return ("use_unsloth needs an NVIDIA GPU with CUDA, and none is visible here: on a CPU use preset "
                "'cpu-tiny' or --set use_unsloth=false (transformers + peft)")
    return None


@dataclass(frozen=True)
class Gpu:
    """One CUDA device as torch reports it: its name, its memory in GiB and whether it computes in bfloat16."""

    name: str
    memory_gib: float
    bf16: bool


def first_gpu() -> Gpu | None:
    """The first CUDA device of this machine, or ``None`` without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return Gpu(props.name, props.total_memory / 2**30, torch.cuda.is_bf16_supported())


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
                   local_rank=int(env.get("LOCAL_RANK", "0")),
                   fsdp=env.get("ACCELERATE_USE_FSDP", "false").lower() == "true",
                   zero_stage=int(stage) if stage else None)

    @property
    def is_main(self) -> bool:
        """Whether this is the main process (rank 0)."""
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        """Whether the weights are sharded over the processes (FSDP, or DeepSpeed ZeRO-3)."""
        return self.fsdp or self.zero_stage == 3


def placement(trains_all_weights: bool = False) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments for this machine.

    On CUDA the weights go over the GPUs (``device_map="auto"``) in bfloat16, except for full
    fine-tuning (``trains_all_weights``): there they stay float32 master weights and training
    autocasts to bfloat16 (``GRPOConfig.bf16``), as TRL does by default. AdamW at the recipes'
    learning rates (1e-6 .. 5e-6) on bfloat16 weights rounds most updates away (8 bits of mantissa:
    an update below about 0.4% of a weight is lost). LoRA keeps its frozen base in bfloat16 (peft
    holds the adapter in float32). Without CUDA: float32 on the CPU.

    >>> placement(trains_all_weights=True)["dtype"]
    'float32'
    """
    if cuda_available():
        return {"dtype": "float32" if trains_all_weights else "bfloat16", "device_map": "auto"}
    return {"dtype": "float32", "device_map": None}
