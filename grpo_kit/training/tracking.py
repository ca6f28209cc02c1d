"""Experiment tracking with Weights & Biases: set up so that it never prompts and never hangs a run.

wandb is optional. Without an API key runs are logged offline (``wandb sync`` uploads them later, and the line
:func:`finish_wandb` logs when training ends names the folder and the command);
a mode the user chose (``WANDB_MODE`` or ``mode=``) is kept as is; an online run on a machine that
cannot reach the wandb server falls back to offline within a few seconds, saying so, instead of
blocking for wandb's own 90-second timeout and then raising.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys

from grpo_kit.system.hub import unreachable

__all__ = ["WANDB_MODES", "finish_wandb", "setup_wandb", "wandb_run_id"]

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


def wandb_run_id() -> str | None:
    """The id of the wandb run open in this process (``None``: none, or wandb not imported), read without importing
    wandb."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    return None if run is None else str(run.id)


def finish_wandb(kept: str | None = None) -> str | None:
    """Finish the wandb run training logged to, if there is one, and say where it went.

    transformers' ``WandbCallback`` starts the run and never finishes it, leaving that to wandb's exit hook, which
    (wandb 0.31) loses the connection to its service first: the run's ``debug.log`` then ends in an uncaught
    ``HandleAbandonedError``. Finished here, once training is over, the run is closed whole.

    Args:
        kept: the id of a run that was open before training (:func:`wandb_run_id`): one the user started, which
            training logged into and which stays open for them.

    Returns:
        One line for the log: an offline run's folder and the ``wandb sync`` command that uploads it, or an online
        run's address; ``None`` when no run training opened is open (wandb not imported, or not asked for).
    """
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None or str(run.id) == kept:
        return None
    folder, offline, url = run.settings.sync_dir, run.settings.mode == "offline", run.url
    run.finish()
    if offline:
        return (f"wandb: the run was logged offline into {folder} (nothing was sent): upload it with "
                f"`wandb sync {shlex.quote(str(folder))}`")
    return f"wandb: the run is at {url}" if url else None
