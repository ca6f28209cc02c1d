"""What the notebooks' set-up cells do, one call each: install the stack, check the GPU, log to wandb; and the
doctor (``python -m grpo_kit doctor``): the installed stack, the driver and the GPU against a preset.

Importing this module imports no third-party package, so the install cell can call it right after
installing the kit itself.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["MIN_DRIVER", "REPOSITORY", "doctor", "driver_problem", "format_doctor", "gpu_check", "install_stack",
           "log_to_wandb", "nvidia_driver", "torch_cuda"]

#: Where the notebooks install the kit from by default (the ``repository`` parameter of their first cell).
REPOSITORY = "https://github.com/grpo-kit/grpo_kit"
#: Packages whose presence means the GPU stack is installed.
_STACK = ("torch", "transformers", "trl", "peft", "datasets")
#: The torch that requirements.txt pins, and the CUDA its PyPI wheel is built for (PyPI's torch 2.13.0 is a
#: CUDA 13.0 build; the PyTorch index keeps CUDA 12.x builds of it).
TORCH_PIN, TORCH_CUDA = "2.13.0", "13.0"
#: The oldest Linux driver each CUDA release runs on (NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit and
#: Corresponding Driver Versions", the GA release of each).
MIN_DRIVER = {"13.0": "580.65.06", "12.9": "575.51.03", "12.8": "570.26", "12.6": "560.28.03", "12.4": "550.54.14"}
#: What the doctor reports, live (imported in this process) and on disk.
_REPORTED = ("torch", "transformers", "trl", "peft", "accelerate", "vllm", "unsloth", "unsloth_zoo")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version as ``nvidia-smi`` reports it, or ``None`` without one (no GPU, no driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() if lines else None


def driver_problem(driver: str | None, cuda: str = TORCH_CUDA) -> str | None:
    """One line saying why a torch built for ``cuda`` cannot use this driver (``None``: it can).

    >>> driver_problem("580.82.07") is None
    True
    >>> driver_problem("550.54.15").split(":")[0]
    'NVIDIA driver 550.54.15 found, torch 2.13.0 (CUDA 13.0) needs >= 580.65.06'
    """
    needed = MIN_DRIVER.get(cuda)
    if driver is None:
        return (f"no NVIDIA driver found (nvidia-smi): the pinned GPU stack (torch {TORCH_PIN}, CUDA {cuda}) needs a "
                "GPU; on Colab choose Runtime > Change runtime type > GPU, or run the notebooks on a CPU with preset "
                "cpu-tiny (pip install -r requirements-cpu.txt)")
    if needed is not None and _version_tuple(driver) < _version_tuple(needed):
        return (f"NVIDIA driver {driver} found, torch {TORCH_PIN} (CUDA {cuda}) needs >= {needed}: it would run on "
                "the CPU only. Use a runtime with a newer driver, or install torch's CUDA 12.6 build first "
                f"(pip install torch=={TORCH_PIN} --index-url https://download.pytorch.org/whl/cu126, driver >= "
                f"{MIN_DRIVER['12.6']}) and then this cell again")
    return None


def torch_cuda(installed: str | None) -> str:
    """The CUDA the pinned torch will run on: that of the torch installed, when it is the pinned version (a CUDA
    12.x build from the PyTorch index, ``2.13.0+cu126``, stays: pip takes it for ``torch==2.13.0``), else that of
    PyPI's wheel (:data:`TORCH_CUDA`).

    >>> torch_cuda("2.13.0+cu126"), torch_cuda("2.13.0"), torch_cuda("2.11.0+cu128"), torch_cuda(None)
    ('12.6', '13.0', '13.0', '13.0')
    """
    import re

    if installed is None or installed.split("+")[0] != TORCH_PIN:
        return TORCH_CUDA
    match = re.search(r"\+cu(\d+)(\d)$", installed)
    return f"{match.group(1)}.{match.group(2)}" if match else TORCH_CUDA


def _reachable(url: str, timeout_s: float = 15.0) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _disk_version(package: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return None


def _live_version(package: str) -> str | None:
    module = sys.modules.get(package)
    return None if module is None else str(getattr(module, "__version__", "?"))


def install_stack(repository: str = REPOSITORY, branch: str = "main", driver: Any = nvidia_driver) -> bool:
    """Install the pinned GPU stack (``requirements.txt`` of ``repository``) unless it is installed already.

    Before downloading anything it checks that ``requirements.txt`` can be reached and that the NVIDIA driver
    runs the CUDA of the torch it pins (:func:`driver_problem`, :func:`torch_cuda`: PyPI's CUDA 13.0 build, or a
    CUDA 12.x build of the pinned version installed first); after installing, it says whether the runtime
    must be restarted: a torch imported in this kernel stays the old one until then (unslothai/notebooks #337
    shows what replacing torch under a live kernel breaks).

    Args:
        repository: the kit's repository (its ``requirements.txt`` is read from the branch).
        branch: the branch to read it from.
        driver: returns the driver's version or ``None`` (default: :func:`nvidia_driver`; tests fake it).

    Returns:
        Whether anything was installed.

    Raises:
        RuntimeError: ``requirements.txt`` cannot be reached, or the driver is missing or too old (one line:
            the driver found, the driver needed, what to do).
        subprocess.CalledProcessError: pip failed (its output was shown).
    """
    if all(importlib.util.find_spec(name) is not None for name in _STACK):
        return False
    requirements = f"{repository.rstrip('/')}/raw/{branch}/requirements.txt"
    if not _reachable(requirements):
        raise RuntimeError(f"cannot read {requirements}: set `repository` in the notebook's parameters cell to the "
                           "kit's git repository (your fork or clone's URL) and `branch` to one that exists")
    problem = driver_problem(driver(), torch_cuda(_disk_version("torch")))
    if problem:
        raise RuntimeError(problem)
    live = _live_version("torch")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-r", requirements])
    disk = _disk_version("torch")
    if live is not None and disk is not None and live.split("+")[0] != disk.split("+")[0]:
        print(f"RESTART the runtime now (Colab: Runtime > Restart session), then run the notebook from the top: this "
              f"kernel still runs torch {live}, and torch {disk} is now installed.")
    else:
        print("The GPU stack is installed; no restart needed.")
    return True


def doctor(preset: Any = None, driver: Any = nvidia_driver) -> dict[str, Any]:
    """What this machine runs against what ``preset`` needs: ``python -m grpo_kit doctor``.

    Args:
        preset: a preset name or :class:`grpo_kit.training.presets.Preset` (``None``: the one that fits here).
        driver: returns the NVIDIA driver's version or ``None`` (default: :func:`nvidia_driver`).

    Returns:
        ``{"versions": {package: {"live", "disk"}}, "torch_cuda", "driver", "driver_needed", "gpu", "bf16",
        "free_gib", "preset", "needed_gib", "problems": [line, ...]}``. ``live`` is the version imported in this
        process (``None``: not imported); a live version that differs from the disk's means a restart is owed.
    """
    import torch

    from grpo_kit.policy.devices import first_gpu
    from grpo_kit.training.presets import get_preset

    versions = {name: {"live": _live_version(name), "disk": _disk_version(name)} for name in _REPORTED}
    problems = [f"{name} {v['live']} is running and {v['disk']} is on disk: restart the runtime (kernel)"
                for name, v in versions.items() if v["live"] and v["disk"] and v["live"] != v["disk"]
                and v["live"].split("+")[0] != v["disk"].split("+")[0]]
    cuda = torch.version.cuda
    found = driver()
    gpu = first_gpu()
    free = torch.cuda.mem_get_info()[0] / 2**30 if gpu is not None else None
    config = get_preset(preset)
    if cuda is not None and found is not None:  # a CUDA build of torch and a driver: do they go together?
        problem = driver_problem(found, ".".join(cuda.split(".")[:2]))
        if problem:
            problems.append(problem)
    needed = None
    if gpu is not None:
        from grpo_kit.training.plan import make_plan

        plan = make_plan(config)
        needed = plan["memory"]["needed"] if plan["memory"] else None
        problems += [line for line in plan["problems"] if line.startswith("FATAL")]
        if needed is not None and free is not None and needed > free:
            problems.append(f"{free:.1f} GiB of GPU memory are free and preset {config.name!r} needs about "
                            f"{needed:g}: free the GPU (another kernel or process holds it) or pick a smaller preset")
    elif not config.use_cpu:
        problems.append(f"preset {config.name!r} needs a CUDA GPU and torch sees none (torch {torch.__version__}, "
                        f"CUDA build {cuda or 'none'}, driver {found or 'none'})")
    return {"versions": versions, "torch_cuda": cuda, "driver": found,
            "driver_needed": MIN_DRIVER.get(".".join(cuda.split(".")[:2])) if cuda else None,
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


def gpu_check(preset: Any = None, preset_overrides: Mapping[str, Any] | None = None) -> Any:
    """The notebooks' GPU check: say what this machine has and which preset fits it, resolve the preset, show
    the kit's log, and import the GPU stack in the order it needs (Unsloth first on its routes).

    Args:
        preset: a preset name or :class:`grpo_kit.training.presets.Preset`; ``None``: the one that fits this
            machine (T4: ``colab-t4``, A100/H100: ``a100``, no GPU: ``cpu-tiny``).
        preset_overrides: preset fields to replace.

    Returns:
        The :class:`grpo_kit.training.presets.Preset`.

    Raises:
        ValueError: an unknown preset or field (before any model loads).
        RuntimeError: transformers, TRL or peft were imported before Unsloth on an Unsloth route (restart the
            kernel and run the cells in order).
    """
    from grpo_kit.policy.devices import first_gpu
    from grpo_kit.policy.routes import prepare_stack
    from grpo_kit.system.logs import configure_logging
    from grpo_kit.training.presets import device_preset, get_preset

    configure_logging()
    config = get_preset(preset, **dict(preset_overrides or {}))
    gpu = first_gpu()
    if gpu is None:
        print("No CUDA GPU: everything runs on the CPU. The preset that fits: 'cpu-tiny' (the kit's tiny offline "
              "policy); the GPU presets need a CUDA GPU (on Colab: Runtime > Change runtime type > GPU).")
    else:
        why = "bfloat16 available" if gpu.bf16 else "no bfloat16 on this card"
        print(f"CUDA GPU: {gpu.name}, {gpu.memory_gib:.0f} GiB ({why}). The preset that fits: '{device_preset()}' "
              "(used when the parameters cell leaves preset = None).")
    prepare_stack(config.loading)
    print(f"preset: {config.name} ({config.model or 'the kit tiny policy'})")
    return config


def log_to_wandb(project: str | None, mode: str | None, name: str, job_type: str,
                 tables: Mapping[str, Any]) -> bool:
    """Log data frames to a wandb run of their own, if a project is set (never prompting, never blocking:
    :func:`grpo_kit.training.tracking.setup_wandb`).

    Args:
        project: the wandb project; ``None`` logs nothing.
        mode: ``"online"``, ``"offline"``, ``"disabled"`` or ``None`` (see ``setup_wandb``).
        name, job_type: the wandb run's name and job type.
        tables: ``{key: pandas.DataFrame}``, each logged as a ``wandb.Table`` (columns that mix types are
            logged as text).

    Returns:
        Whether anything was logged.
    """
    from grpo_kit.training.tracking import setup_wandb

    if setup_wandb(project, mode) != "wandb":
        return False
    import wandb

    wandb.init(project=project, name=name, job_type=job_type)
    for key, frame in tables.items():
        mixed = [c for c in frame.columns if frame[c].dtype == object]
        wandb.log({key: wandb.Table(dataframe=frame.astype({c: str for c in mixed}))})
    wandb.finish()
    return True
