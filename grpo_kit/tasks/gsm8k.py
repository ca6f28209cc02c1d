"""GSM8K (Cobbe et al. 2021): grade-school math word problems with numeric answers, the task of the blog post
"LLM Reinforcement Learning with GRPO" (2025-03-03).

A copy of GSM8K (MIT, OpenAI; ``data_files/gsm8k/SOURCE.md`` and ``LICENSE``) ships in the package.
:func:`load_gsm8k` returns the columns

- ``question``: the problem text;
- ``solution``: GSM8K's worked solution (its own ``answer`` field, ending ``#### N``);
- ``answer``: the gold final answer, :func:`extract_hash_answer` of the solution (thousands commas
  removed), the column the correctness rewards read;
- ``prompt``: ``[{"role": "system", ...}, {"role": "user", "content": question}]``.

The rules: ``strict`` is the first number inside ``<answer>`` of a completion in the strict layout,
``flexible`` the last number anywhere (lm-evaluation-harness's flexible-extract), both compared with
the gold as normalised numbers. The headline metric is the post's hard correctness.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from grpo_kit.tasks.answer_format import SYSTEM_PROMPT, extract_final_answer, extract_xml_answer, strictly
from grpo_kit.tasks.data import Located, build_prompt, check_rows, local_rows, numbered
from grpo_kit.tasks.numbers import last_number, normalize_number, parse_number
from grpo_kit.tasks.rewards import SEED_REWARDS
from grpo_kit.tasks.task import Example, ExtractionRule, Task

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["GSM8K", "extract_hash_answer", "flexible_answer", "load_gsm8k", "solution_reasoning", "solution_steps",
           "strict_answer", "tokenizer_texts"]

HUB_ID = "openai/gsm8k"
SPLITS = ("train", "test")
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
    if "####" not in solution:
        return None
    return solution.split("####")[-1].strip().replace(",", "")


def _to_examples(rows: list[Located], system_prompt: str) -> list[dict[str, Any]]:
    rows = check_rows(rows, {"question": (str,), "answer": (str,)},
               "GSM8K rows need a 'question' and an 'answer' (the worked solution ending '#### N'), both text")
    examples = []
    for where, row in rows:
        gold = extract_hash_answer(row["answer"])
        if gold is None:
            raise ValueError(f"{where}: its 'answer' has no '#### N' final line")
        examples.append({
            "question": row["question"],
            "solution": row["answer"],
            "answer": gold,
            "prompt": build_prompt(row["question"], system_prompt),
        })
    return examples


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
    if split not in SPLITS:
        raise ValueError(f"unknown GSM8K split {split!r}: choose 'train' or 'test'")
    from datasets import Dataset

    if source == "hub":
        from datasets import load_dataset

        rows = numbered(list(load_dataset(HUB_ID, "main", split=split)), f"{HUB_ID}[{split}]")
    else:
        rows = local_rows(source, split, "gsm8k", "GSM8K")
    return Dataset.from_list(_to_examples(rows, system_prompt))


def strict_answer(text: str) -> str | None:
    """The ``strict`` rule: the number inside ``<answer>`` of a strictly formatted completion.

    Returns:
        The normalised first number of the answer block, or ``None`` when the completion is not
        in the strict format or its answer holds no number.

    >>> strict_answer("<reasoning>\\nx\\n</reasoning>\\n<answer>\\n$1,200.0\\n</answer>")
    '1200'
    >>> strict_answer("The answer is 1200.") is None
    True
    """
    return strictly(lambda t: normalize_number(extract_final_answer(t)))(text)


def flexible_answer(text: str) -> str | None:
    """The ``flexible`` rule: the last number anywhere in the completion
    (:func:`grpo_kit.tasks.numbers.last_number`; lm-evaluation-harness's flexible-extract for GSM8K).

    >>> flexible_answer("3 + 4 = 7, so the answer is 7.")
    '7'
    >>> flexible_answer("<answer>\\n$1,200\\n</answer>")
    '1200'
    """
    return last_number(text)


def _right(answer: str, example: Example) -> bool:
    return answer == normalize_number(example["answer"])


def solution_reasoning(solution: str, style: str = "equations") -> str:
    """The reasoning of a GSM8K worked solution: its calculator annotations one per line
    (``"equations"``), or its text with the annotations removed (``"full"``).

    >>> solution_reasoning("Half is 48/2 = <<48/2=24>>24.\\n#### 24")
    '48/2=24'
    """
    body = solution.split("####")[0].strip()
    if style == "equations":
        # The solution's calculator annotations (`<<48/2=24>>`), one per line: the steps
        # without prose, short enough for a 1M-parameter model to learn in minutes.
        equations = _CALCULATOR.findall(body)
        if equations:
            return "\n".join(equations)
    return _CALCULATOR.sub("", body)


def solution_steps(solution: str) -> int:
    """Number of worked-solution lines before the ``#### N`` line (the blog post's proxy for difficulty).

    >>> solution_steps("Half is 24.\\nTotal is 72.\\n#### 72")
    2
    """
    return sum(1 for line in solution.split("####")[0].splitlines() if line.strip())


def tokenizer_texts(dataset: Dataset, system_copies: int = 50) -> list[str]:
    """Text to train the tiny policy's tokenizer on: the system prompt (weighted by
    ``system_copies`` so its words become single tokens), then every question and solution."""
    return [SYSTEM_PROMPT] * system_copies + list(dataset["question"]) + list(dataset["solution"])


def _fields(text: str) -> dict[str, Any]:
    return {"extracted": extract_xml_answer(text), "final_answer": extract_final_answer(text)}


def _answer_value(example: Example) -> float | None:
    number = parse_number(str(example["answer"]))
    return None if number is None else float(number)


GSM8K = Task(
    name="gsm8k",
    description="GSM8K grade-school math (the blog post's task): numeric answers in <answer> tags",
    loader=load_gsm8k,
    splits=SPLITS,
    rewards=SEED_REWARDS,
    metrics=("correctness_reward_func", "soft_correctness_reward_func", "int_reward_func",
             "soft_format_reward_func", "strict_format_reward_func", "xmlcount_reward_func"),
    rules={"strict": ExtractionRule(strict_answer, _right), "flexible": ExtractionRule(flexible_answer, _right)},
    headline="correctness_reward_func",
    gold=lambda example: example["answer"],
    fields=_fields,
    demonstration=lambda example, style="equations": (solution_reasoning(example["solution"], style),
                                                      example["answer"]),
    texts=tokenizer_texts,
    solution=lambda example: (example["solution"], solution_steps(example["solution"])),
    answer_value=_answer_value,
    notes=("A ~1M-parameter policy trained for minutes on a CPU cannot do grade-school arithmetic: soft "
           "correctness, which reads the first number whether or not it sits in <answer> tags, stays level. What "
           "it can show is the effect that dominates the blog post's hard-correctness gain: GRPO teaches the "
           "answer format (strict and soft format, XML tag count, integer answers) that the warm start made "
           "possible but rare. Any rise in hard correctness here is that same format effect: it needs the exact "
           "answer inside <answer> tags, so the few answers the policy already got right start to count. Run the "
           "`a100` preset on a real model to see reasoning improve."),
)
