"""Reward functions for verifiable answers in TRL's ``reward_funcs`` contract, what the kit knows about each,
and how the trainer calls them.

A reward function takes keyword arguments ``prompts``, ``completions``, the dataset columns it
needs (``answer``) and ``**kwargs`` (TRL also passes ``completion_ids``, ``trainer_state``,
``log_metric``, ...). A completion is a ``str`` or a list of chat messages; the functions here
read both (:func:`grpo_kit.tasks.answer_format.completion_text`). Gold answers may be ``str``, ``int``
or ``float`` (:func:`gold_text`). They return one ``float`` per completion (``None``: cannot judge,
TRL skips the sample), never raise on any completion text, run in linear time on any completion
(``benchmarks/reward_worst_case.py``) and print nothing; a column whose length differs from the
completions' is a caller's mistake and raises ``ValueError``.

The six in :data:`SEED_REWARDS` are those of Unsloth's Llama 3.1 (8B) GRPO notebook as the blog post
"LLM Reinforcement Learning with GRPO" (2025-03-03) trained with them, with their regexes fixed;
docs/concepts/rewards.md lists where they differ from the notebook and why. Tasks add their own
(:mod:`grpo_kit.tasks.countdown`, :mod:`grpo_kit.tasks.math_verify`).

What the kit knows about a reward is one :class:`Reward`: the function, its table label, its
largest value, whether it is right/wrong (evaluation counts flips and runs McNemar on it) and the
dataset columns it reads (checked before training). A function carries these as attributes
(:func:`describe`); a user's function without them still works (its columns are read from its
signature). :func:`guarded` is what the trainer and evaluation call: a reward's mistake becomes "cannot judge",
never a crash. Built-in rewards are known by name through one mapping, which this module does not read:
:data:`grpo_kit.tasks.reward_registry.BUILTIN_REWARDS` (open-r1's ``REWARD_FUNCS_REGISTRY``), with
:class:`~grpo_kit.tasks.reward_registry.RewardSet`, the rewards of one run and their weights.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import math
import numbers
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_kit.tasks.answer_format import (
    completion_text,
    extract_final_answer,
    extract_xml_answer,
    is_soft_format,
    is_strict_format,
    xml_count,
)
from grpo_kit.tasks.numbers import is_integer_literal, numbers_equal

__all__ = ["COLUMN_KINDS", "LARGEST_REWARD", "SEED_REWARDS", "Reward", "RewardCalls", "RewardFunc", "column",
           "column_problem", "correctness_reward_func", "describe", "gold_text", "golds", "as_values", "per_answer",
           "guarded", "int_reward_func", "r1_format_reward_func", "r1_tag_count_reward_func",
           "soft_correctness_reward_func", "soft_format_reward_func", "strict_format_reward_func", "texts",
           "xmlcount_reward_func"]

RewardFunc = Callable[..., list[float | None]]

log = logging.getLogger(__name__)

#: Keyword arguments TRL passes to every reward besides the dataset columns (trl/trainer/grpo_trainer.py).
_TRL_ARGUMENTS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_metric", "log_extra"})


def texts(completions: Sequence[Any] | None) -> list[str]:
    """Each completion's text (:func:`grpo_kit.tasks.answer_format.completion_text`)."""
    return [completion_text(c) for c in (completions or [])]


def gold_text(value: Any) -> str | None:
    """A gold answer as text: a ``str`` as it is, an ``int`` or a finite ``float`` as its number (``2.0`` is
    ``"2"``, ``2.5`` is ``"2.5"``); anything else (``None``, a list, ``True``) cannot be read: ``None``.

    >>> [gold_text(v) for v in ["72", 72, 72.0, 2.5, 1e300, None, True, float("nan")]]
    ['72', '72', '72', '2.5', '1e+300', None, None, None]
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        # exactly as Python writes it beyond 2**53: str(int(1e300)) would be the float's 301 digits, not 10**300
        return str(int(value)) if value.is_integer() and abs(value) < 2 ** 53 else repr(value)
    return None


def column(values: Any, n: int, name: str) -> list[Any]:
    """A dataset column as TRL passes it, one entry per completion; an absent column (``None``) is ``None`` each.

    Raises:
        ValueError: the column is not a list, or its length is not the number of completions (a
            caller's mistake: TRL always passes one entry per completion; padding or truncating would
            score completions against the wrong questions).
    """
    if values is None:
        return [None] * n
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__"):
        raise ValueError(f"the {name!r} column must be a list with one entry per completion, got "
                         f"{type(values).__name__}")
    if len(values) != n:
        raise ValueError(f"{n} completions but {len(values)} entries in the {name!r} column: pass one per "
                         "completion (TRL repeats each row's value num_generations times)")
    return list(values)


def golds(answer: Any, n: int) -> list[str | None]:
    """The ``answer`` column as text (:func:`gold_text`), one per completion."""
    return [gold_text(a) for a in column(answer, n, "answer")]


def per_answer(completions: Sequence[Any] | None, answer: Any, judge: Callable[[str, str], float | None],
               unread: float | None = 0.0) -> list[float | None]:
    """``judge(text, gold)`` of each completion's text and its gold answer (:func:`golds`); ``unread`` where the gold
    cannot be read: the loop of every reward that compares a completion with the ``answer`` column."""
    found = texts(completions)
    return [unread if gold is None else judge(t, gold) for t, gold in zip(found, golds(answer, len(found)))]


#: What the dataset columns the built-in rewards read may hold, checked before training (:func:`column_problem`).
COLUMN_KINDS: dict[str, str] = {"answer": "text or a number", "nums": "a list of numbers", "target": "a number"}
_NUMBER_TYPES = ("int", "uint", "float", "double", "decimal")


def column_problem(name: str, feature: Any) -> str | None:
    """Why a ``datasets`` feature cannot be read by the rewards that read column ``name``; ``None`` when it can
    (or when the column is not one of :data:`COLUMN_KINDS`).

    >>> from datasets import List, Value
    >>> column_problem("answer", Value("int64")) is None, column_problem("answer", List(Value("string")))
    (True, "column 'answer' holds List(Value('string')), not text or a number")
    """
    if name not in COLUMN_KINDS:
        return None

    def number(f: Any) -> bool:
        return str(getattr(f, "dtype", "")).startswith(_NUMBER_TYPES)

    inner = getattr(feature, "feature", None)
    ok = {"answer": number(feature) or str(getattr(feature, "dtype", "")) in ("string", "large_string"),
          "nums": inner is not None and number(inner),
          "target": number(feature)}[name]
    return None if ok else f"column {name!r} holds {feature}, not {COLUMN_KINDS[name]}"


def describe(label: str, max_value: float, binary: bool = True,
             columns: tuple[str, ...] = ()) -> Callable[[RewardFunc], RewardFunc]:
    """Mark a reward function with what evaluation and the checks need to know (read by :meth:`Reward.of`).

    Args:
        label: its row label in tables (``"Hard correctness"``).
        max_value: its largest value per completion.
        binary: right/wrong (evaluation counts flips and runs McNemar on it); ``False`` for graded rewards.
        columns: the dataset columns it reads (checked before training).
    """
    def mark(func: RewardFunc) -> RewardFunc:
        func.label, func.max_value, func.binary, func.columns = label, max_value, binary, columns  # type: ignore
        return func

    return mark


@dataclass(frozen=True)
class Reward:
    """One reward function and what the kit knows about it.

    Attributes:
        func: the function, in TRL's contract (what TRL calls; its ``__name__`` is the metric name).
        label: its row label in tables.
        max_value: its largest value per completion (NaN when unknown).
        binary: right/wrong (flips and McNemar in before/after tables).
        columns: the dataset columns it reads.
    """

    func: RewardFunc
    label: str
    max_value: float = math.nan
    binary: bool = False
    columns: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """Its ``__name__``: TRL logs it as ``rewards/<name>/mean``; evaluation records key it so."""
        return self.func.__name__

    @classmethod
    def of(cls, func: RewardFunc | Reward) -> Reward:
        """What is known about ``func``: the attributes :func:`describe` set, else its name as label, an unknown
        maximum, graded, and the dataset columns its signature names (parameters other than TRL's own).

        Raises:
            ValueError: ``func`` is not callable, has no ``__name__``, or cannot take ``completions`` as a keyword
                argument (TRL calls ``func(prompts=..., completions=..., <columns>..., **kwargs)``).
        """
        if isinstance(func, Reward):
            return func
        name = getattr(func, "__name__", None)
        if not callable(func) or not isinstance(name, str):
            raise ValueError(f"a reward must be a function (TRL's contract), got {func!r}")
        columns = getattr(func, "columns", None)
        try:
            parameters = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):  # a builtin or C function: nothing to check
            parameters = None
        if parameters is not None:
            named = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            if "completions" not in named and not any(p.kind is p.VAR_KEYWORD for p in parameters):
                raise ValueError(f"reward {name} cannot take completions=...: TRL calls it as "
                                 f"{name}(prompts=..., completions=..., <dataset columns>..., **kwargs); give it "
                                 "those keyword parameters and **kwargs")
            if columns is None:
                columns = tuple(p for p in named if p not in _TRL_ARGUMENTS)
        return cls(func, str(getattr(func, "label", name)), float(getattr(func, "max_value", math.nan)),
                   bool(getattr(func, "binary", False)), tuple(columns or ()))


# --- the blog post's six ------------------------------------------------------------------------------


@describe("Hard correctness", 1.0, columns=("answer",))
def correctness_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Hard correctness: 1.0 when the text inside ``<answer>`` equals the gold answer exactly.

    Args:
        prompts: the prompts (unused; part of TRL's contract).
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.
        answer: gold answers, one per completion: ``str``, ``int`` or ``float`` (:func:`gold_text`;
            the GSM8K ``answer`` column holds strings).

    Returns:
        ``list[float]`` of length N, each 0.0 or 1.0. A string compare, as in the notebook:
        ``"1200.0"`` does not match ``"1200"`` (:func:`soft_correctness_reward_func` does).

    >>> correctness_reward_func(completions=["<answer>\\n72\\n</answer>", "<answer>72.0</answer>"],
    ...                         answer=["72", "72"])
    [1.0, 0.0]
    """
    return per_answer(completions, answer, lambda t, gold: float(extract_xml_answer(t) == gold))


@describe("Soft correctness", 1.0, columns=("answer",))
def soft_correctness_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Soft correctness: 1.0 when the first number inside ``<answer>`` equals the gold as a number.

    Args:
        prompts: unused.
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.
        answer: gold answers, one per completion: ``str``, ``int`` or ``float`` (:func:`gold_text`).

    Returns:
        ``list[float]`` of length N, each 0.0 or 1.0. ``"1200.0"``, ``"$1,200"`` and
        ``"1200 units"`` match ``"1200"``; ``"3"`` does not match ``"-3"``. The blog post compared
        strings and dropped the sign; this compares numbers with the sign kept.

    >>> soft_correctness_reward_func(
    ...     completions=[[{"role": "assistant", "content": "<answer>$1,200</answer>"}],
    ...                  [{"role": "assistant", "content": "<answer>3</answer>"}]],
    ...     answer=["1200", "-3"])
    [1.0, 0.0]
    """
    return per_answer(completions, answer, lambda t, gold: float(numbers_equal(extract_final_answer(t), gold)))


@describe("Integer", 0.5)
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
    return [0.5 if is_integer_literal(extract_xml_answer(t)) else 0.0 for t in texts(completions)]


@describe("Strict format", 0.5)
def strict_format_reward_func(completions=None, **kwargs) -> list[float]:
    """Strict format: 0.5 when the whole completion is reasoning then answer, each tag on its own line.

    Pattern ``^<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\n*$`` with ``re.DOTALL``
    (:func:`grpo_kit.tasks.answer_format.is_strict_format`; the notebook lacked DOTALL: unsloth #1761).

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N, each 0.0 or 0.5.

    >>> strict_format_reward_func(completions=[
    ...     "<reasoning>\\nstep 1\\nstep 2\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n",
    ...     "<reasoning>2+2</reasoning><answer>4</answer>"])
    [0.5, 0.0]
    """
    return [0.5 if is_strict_format(t) else 0.0 for t in texts(completions)]


@describe("Soft format", 0.5)
def soft_format_reward_func(completions=None, **kwargs) -> list[float]:
    """Soft format: 0.5 when the completion starts with a reasoning block followed by an answer block.

    Pattern ``<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>`` with ``re.DOTALL`` (the notebook lacked
    DOTALL: unsloth #1761), anchored at the start (``re.match``), as in the notebook; decided in linear
    time by :func:`grpo_kit.tasks.answer_format.is_soft_format`.

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N, each 0.0 or 0.5.

    >>> soft_format_reward_func(completions=["<reasoning>a\\nb</reasoning> <answer>4</answer>", "4"])
    [0.5, 0.0]
    """
    return [0.5 if is_soft_format(t) else 0.0 for t in texts(completions)]


@describe("XML tag count", 0.5, binary=False)
def xmlcount_reward_func(completions=None, **kwargs) -> list[float]:
    """XML tag count: :func:`grpo_kit.tasks.answer_format.xml_count` of each completion (at most 0.5;
    negative for long tails).

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N.

    >>> xmlcount_reward_func(completions=["<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>", "x"])
    [0.5, 0.0]
    """
    return [xml_count(t) for t in texts(completions)]


# an </answer> line that ends the text or a line (MULTILINE's `$`): a literal start, so the search is linear
_R1_CLOSE = re.compile(r"\n</answer>(?:\n|\Z)")


def _r1_format(text: str) -> bool:
    """open-r1's layout, ``re.match(r"^<think>\\n.*?\\n</think>\\n<answer>\\n.*?\\n</answer>$", text,
    re.DOTALL | re.MULTILINE)``, decided in linear time by a string search and :data:`_R1_CLOSE` (the expression
    backtracks on crafted text):
    the text opens with ``<think>``; the first think-to-answer joint comes after; an ``</answer>`` line ends a line
    after it."""
    joint = "\n</think>\n<answer>\n"
    start = text.find(joint, 8) if text.startswith("<think>\n") else -1
    return start >= 0 and _R1_CLOSE.search(text, start + len(joint)) is not None


@describe("open-r1 format", 1.0)
def r1_format_reward_func(completions=None, **kwargs) -> list[float]:
    """open-r1's ``format`` reward (``open_r1.rewards.format_reward``): 1.0 when the completion is ``<think>``
    reasoning then an ``<answer>``, each tag on its own line, else 0.0; a recipe's ``reward_funcs: [format]``.

    >>> r1_format_reward_func(completions=["<think>\\n2+2\\n</think>\\n<answer>\\n4\\n</answer>", "<answer>4</answer>"])
    [1.0, 0.0]
    """
    return [1.0 if _r1_format(t) else 0.0 for t in texts(completions)]


@describe("open-r1 tag count", 1.0, binary=False)
def r1_tag_count_reward_func(completions=None, **kwargs) -> list[float]:
    """open-r1's ``tag_count`` reward (``open_r1.rewards.tag_count_reward``): 0.25 for each of ``<think>\\n``,
    ``\\n</think>\\n``, ``\\n<answer>\\n`` and ``\\n</answer>`` found exactly once; a recipe's ``reward_funcs:
    [tag_count]``.

    >>> r1_tag_count_reward_func(completions=["<think>\\nx\\n</think>\\n<answer>\\n4\\n</answer>", "none"])
    [1.0, 0.0]
    """
    pieces = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")
    return [0.25 * sum(t.count(piece) == 1 for piece in pieces) for t in texts(completions)]


#: The six rewards the blog post trained with, in its order.
SEED_REWARDS: tuple[str, ...] = ("xmlcount_reward_func", "soft_format_reward_func", "strict_format_reward_func",
                                 "int_reward_func", "correctness_reward_func", "soft_correctness_reward_func")


_SHOWN_PER_REWARD = 10  # warnings per reward and process; a reward wrong on every completion must not flood the log
#: The largest reward magnitude kept. TRL holds rewards in float32 and takes each group's standard deviation, which
#: squares them: float32's largest value is 3.4e38, so a reward much above its square root (1.8e19) turns the
#: advantage into inf or NaN although it passed as a finite Python float (1e30 does). 1e15 leaves room for the
#: reward weights and the sum over a group.
LARGEST_REWARD = 1e15


def as_values(out: Any) -> Any:
    """A reward's result with numpy's types read as Python's, as TRL reads them (it builds a tensor from the list):
    an ndarray (or anything with ``tolist`` that is not a sequence) becomes a list, and each numpy scalar its Python
    number. Anything else comes back as it is, for the caller to judge.

    >>> import numpy as np
    >>> as_values(np.array([1.5, 2.0], dtype=np.float32)), as_values([np.int64(3), None])
    ([1.5, 2.0], [3, None])
    """
    if not isinstance(out, (Sequence, str, bytes, Mapping)) and hasattr(out, "tolist"):
        out = out.tolist()
    if isinstance(out, list) and any(hasattr(v, "item") and isinstance(v, numbers.Number) for v in out):
        out = [v.item() if hasattr(v, "item") and isinstance(v, numbers.Number) else v for v in out]
    return out


def _usable(value: Any) -> bool:
    """A number TRL can train on: real (``bool`` counts as 0/1), finite and within :data:`LARGEST_REWARD`."""
    return isinstance(value, numbers.Real) and math.isfinite(value) and abs(value) <= LARGEST_REWARD


@dataclass
class RewardCalls:
    """What a :func:`guarded` reward did so far in this process (``checked.calls``), read by the training callback
    :class:`grpo_kit.training.callbacks.RewardWatch`.

    Attributes:
        completions: completions it was asked to judge.
        judged: of those, how many it gave a usable number (not ``None``, not skipped).
        seconds: wall time spent in the function.
        raised: calls that raised (each counted as "cannot judge" for all its completions).
    """

    completions: int = 0
    judged: int = 0
    seconds: float = 0.0
    raised: int = 0


#: Argument names TRL passes that are the trainer's objects, not data: handed to a reward as they are.
_NOT_DATA = ("trainer_state", "log_extra", "log_metric", "environments")


def guarded(func: RewardFunc) -> RewardFunc:
    """``func`` with its output checked on every call, so that a reward's mistake never crashes a run.

    TRL adds ``None`` ("cannot judge", skipped) as NaN and takes ``nansum`` over rewards, so a NaN or an
    infinity returned by a reward would poison (inf) or silently drop a sample. Each value that is not ``None``,
    a finite real number within :data:`LARGEST_REWARD` (``bool`` counts as 0/1; numpy numbers and arrays are read as
    TRL reads them, :func:`as_values`) becomes ``None`` with a warning naming the reward and the completion's
    index; a result that is not a list of one value per completion becomes all ``None``, with a warning. An
    exception the reward raises (``SystemExit`` included; Ctrl-C is not caught) is "cannot judge" for all the call's
    completions too, with a warning naming the reward, the exception and the training step (TRL's ``trainer_state``).
    Each call gets its own copy of the completions, prompts and dataset columns, so a reward that edits them in place
    (``answer.clear()``) cannot change what the next reward reads. Linear in the number of completions.

    Args:
        func: a reward in TRL's contract.

    Returns:
        A reward with ``func``'s ``__name__`` and attributes, returning ``list[float | None]``; its ``calls``
        attribute (:class:`RewardCalls`) counts what it judged and the seconds it took.
    """
    shown = [0]
    calls = RewardCalls()

    def warn(message: str) -> None:
        shown[0] += 1
        if shown[0] <= _SHOWN_PER_REWARD:
            log.warning(f"reward {func.__name__}: {message}" + ("" if shown[0] < _SHOWN_PER_REWARD else
                                                               " (further such warnings of this reward not shown)"))

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> list[float | None]:
        n = len(kwargs.get("completions") or (args[1] if len(args) > 1 else ()))
        # the next reward reads the completions, prompts and columns as the policy and the dataset gave them
        kwargs = {k: v if k in _NOT_DATA else copy.deepcopy(v) for k, v in kwargs.items()}
        calls.completions += n
        start = time.perf_counter()
        try:
            out = as_values(func(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - a reward never ends training; Ctrl-C does
            if isinstance(e, KeyboardInterrupt):
                raise
            calls.raised += 1
            step = getattr(kwargs.get("trainer_state"), "global_step", None)
            if calls.raised == 1:  # once: a reward that raises at every step would flood the log
                log.warning(f"reward {func.__name__} raised {type(e).__name__}: {e}"
                            + (f" at step {step + 1}" if isinstance(step, int) else "")
                            + f": treated as 'cannot judge' for these {n} completions (later exceptions of this "
                            "reward are counted, not shown); fix the reward")
            return [None] * n
        finally:
            calls.seconds += time.perf_counter() - start
        if isinstance(out, (str, bytes, Mapping)) or not isinstance(out, Sequence) or len(out) != n:
            size = len(out) if isinstance(out, Sequence) else type(out).__name__
            warn(f"returned {size} for {n} completions (it must return a list of one number or None per "
                 "completion): treated as 'cannot judge' for all of them")
            return [None] * n
        values = [float(value) if _usable(value) else None for value in out]
        for i, value in enumerate(out):
            if value is not None and values[i] is None:
                warn(f"returned {value!r} for completion {i}, which is not a finite number within "
                     f"{LARGEST_REWARD:g}: treated as 'cannot judge' (return None for that on purpose)")
        calls.judged += sum(v is not None for v in values)
        return values

    checked.calls = calls  # type: ignore[attr-defined]
    return checked

