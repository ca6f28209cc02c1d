"""Experiment tracking with Weights & Biases: set up so that it never prompts and never hangs a run.

wandb is optional. Without an API key runs are logged offline (``wandb sync`` uploads them later);
a mode the user chose (``WANDB_MODE`` or ``mode=``) is kept as is; an online run on a machine that
cannot reach the wandb server falls back to offline within a few seconds, saying so, instead of
blocking for wandb's own 90-second timeout and then raising.
"""

from __future__ import annotations

import logging
import os

from grpo_kit.system.hub import unreachable

__all__ = ["WANDB_MODES", "setup_wandb"]

log = logging.getLogger(__name__)

WANDB_MODES = ("online", "offline", "disabled")
_written: str | None = None  # the WANDB_MODE this module set (not the user's choice)


def setup_wandb(project: str | None, mode: str | None = None, timeout_s: float = 3.0) -> str:
    """Prepare Weights & Biases logging without ever prompting for a login or blocking on the network.

    Args:
        project: the wandb project; ``None`` turns wandb off.
        mode: ``"online"``, ``"offline"`` or ``"disabled"``. Default: the ``WANDB_MODE`` environment
            variable when set (it is kept as is), else online when ``WANDB_API_KEY`` is set, else offline.
        timeout_s: how long an online run may take to reach the wandb server (``WANDB_BASE_URL``,
            default ``https://api.wandb.ai``) before it is logged offline instead.

    Returns:
        The value for the preset's ``report_to``: ``"wandb"``, or ``"none"`` (no project, or disabled).

    Raises:
        ValueError: an unknown mode (before anything is set).
    """
    global _written
    from_env = os.environ.get("WANDB_MODE")
    chosen = mode or (from_env if from_env != _written else None)
    if chosen is not None and chosen not in WANDB_MODES:
        raise ValueError(f"wandb mode {chosen!r} is unknown: choose from {', '.join(WANDB_MODES)}")
    if project is None or chosen == "disabled":
        return "none"
    if chosen is None:
        chosen = "online" if os.environ.get("WANDB_API_KEY") else "offline"
    if chosen == "online":
        server = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
        if unreachable(server, timeout_s) is not None:
            log.warning(f"wandb: {server} is not reachable within {timeout_s:g} s; logging offline instead "
                        "(upload later with `wandb sync`)")
            chosen = "offline"
    os.environ["WANDB_PROJECT"] = project
    os.environ["WANDB_MODE"] = _written = chosen
    os.environ.setdefault("WANDB_SILENT", "true")
    return "wandb"
