"""TRL 1.15.0's per-token log-probabilities in PyTorch, for running its GRPO trainer on a CPU.

TRL 1.15.0 computes the policy's per-token log-probabilities (and entropy) only through its Triton kernel
(``trl.trainer.utils._ChunkedLogProbFunction``, from ``trl/kernels``, used by the fused LM head that
``GRPOTrainer`` always installs); Triton has no CPU driver, so on a CPU every step fails with "0 active drivers".
trl 1.16 falls back to PyTorch there. :class:`TorchLogProbs` is that arithmetic in PyTorch, swapped in by the
stack tests and by the GPU proof's CPU rehearsal (``benchmarks/gpu_proof.py --miniature``); on a GPU the kernel
itself runs and nothing here is used.
"""

from __future__ import annotations

from typing import Any


class TorchLogProbs:
    """Same arguments and outputs as ``trl.kernels.ChunkedLogProbFunction.apply``: logits are
    ``hidden @ weight.T + bias``, times ``logit_scale``, soft-capped, divided by ``temperature``; returns the target
    tokens' log-probabilities ``[N]``, the entropy ``[N]`` when ``outputs`` asks for it, and ``None`` for the rest."""

    @staticmethod
    def apply(hidden: Any, weight: Any, bias: Any, targets: Any, temperature: float, chunk_size: int,
              softcap: float | None = None, logit_scale: float = 1.0, outputs: Any = ()) -> tuple[Any, ...]:
        import torch

        logits = hidden.float() @ weight.float().t()
        if bias is not None:
            logits = logits + bias.float()
        logits = logits * logit_scale
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        logp = (logits / temperature).log_softmax(-1)
        entropy = -(logp.exp() * logp).sum(-1) if "entropy" in outputs else None
        return logp.gather(-1, targets[:, None]).squeeze(-1), entropy, None, None, None


def swap_in_without_gpu() -> str | None:
    """Put :class:`TorchLogProbs` in place of TRL's Triton kernel when there is no CUDA GPU and the installed TRL
    has the kernel (1.15.0). Returns what was replaced and why, or ``None`` when nothing was."""
    import torch

    if torch.cuda.is_available():
        return None
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return None
    if getattr(trl_utils, "_ChunkedLogProbFunction", None) is None:
        return None
    trl_utils._ChunkedLogProbFunction = TorchLogProbs
    return ("trl.trainer.utils._ChunkedLogProbFunction (TRL's Triton log-probability kernel: Triton has no CPU "
            "driver) by its arithmetic in PyTorch (benchmarks/triton_shim.py)")
