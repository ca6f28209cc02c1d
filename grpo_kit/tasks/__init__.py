"""What is asked and how it is checked: the answer format, numbers, rewards, and the tasks (GSM8K, Countdown,
MATH-500). No torch, no TRL: everything here runs wherever Python does.

A task is one name in the notebooks' parameters cell and in the command line (``--task``):

- ``gsm8k``: grade-school word problems (the blog post's task); numeric answers.
- ``countdown``: reach a target with 3-4 numbers (TinyZero); many right answers, checked by
  evaluating the expression.
- ``math500``: competition problems, evaluation only, checked with math-verify.
- ``sum3``: a+b+c over digits, synthetic and seeded: the CPU experiment where the reward decides what is learned.

A new task is a module of its own that builds a :class:`Task`, listed in :data:`TASKS`.
"""

from __future__ import annotations

from grpo_kit.tasks.countdown import COUNTDOWN
from grpo_kit.tasks.gsm8k import GSM8K
from grpo_kit.tasks.math500 import MATH500
from grpo_kit.tasks.rewards import BUILTIN_REWARDS, Reward, RewardSet
from grpo_kit.tasks.sum3 import SUM3
from grpo_kit.tasks.task import ExtractionRule, Task

__all__ = ["BUILTIN_REWARDS", "DEFAULT_TASK", "TASKS", "ExtractionRule", "Reward", "RewardSet", "Task", "get_task"]

#: Every task by name.
TASKS: dict[str, Task] = {task.name: task for task in (GSM8K, COUNTDOWN, MATH500, SUM3)}
#: The task of the recipe the kit packages (the blog post's).
DEFAULT_TASK = GSM8K.name


def get_task(task: str | Task) -> Task:
    """A task by name (a :class:`Task` passes through).

    Raises:
        ValueError: unknown name (the message lists the tasks).

    >>> get_task("countdown").rewards[-1]
    'countdown_reward_func'
    """
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: choose from {', '.join(TASKS)}")
    return TASKS[task]
