"""grpo_kit: measure an LLM, train it with GRPO (TRL), measure it again, and trust the before-and-after table.

The wings import one way: ``tasks`` (what is asked and how it is checked) -> ``policy`` (devices,
loading, generation) -> ``evaluation`` (scoring, tables, statistics, reports) -> ``training``
(recipes, the trainer, checkpoints, callbacks) -> ``runs`` (one experiment: its spec, its folder),
with ``system`` (logging, files, child processes) below them all and the command line, the demo
and the notebook helpers on top. The blog post's reward functions, the answer format and the tasks
are importable from here without torch (a task's own rewards from its module, e.g.
``grpo_kit.tasks.countdown.countdown_reward_func``); the heavier parts load torch and friends only
when imported.
"""

from grpo_kit.tasks import BUILTIN_REWARDS, TASKS, Reward, RewardSet, get_task
from grpo_kit.tasks.answer_format import SYSTEM_PROMPT, extract_final_answer, extract_xml_answer
from grpo_kit.tasks.rewards import (
    SEED_REWARDS,
    correctness_reward_func,
    int_reward_func,
    soft_correctness_reward_func,
    soft_format_reward_func,
    strict_format_reward_func,
    xmlcount_reward_func,
)

__version__ = "0.1.0"

__all__ = ["BUILTIN_REWARDS", "SEED_REWARDS", "SYSTEM_PROMPT", "Reward", "RewardSet", "TASKS",
           "correctness_reward_func", "extract_final_answer", "extract_xml_answer", "get_task", "int_reward_func",
           "soft_correctness_reward_func", "soft_format_reward_func", "strict_format_reward_func",
           "xmlcount_reward_func"]
