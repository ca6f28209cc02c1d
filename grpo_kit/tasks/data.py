"""Task data as conversational prompts: rows read from JSONL files (named by file and line in every error),
the system prompt, seeded slices, prompts that fit.

Copies of each task's data ship in the package (``grpo_kit/tasks/data_files/<task>/`` with its
``SOURCE.md`` and ``LICENSE``) and are the default, so nothing touches the network unless a task's
loader is asked for ``source="hub"``. Each task's own module loads its rows (:mod:`grpo_kit.tasks.gsm8k`,
:mod:`grpo_kit.tasks.countdown`, :mod:`grpo_kit.tasks.math500`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.tasks.answer_format import SYSTEM_PROMPT, visible

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["ROW_BATCH", "Located", "build_prompt", "carve_validation", "check_row", "check_rows", "drop_long_prompts",
           "iter_rows", "numbered", "system_prompt_of", "take_slice", "task_rows"]


def build_prompt(question: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """Return the conversational prompt for one question: the system prompt, then the user turn.

    >>> [m["role"] for m in build_prompt("What is 2+2?")]
    ['system', 'user']
    """
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]


#: A row and where it came from ("file.jsonl:12", or "openai/gsm8k[test] row 12"), for error messages.
Located = tuple[str, Any]


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: an object that names a key twice is refused (json would keep the last silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {twice!r} is given twice in one object (JSON keeps only the last): keep one")
    return out


def _read_jsonl(path: Path) -> Iterator[Located]:
    """The non-blank lines of a JSONL file, parsed one at a time (a bad line is reported as soon as it is read), each
    with its ``file:line``; a UTF-8 byte order mark (what some editors write first) is skipped.

    Raises:
        ValueError: a line that is not UTF-8 or not JSON, an object that names a key twice, a whole number longer than
            Python reads (``sys.get_int_max_str_digits``), an escape of half a UTF-16 pair (``\\ud800``, no
            character: it cannot be written as UTF-8), or the file holds no rows (the message names the line).
    """
    import sys

    rows = 0
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{line_no} is not UTF-8 text ({e.reason} at byte {e.start}): save the file "
                                 "as UTF-8") from None
            if line.strip():
                try:
                    row = json.loads(line, object_pairs_hook=_unique_keys)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{line_no} is not a JSON line: {e}") from None
                except ValueError as e:
                    if "int_max_str_digits" in str(e):  # Python's own limit, and its advice to raise it
                        raise ValueError(f"{path}:{line_no} holds a whole number of more than "
                                         f"{sys.get_int_max_str_digits()} digits, which Python does not read: write "
                                         "it as text in quotes, or shorten it") from None
                    raise ValueError(f"{path}:{line_no}: {e}") from None
                if "\\ud" in line.lower():  # an escaped surrogate: is one left without its pair?
                    try:
                        json.dumps(row, ensure_ascii=False).encode("utf-8")
                    except UnicodeEncodeError as e:
                        raise ValueError(f"{path}:{line_no} holds {e.object[e.start]!r}, half of a UTF-16 pair, "
                                         "which is no character (a broken escape of an emoji, say): fix that text"
                                         ) from None
                rows += 1
                yield f"{path}:{line_no}", row
    if not rows:
        raise ValueError(f"{path} holds no rows: give a JSONL file with one JSON object per line")


def _read_csv(path: Path) -> Iterator[Located]:
    """The rows of a CSV file with a header line, each named ``file:line`` (every value is text); a UTF-8 byte order
    mark (Excel's "CSV UTF-8") is skipped.

    Raises:
        ValueError: the file is not UTF-8 or not CSV; its header names a column twice or leaves one unnamed; a row
            has more cells than the header (which would be dropped); or it holds no rows.
    """
    import csv

    rows = 0
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            twice = [name for i, name in enumerate(header) if name in header[:i]]
            if twice:
                raise ValueError(f"{path}:1: the header names the column {twice[0]!r} twice (only the last would be "
                                 "read): give each column its own name")
            for row in reader:
                where = f"{path}:{reader.line_num}"
                if None in row:
                    raise ValueError(f"{where} has {len(header) + len(row[None])} cells and the header "
                                     f"{len(header)}: the extra cells would be dropped; quote a value holding a comma")
                rows += 1
                yield where, row
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}): save the file as UTF-8") from None
    except csv.Error as e:
        raise ValueError(f"{path} is not a CSV file: {e}") from None
    if not rows:
        raise ValueError(f"{path} holds no rows: give a CSV file with a header line and one row per line")


def _read_parquet(path: Path) -> Iterator[Located]:
    """The rows of a Parquet file, a batch at a time, each named ``file row <i>`` (read with pyarrow, which
    ``datasets`` installs).

    Raises:
        ValueError: the file is not Parquet, or holds no rows.
    """
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=ROW_BATCH)
        first = next(batches, None)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a file that is not Parquet
        raise ValueError(f"{path} is not a Parquet file ({type(e).__name__}: {e})") from None
    rows = (row for batch in ([first] if first is not None else []) for row in batch.to_pylist())
    yield from numbered(itertools.chain(rows, (row for batch in batches for row in batch.to_pylist())), str(path))


#: Rows read and converted at a time (Parquet batches, the Arrow chunks a task file's rows are kept in).
ROW_BATCH = 4096


#: How each data file is read, by suffix.
READERS = {".jsonl": _read_jsonl, ".json": _read_jsonl, ".csv": _read_csv, ".parquet": _read_parquet}


def iter_rows(path: str | Path) -> Iterator[Located]:
    """The rows of a JSONL, CSV or Parquet file (by its suffix), one at a time, each with where it came from: a file
    of any size is read in constant memory, and a row that cannot be read is reported as soon as it is reached.

    Raises:
        ValueError: no such file, a suffix that is none of ``.jsonl``, ``.csv``, ``.parquet`` (raised at once), a row
            that cannot be read (the message names the file and line), or no rows.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no data file at {path}")
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise ValueError(f"{path}: data files are JSONL (.jsonl), CSV (.csv) or Parquet (.parquet), not "
                         f"{path.suffix or 'without a suffix'}")
    return reader(path)


def numbered(rows: Iterable[Any], origin: str) -> Iterator[Located]:
    """Rows from elsewhere (the Hub, a generator), each named ``<origin> row <i>``, one at a time.

    Raises:
        ValueError: ``rows`` is empty (when the last is reached).
    """
    i = -1
    for i, row in enumerate(rows):
        yield f"{origin} row {i}", row
    if i < 0:
        raise ValueError(f"{origin} holds no rows")


def check_row(where: str, row: Any, fields: dict[str, tuple[type, ...]], need: str) -> None:
    """Raise a ``ValueError`` naming ``where`` when ``row`` is not an object with each field of ``fields`` set (not
    null, not empty, not only whitespace or invisible characters: :func:`grpo_kit.tasks.answer_format.visible`) to a
    value of its types."""
    if not isinstance(row, dict):
        raise ValueError(f"{where} holds a JSON {type(row).__name__}, not an object: {need}")
    for name, types in fields.items():
        value = row.get(name)
        if name not in row or value is None or (isinstance(value, str) and not visible(value).strip()) or value == []:
            raise ValueError(f"{where}: {name!r} is {'missing' if name not in row else repr(value)}; {need}")
        if not isinstance(value, types) or isinstance(value, bool):
            raise ValueError(f"{where}: {name!r} is a {type(value).__name__} ({str(value)[:40]!r}); {need}")


def check_rows(rows: Iterable[Located], fields: dict[str, tuple[type, ...]], need: str) -> list[Located]:
    """Check every row (:func:`check_row`, whose error names the first bad one); return them as a list."""
    out = list(rows)
    for where, row in out:
        check_row(where, row, fields, need)
    return out


def task_rows(task: str, display: str, split: str, source: str | Path, fields: dict[str, tuple[type, ...]],
              need: str, splits: tuple[str, ...] = ("train", "test"), hub: tuple[str, ...] = ()) -> list[Located]:
    """The rows of a split of one of the kit's own tasks, each checked (:func:`check_row`): its bundled copy
    (``source="bundled"``), the Hub (``source="hub"``: ``datasets.load_dataset(*hub, split=split)``, for a task that
    names ``hub``), or a JSONL file / a folder holding ``<split>.jsonl``.

    Raises:
        ValueError: a split the task does not have; no such file (the message says what to pass); a line that is not
            JSON; no rows; a row without one of ``fields`` (the message names the file and line, and ``need``).
    """
    if split not in splits:
        raise ValueError(f"unknown {display} split {split!r}: choose {' or '.join(map(repr, splits))}")
    if source == "hub" and hub:
        from datasets import load_dataset

        return check_rows(numbered(list(load_dataset(*hub, split=split)), f"{hub[0]}[{split}]"), fields, need)
    path = Path(__file__).parent / "data_files" / task / f"{split}.jsonl" if source == "bundled" else Path(source)
    if path.is_dir():
        path = path / f"{split}.jsonl"
    if not path.is_file():
        raise ValueError(f"no {display} file at {path}: pass source='bundled' or a JSONL file / a folder holding "
                         f"{split}.jsonl")
    return check_rows(_read_jsonl(path), fields, need)


def take_slice(dataset: Dataset, n: int | None = None, fraction: float | None = None, seed: int = 0) -> Dataset:
    """Take a seeded random slice: shuffle the rows with ``seed``, keep the first ``n`` (or ``fraction``).

    Slices with one seed are nested: the first 50 rows of a 200-row slice are the 50-row
    slice. The blog post evaluated on "50% of the test split": ``take_slice(test, fraction=0.5)``.

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
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"fraction must be a number in (0, 1], got {fraction!r}")
        n = max(1, int(len(dataset) * fraction))
    if n is None:
        return dataset
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= len(dataset):
        raise ValueError(f"n must be a whole number of rows between 1 and {len(dataset)} (the dataset's size), got "
                         f"{n!r}")
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(dataset))[:n]
    return dataset.select(order.tolist())


def carve_validation(dataset: Dataset, n: int, seed: int = 0, what: str = "validation_size"
                     ) -> tuple[Dataset, Dataset]:
    """Hold ``n`` questions of a train split out for measuring accuracy during training: a seeded choice of distinct
    questions, one row each, and the train rows without any of them (a question written more than once, as in a
    task whose warm start shows it in several styles, leaves training whole).

    Model selection on this curve then never looks at a test question: the before/after table alone uses the test
    split.

    Args:
        dataset: the train split (a ``question`` column, else ``prompt``, tells questions apart).
        n: validation questions, at most one fewer than the distinct questions.
        seed: seed of the choice (``numpy.random.default_rng``).
        what: how the message names ``n`` (the option or the task file's key it came from).

    Returns:
        ``(train rows left, validation rows)``.

    Raises:
        ValueError: ``n`` below 1 or leaving no question to train on.

    >>> from datasets import Dataset
    >>> ds = Dataset.from_dict({"question": ["a", "b", "a", "c", "d"], "style": [1, 1, 2, 1, 1]})
    >>> train, validation = carve_validation(ds, 2, seed=0)
    >>> sorted(validation["question"]), sorted(set(train["question"]) & set(validation["question"]))
    (['a', 'c'], [])
    """
    import numpy as np

    column = "question" if "question" in dataset.column_names else "prompt"
    keys = [json.dumps(q, sort_keys=True) if not isinstance(q, str) else q for q in dataset[column]]
    first = {key: i for i, key in reversed(list(enumerate(keys)))}  # each question's first row
    distinct = list(dict.fromkeys(keys))  # in the order they first appear
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n < len(distinct):
        raise ValueError(f"{what} must be between 1 and {len(distinct) - 1} (the train split's distinct "
                         f"questions less one), got {n!r}")
    order = np.random.default_rng(seed).permutation(len(distinct))[:n]
    held = {distinct[i] for i in order}
    validation = dataset.select([first[distinct[i]] for i in order])
    return dataset.select([i for i, key in enumerate(keys) if key not in held]), validation


def drop_long_prompts(dataset: Dataset, tokenizer: Any, max_prompt_tokens: int) -> Dataset:
    """Drop rows whose chat-templated prompt is longer than ``max_prompt_tokens`` tokens.

    TRL removed ``GRPOConfig.max_prompt_length`` (0.28); the recipe's 256-token prompt limit
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
