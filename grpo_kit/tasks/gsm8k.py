"""GSM8K (Cobbe et al. 2021): grade-school math word problems with numeric answers, the task of the blog post
"LLM Reinforcement Learning with GRPO" (2025-03-03).

A copy of GSM8K (MIT, OpenAI; ``data_files/gsm8k/SOURCE.md`` and ``LICENSE``) ships in the package.
:func:`load_gsm8k` returns the columns

- ``question``: the problem text;
- ``solution``: GSM8K's worked solution (its own ``answer`` field, ending ``#### N``);
- ``answer``: the gold final answer, :func:`extract_hash_answer` of the solution (thousands commas
  removed), the column the correctness rewards read;
- ``prompt``: ``[{"role": "system", ...}, {"role": "user", "content": question}]``.

The task itself is declared in ``builtin/gsm8k.yaml`` (answer type ``number``: ``strict`` is the first number
inside ``<answer>`` of a completion in the strict layout, ``flexible`` the last number anywhere, as
lm-evaluation-harness's flexible-extract); this module holds what a file cannot say: how GSM8K's rows are read and
how the tiny policy is shown and taught its solutions.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from grpo_kit.tasks.answer_format import SYSTEM_PROMPT, Example
from grpo_kit.tasks.data import build_prompt, task_rows

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["demonstration", "extract_hash_answer", "load_gsm8k", "solution_reasoning", "tokenizer_texts"]

HUB_ID = "openai/gsm8k"
_CALCULATOR = re.compile(r"<<(.*?)>>")


def extract_hash_answer(solution: str) -> str | None:
    """Return the final answer of a GSM8K worked solution: the text after the last ``####``.

    Args:
        solution: GSM8K's ``answer`` field (worked solution ending in ``#### N``).

    Returns:
        The stripped text after the last ``####`` with thousands commas removed
        (``"#### 1,000"`` gives ``"1000"``), or ``None`` when there is no ``####``.

    >>> extract_hash_answer("48/2 = 24\\n#### 1,024")
    '1024'
    >>> extract_hash_answer("no marker") is None
    True
    """
    return solution.split("####")[-1].strip().replace(",", "") if "####" in solution else None


def load_gsm8k(split: str = "test", source: str = "bundled", system_prompt: str = SYSTEM_PROMPT) -> Dataset:
    """Load one GSM8K split as conversational prompts with gold answers.

    Args:
        split: ``"train"`` (7,473 rows) or ``"test"`` (1,319 rows).
        source: ``"bundled"`` (the copy in the package, offline; default), ``"hub"``
            (``openai/gsm8k``, config ``main``, through ``datasets.load_dataset``; needs the
            network), or a path: a JSONL file, or a folder holding ``<split>.jsonl``, with
            GSM8K's ``question`` / ``answer`` keys.
        system_prompt: the system turn of every prompt (default:
            :data:`grpo_kit.tasks.answer_format.SYSTEM_PROMPT`).

    Returns:
        ``datasets.Dataset`` with columns ``question``, ``solution``, ``answer``, ``prompt``.

    Raises:
        ValueError: unknown split; a path that does not exist; an empty file; a line that is not a
            JSON object, or whose ``question``/``answer`` is missing, null, empty or not text, or whose
            answer has no ``#### N`` final line (the message names the file and line).
    """
    from datasets import Dataset

    need = "GSM8K rows need a 'question' and an 'answer' (the worked solution ending '#### N'), both text"
    rows = task_rows("gsm8k", "GSM8K", split, source, {"question": (str,), "answer": (str,)}, need, ("train", "test"),
                     (HUB_ID, "main"))
    examples = []
    for where, row in rows:
        gold = extract_hash_answer(row["answer"])
        if gold is None:
            raise ValueError(f"{where}: its 'answer' has no '#### N' final line")
        examples.append({"question": row["question"], "solution": row["answer"], "answer": gold,
                         "prompt": build_prompt(row["question"], system_prompt)})
    return Dataset.from_list(examples)


def solution_reasoning(solution: str, style: str = "equations") -> str:
    """The reasoning of a GSM8K worked solution: its calculator annotations one per line
    (``"equations"``), or its text with the annotations removed (``"full"``).

    >>> solution_reasoning("Half is 48/2 = <<48/2=24>>24.\\n#### 24")
    '48/2=24'
    """
    body = solution.split("####")[0].strip()
    # The solution's calculator annotations (`<<48/2=24>>`), one per line: the steps
    # without prose, short enough for a 1M-parameter model to learn in minutes.
    equations = _CALCULATOR.findall(body) if style == "equations" else []
    return "\n".join(equations) if equations else _CALCULATOR.sub("", body)


def tokenizer_texts(dataset: Dataset, system_copies: int = 50) -> list[str]:
    """Text to train the tiny policy's tokenizer on: the system prompt (weighted by
    ``system_copies`` so its words become single tokens), then every question and solution."""
    return [SYSTEM_PROMPT] * system_copies + list(dataset["question"]) + list(dataset["solution"])


def demonstration(example: Example, style: str = "equations") -> tuple[str, str]:
    """The tiny policy's warm-start target for a GSM8K row: its worked solution's reasoning
    (:func:`solution_reasoning` in ``style``) and its gold answer.

    >>> demonstration({"solution": "Half is 48/2 = <<48/2=24>>24.\\n#### 24", "answer": "24"})
    ('48/2=24', '24')
    """
    return solution_reasoning(example["solution"], style), example["answer"]
