"""A reward that records which prompts each training process scored (for the multi-process tests).

Given to the command line as ``--rewards tests.prompt_recorder:record_prompts=0`` (weight 0: logged, never
trained on); it appends each prompt's user turn to ``$GRPO_KIT_PROMPT_LOG/rank-<RANK>.txt``.
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
