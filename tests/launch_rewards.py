"""Rewards for the multi-process tests, given to `grpo_kit train` as ``--rewards tests.launch_rewards:<name>``.

``record_prompts`` (weight 0: logged, never trained on) appends each prompt's user turn to
``$GRPO_KIT_PROMPT_LOG/rank-<RANK>.txt``, to show which prompts each process scored. ``digit_share`` varies
between completions of a random policy, so GRPO's advantages are not all zero and the weights move: runs on
different engines (DDP, ZeRO-2, ZeRO-3) can then be compared by their trained weights.
"""

from __future__ import annotations

import os
from pathlib import Path


def record_prompts(prompts=None, completions=None, **kwargs):
    folder = Path(os.environ["GRPO_KIT_PROMPT_LOG"])
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"rank-{os.environ.get('RANK', '0')}.txt").open("a", encoding="utf-8") as f:
        for prompt in prompts:
            f.write(prompt[-1]["content"].replace("\n", " ") + "\n")
    return [0.0] * len(completions)


def digit_share(completions=None, **kwargs):
    """The share of each completion's characters that are digits (0.0 for an empty one)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in text) / max(len(text), 1) for text in texts]
