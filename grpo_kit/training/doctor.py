"""The doctor (``python -m grpo_kit doctor``, notebook 01's check): the installed stack, live and on disk, the
NVIDIA driver, bfloat16 and free GPU memory, against what a recipe needs.

Importing this module imports no third-party package (the notebooks' install cell reads versions with it).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from grpo_kit.system.install import installed_version as _disk_version  # the version on disk (notebook.py's too)

__all__ = ["doctor", "format_doctor", "nvidia_driver"]

#: What the doctor reports, live (imported in this process) and on disk.
_REPORTED = ("torch", "transformers", "trl", "peft", "accelerate", "vllm", "unsloth", "unsloth_zoo")


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version as ``nvidia-smi`` reports it, or ``None`` without one (no GPU, no driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() if lines else None


def _live_version(package: str) -> str | None:
    module = sys.modules.get(package)
    return None if module is None else str(getattr(module, "__version__", "?"))


def doctor(preset: Any = None, driver: Any = nvidia_driver) -> dict[str, Any]:
    """What this machine runs against what ``preset`` needs: ``python -m grpo_kit doctor``.

    Args:
        preset: a preset name or :class:`grpo_kit.training.presets.Recipe` (``None``: the one that fits here).
        driver: returns the NVIDIA driver's version or ``None`` (default: :func:`nvidia_driver`).

    Returns:
        ``{"versions": {package: {"live", "disk"}}, "torch_cuda", "driver", "driver_needed", "gpu", "bf16",
        "free_gib", "preset", "needed_gib", "problems": [line, ...]}``. ``live`` is the version imported in this
        process (``None``: not imported); a live version that differs from the disk's means a restart is owed.
    """
    import torch

    from grpo_kit.policy.devices import first_gpu
    from grpo_kit.system.install import MIN_DRIVER, driver_problem
    from grpo_kit.training.presets import get_preset

    versions = {name: {"live": _live_version(name), "disk": _disk_version(name)} for name in _REPORTED}
    problems = [f"{name} {v['live']} is running and {v['disk']} is on disk: restart the runtime (kernel)"
                for name, v in versions.items() if v["live"] and v["disk"] and v["live"] != v["disk"]
                and v["live"].split("+")[0] != v["disk"].split("+")[0]]
    cuda, found, gpu = torch.version.cuda, driver(), first_gpu()
    free = torch.cuda.mem_get_info()[0] / 2**30 if gpu is not None else None
    config = get_preset(preset)
    if cuda is not None and found is not None:  # a CUDA build of torch and a driver: do they go together?
        if problem := driver_problem(found, ".".join(cuda.split(".")[:2]), f"torch {torch.__version__}"):
            problems.append(problem)
    needed = None
    if gpu is not None:
        from grpo_kit.training.plan import make_plan

        plan = make_plan(config)
        needed = plan.memory["needed"] if plan.memory else None
        problems += [line for line in plan.problems if line.startswith("FATAL")]
        if needed is not None and free is not None and needed > free:
            problems.append(f"{free:.1f} GiB of GPU memory are free and preset {config.name!r} needs about "
                            f"{needed:g}: free the GPU (another kernel or process holds it) or pick a smaller preset")
    elif not config.use_cpu:
        problems.append(f"preset {config.name!r} needs a CUDA GPU and torch sees none (torch {torch.__version__}, "
                        f"CUDA build {cuda or 'none'}, driver {found or 'none'})")
    return {"versions": versions, "torch_cuda": cuda, "driver": found,
            "driver_needed": MIN_DRIVER.get(cuda.split(".")[0]) if cuda else None,
            "gpu": None if gpu is None else gpu.name, "bf16": None if gpu is None else gpu.bf16,
            "free_gib": None if free is None else round(free, 2), "preset": config.name, "needed_gib": needed,
            "problems": problems}


def format_doctor(report: dict[str, Any]) -> str:
    """The report of :func:`doctor` as text."""
    lines = [f"{name}: {v['disk'] or 'not installed'}" + (f" (running: {v['live']})" if v["live"] else "")
             for name, v in report["versions"].items()]
    lines.append(f"torch CUDA build: {report['torch_cuda'] or 'none'}; NVIDIA driver: {report['driver'] or 'none'}"
                 + (f" (needs >= {report['driver_needed']})" if report["driver_needed"] else ""))
    lines.append(f"GPU: {report['gpu'] or 'none'}" + ("" if report["gpu"] is None else
                 f", bfloat16 {'yes' if report['bf16'] else 'no'}, {report['free_gib']:g} GiB free"))
    lines.append(f"preset {report['preset']}: needs about {report['needed_gib']} GiB per GPU (estimate)"
                 if report["needed_gib"] is not None else f"preset {report['preset']}")
    lines += ["problems:"] + [f"  {p}" for p in report["problems"]] if report["problems"] else ["problems: none"]
    return "\n".join(lines)
