"""``python -m grpo_kit reward-check RUN_DIR`` and notebook 02's last cell: the reward check of a reward set on a run
folder's sampled baseline (:mod:`grpo_kit.evaluation.reward_check`), before any training. Nothing loads but the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.reward_check import RewardCheck, check_rewards
from grpo_kit.evaluation.scoring import EvalResult, with_rewards
from grpo_kit.runs.folder import RunFolder
from grpo_kit.runs.measure import plan_from_settings
from grpo_kit.runs.spec import probe_rewards
from grpo_kit.tasks import RewardSet

__all__ = ["reward_check"]

_BASELINE = "02_baseline_eval (or python -m grpo_kit eval --before --samples 8)"


def reward_check(run_dir: str | Path | RunFolder,
                 rewards: RewardSet | Sequence[Any] | Mapping[Any, float] | None = None,
                 trust_remote_code: bool = False) -> RewardCheck:
    """Check a reward set on the run folder's sampled baseline (``baseline_sampled.jsonl``).

    Args:
        run_dir: a run folder whose baseline was measured with sampled completions (``eval --before --samples k``).
        rewards: the rewards and weights to check (a :class:`grpo_kit.tasks.RewardSet`, names and/or functions, or a
            ``{reward: weight}`` mapping); default the task's. Rewards the records do not hold are scored on the
            recorded completions (nothing is generated).
        trust_remote_code: the run's task file may import and run Python of its own
            (:func:`grpo_kit.tasks.task_file.check_task_code`).

    Returns:
        :class:`grpo_kit.evaluation.reward_check.RewardCheck` (``.markdown()``, ``.to_json()``).

    Raises:
        FileNotFoundError: no run folder, or no baseline in it (the message names the step that writes it).
        ValueError: the baseline has no sampled completions; its task's data changed; an unknown reward; a reward
            that ``train`` would refuse (:func:`grpo_kit.runs.spec.probe_rewards`: one that returns other than one
            number or ``None`` per completion), named.
    """
    run = run_dir if isinstance(run_dir, RunFolder) else RunFolder.existing(run_dir, _BASELINE, write=False)
    settings = run.read_settings(run.eval_settings, _BASELINE, ("task", "samples"))
    reward_set = RewardSet(rewards) if rewards is not None else None  # an unknown reward fails before the data loads
    plan = plan_from_settings(settings, trust_remote_code=trust_remote_code)
    if not settings["samples"] or not run.baseline_sampled.is_file():
        raise ValueError(f"the baseline in {run.path} has no sampled completions: measure it again with samples "
                         "(eval --before --samples 8; notebook 02: samples = 8) in a new run folder")
    result = EvalResult.from_jsonl(run.check_baseline(run.baseline_sampled), task=plan.task)
    reward_set = reward_set or plan.task.reward_set()
    questions = list(plan.questions())
    probe_rewards(reward_set, plan.task, questions)  # what train refuses is refused here, naming the reward
    scored = with_rewards(result, questions, reward_set.rewards)
    return check_rewards(scored.records, plan.task, reward_set, source=str(run.baseline_sampled))
