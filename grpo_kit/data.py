"""Datasets as conversational prompts: GSM8K, Countdown, MATH-500; the seed's system prompt; seeded slicing.

Copies of GSM8K (MIT, OpenAI), Countdown (TinyZero's 3-4 number puzzles) and MATH-500 (MIT,
OpenAI) ship in the package (``grpo_kit/data_files/*/SOURCE.md`` and ``LICENSE``) and are the
default, so nothing touches the network unless ``source="hub"`` is asked for. Every prompt is the
seed's XML system prompt then the user turn. :func:`load_gsm8k` returns the columns

- ``question``: the problem text;
- ``solution``: GSM8K's worked solution (its own ``answer`` field, ending ``#### N``);
- ``answer``: the gold final answer, :func:`grpo_kit.answers.extract_hash_answer` of the
  solution (thousands commas removed), the column the reward functions read;
- ``prompt``: ``[{"role": "system", ...}, {"role": "user", "content": question}]``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.answers import extract_hash_answer

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = [
    "SYSTEM_PROMPT",
    "build_prompt",
    "countdown_question",
    "drop_long_prompts",
    "load_countdown",
    "load_gsm8k",
    "load_math500",
    "solution_reasoning",
    "system_prompt_of",
    "take_slice",
    "tokenizer_texts",
]

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

_CALCULATOR = re.compile(r"<<(.*?)>>")

GSM8K_HUB_ID = "openai/gsm8k"
GSM8K_SPLITS = ("train", "test")


def build_prompt(question: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """Return the conversational prompt for one question: the system prompt, then the user turn.

    >>> [m["role"] for m in build_prompt("What is 2+2?")]
    ['system', 'user']
    """
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]


def _bundled_path(split: str, task: str = "gsm8k") -> Path:
    return Path(__file__).parent / "data_files" / task / f"{split}.jsonl"


#: A row and where it came from ("file.jsonl:12", or "openai/gsm8k[test] row 12"), for error messages.
Located = tuple[str, Any]


def _read_jsonl(path: Path) -> list[Located]:
    """The non-blank lines of a JSONL file, parsed, each with its ``file:line``.

    Raises:
        ValueError: a line that is not JSON, or the file holds no rows.
    """
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append((f"{path}:{line_no}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{line_no} is not a JSON line: {e}") from None
    if not rows:
        raise ValueError(f"{path} holds no rows: give a JSONL file with one JSON object per line")
    return rows


def _numbered(rows: list[Any], origin: str) -> list[Located]:
    """Rows from elsewhere (the Hub, a generator), each named ``<origin> row <i>``."""
    if not rows:
        raise ValueError(f"{origin} holds no rows")
    return [(f"{origin} row {i}", row) for i, row in enumerate(rows)]


def _check_rows(rows: list[Located], fields: dict[str, tuple[type, ...]], need: str) -> None:
    """Raise a ``ValueError`` naming the first row that is not an object with each field of ``fields`` set
    (not null, not empty) to a value of its types."""
    for where, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{where} holds a JSON {type(row).__name__}, not an object: {need}")
        for name, types in fields.items():
            value = row.get(name)
            if name not in row or value is None or value == "" or value == []:
                raise ValueError(f"{where}: {name!r} is {'missing' if name not in row else repr(value)}; {need}")
            if not isinstance(value, types) or isinstance(value, bool):
                raise ValueError(f"{where}: {name!r} is a {type(value).__name__} ({str(value)[:40]!r}); {need}")


def _whole(value: Any, where: str, name: str) -> int:
    """A whole number from an int or an integral float (``3.0``); anything else is an error naming the row."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"{where}: Countdown {name} must be whole numbers (the prompt states them and the reward "
                         f"uses them as they are), got {value!r}")
    return int(value)


def _to_examples(rows: list[Located], system_prompt: str) -> list[dict[str, Any]]:
    _check_rows(rows, {"question": (str,), "answer": (str,)},
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
        system_prompt: the system turn of every prompt (default: :data:`SYSTEM_PROMPT`).

    Returns:
        ``datasets.Dataset`` with columns ``question``, ``solution``, ``answer``, ``prompt``.

    Raises:
        ValueError: unknown split; a path that does not exist; an empty file; a line that is not a
            JSON object, or whose ``question``/``answer`` is missing, null, empty or not text, or whose
            answer has no ``#### N`` final line (the message names the file and line).
    """
    if split not in GSM8K_SPLITS:
        raise ValueError(f"unknown GSM8K split {split!r}: choose 'train' or 'test'")
    from datasets import Dataset

    if source == "hub":
        from datasets import load_dataset

        rows = _numbered(list(load_dataset(GSM8K_HUB_ID, "main", split=split)), f"{GSM8K_HUB_ID}[{split}]")
    else:
        rows = _local_rows(source, split, "gsm8k")
    return Dataset.from_list(_to_examples(rows, system_prompt))


_NAMES = {"gsm8k": "GSM8K", "countdown": "Countdown", "math500": "MATH-500"}


def _local_rows(source: str, split: str, task: str) -> list[Located]:
    path = _bundled_path(split, task) if source == "bundled" else Path(source)
    if path.is_dir():
        path = path / f"{split}.jsonl"
    if not path.is_file():
        raise ValueError(f"no {_NAMES[task]} file at {path}: pass source='bundled' or a JSONL file / a folder holding "
                         f"{split}.jsonl")
    return _read_jsonl(path)


def countdown_question(nums: list[int], target: int) -> str:
    """The user turn of a Countdown puzzle (TinyZero's wording, asking for the bare expression).

    >>> countdown_question([79, 17, 60], 36)[:56]
    'Using the numbers [79, 17, 60], create an equation that '
    """
    return (f"Using the numbers {list(nums)}, create an equation that equals {target}. You can use basic "
            "arithmetic operations (+, -, *, /) and each number can only be used once. Put only the expression, "
            "without '=', inside the answer tags.")


def load_countdown(split: str = "test", source: str = "bundled", n: int = 1000, seed: int = 0,
                   system_prompt: str = SYSTEM_PROMPT) -> Dataset:
    """Load Countdown puzzles (TinyZero's task, seeds 001/003) as conversational prompts.

    Args:
        split: ``"train"`` (10,000 bundled puzzles) or ``"test"`` (1,024).
        source: ``"bundled"`` (TinyZero's ``Countdown-Tasks-3to4`` rows, offline; default),
            ``"generated"`` (``n`` fresh solvable puzzles from
            :func:`grpo_kit.countdown.make_puzzles` with ``seed``; the split only salts the seed),
            or a path to JSONL rows with ``nums`` and ``target``.
        n, seed: the size and seed of a generated set.
        system_prompt: the system turn of every prompt.

    Returns:
        ``datasets.Dataset`` with columns ``nums`` (``list[int]``), ``target`` (``int``),
        ``question`` (the user turn) and ``prompt``. There is no ``answer`` column: Countdown
        has many right answers, checked by ``countdown_reward_func``.

    Raises:
        ValueError: unknown split, missing or empty file, or a row without ``nums``/``target`` or
            with a number that is not whole (``1.5``; the message names the file and line).
    """
    if split not in ("train", "test"):
        raise ValueError(f"unknown Countdown split {split!r}: choose 'train' or 'test'")
    from datasets import Dataset

    if source == "generated":
        from grpo_kit.countdown import make_puzzles

        rows = _numbered(make_puzzles(n, seed=seed + (0 if split == "train" else 1_000_003)), "generated")
    else:
        rows = _local_rows(source, split, "countdown")
    _check_rows(rows, {"nums": (list,), "target": (int, float)},
                "Countdown rows need 'nums' (a list of whole numbers) and 'target' (a whole number)")
    examples = []
    for where, row in rows:
        nums = [_whole(x, where, "nums") for x in row["nums"]]
        target = _whole(row["target"], where, "target")
        question = countdown_question(nums, target)
        examples.append({"nums": nums, "target": target, "question": question,
                         "prompt": build_prompt(question, system_prompt)})
    return Dataset.from_list(examples)


def load_math500(split: str = "test", source: str = "bundled", system_prompt: str = SYSTEM_PROMPT) -> Dataset:
    """Load MATH-500 (Lightman et al. 2023's 500-problem MATH test subset) as conversational prompts.

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
    if split != "test":
        raise ValueError(f"MATH-500 has only a 'test' split, got {split!r}")
    from datasets import Dataset

    if source == "hub":
        from datasets import load_dataset

        rows = _numbered(list(load_dataset("HuggingFaceH4/MATH-500", split="test")), "HuggingFaceH4/MATH-500")
    else:
        rows = _local_rows(source, split, "math500")
    _check_rows(rows, {"problem": (str,), "answer": (str, int, float)},
                "MATH-500 rows need a 'problem' (text) and an 'answer' (LaTeX text or a number)")
    examples = []
    for i, (_, row) in enumerate(rows):
        examples.append({"question": row["problem"], "solution": row.get("solution", ""), "answer": str(row["answer"]),
                         "subject": row.get("subject", ""), "level": int(row.get("level", 0)),
                         "unique_id": row.get("unique_id", str(i)),
                         "prompt": build_prompt(row["problem"], system_prompt)})
    return Dataset.from_list(examples)


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
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        raise ValueError(f"n must be a whole number of rows, got {n!r}")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))):
        raise ValueError(f"fraction must be a number in (0, 1], got {fraction!r}")
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


def system_prompt_of(dataset: Any) -> str:
    """The system turn of a dataset's first prompt (``""`` without one): what run folders record so that
    a baseline and a training run can be checked to use the same prompt."""
    first = dataset[0]["prompt"]
    return first[0]["content"] if first and first[0].get("role") == "system" else ""


def tokenizer_texts(dataset: Dataset, system_copies: int = 50) -> list[str]:
    """Text to train the tiny policy's tokenizer on: the system prompt (weighted by
    ``system_copies`` so its words become single tokens), then every question and solution."""
    return [SYSTEM_PROMPT] * system_copies + list(dataset["question"]) + list(dataset["solution"])


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
