"""What is asked and how it is checked: the answer format, numbers, rewards, and the tasks (GSM8K, Countdown,
MATH-500, sum3). No torch, no TRL: everything here runs wherever Python does.

A task is one name in the notebooks' parameters cell and in the command line (``--task``):

- ``gsm8k``: grade-school word problems (the blog post's task); numeric answers.
- ``countdown``: reach a target with 3-4 numbers (TinyZero); many right answers, checked by
  evaluating the expression.
- ``math500``: competition problems, evaluation only, checked with math-verify.
- ``sum3``: a+b+c over digits, synthetic and seeded: the CPU experiment where the reward decides what is learned.

Each is a task file in ``grpo_kit/tasks/builtin/`` in the format a user writes for a task of their own
(:func:`load_task`; ``--task my_task.yaml``, ``task = "my_task.yaml"``): its answer type (number, text, math, choice)
brings the extraction rules and the correctness reward, and what a file cannot declare (how GSM8K's rows are read,
Countdown's equation checker) is Python the file names as ``module:function``. A new task of the kit's own is one
more file there, listed in :data:`BUILTIN_TASKS`; a new reward is a function listed in :data:`BUILTIN_REWARDS`
(:mod:`grpo_kit.tasks.reward_registry`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from grpo_kit.tasks.answer_format import ExtractionRule
from grpo_kit.tasks.reward_registry import BUILTIN_REWARDS, RewardSet
from grpo_kit.tasks.rewards import Reward
from grpo_kit.tasks.task import Task
from grpo_kit.tasks.task_file import check_digest, is_task_file, load_task

__all__ = ["BUILTIN_REWARDS", "BUILTIN_TASKS", "DEFAULT_TASK", "TASKS", "ExtractionRule", "Reward", "RewardSet", "Task",
           "get_task", "load_task"]

#: The kit's own task files, in the order they are listed.
BUILTIN_TASKS = {name: Path(__file__).parent / "builtin" / f"{name}.yaml"
                 for name in ("gsm8k", "countdown", "math500", "sum3")}
#: Every task of the kit's own by name, read from :data:`BUILTIN_TASKS`; recorded by name in run folders.
TASKS: dict[str, Task] = {name: load_task(path, builtin=True) for name, path in BUILTIN_TASKS.items()}
#: The task of the recipe the kit packages (the blog post's).
DEFAULT_TASK = "gsm8k"


def get_task(task: str | Path | Task, digest: Mapping[str, str] | None = None, trust_remote_code: bool = False
             ) -> Task:
    """A task by name, or from a task file (a path ending ``.yaml``/``.yml``: :func:`load_task`); a :class:`Task`
    passes through.

    Args:
        task: a name of :data:`TASKS`, a task file's path, or a :class:`Task`.
        digest: the task's files' SHA-256 as a run folder recorded them (:attr:`Task.digest`): data that changed
            since is refused (:func:`grpo_kit.tasks.task_file.check_digest`).
        trust_remote_code: a task file may import and run Python of its own (``module:name`` outside ``grpo_kit``:
            :func:`grpo_kit.tasks.task_file.check_task_code`); the kit's own tasks need nothing.

    Raises:
        ValueError: unknown name (the message lists the tasks); a task file that cannot be read (the message names
            the file and the line or field), or that names Python of its own without ``trust_remote_code``; data
            that changed since ``digest``.

    >>> get_task("countdown").rewards[-1]
    'countdown_reward_func'
    """
    if isinstance(task, Task):
        found = task
    elif is_task_file(task):
        if digest is not None and not Path(task).expanduser().is_file():  # recorded by a run folder, since moved
            raise ValueError(f"the task file {task}, which this run folder was measured and trained on, is no longer "
                             "there (moved or deleted): put it back at that path (with its data files); the run's "
                             "results are checked against its data")
        found = load_task(task, trust_remote_code=trust_remote_code)
    elif task in TASKS:
        found = TASKS[task]
    else:
        raise ValueError(f"unknown task {task!r}: choose from {', '.join(TASKS)}, or give a task file (my_task.yaml)")
    check_digest(found, digest)
    return found
