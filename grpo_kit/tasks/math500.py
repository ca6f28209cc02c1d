"""MATH-500 (Lightman et al. 2023's 500-problem subset of the MATH test set): competition problems, evaluation
only, checked with math-verify; for measuring whether GSM8K training transfers. Declared in ``builtin/math500.yaml``;
this module reads its rows and holds its two rules.

A copy of ``openai/prm800k``'s ``math_splits/test.jsonl`` (MIT) ships in the package
(``data_files/math500/``). Both rules check with :func:`grpo_kit.tasks.math_verify.math_equal`:
``strict`` reads the ``<answer>`` of a completion in the strict layout, ``flexible`` the last
``\\boxed{...}`` anywhere, else the ``<answer>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_kit.tasks.answer_format import SYSTEM_PROMPT, Example, ExtractionRule, extract_xml_answer, strictly
from grpo_kit.tasks.answer_types import MAX_BOXED_CHARS, last_boxed
from grpo_kit.tasks.data import build_prompt, task_rows
from grpo_kit.tasks.math_verify import math_verifier

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["MAX_BOXED_CHARS", "RULES", "last_boxed", "load_math500"]

HUB_ID = "HuggingFaceH4/MATH-500"


def load_math500(split: str = "test", source: str = "bundled", system_prompt: str = SYSTEM_PROMPT) -> Dataset:
    """Load MATH-500 as conversational prompts.

    Args:
        split: ``"test"`` (the only split).
        source: ``"bundled"`` (the copy of ``openai/prm800k``'s ``math_splits/test.jsonl``),
            ``"hub"`` (``HuggingFaceH4/MATH-500``; needs the network) or a JSONL path.
        system_prompt: the system turn of every prompt.

    Returns:
        ``datasets.Dataset`` with columns ``question`` (the problem), ``solution``, ``answer``
        (LaTeX, e.g. ``\\frac{\\pi}{2}``; checked with math-verify), ``subject``, ``level``
        (1-5), ``unique_id`` and ``prompt``.

    Raises:
        ValueError: a split other than ``"test"``, a missing or empty file, or rows without
            ``problem``/``answer`` (the message names the file and line).
    """
    from datasets import Dataset

    rows = task_rows("math500", "MATH-500", split, source, {"problem": (str,), "answer": (str, int, float)},
                     "MATH-500 rows need a 'problem' (text) and an 'answer' (LaTeX text or a number)", ("test",),
                     (HUB_ID,))
    return Dataset.from_list([{"question": row["problem"], "solution": row.get("solution", ""),
                               "answer": str(row["answer"]), "subject": row.get("subject", ""),
                               "level": int(row.get("level", 0)), "unique_id": row.get("unique_id", str(i)),
                               "prompt": build_prompt(row["problem"], system_prompt)}
                              for i, (_, row) in enumerate(rows)])


def _correct(answer: str, example: Example) -> bool:
    return math_verifier()(example["answer"], answer) is True


#: The two rules ``builtin/math500.yaml`` names: the ``<answer>`` of a completion in the strict layout, or the last
#: ``\\boxed{...}`` anywhere, else the ``<answer>``; both checked with math-verify against the gold answer.
RULES = {"strict": ExtractionRule(strictly(extract_xml_answer), _correct),
         "flexible": ExtractionRule(lambda t: last_boxed(t) or extract_xml_answer(t) or None, _correct)}
