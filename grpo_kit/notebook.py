"""What the notebooks' set-up cells do, one call each: install the stack, check the GPU, log to wandb.

Importing this module imports no third-party package, so the install cell can call it right after
installing the kit itself.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["gpu_check", "install_stack", "log_to_wandb"]

#: Where the notebooks install the kit from (a parameter of their install cell).
REPOSITORY = "https://github.com/grpo-kit/grpo_kit"
#: Packages whose presence means the GPU stack is installed.
_STACK = ("torch", "transformers", "trl", "peft", "datasets")


def install_stack(repository: str = REPOSITORY, branch: str = "main") -> bool:
    """Install the pinned GPU stack (``requirements.txt`` of ``repository``) unless it is installed already.

    Args:
        repository: the kit's repository (its ``requirements.txt`` is read from the branch).
        branch: the branch to read it from.

    Returns:
        Whether anything was installed.

    Raises:
        subprocess.CalledProcessError: pip failed (its output was shown).
    """
    if all(importlib.util.find_spec(name) is not None for name in _STACK):
        return False
    requirements = f"{repository.rstrip('/')}/raw/{branch}/requirements.txt"
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-r", requirements])
    return True


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
