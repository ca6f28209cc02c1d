"""Reward functions for verifiable answers, in TRL's ``reward_funcs`` contract.

Each function takes keyword arguments ``prompts``, ``completions``, the dataset columns it
needs (``answer``) and ``**kwargs`` (TRL also passes ``completion_ids``, ``trainer_state``,
``log_metric``, ...). A completion is a ``str`` or a list of chat messages; the functions
read both (see :func:`grpo_kit.answers.completion_text`). They return one ``float`` per
completion, never raise on any completion text and print nothing.

The six are seed 002's (``../shared/seeds/002_*.txt``), which took them from the Unsloth
Llama-3.1-8B GRPO notebook and fixed their regexes; README's "Rewards" section lists where
they differ from the notebook and why. Swapping a reward is one line: pass other names to
:func:`get_reward_funcs`, or put your own function in the list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from grpo_kit.answers import (
    completion_text,
    extract_final_answer,
    extract_xml_answer,
    is_integer_literal,
    is_strict_format,
    numbers_equal,
)

__all__ = [
    "REWARD_FUNCS",
    "REWARD_MAX",
    "SEED_REWARDS",
    "correctness_reward_func",
    "get_reward_funcs",
    "int_reward_func",
    "soft_correctness_reward_func",
    "soft_format_reward_func",
    "strict_format_reward_func",
    "xmlcount_reward_func",
]

RewardFunc = Callable[..., list[float]]

# re.DOTALL: without it multi-line reasoning never matches (unsloth #1761).
_SOFT_FORMAT = re.compile(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", re.DOTALL)
_XML_TAGS = ("<reasoning>\n", "\n</reasoning>\n", "\n<answer>\n", "\n</answer>")


def _texts(completions: Sequence[Any] | None) -> list[str]:
    return [completion_text(c) for c in (completions or [])]


def _golds(answer: Sequence[Any] | None, n: int) -> list[str | None]:
    """Gold answers padded with ``None`` to ``n`` entries, so a short column scores 0, not raises."""
    golds = [a if isinstance(a, str) else None for a in (answer or [])][:n]
    return golds + [None] * (n - len(golds))


def correctness_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Hard correctness: 1.0 when the text inside ``<answer>`` equals the gold answer exactly.

    Args:
        prompts: the prompts (unused; part of TRL's contract).
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.
        answer: gold answers, ``list[str]`` of length N (the GSM8K ``answer`` column).

    Returns:
        ``list[float]`` of length N, each 0.0 or 1.0. A string compare, as in the seed:
        ``"1200.0"`` does not match ``"1200"`` (:func:`soft_correctness_reward_func` does).

    >>> correctness_reward_func(completions=["<answer>\\n72\\n</answer>", "<answer>72.0</answer>"],
    ...                         answer=["72", "72"])
    [1.0, 0.0]
    """
    texts = _texts(completions)
    return [1.0 if gold is not None and extract_xml_answer(t) == gold else 0.0
            for t, gold in zip(texts, _golds(answer, len(texts)))]


def soft_correctness_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Soft correctness: 1.0 when the first number inside ``<answer>`` equals the gold as a number.

    Args:
        prompts: unused.
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.
        answer: gold answers, ``list[str]`` of length N.

    Returns:
        ``list[float]`` of length N, each 0.0 or 1.0. ``"1200.0"``, ``"$1,200"`` and
        ``"1200 units"`` match ``"1200"``; ``"3"`` does not match ``"-3"``. The seed
        compared strings and dropped the sign; this compares numbers with the sign kept.

    >>> soft_correctness_reward_func(
    ...     completions=[[{"role": "assistant", "content": "<answer>$1,200</answer>"}],
    ...                  [{"role": "assistant", "content": "<answer>3</answer>"}]],
    ...     answer=["1200", "-3"])
    [1.0, 0.0]
    """
    texts = _texts(completions)
    return [1.0 if numbers_equal(extract_final_answer(t), gold) else 0.0
            for t, gold in zip(texts, _golds(answer, len(texts)))]


def int_reward_func(completions=None, **kwargs) -> list[float]:
    """Integer: 0.5 when the text inside ``<answer>`` is an integer literal (``-3`` counts).

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N, each 0.0 or 0.5. The notebook's ``isdigit()`` rejected
        ``-3``; ``3.5``, ``1,000`` and ``12 apples`` still score 0.

    >>> int_reward_func(completions=["<answer>\\n-3\\n</answer>", "<answer>3.5</answer>"])
    [0.5, 0.0]
    """
    return [0.5 if is_integer_literal(extract_xml_answer(t)) else 0.0 for t in _texts(completions)]


def strict_format_reward_func(completions=None, **kwargs) -> list[float]:
    """Strict format: 0.5 when the whole completion is reasoning then answer, each tag on its own line.

    Pattern ``^<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\n*$`` with
    ``re.DOTALL`` (seed 002's fix of the notebook, which lacked DOTALL: unsloth #1761).

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N, each 0.0 or 0.5.

    >>> strict_format_reward_func(completions=[
    ...     "<reasoning>\\nstep 1\\nstep 2\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n",
    ...     "<reasoning>2+2</reasoning><answer>4</answer>"])
    [0.5, 0.0]
    """
    return [0.5 if is_strict_format(t) else 0.0 for t in _texts(completions)]


def soft_format_reward_func(completions=None, **kwargs) -> list[float]:
    """Soft format: 0.5 when the completion starts with a reasoning block followed by an answer block.

    Pattern ``<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>`` with ``re.DOTALL``,
    anchored at the start (``re.match``), as in the notebook.

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N, each 0.0 or 0.5.

    >>> soft_format_reward_func(completions=["<reasoning>a\\nb</reasoning> <answer>4</answer>", "4"])
    [0.5, 0.0]
    """
    return [0.5 if _SOFT_FORMAT.match(t) else 0.0 for t in _texts(completions)]


def xml_count(text: str) -> float:
    """Score one text for its XML tags: 0.125 per tag present exactly once, less a tail penalty.

    The tags are ``"<reasoning>\\n"``, ``"\\n</reasoning>\\n"``, ``"\\n<answer>\\n"`` and
    ``"\\n</answer>"``. When ``</answer>`` occurs, 0.001 is taken off per character after
    the last one, surrounding whitespace stripped, so a perfect completion scores exactly
    0.5 with or without a trailing newline (the notebook docked the newline itself).

    >>> xml_count("<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n")
    0.5
    >>> xml_count("<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>\\nmore")
    0.496
    """
    score = sum(0.125 for tag in _XML_TAGS if text.count(tag) == 1)
    if "</answer>" in text:
        score -= 0.001 * len(text.split("</answer>")[-1].strip())
    return float(round(score, 6))


def xmlcount_reward_func(completions=None, **kwargs) -> list[float]:
    """XML tag count: :func:`xml_count` of each completion (at most 0.5; negative for long tails).

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N.

    >>> xmlcount_reward_func(completions=["<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>", "x"])
    [0.5, 0.0]
    """
    return [xml_count(t) for t in _texts(completions)]


#: Every built-in reward by name (the function's ``__name__``, which TRL logs as
#: ``rewards/<name>/mean``).
REWARD_FUNCS: dict[str, RewardFunc] = {
    f.__name__: f
    for f in (
        xmlcount_reward_func,
        soft_format_reward_func,
        strict_format_reward_func,
        int_reward_func,
        correctness_reward_func,
        soft_correctness_reward_func,
    )
}

#: The six rewards seed 002 trained with, in its order.
SEED_REWARDS: tuple[str, ...] = tuple(REWARD_FUNCS)

#: Each built-in reward's largest value per completion (the "Max Value" column of the seed's tables).
REWARD_MAX: dict[str, float] = {
    "xmlcount_reward_func": 0.5,
    "soft_format_reward_func": 0.5,
    "strict_format_reward_func": 0.5,
    "int_reward_func": 0.5,
    "correctness_reward_func": 1.0,
    "soft_correctness_reward_func": 1.0,
}


def get_reward_funcs(rewards: Sequence[str | RewardFunc]) -> list[RewardFunc]:
    """Resolve reward names (or functions, passed through) to functions, in order.

    Args:
        rewards: names from :data:`REWARD_FUNCS` and/or callables in TRL's contract.

    Returns:
        ``list`` of callables, one per entry.

    Raises:
        ValueError: a name is not a built-in reward (the message lists the known names),
            or the list is empty.

    >>> [f.__name__ for f in get_reward_funcs(["int_reward_func"])]
    ['int_reward_func']
    """
    if not rewards:
        raise ValueError("no reward functions given: name at least one of " + ", ".join(REWARD_FUNCS))
    funcs = []
    for reward in rewards:
        if callable(reward):
            funcs.append(reward)
        elif reward in REWARD_FUNCS:
            funcs.append(REWARD_FUNCS[reward])
        else:
            raise ValueError(f"unknown reward {reward!r}: choose from {', '.join(REWARD_FUNCS)} "
                             "or pass your own function")
    return funcs
