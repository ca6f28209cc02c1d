"""What the notebooks' set-up cells do, one call each: install the stack, check the GPU, log to wandb; and the
doctor (``python -m grpo_kit doctor``): the installed stack, the driver and the GPU against a preset.

Importing this module imports no third-party package, so the install cell can call it right after
installing the kit itself.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["doctor", "format_doctor", "gpu_check", "install_stack", "log_to_wandb", "nvidia_driver"]

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


def _disk_version(package: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return None


def _live_version(package: str) -> str | None:
    module = sys.modules.get(package)
    return None if module is None else str(getattr(module, "__version__", "?"))


def install_stack(gpu: bool = True, driver: Any = nvidia_driver) -> bool:
    """Install what the notebooks need beside the runtime's torch, keeping that torch (the notebooks' first cell).

    With ``gpu`` the plan of :func:`grpo_kit.system.install.install_plan` for this runtime's torch and driver is
    shown first; where no GPU route exists it stops in one line (driver found, what it needs, what to do) before
    anything downloads. The plan's packages are installed by pip with torch held at the runtime's version (a
    constraint: pip refuses rather than replaces it), then every version is read back from what is installed. The
    kit's other packages (pandas, matplotlib, ...) are installed only where missing, so a runtime's own stay.
    Without ``gpu`` (notebook 01: a tokenizer and the data) only transformers, datasets and the kit's other
    packages are installed where missing, on any runtime; so is a runtime without an NVIDIA driver, where the
    notebooks run the kit's tiny policy on the CPU.

    Afterwards it says whether the runtime must be restarted: a package imported in this kernel stays the old one
    until then (unslothai/notebooks #337 shows what replacing packages under a live kernel breaks).

    Args:
        gpu: install the GPU stack (Unsloth, TRL, vLLM where one fits, ...); ``False``: only what runs on a CPU.
        driver: returns the NVIDIA driver's version or ``None`` (default: :func:`nvidia_driver`; tests fake it).

    Returns:
        Whether anything was installed.

    Raises:
        RuntimeError: no GPU route for this runtime (one line, from the plan's first problem); a version read back
            after installing differs from the plan's (the packages named).
        subprocess.CalledProcessError: pip failed (its output was shown).
    """
    from grpo_kit.system.install import install_plan, install_table

    table = install_table()
    kit = [requirement for requirement in table["kit"] if _disk_version(requirement.split("==")[0]) is None]
    torch = _disk_version("torch")
    found = driver() if gpu else None
    if gpu and found is None:
        print("No NVIDIA GPU here: installing what runs on a CPU (the notebooks then use preset cpu-tiny, the kit's "
              "tiny policy; on Colab a GPU is Runtime > Change runtime type > GPU).")
        gpu = False
    if gpu:
        plan = install_plan(torch, found)
        if plan.fatal:
            raise RuntimeError(plan.problems[0])
        print(plan.describe())
        wanted, index = plan.install, plan.extra_index_url
    else:
        index = None
        row = next(r for r in table["rows"] if r["torch_minor"] == table["pinned"])
        wanted = [f"{name}=={row['packages'][name]}" for name in ("transformers", "datasets")]
    missing = [r for r in wanted if _disk_version(r.split("==")[0]) != r.split("==")[1]] + kit
    if not missing:
        print("Everything the notebook needs is installed; nothing to do.")
        return False
    before = {r.split("==")[0]: _live_version(_module_of(r)) for r in missing}
    command = [sys.executable, "-m", "pip", "install", "-q", *missing] + (["--extra-index-url", index] if index else [])
    if torch is not None:  # keep the runtime's torch: pip fails instead of replacing it
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
            constraints.write(f"torch=={torch}\n")
        command += ["-c", constraints.name]
    subprocess.check_call(command)
    wrong = [f"{r.split('==')[0]} {_disk_version(r.split('==')[0])} (wanted {r.split('==')[1]})"
             for r in wanted if _disk_version(r.split("==")[0]) != r.split("==")[1]]
    if torch is not None and _disk_version("torch") != torch:
        wrong.append(f"torch {_disk_version('torch')} (the runtime's {torch} was to stay)")
    if wrong:
        raise RuntimeError(f"after installing, {', '.join(wrong)}: another package changed them; install these "
                           "versions by hand (pip install NAME==VERSION) or start from a fresh runtime")
    stale = [name for name, live in before.items() if live is not None and live != _disk_version(name)]
    if stale:
        print(f"RESTART the runtime now (Colab: Runtime > Restart session), then run the notebook from the top: this "
              f"kernel still runs the old {', '.join(stale)}.")
    else:
        print("Installed; no restart needed.")
    return True


def _module_of(requirement: str) -> str:
    """The module a ``name==version`` requirement installs (``unsloth_zoo``, ``sklearn`` for scikit-learn)."""
    name = requirement.split("==")[0]
    return {"scikit-learn": "sklearn", "math-verify": "math_verify"}.get(name, name.replace("-", "_"))


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
    from grpo_kit.system.install import MIN_DRIVER, driver_problem
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
        problem = driver_problem(found, ".".join(cuda.split(".")[:2]), f"torch {torch.__version__}")
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
