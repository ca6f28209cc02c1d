"""A task declared in a YAML file over the user's own data, as lm-evaluation-harness declares its tasks (data, fields,
target, filters, metrics): :func:`load_task` reads the file and its data, checks every row, and builds the
:class:`grpo_kit.tasks.Task` the kit's pipelines take (``--task PATH.yaml``, ``task = "PATH.yaml"``).

A task file::

    name: capitals
    train: train.jsonl          # JSONL, CSV or Parquet, relative to this file; or
    test: test.jsonl            # hub: {path: owner/name, name: config, train_split: train, test_split: test}
    question: question          # the fields holding the question and the gold answer
    answer: answer
    answer_type: text           # number | text | math | choice (grpo_kit.tasks.answer_types)
    solution: explanation       # optional: a worked solution the tiny policy's warm start shows
    choices: ABCD               # choice only: the option letters (default ABCD)
    system_prompt: ...          # optional; default the kit's answer format
    rewards: {text_correctness_reward_func: 2.0, strict_format_reward_func: 0.5}   # optional
    validation_size: 100        # optional; questions held out of the train split during training

Where a rule is not data, the file names Python as ``module:name`` (:data:`CODE_KEYS`): ``loader``
(``function(split, **kwargs) -> datasets.Dataset``, with ``splits``, instead of the data keys), ``rules``
(``{"strict": ExtractionRule, "flexible": ExtractionRule}`` instead of an answer type's), and for the tiny policy
``demonstration`` and ``tokenizer_texts``. Any name but one the kit's own task files give that key (:func:`kit_code`)
is code that came with the file, so it is imported only when the caller says so (``trust_remote_code=True``, the
command line's ``--trust-task-code``), as ``datasets`` and ``transformers`` ask before running code that came with a
dataset or a model; otherwise the file is refused before anything is imported, naming each key and module
(:func:`check_task_code`). ``gold`` (a template over
a row's fields), ``metrics`` and ``headline`` are declared as data, and so is what only the demo and notebook 01 read
(:data:`EXTRAS`, kept as :attr:`grpo_kit.tasks.Task.extras`). The kit's own tasks are such files
(``grpo_kit/tasks/builtin/``).

Everything is checked when the file is loaded, before any model: the file must be YAML with known keys, the data
files must exist, be UTF-8 and parse, every row must hold the question and a non-empty answer of the declared type;
each message names the file and the line or the field. A question that is in both splits is warned about, with the
count. The task records a SHA-256 of the task file and of each data file (:attr:`grpo_kit.tasks.Task.digest`), so a
run folder can refuse data that changed since it was measured (:func:`check_digest`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import string
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from grpo_kit.system.files import read_yaml, sha256_file
from grpo_kit.tasks.answer_format import (
    SYSTEM_PROMPT,
    Example,
    ExtractionRule,
    extract_final_answer,
    extract_xml_answer,
)
from grpo_kit.tasks.answer_types import ANSWER_TYPES, answer_type
from grpo_kit.tasks.data import ROW_BATCH, Located, build_prompt, check_row, iter_rows, numbered
from grpo_kit.tasks.numbers import MAX_NUMBER_CHARS
from grpo_kit.tasks.reward_registry import BUILTIN_REWARDS, RewardSet
from grpo_kit.tasks.rewards import gold_text
from grpo_kit.tasks.task import Task
from grpo_kit.tasks.user_code import TRUST, check_trusted, import_named, untrusted

__all__ = ["CODE_KEYS", "EXTRAS", "KEYS", "TASK_FILE_SUFFIXES", "check_digest", "check_task_code", "foreign_code",
           "is_task_file", "kit_code", "load_task", "names_code", "task_name"]

log = logging.getLogger(__name__)

#: The keys a task file may hold.
KEYS = ("name", "description", "train", "test", "hub", "question", "answer", "answer_type", "solution", "choices",
        "system_prompt", "rewards", "validation_size", "loader", "splits", "rules", "gold", "metrics", "headline")
#: The keys only the demo, the tiny policy or notebook 01 read (:attr:`grpo_kit.tasks.Task.extras`).
EXTRAS = ("demonstration", "tokenizer_texts", "notes", "warm_xml_share", "compare_rewards", "answer_value")
_HUB_KEYS = ("path", "name", "train_split", "test_split")
#: The keys that name Python as ``module:name``, imported when the file is loaded.
CODE_KEYS = ("loader", "rules", "demonstration", "tokenizer_texts")
#: Suffixes that mark a task file where a task name is expected.
TASK_FILE_SUFFIXES = (".yaml", ".yml")
#: Format rewards every answer type is measured with, after its correctness reward.
_FORMAT_METRICS = ("soft_format_reward_func", "strict_format_reward_func", "xmlcount_reward_func")
_CACHE: dict[tuple[Any, ...], Task] = {}
_BUILTIN = Path(__file__).parent / "builtin"
#: The kinds of value a data file's field may hold, as a message names them (one kind a field: one table column).
_KINDS = {bool: "true or false", int: "a number", float: "a number", str: "text", list: "a list", dict: "an object"}


def is_task_file(task: Any) -> bool:
    """Whether ``task`` names a task file (a path ending ``.yaml`` or ``.yml``) rather than a task of the kit's own.

    >>> is_task_file("my_task.yaml"), is_task_file("gsm8k")
    (True, False)
    """
    return isinstance(task, (str, Path)) and str(task).lower().endswith(TASK_FILE_SUFFIXES)


def _short(value: Any) -> str:
    """``repr(value)`` cut in its middle past 60 characters, with its length: a 5,000-digit answer in one line."""
    import reprlib

    shown = reprlib.Repr()
    shown.maxstring = shown.maxlong = shown.maxother = 60
    text = shown.repr(value)
    return text if len(str(value)) <= 60 else f"{text} ({len(str(value))} characters)"


def task_name(task: Any) -> str:
    """A task as a report or model card names it, without loading it or importing anything: a built-in's name, a task
    file's ``name`` (its file's stem where it has none, as :func:`load_task` names it, or where the file is gone or
    unreadable), never the file's path.

    >>> task_name("gsm8k"), task_name("/nowhere/units.yaml")
    ('gsm8k', 'units')
    """
    if not is_task_file(task):
        return str(task)
    try:
        data = read_yaml(task, "a task file")
    except ValueError:
        data = None
    name = data.get("name") if isinstance(data, dict) else None
    return name.strip() if isinstance(name, str) and name.strip() else Path(str(task)).stem


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_yaml(path, "a task file")
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a YAML mapping (it holds {type(data).__name__}): write one key per line, "
                         "e.g. 'answer_type: text'")
    if "trust_remote_code" in data:
        raise ValueError(f"{path}: a task file cannot trust its own code (trust_remote_code): remove the key; whoever "
                         f"runs the file says so, with {TRUST}")
    unknown = [k for k in data if k not in KEYS + EXTRAS]
    if unknown:
        raise ValueError(f"{path}: unknown field {unknown[0]!r}; a task file's fields are {', '.join(KEYS + EXTRAS)}")
    # the rows a loader returns hold question and answer already; with a loader, rules may stand for an answer type
    loader = data.get("loader") is not None
    required = () if loader else ("question", "answer")
    for key in required + (("answer_type",) if not loader or data.get("rules") is None else ()):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ValueError(f"{path}: field {key!r} is {'missing' if key not in data else repr(data[key])}; "
                             + ("choose one of " + ", ".join(ANSWER_TYPES) if key == "answer_type" else
                                f"name the data field that holds the {key}"))
    # one field for the question and the answer: every gold answer would be the question (an answer read out of
    # the solution's own field, as MATH's boxed answers are, is fine)
    for other in ("answer", "solution"):
        if isinstance(data.get("question"), str) and data["question"].strip() == str(data.get(other, "")).strip():
            raise ValueError(f"{path}: question and {other} both name the data field {data['question']!r}: name the "
                             f"field that holds the {other}")
    return data


def _split_rows(path: Path, data: dict[str, Any]) -> tuple[dict[str, Iterator[Located]], dict[str, str]]:
    """Each split's rows (read as they are consumed), and the data files read (``{split: file}``)."""
    hub = data.get("hub")
    files = {split: data[split] for split in ("train", "test") if data.get(split) is not None}
    if hub is not None and files:
        raise ValueError(f"{path}: give the data either as files (train:, test:) or as hub:, not both")
    if hub is None and "test" not in files:
        raise ValueError(f"{path}: field 'test' is missing; name the test data file (JSONL, CSV or Parquet), relative "
                         "to the task file, or give hub: {path: owner/name, test_split: test}")
    if hub is not None:
        if not isinstance(hub, dict) or not isinstance(hub.get("path"), str) or set(hub) - set(_HUB_KEYS):
            raise ValueError(f"{path}: field 'hub' must be a mapping with path: owner/name and optionally "
                             f"{', '.join(_HUB_KEYS[1:])}, got {hub!r}")
        splits = {"train": hub.get("train_split"), "test": hub.get("test_split", "test")}
        return {split: numbered(map(dict, _hub_split(path, hub, name)), f"{hub['path']}[{name}]")
                for split, name in splits.items() if name is not None}, {}
    rows, read = {}, {}
    for split, name in files.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{path}: field {split!r} must be a file name, got {name!r}")
        file = (path.parent / name).resolve()
        if not file.is_file():
            raise ValueError(f"{path}: {split}: no data file at {file} (paths are relative to the task file)")
        rows[split], read[split] = iter_rows(file), str(file)
    return rows, read


def _hub_split(path: Path, hub: dict[str, Any], split: str) -> Any:
    """One split of a task file's Hub dataset (``datasets.load_dataset``), every failure one line naming the task file.

    Offline, ``datasets`` retries for about half a minute before it gives up: when ``HF_HUB_OFFLINE`` is not set, the
    Hub's host is tried first with a 5-second timeout, and an unreachable Hub is said at once.

    Raises:
        ValueError: the Hub cannot be reached, or the dataset, its configuration or the split cannot be loaded.
    """
    import os

    from grpo_kit.system.hub import hub_offline, hub_problem

    fix = ("check hub: in the task file and your connection, or set HF_HUB_OFFLINE=1 to use a copy already in the "
           "Hugging Face cache")
    local = Path(hub["path"]).expanduser().is_dir()  # datasets reads a folder of data files as a data set
    if not local and not hub_offline() and not os.environ.get("HF_DATASETS_OFFLINE") and \
            (problem := hub_problem(f"{path}: hub: {hub['path']} is downloaded from the Hub", token=False)):
        raise ValueError(f"{problem}: {fix}")
    from datasets import load_dataset

    try:
        return load_dataset(hub["path"], hub.get("name"), split=split)
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds (ConnectionError, DatasetNotFoundError, ...)
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path}: hub: cannot load {hub['path']}" + (f" ({hub['name']})" if hub.get("name") else "")
                         + f" split {split!r}: {reason}; {fix}") from None


def _examples(path: Path, split: str, rows: Iterable[Located], data: dict[str, Any], kind: Any, system_prompt: str
              ) -> Any:
    """A split's rows checked and turned into the task's examples, one at a time (a bad row is reported as soon as
    it is read), kept as an Arrow table built a batch at a time: memory holds the examples once, in Arrow's compact
    form, plus one batch of Python objects (``benchmarks/task_file_load.py``)."""
    import pyarrow as pa

    question, answer, solution = data["question"], data["answer"], data.get("solution")
    need = (f"{path} names {question!r} as the question field and {answer!r} as the answer field"
            + (f" and {solution!r} as the solution field" if solution else ""))
    fields = {question: (str,), answer: (str, int, float), **({solution: (str,)} if solution else {})}
    own = (question, answer, solution, "prompt", "question", "answer", "solution")
    chunks, batch = [], []
    kinds: dict[str, tuple[str, str]] = {}  # each other field's first kind of value, and where it was seen

    def table(rows: list[dict[str, Any]], *tables: Any) -> Any:
        """``rows`` as a table, after ``tables`` ("permissive": whole numbers in one batch, decimals in another are
        decimals); a field whose values differ in type is one line naming the file."""
        try:
            tables += (pa.Table.from_pylist(rows),) if rows else ()
            return pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise ValueError(f"{path}: the {split} rows' fields cannot form one table ({e}): give each field values "
                             "of one type in every row") from None

    for where, row in rows:
        check_row(where, row, fields, need)
        value = gold_text(row[answer])
        gold = kind.gold(value) if value is not None else None
        if gold is None:
            raise ValueError(f"{where}: {answer!r} is {_short(row[answer])}, {_not_of_type(kind, value)} (answer_type "
                             f"{kind.name} in {path})")
        example = {k: v for k, v in row.items() if k not in own}
        for k, v in example.items():  # one table holds them: a field of two kinds is named with both rows
            if v is None:
                continue
            held = _KINDS.get(type(v), type(v).__name__)
            first = kinds.setdefault(k, (held, where))
            if first[0] != held:
                raise ValueError(f"{where}: field {k!r} is {held} ({str(v)[:40]!r}) where {first[1]} holds {first[0]}: "
                                 "give the field values of one kind in every row (quote numbers meant as text)")
        example.update(question=row[question], answer=gold, prompt=build_prompt(row[question], system_prompt))
        if solution:
            example["solution"] = row[solution]
        batch.append(example)
        if len(batch) == ROW_BATCH:
            chunks.append(table(batch))
            batch = []
    return table(batch, *chunks)


def _not_of_type(kind: Any, value: str | None) -> str:
    """Why a gold answer is not of its type, as the row's message says it: what the type needs, and for a number
    longer than the kit reads (:data:`grpo_kit.tasks.numbers.MAX_NUMBER_CHARS`) that length."""
    digits = sum(c in "0123456789" for c in value or "")
    if kind.name == "number" and digits > MAX_NUMBER_CHARS:
        return (f"a number of {digits:,} digits, longer than the {MAX_NUMBER_CHARS:,} the kit reads and compares: "
                "give a shorter answer, or answer_type text to compare it as text")
    return f"not {kind.needs}"


def _questions(table: Any) -> Iterator[str]:
    """A table's questions with their whitespace runs made one space, a chunk of the column at a time (none without a
    table)."""
    for chunk in table.column("question").chunks if table is not None else ():
        for question in chunk.to_pylist():
            yield " ".join(question.split())


def _warn_overlap(path: Path, examples: dict[str, Any]) -> None:
    train = {hash(q) for q in _questions(examples.get("train"))}  # hashes: a set of the questions would copy them all
    both = sum(1 for q in _questions(examples["test"]) if hash(q) in train) if train else 0
    if both:
        log.warning(f"{path}: {both} of {examples['test'].num_rows} test questions are also in the train split: "
                    "accuracy on them measures memory, not solving; remove them from one of the files")


def _signature(path: Path) -> tuple[Any, ...]:
    """What the cache of loaded task files is keyed on: the file's path, size and modification time."""
    stat = path.stat()
    return str(path), stat.st_size, stat.st_mtime_ns


@functools.cache
def kit_code() -> Mapping[str, frozenset[str]]:
    """The Python a task file may name without ``trust_remote_code``: for each key of :data:`CODE_KEYS`, the
    ``module:name`` values the kit's own task files give it (``grpo_kit/tasks/builtin/``: GSM8K's loader, Countdown's
    rules, ...), and nothing else: not any name in a ``grpo_kit`` module, since a name may be a dotted path through
    the module's globals (``grpo_kit.tasks.user_code:importlib.import_module``). Read from the files once, without
    importing anything."""
    found: dict[str, set[str]] = {key: set() for key in CODE_KEYS}
    for file in sorted(_BUILTIN.glob("*.yaml")):
        data = read_yaml(file, "a task file of the kit's own")
        for key in CODE_KEYS:
            if isinstance(data.get(key), str):
                found[key].add(data[key].strip())
    return MappingProxyType({key: frozenset(refs) for key, refs in found.items()})


def foreign_code(data: Any) -> dict[str, Any]:
    """``{key: module:name}`` of the Python a task file's keys (``data``, as read) name that is not the kit's own
    (:func:`kit_code`): what loading it needs ``trust_remote_code`` for; empty for anything but a mapping."""
    if not isinstance(data, Mapping):
        return {}
    return untrusted({key: data.get(key) for key in CODE_KEYS}, kit_code())


def check_task_code(path: str | Path, data: Mapping[str, Any], trust_remote_code: bool = False) -> None:
    """Refuse a task file that names Python other than the kit's own for its key (:func:`kit_code`) unless the caller
    trusts it (:func:`grpo_kit.tasks.user_code.check_trusted`: a task file arrives with data, often downloaded).

    Args:
        path: the task file (for the message).
        data: its keys, as read.
        trust_remote_code: the caller's consent (``--trust-task-code`` on the command line).

    Raises:
        ValueError: untrusted code; one line naming each key, its ``module:name`` and where the module would be
            imported from, said before anything is imported.
    """
    check_trusted(path, {key: data.get(key) for key in CODE_KEYS}, "loading it", trust_remote_code, kit_code())


def names_code(task: Any) -> dict[str, Any]:
    """``{key: module:name}`` of the Python other than the kit's own that ``task``, a task file, names
    (:func:`foreign_code`), which loading it needs ``trust_remote_code`` for (:func:`check_task_code`); read without
    importing anything. Empty for a task of the kit's own and for a file that is gone or unreadable (loading it says
    why)."""
    if not is_task_file(task):
        return {}
    try:
        return foreign_code(read_yaml(task, "a task file"))
    except (OSError, ValueError):
        return {}


def _named(path: Path, data: dict[str, Any], key: str) -> Any:
    """The Python object a key names as ``module:name`` (``None`` when the key is absent), imported
    (:func:`grpo_kit.tasks.user_code.import_named`: whatever its import raises is one line naming the file and line).
    """
    return None if data.get(key) is None else import_named(str(data[key]), f"{path}: {key}:")


def _reward_names(path: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    """A key holding reward names (a list, or a mapping to weights), each checked to be a built-in reward."""
    given = data.get(key)
    if isinstance(given, list):
        given = {name: 1.0 for name in given}
    if not isinstance(given, dict) or not given:
        raise ValueError(f"{path}: field {key!r} must map reward names to weights, e.g. "
                         f"{{text_correctness_reward_func: 2.0, strict_format_reward_func: 0.5}}, got {given!r}")
    for name in given:
        if name not in BUILTIN_REWARDS:
            raise ValueError(f"{path}: {key}: unknown reward {name!r}; choose from {', '.join(BUILTIN_REWARDS)} "
                             "(your own functions go to --rewards module:function or the notebooks' rewards)")
    return given


def _rewards(path: Path, data: dict[str, Any], correctness: str | None) -> tuple[tuple[str, ...], tuple[float, ...]]:
    if data.get("rewards") is None and correctness is not None:
        return ("xmlcount_reward_func", "strict_format_reward_func", correctness), (1.0, 1.0, 2.0)
    if data.get("rewards") is None:
        raise ValueError(f"{path}: without answer_type the task has no correctness reward to train with: add "
                         "rewards: {reward name: weight} (e.g. {xmlcount_reward_func: 1.0}), or an answer_type: "
                         + ", ".join(ANSWER_TYPES))
    given = _reward_names(path, data, "rewards")
    try:
        RewardSet(dict(given))
    except ValueError as e:
        raise ValueError(f"{path}: rewards: {e}") from None
    return tuple(given), tuple(float(w) for w in given.values())


def _extras(path: Path, data: dict[str, Any], weights: dict[str, float], correctness: str | None,
            trains: bool) -> dict[str, Any]:
    """:attr:`grpo_kit.tasks.Task.extras`: the keys of :data:`EXTRAS` the file gives (the Python they name
    imported), and for a task that trains, each key the file leaves out at the default a task over the user's own data
    gets."""
    extras: dict[str, Any] = {key: data[key] for key in ("notes", "warm_xml_share", "answer_value") if key in data}
    extras.update({key: _named(path, data, key) for key in ("demonstration", "tokenizer_texts") if key in data})
    if "compare_rewards" in data:
        sets = data["compare_rewards"]
        if not isinstance(sets, dict) or not sets:
            raise ValueError(f"{path}: field 'compare_rewards' must map names to reward sets, got {sets!r}")
        extras["compare_rewards"] = {name: _reward_names(path, sets, name) for name in sets}
    elif "loader" not in data and weights.get(correctness) and any(w for n, w in weights.items() if n != correctness):
        # the task's own set against the same set with its correctness logged but not trained on (notebook 05)
        extras["compare_rewards"] = {"format-only": {**weights, correctness: 0.0}, "correctness": weights}
    if not trains:
        return extras
    solution, system_prompt = bool(data.get("solution")), data.get("system_prompt", SYSTEM_PROMPT)

    def demonstration(example: Example, style: str = "equations") -> tuple[str, str]:  # noqa: ARG001
        return (example.get("solution") or "", str(example["answer"]))

    def tokenizer_texts(dataset: Any) -> list[str]:
        rows = list(dataset)
        return [system_prompt] * 50 + [r["question"] for r in rows] + [str(r["answer"]) for r in rows] + \
            [r["solution"] for r in rows if r.get("solution")]

    notes = (f"A task file ({path.name}) with {data.get('answer_type')} answers: the tiny policy learns from its "
             + ("worked solutions" if solution else "answers alone (no solution field)") +
             "; on a CPU it can show the answer format being learned more than solving.")
    return {"demonstration": demonstration, "tokenizer_texts": tokenizer_texts, "notes": notes, **extras}


def load_task(path: str | Path, builtin: bool = False, trust_remote_code: bool = False) -> Task:
    """Read a task file and its data into a :class:`grpo_kit.tasks.Task` (see the module docstring for the fields).

    Args:
        path: the YAML file; data files are found relative to it.
        builtin: a task file of the kit's own (:data:`grpo_kit.tasks.BUILTIN_TASKS`): recorded by name, with no digest.
        trust_remote_code: import the Python the file names outside ``grpo_kit`` (:func:`check_task_code`);
            without it such a file is refused before anything is imported.

    Returns:
        The task: its ``name`` (default the file's stem), the splits given, rows with ``question``, ``answer`` (the
        gold in the type's canonical form), ``prompt``, ``solution`` when named, and the row's other fields; the
        answer type's rules, metrics and correctness reward (default rewards: XML count 1, strict format 1,
        correctness 2); two reward sets to compare (notebook 05): ``correctness``, the task's set, and
        ``format-only``, the same with the correctness reward at weight 0 (logged, not trained on);
        :attr:`~grpo_kit.tasks.Task.ref` is the file's absolute path.

    Raises:
        ValueError: before anything else loads, naming the file and the line or field: no such file; not UTF-8 or
            not YAML; an unknown or missing field; an unknown answer type; Python of the file's own without
            ``trust_remote_code``; Python named as ``module:name`` that cannot be imported; a data file that is
            missing, not UTF-8, or holds a line that is not JSON; a row without the question or answer field, or
            whose answer is null, empty or not of the answer type; an unknown reward or a bad weight; a bad
            ``validation_size``.
    """
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"no task file at {path}: give the path of a YAML task file (see the tutorial 'Your own "
                         "data')")
    data = _read_yaml(path)
    check_task_code(path, data, trust_remote_code)
    kind = None
    if data.get("answer_type") is not None:
        kind_name = data["answer_type"].strip()
        if kind_name not in ANSWER_TYPES:
            raise ValueError(f"{path}: answer_type {kind_name!r} is not one of {', '.join(ANSWER_TYPES)}")
        choices = data.get("choices", "ABCD")
        if isinstance(choices, list):
            choices = "".join(str(c) for c in choices)
        if kind_name == "choice" and (not isinstance(choices, str) or not choices.isalpha() or not choices.isupper()):
            raise ValueError(f"{path}: field 'choices' must be the option letters in capitals, e.g. ABCD, got "
                             f"{choices!r}")
        kind = answer_type(kind_name, choices)
    system_prompt = data.get("system_prompt", SYSTEM_PROMPT)
    if not isinstance(system_prompt, str) or not system_prompt.strip():
        raise ValueError(f"{path}: field 'system_prompt' must be text, got {system_prompt!r}")
    validation_size = data.get("validation_size")
    if validation_size is not None and (type(validation_size) is not int or validation_size < 1):  # bool is no size
        raise ValueError(f"{path}: field 'validation_size' must be a whole number >= 1, got {validation_size!r}")
    name = data.get("name", path.stem)  # as task_name reads it
    if not isinstance(name, str) or not name.strip() or "/" in name or not name.isprintable():
        raise ValueError(f"{path}: field 'name' must be a short name on one line, without '/' or control characters "
                         f"(it names the run's folder, report and model card), got {_short(name)}")
    rewards, weights = _rewards(path, data, kind.reward if kind else None)
    gold = _gold(path, data)
    loader = _named(path, data, "loader")
    if loader is not None:
        return _task(path, data, name, kind, _checked_loader(path, data["loader"], loader, gold), _splits(path, data),
                     rewards, weights, validation_size, None if builtin else {str(path): sha256_file(path)}, gold)
    rows, files = _split_rows(path, data)
    key = (_signature(path), *(_signature(Path(f)) for f in files.values()))
    if files and key in _CACHE:  # a Hub dataset is not cached here: datasets caches it
        return _CACHE[key]
    examples = {split: _examples(path, split, split_rows, data, kind, system_prompt)
                for split, split_rows in rows.items()}
    _warn_overlap(path, examples)
    for table in examples.values():  # a template naming a field the rows lack is refused now, not at a table
        gold(table.slice(0, 1).to_pylist()[0])
    digest = {str(path): sha256_file(path), **{f: sha256_file(Path(f)) for f in files.values()}}

    def load(split: str = "test", **kwargs: Any) -> Any:
        from datasets import Dataset
        from datasets.table import InMemoryTable

        # the kept table itself, not a copy; fingerprinted by the data's SHA-256 (datasets would otherwise hash
        # the whole table on every load: seconds, and a transient copy of it in memory)
        fingerprint = hashlib.sha256(json.dumps([sorted(digest.items()), split, kind.name]).encode()).hexdigest()
        return Dataset(InMemoryTable(examples[split]), fingerprint=fingerprint[:32])

    task = _task(path, data, name, kind, load, tuple(s for s in ("train", "test") if s in examples), rewards,
                 weights, validation_size, None if builtin else digest, gold)
    if files:
        _CACHE[key] = task
    return task


def _gold(path: Path, data: dict[str, Any]) -> Callable[[Example], str]:
    """The ``gold`` key as a function of a row: a ``str.format`` template over the row's fields (default
    ``"{answer}"``), its syntax checked now; a row that cannot fill it raises one line naming the file.

    Raises:
        ValueError: the template is not text, is not a template (a lone brace), numbers its fields instead of
            naming them, or gives a field anything but its name: a format spec (``{answer:>9999999999}`` would fill
            10 GB per row), a conversion (``!r``), an attribute or an index (``{answer.__class__}``).
    """
    template = data.get("gold", "{answer}")
    example = "e.g. '{answer}', or '{target} from {nums}' (a brace meant as text written twice: '{{')"
    if not isinstance(template, str) or not template.strip():
        raise ValueError(f"{path}: field 'gold' must be a template over a row's fields, {example}; got {template!r}")
    try:
        fields = [(field, spec, conversion) for _, field, spec, conversion in string.Formatter().parse(template)
                  if field is not None]
    except ValueError as e:
        raise ValueError(f"{path}: gold {template!r} is not a template ({e}): {example}") from None
    if any(not field or field[0].isdigit() for field, _, _ in fields):
        raise ValueError(f"{path}: gold {template!r} numbers its fields: name them, {example}")
    for field, spec, conversion in fields:
        extra = f"a format spec ({':' + spec!r})" if spec else f"a conversion ('!{conversion}')" if conversion else \
            "an attribute or index" if any(c in field for c in ".[") else None
        if extra is not None:
            raise ValueError(f"{path}: gold {template!r} gives the field {field.split('.')[0].split('[')[0]!r} "
                             f"{extra}: a gold template names fields only, as '{{field}}', {example}")

    def gold(row: Example) -> str:
        try:
            return template.format_map(row)
        except (KeyError, IndexError, AttributeError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: gold {template!r} cannot be filled from a row ({type(e).__name__}: {e}): name "
                             f"the row's fields, which are {', '.join(map(str, row))}") from None

    return gold


def _splits(path: Path, data: dict[str, Any]) -> tuple[str, ...]:
    """The ``splits`` a ``loader`` has (default train and test); one name may stand for a list of one."""
    splits = data.get("splits", ["train", "test"])
    splits = [splits] if isinstance(splits, str) else splits
    if not isinstance(splits, list) or not splits or not all(isinstance(s, str) and s.strip() for s in splits) \
            or "test" not in splits or len(set(splits)) != len(splits):
        raise ValueError(f"{path}: field 'splits' must list the loader's split names, test among them, e.g. [train, "
                         f"test] or [test], got {data.get('splits')!r}")
    return tuple(splits)


def _checked_loader(path: Path, ref: str, loader: Callable[..., Any], gold: Callable[[Example], str]
                    ) -> Callable[..., Any]:
    """A task file's ``loader``, each split it returns checked before anything uses it: a ``datasets.Dataset`` with a
    ``prompt`` column whose first row fills the ``gold`` template; what the loader raises besides a ``ValueError``
    (which says what to change already) is one line naming the file."""

    def load(split: str = "test", **kwargs: Any) -> Any:
        from datasets import Dataset

        try:
            rows = loader(split, **kwargs)
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 - a user's loader may raise anything
            lines = str(e).strip().splitlines()
            raise ValueError(f"{path}: loader {ref} raised {type(e).__name__} reading split {split!r}"
                             f"{': ' + lines[0] if lines else ''}: fix the loader") from None
        if not isinstance(rows, Dataset):
            raise ValueError(f"{path}: loader {ref} returned {type(rows).__name__} for split {split!r}, not a "
                             "datasets.Dataset: return one with a conversational prompt column, e.g. "
                             "datasets.Dataset.from_list(rows)")
        if "prompt" not in rows.column_names:
            raise ValueError(f"{path}: loader {ref} returned split {split!r} without a prompt column (it has "
                             f"{', '.join(rows.column_names) or 'none'}): give each row its conversational prompt")
        if len(rows):
            gold(rows[0])
        return rows

    return load


def _task(path: Path, data: dict[str, Any], name: str, kind: Any, loader: Any, splits: tuple[str, ...],
          rewards: tuple[str, ...], weights: tuple[float, ...], validation_size: int | None,
          digest: dict[str, str] | None, gold: Callable[[Example], str]) -> Task:
    rules = _named(path, data, "rules")
    if rules is None:
        def correct(answer: str, example: Example) -> bool:
            return kind.same(answer, str(example["answer"]))

        rules = {"strict": ExtractionRule(kind.strict, correct), "flexible": ExtractionRule(kind.flexible, correct)}
    metrics = _reward_names(path, data, "metrics") if "metrics" in data else \
        ((kind.reward,) if kind else ()) + _FORMAT_METRICS
    extras = _extras(path, data, dict(zip(rewards, weights)), kind.reward if kind else None, "train" in splits)
    number = kind is not None and kind.name == "number"
    if number:
        extras.setdefault("answer_value", "answer")
    description = data.get("description") or f"{name}: {kind.name if kind else 'its own'} answers, from {path.name}"
    return Task(name=name, description=description, loader=loader, splits=splits, rewards=rewards, weights=weights,
                metrics=tuple(metrics), rules=rules, gold=gold, fields=_number_fields if number else Task.fields,
                headline=data.get("headline", kind.reward if kind else "strict_correct"),
                validation_size=validation_size, file=None if digest is None else str(path), digest=digest,
                extras=extras)


def _number_fields(text: str) -> dict[str, Any]:
    """What an evaluation record of a task with number answers carries besides the rules' answers: the text inside
    ``<answer>`` and the first number in it."""
    return {"extracted": extract_xml_answer(text), "final_answer": extract_final_answer(text)}


def check_digest(task: Task, recorded: Mapping[str, str] | None, folder: str | Path | None = None) -> None:
    """Refuse a task whose files changed since a run folder recorded their digests.

    Args:
        task: the task loaded now.
        recorded: ``{file: SHA-256}`` the run folder recorded (``None``: nothing recorded, nothing to check).
        folder: the run folder, for the message.

    Raises:
        ValueError: a file changed, went missing or was added; the message names each.
    """
    if not recorded or task.digest is None:
        return
    now = dict(task.digest)
    what = "; ".join([*(f"{f} changed" for f in recorded if f in now and now[f] != recorded[f]),
                      *(f"{f} is no longer used" for f in recorded if f not in now),
                      *(f"{f} is new" for f in now if f not in recorded)])
    if what:
        where = f"{folder} was measured on" if folder is not None else "this run recorded"
        raise ValueError(f"the data of task {task.name} differs from what {where}: {what}. Restore the files, or "
                         "start a new run folder for the new data")
