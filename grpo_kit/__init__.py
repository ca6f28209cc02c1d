"""grpo_kit: measure an LLM, train it with GRPO (TRL), measure it again.

The reward functions and answer extraction are importable from here; the heavier parts
(data, models, generation, evaluation, training) load torch and friends only when imported.
"""

from grpo_kit.answers import extract_final_answer, extract_hash_answer, extract_xml_answer
from grpo_kit.countdown import safe_eval
from grpo_kit.evaluation import evaluate_answers
from grpo_kit.rewards import (
    REWARD_FUNCS,
    SEED_REWARDS,
    RewardMix,
    correctness_reward_func,
    countdown_reward_func,
    get_reward_funcs,
    int_reward_func,
    math_verify_reward_func,
    register_reward,
    soft_correctness_reward_func,
    soft_format_reward_func,
    strict_format_reward_func,
    xmlcount_reward_func,
)

__version__ = "0.1.0"

__all__ = [
    "REWARD_FUNCS",
    "SEED_REWARDS",
    "RewardMix",
    "correctness_reward_func",
    "countdown_reward_func",
    "evaluate_answers",
    "extract_final_answer",
    "extract_hash_answer",
    "extract_xml_answer",
    "get_reward_funcs",
    "int_reward_func",
    "math_verify_reward_func",
    "register_reward",
    "safe_eval",
    "soft_correctness_reward_func",
    "soft_format_reward_func",
    "strict_format_reward_func",
    "xmlcount_reward_func",
]
