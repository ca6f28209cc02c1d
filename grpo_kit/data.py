"""GSM8K as conversational prompts: loading, the seed's system prompt, seeded slicing.

A copy of GSM8K (MIT, OpenAI; see ``grpo_kit/data_files/gsm8k/SOURCE.md``) ships in the
package and is the default, so nothing touches the network unless ``source="hub"`` is asked
for. Every loader returns a ``datasets.Dataset`` with the columns

- ``question``: the problem text;
- ``solution``: GSM8K's worked solution (its own ``answer`` field, ending ``#### N``);
- ``answer``: the gold final answer, :func:`grpo_kit.answers.extract_hash_answer` of the
  solution (thousands commas removed), the column the reward functions read;
- ``prompt``: ``[{"role": "system", ...}, {"role": "user", "content": question}]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.answers import extract_hash_answer

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["SYSTEM_PROMPT", "build_prompt", "drop_long_prompts", "load_gsm8k", "take_slice", "tokenizer_texts"]

#: Seed 002's system prompt: the Unsloth notebook's format block plus the seed's extra line,
#: which lifted the instruct model's baseline.
SYSTEM_PROMPT = """Respond in the following format:
<reasoning>
...
</reasoning>
<answer>
...
</answer>
You must put your reasoning between the <reasoning> tags and answer between the <answer> tags."""

GSM8K_HUB_ID = "openai/gsm8k"
GSM8K_SPLITS = ("train", "test")


def build_prompt(question: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """Return the conversational prompt for one question: the system prompt, then the user turn.

    >>> [m["role"] for m in build_prompt("What is 2+2?")]
    ['system', 'user']
    """
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]


def _bundled_path(split: str) -> Path:
    return Path(__file__).parent / "data_files" / "gsm8k" / f"{split}.jsonl"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{line_no} is not a JSON line: {e}") from None
    return rows


def _to_examples(rows: list[dict[str, Any]], origin: str, system_prompt: str) -> list[dict[str, Any]]:
    examples = []
    for i, row in enumerate(rows):
        if not {"question", "answer"} <= set(row):
            raise ValueError(f"{origin} row {i} has keys {sorted(row)}; GSM8K rows need "
                             "'question' and 'answer' (the worked solution ending '#### N')")
        gold = extract_hash_answer(row["answer"])
        if gold is None:
            raise ValueError(f"{origin} row {i}: its 'answer' has no '#### N' final line")
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
        system_prompt: the system turn of every prompt (default: :data:`SYSTEM_PROMPT`).

    Returns:
        ``datasets.Dataset`` with columns ``question``, ``solution``, ``answer``, ``prompt``.

    Raises:
        ValueError: unknown split; a path that does not exist; a row without
            ``question``/``answer`` or without a ``#### N`` final line.
    """
    if split not in GSM8K_SPLITS:
        raise ValueError(f"unknown GSM8K split {split!r}: choose 'train' or 'test'")
    from datasets import Dataset

    if source == "hub":
        from datasets import load_dataset

        rows = list(load_dataset(GSM8K_HUB_ID, "main", split=split))
        origin = f"{GSM8K_HUB_ID}[{split}]"
    else:
        path = _bundled_path(split) if source == "bundled" else Path(source)
        if path.is_dir():
            path = path / f"{split}.jsonl"
        if not path.is_file():
            raise ValueError(f"no GSM8K file at {path}: pass source='bundled', 'hub', or a JSONL "
                             "file / a folder holding train.jsonl and test.jsonl")
        rows = _read_jsonl(path)
        origin = str(path)
    return Dataset.from_list(_to_examples(rows, origin, system_prompt))


def take_slice(dataset: Dataset, n: int | None = None, fraction: float | None = None, seed: int = 0) -> Dataset:
    """Take a seeded random slice: shuffle the rows with ``seed``, keep the first ``n`` (or ``fraction``).

    Slices with one seed are nested: the first 50 rows of a 200-row slice are the 50-row
    slice. Seed 002 evaluated on "50% of the test split": ``take_slice(test, fraction=0.5)``.

    Args:
        dataset: any ``datasets.Dataset``.
        n: number of rows to keep, at most ``len(dataset)``.
        fraction: share of rows to keep, in (0, 1]; rounded down, at least 1 row.
        seed: seed of the permutation (``numpy.random.default_rng``).

    Returns:
        ``datasets.Dataset`` with the chosen rows, in permuted order. With neither ``n`` nor
        ``fraction`` the whole dataset comes back unshuffled.

    Raises:
        ValueError: both ``n`` and ``fraction`` given, or either out of range.

    >>> from datasets import Dataset
    >>> ds = Dataset.from_dict({"x": list(range(10))})
    >>> take_slice(ds, n=3, seed=1)["x"] == take_slice(ds, fraction=0.5, seed=1)["x"][:3]
    True
    """
    if n is not None and fraction is not None:
        raise ValueError("give either n or fraction, not both")
    if n is None and fraction is None:
        return dataset
    if fraction is not None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        n = max(1, int(len(dataset) * fraction))
    if not 0 < n <= len(dataset):
        raise ValueError(f"n must be between 1 and {len(dataset)} (the dataset's size), got {n}")
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(dataset))[:n]
    return dataset.select(order.tolist())


def drop_long_prompts(dataset: Dataset, tokenizer: Any, max_prompt_tokens: int) -> Dataset:
    """Drop rows whose chat-templated prompt is longer than ``max_prompt_tokens`` tokens.

    TRL removed ``GRPOConfig.max_prompt_length`` (0.28); the seed's 256-token prompt limit
    is applied to the data instead.

    Args:
        dataset: a dataset with a conversational ``prompt`` column.
        tokenizer: a tokenizer with a chat template.
        max_prompt_tokens: the largest prompt length kept, in tokens.

    Returns:
        The rows that fit, in order.
    """
    def fits(row: dict[str, Any]) -> bool:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return len(ids) <= max_prompt_tokens

    return dataset.filter(fits)


def tokenizer_texts(dataset: Dataset, system_copies: int = 50) -> list[str]:
    """Text to train the tiny policy's tokenizer on: the system prompt (weighted by
    ``system_copies`` so its words become single tokens), then every question and solution."""
    return [SYSTEM_PROMPT] * system_copies + list(dataset["question"]) + list(dataset["solution"])
