"""What the policy generated while it trained: each kept step's groups (prompt, completions, each reward function's
value, the weighted total, the advantage) as one Parquet file per step in the run folder.

TRL writes them itself: with ``log_completions=True`` its ``GRPOTrainer.log`` (trl 1.15.0 and 1.16.0,
``trl/trainer/grpo_trainer.py``) writes ``<output_dir>/completions/completions_<step:05d>.parquet`` at every logging
step, one row per completion of the last generation batch (``prompt``, ``completion``, one column per reward
function, ``advantage``), with pandas straight into the file, all of the batch, never pruned. :func:`keep_groups`
takes each such file once TRL has closed it, keeps at most ``groups`` groups of every ``every``-th step, adds the
group number, the weighted total and the group's spread, and writes ``groups/step-<step>.parquet`` whole (a
temporary file renamed over it), then deletes TRL's copy. A run killed and resumed from a checkpoint drops the kept
steps after that checkpoint (they are trained again), as it drops their held-out evaluations.

Rows of one group are consecutive (TRL computes advantages over ``rewards.view(-1, num_generations)`` of the
gathered batch), so row ``i`` belongs to group ``i // num_generations``.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.system.files import replaced

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["GROUP_COLUMNS", "GroupsKept", "groups_frame", "keep_groups", "kept_steps", "read_groups",
           "trl_completions_settings"]

log = logging.getLogger(__name__)

#: The columns of a kept step besides one ``reward/<name>`` per reward function.
GROUP_COLUMNS = ("step", "group", "prompt", "completion", "total", "advantage", "group_std")
_TRL_FILE = re.compile(r"completions_(\d+)\.parquet")
_KEPT_FILE = re.compile(r"step-(\d+)\.parquet")


@dataclass(frozen=True)
class GroupsKept:
    """Which training groups a run keeps: every ``every``-th logged step, at most ``groups`` groups of it.

    The default keeps the blog post's 250-step a100 run (2 groups of 8 completions a step, at most 256 tokens each)
    whole: 4,000 completions, about 5 MB of Parquet (``benchmarks/viewer_scale.py`` measures it), far under 50 MB;
    16 groups a step of 8 such completions for 250 steps take about 18 MB.

    Raises:
        ValueError: ``every`` below 1 or ``groups`` below 0 (0 keeps nothing).
    """

    every: int = 1
    groups: int = 16

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or isinstance(self.every, bool) or self.every < 1:
            raise ValueError(f"groups are kept every N steps: N must be a whole number >= 1, got {self.every!r}")
        if not isinstance(self.groups, int) or isinstance(self.groups, bool) or self.groups < 0:
            raise ValueError(f"groups kept a step must be a whole number >= 0 (0 keeps none), got {self.groups!r}")

    @property
    def on(self) -> bool:
        """Whether any group is kept."""
        return self.groups > 0


def trl_completions_settings() -> dict[str, Any]:
    """The ``GRPOConfig`` fields that make TRL write each logging step's completions as Parquet, without printing
    them (``num_completions_to_print=0`` returns before ``rich`` draws a table: ``trl/trainer/utils.py``,
    ``print_prompt_completions_sample``)."""
    return {"log_completions": True, "num_completions_to_print": 0}


def _text(value: Any) -> str:
    """A prompt or completion as text: the last message's content for a conversation (TRL's chat format)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) for m in value):
        content = value[-1].get("content", "")
        return content if isinstance(content, str) else json.dumps(content, default=str)
    return value if isinstance(value, str) else json.dumps(value, default=str)


def groups_frame(raw: pd.DataFrame, step: int, rewards: Sequence[str], weights: Sequence[float],
                 num_generations: int, groups: int) -> pd.DataFrame:
    """One logged step of TRL's completions (``raw``) as the kept table: the first ``groups`` groups.

    Args:
        raw: TRL's ``completions_<step>.parquet``: ``prompt``, ``completion``, one column per reward function
            (named as the function), ``advantage``.
        step: the optimiser step.
        rewards: the reward functions' names, in ``GRPOConfig.reward_weights``' order.
        weights: their weights.
        num_generations: completions per group.
        groups: the most groups kept.

    Returns:
        A ``pandas.DataFrame`` with :data:`GROUP_COLUMNS` and ``reward/<name>`` per reward function (NaN where the
        function could not judge). ``total`` is TRL's weighted sum (NaN values skipped, as ``nansum``);
        ``group_std`` the population standard deviation of ``total`` within the group (0: the group taught
        nothing).
    """
    import numpy as np
    import pandas as pd

    rows = raw.iloc[: groups * num_generations]
    out = pd.DataFrame({"step": np.full(len(rows), step, dtype="int32"),
                        "group": (np.arange(len(rows)) // num_generations).astype("int32"),
                        "prompt": [_text(p) for p in rows["prompt"]],
                        "completion": [_text(c) for c in rows["completion"]]})
    total = np.zeros(len(rows))
    for name, weight in zip(rewards, weights):
        values = pd.to_numeric(rows[name], errors="coerce").to_numpy(dtype=float) if name in rows else \
            np.full(len(rows), np.nan)
        out[f"reward/{name}"] = values
        total += np.nan_to_num(values * weight)
    out["total"] = total
    out["advantage"] = pd.to_numeric(rows["advantage"], errors="coerce").to_numpy(dtype=float) \
        if "advantage" in rows else np.nan
    out["group_std"] = out.groupby("group")["total"].transform(lambda t: float(np.std(t)))
    return out


# Why the kit keeps its own file per step rather than the viewer reading TRL's: TRL writes every logging step's whole
# generation batch, never pruned (a run folder would grow with the run and its batch size), with pandas straight into
# the final name (a kill can tear it), and without the group size and reward weights (its columns mix reward functions
# with their extra logs), which the group, total and spread need. Its file is read once here and deleted.
def keep_groups(folder: str | Path, kept: GroupsKept, rewards: Sequence[str], weights: Sequence[float],
                num_generations: int, is_main_process: bool = True) -> Any:
    """A ``TrainerCallback`` that keeps TRL's logged completions as ``<folder>/step-<step>.parquet`` (module
    docstring). The trainer's ``GRPOConfig`` needs :func:`trl_completions_settings`.

    Args:
        folder: where the kept steps go (the run folder's ``groups/``).
        kept: which steps and how many groups (:class:`GroupsKept`).
        rewards: the reward functions' names, in the order of ``GRPOConfig.reward_weights``.
        weights: their weights.
        num_generations: completions per group (``GRPOConfig.num_generations``).
        is_main_process: only the main process writes (TRL writes its files there only); on the others the callback
            does nothing.

    Returns:
        a ``transformers.TrainerCallback``: at the start of training (after a resume loaded its checkpoint) it drops
        kept steps after that step; after each step, at each save and at the end it collects TRL's closed files.
    """
    import pandas as pd
    from transformers import TrainerCallback

    folder = Path(folder)

    def collect(output_dir: str, before: float = math.inf) -> None:
        """Turn TRL's files of steps before ``before`` into kept steps, deleting TRL's copy."""
        for step, path in _numbered(Path(output_dir) / "completions", _TRL_FILE):
            if step >= before:
                continue
            if kept.on and step % kept.every == 0:
                try:
                    raw = pd.read_parquet(path)
                except (OSError, ValueError) as e:  # a file TRL was writing when a run was killed
                    log.warning(f"skipped the completions TRL logged at step {step} ({path}: {e})")
                else:
                    frame = groups_frame(raw, step, rewards, weights, num_generations, kept.groups)
                    with replaced(folder / f"step-{step:06d}.parquet") as tmp:
                        frame.to_parquet(tmp, index=False)
            path.unlink(missing_ok=True)

    class KeepGroups(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            # a resumed run trains the steps after its checkpoint again: what a killed run kept or TRL logged of them
            # is dropped; what TRL logged up to the checkpoint and was not collected yet is kept
            for step, path in [*kept_steps(folder), *_numbered(Path(args.output_dir) / "completions", _TRL_FILE)]:
                if step > state.global_step:
                    path.unlink()
            collect(args.output_dir)

        def on_step_end(self, args, state, control, **kwargs):
            collect(args.output_dir, before=state.global_step)  # TRL writes this step's file after, when it logs

        def on_save(self, args, state, control, **kwargs):
            collect(args.output_dir)  # a checkpoint's step is logged before it is saved; at the end all of them are

        on_train_end = on_save

    return KeepGroups() if is_main_process else TrainerCallback()


def kept_steps(folder: str | Path) -> list[tuple[int, Path]]:
    """The kept steps in ``folder`` (a run folder's ``groups/``), as ``(step, path)``, oldest first."""
    return _numbered(Path(folder), _KEPT_FILE)


def _numbered(folder: Path, name: re.Pattern[str]) -> list[tuple[int, Path]]:
    """The files of ``folder`` whose whole name matches ``name``, as ``(its number, path)``, lowest first."""
    return sorted((int(m.group(1)), p) for p in folder.glob("*.parquet") if (m := name.fullmatch(p.name)))


def read_groups(folder: str | Path, steps: Sequence[int] | None = None, damaged: list[str] | None = None
                ) -> pd.DataFrame:
    """The training groups kept in ``folder`` (a run folder's ``groups/``), one row per completion.

    Args:
        folder: the folder of ``step-<step>.parquet`` files (:func:`keep_groups`).
        steps: only these steps (default all).
        damaged: where given, a damaged step's file (torn by a kill, edited) is left out and its message appended
            here (the viewer shows the other steps) instead of raised.

    Returns:
        A ``pandas.DataFrame`` with :data:`GROUP_COLUMNS` and ``reward/<name>`` per reward function, ordered by
        step; empty (those columns only) when nothing was kept.

    Raises:
        ValueError: a kept file is damaged (the message names it), unless ``damaged`` collects it.
    """
    import pandas as pd

    frames = []
    for step, path in kept_steps(folder):
        if steps is not None and step not in steps:
            continue
        try:
            frames.append(pd.read_parquet(path))
        except (OSError, ValueError) as e:
            message = f"{path} is damaged ({e}): delete it (the other steps stay readable)"
            if damaged is None:
                raise ValueError(message) from None
            damaged.append(message)
    if not frames:
        return pd.DataFrame(columns=list(GROUP_COLUMNS))
    return pd.concat(frames, ignore_index=True)

