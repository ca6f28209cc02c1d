"""Reward functions for verifiable answers, in TRL's ``reward_funcs`` contract.

Each function takes keyword arguments ``prompts``, ``completions``, the dataset columns it
needs (``answer``) and ``**kwargs`` (TRL also passes ``completion_ids``, ``trainer_state``,
``log_metric``, ...). A completion is a ``str`` or a list of chat messages; the functions
read both (see :func:`grpo_kit.answers.completion_text`). Gold answers may be ``str``, ``int`` or
``float`` (:func:`gold_text`). They return one ``float`` per completion, never raise on any
completion text, run in linear time on any completion (``benchmarks/reward_worst_case.py``) and
print nothing; a column whose length differs from the completions' is a caller's mistake and
raises ``ValueError``.

The first six are seed 002's (``../shared/seeds/002_*.txt``), which took them from the Unsloth
Llama-3.1-8B GRPO notebook and fixed their regexes; README's "Rewards" section lists where
they differ from the notebook and why. Beside them: TinyZero's Countdown reward and math-verify
correctness. Swapping a reward is one line: pass other names to :func:`get_reward_funcs`, or
put your own function in the list. :class:`RewardMix` adds weights (TRL's ``reward_weights``);
weight 0 keeps a reward computed and logged without training on it.

The registry (:data:`REWARD_FUNCS`) knows each reward by its ``__name__``, which TRL logs as
``rewards/<name>/mean``; each built-in carries ``max_value`` (the "Max Value" of the seed's
tables), ``columns`` (the dataset columns it reads) and ``binary`` (right/wrong, so evaluation
counts flips and runs McNemar on it). Parameterised rewards are factories
(:func:`countdown_reward`, :func:`math_verify_reward`) whose products are named after their
parameters and registered under that name.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grpo_kit.answers import (
    completion_text,
    extract_final_answer,
    extract_xml_answer,
    is_integer_literal,
    is_soft_format,
    is_strict_format,
    numbers_equal,
)
from grpo_kit.countdown import countdown_score
from grpo_kit.verify import DEFAULT_TIMEOUT_S, math_verifier

__all__ = [
    "REWARD_FUNCS",
    "REWARD_MAX",
    "SEED_REWARDS",
    "RewardMix",
    "correctness_reward_func",
    "countdown_reward",
    "COLUMN_KINDS",
    "column_problem",
    "countdown_reward_func",
    "get_reward_funcs",
    "gold_text",
    "int_reward_func",
    "math_verify_reward",
    "math_verify_reward_func",
    "register_reward",
    "reward_max",
    "soft_correctness_reward_func",
    "soft_format_reward_func",
    "strict_format_reward_func",
    "xmlcount_reward_func",
]

RewardFunc = Callable[..., list[float | None]]

_XML_TAGS = ("<reasoning>\n", "\n</reasoning>\n", "\n<answer>\n", "\n</answer>")


def _texts(completions: Sequence[Any] | None) -> list[str]:
    return [completion_text(c) for c in (completions or [])]


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Print ``message`` to stderr the first time only (rewards run on every step)."""
    if message not in _warned:
        _warned.add(message)
        print(f"[grpo_kit] WARNING {message}", file=sys.stderr, flush=True)


def gold_text(value: Any) -> str | None:
    """A gold answer as text: a ``str`` as it is, an ``int`` or a finite ``float`` as its number (``2.0`` is
    ``"2"``, ``2.5`` is ``"2.5"``); anything else (``None``, a list, ``True``) cannot be read: ``None``.

    >>> [gold_text(v) for v in ["72", 72, 72.0, 2.5, None, True, float("nan")]]
    ['72', '72', '72', '2.5', None, None, None]
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    return None


def _column(values: Any, n: int, name: str) -> list[Any]:
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


#: What the dataset columns the built-in rewards read may hold, checked before training (:func:`column_problem`).
COLUMN_KINDS: dict[str, str] = {"answer": "text or a number", "nums": "a list of numbers", "target": "a number"}
_NUMBER_TYPES = ("int", "uint", "float", "double", "decimal")


def column_problem(column: str, feature: Any) -> str | None:
    """Why a ``datasets`` feature cannot be read by the rewards that read ``column``; ``None`` when it can
    (or when the column is not one of :data:`COLUMN_KINDS`).

    >>> from datasets import List, Value
    >>> column_problem("answer", Value("int64")) is None, column_problem("answer", List(Value("string")))
    (True, "column 'answer' holds List(Value('string')), not text or a number")
    """
    if column not in COLUMN_KINDS:
        return None

    def number(f: Any) -> bool:
        return str(getattr(f, "dtype", "")).startswith(_NUMBER_TYPES)

    inner = getattr(feature, "feature", None)
    ok = {"answer": number(feature) or str(getattr(feature, "dtype", "")) in ("string", "large_string"),
          "nums": inner is not None and number(inner),
          "target": number(feature)}[column]
    return None if ok else f"column {column!r} holds {feature}, not {COLUMN_KINDS[column]}"


def _golds(answer: Any, n: int) -> list[str | None]:
    """The ``answer`` column as text (:func:`gold_text`), one per completion."""
    return [gold_text(a) for a in _column(answer, n, "answer")]


def _describe(max_value: float, columns: tuple[str, ...] = (),
              binary: bool = True) -> Callable[[RewardFunc], RewardFunc]:
    def mark(func: RewardFunc) -> RewardFunc:
        func.max_value, func.columns, func.binary = max_value, columns, binary  # type: ignore[attr-defined]
        return func

    return mark


@_describe(1.0, ("answer",))
def correctness_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Hard correctness: 1.0 when the text inside ``<answer>`` equals the gold answer exactly.

    Args:
        prompts: the prompts (unused; part of TRL's contract).
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.
        answer: gold answers, one per completion: ``str``, ``int`` or ``float`` (:func:`gold_text`;
            the GSM8K ``answer`` column holds strings).

    Returns:
        ``list[float]`` of length N, each 0.0 or 1.0. A string compare, as in the seed:
        ``"1200.0"`` does not match ``"1200"`` (:func:`soft_correctness_reward_func` does).

    >>> correctness_reward_func(completions=["<answer>\\n72\\n</answer>", "<answer>72.0</answer>"],
    ...                         answer=["72", "72"])
    [1.0, 0.0]
    """
    texts = _texts(completions)
    return [1.0 if gold is not None and extract_xml_answer(t) == gold else 0.0
            for t, gold in zip(texts, _golds(answer, len(texts)))]


@_describe(1.0, ("answer",))
def soft_correctness_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Soft correctness: 1.0 when the first number inside ``<answer>`` equals the gold as a number.

    Args:
        prompts: unused.
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.
        answer: gold answers, one per completion: ``str``, ``int`` or ``float`` (:func:`gold_text`).

    Returns:
        ``list[float]`` of length N, each 0.0 or 1.0. ``"1200.0"``, ``"$1,200"`` and
        ``"1200 units"`` match ``"1200"``; ``"3"`` does not match ``"-3"``. The seed
        compared strings and dropped the sign; this compares numbers with the sign kept.

    >>> soft_correctness_reward_func(
    ...     completions=[[{"role": "assistant", "content": "<answer>$1,200</answer>"}],
    ...                  [{"role": "assistant", "content": "<answer>3</answer>"}]],
    ...     answer=["1200", "-3"])
    [1.0, 0.0]
    """
    texts = _texts(completions)
    return [1.0 if numbers_equal(extract_final_answer(t), gold) else 0.0
            for t, gold in zip(texts, _golds(answer, len(texts)))]


@_describe(0.5)
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
    return [0.5 if is_integer_literal(extract_xml_answer(t)) else 0.0 for t in _texts(completions)]


@_describe(0.5)
def strict_format_reward_func(completions=None, **kwargs) -> list[float]:
    """Strict format: 0.5 when the whole completion is reasoning then answer, each tag on its own line.

    Pattern ``^<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\n*$`` with
    ``re.DOTALL`` (seed 002's fix of the notebook, which lacked DOTALL: unsloth #1761).

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N, each 0.0 or 0.5.

    >>> strict_format_reward_func(completions=[
    ...     "<reasoning>\\nstep 1\\nstep 2\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n",
    ...     "<reasoning>2+2</reasoning><answer>4</answer>"])
    [0.5, 0.0]
    """
    return [0.5 if is_strict_format(t) else 0.0 for t in _texts(completions)]


@_describe(0.5)
def soft_format_reward_func(completions=None, **kwargs) -> list[float]:
    """Soft format: 0.5 when the completion starts with a reasoning block followed by an answer block.

    Pattern ``<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>`` with ``re.DOTALL`` (the notebook lacked
    DOTALL: unsloth #1761), anchored at the start (``re.match``), as in the notebook; decided in linear
    time by :func:`grpo_kit.answers.is_soft_format`.

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N, each 0.0 or 0.5.

    >>> soft_format_reward_func(completions=["<reasoning>a\\nb</reasoning> <answer>4</answer>", "4"])
    [0.5, 0.0]
    """
    return [0.5 if is_soft_format(t) else 0.0 for t in _texts(completions)]


def xml_count(text: str) -> float:
    """Score one text for its XML tags: 0.125 per tag present exactly once, less a tail penalty.

    The tags are ``"<reasoning>\\n"``, ``"\\n</reasoning>\\n"``, ``"\\n<answer>\\n"`` and
    ``"\\n</answer>"``. When ``</answer>`` occurs, 0.001 is taken off per character after
    the last one, surrounding whitespace stripped, so a perfect completion scores exactly
    0.5 with or without a trailing newline (the notebook docked the newline itself).

    >>> xml_count("<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n")
    0.5
    >>> xml_count("<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>\\nmore")
    0.496
    """
    score = sum(0.125 for tag in _XML_TAGS if text.count(tag) == 1)
    if "</answer>" in text:
        score -= 0.001 * len(text.split("</answer>")[-1].strip())
    return float(round(score, 6))


@_describe(0.5, binary=False)
def xmlcount_reward_func(completions=None, **kwargs) -> list[float]:
    """XML tag count: :func:`xml_count` of each completion (at most 0.5; negative for long tails).

    Args:
        completions: ``list[str]`` or ``list[list[dict]]`` of length N.

    Returns:
        ``list[float]`` of length N.

    >>> xmlcount_reward_func(completions=["<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>", "x"])
    [0.5, 0.0]
    """
    return [xml_count(t) for t in _texts(completions)]


def countdown_reward(format_score: float = 0.1, score: float = 1.0) -> RewardFunc:
    """A Countdown reward (TinyZero's, seeds 001/003) with the given scores; registered under its name.

    Args:
        format_score: for an ``<answer>`` that does not solve the puzzle (TinyZero: 0.1).
        score: for one that does (TinyZero: 1.0).

    Returns:
        A reward function ``(completions, nums, target, **kwargs) -> list[float]`` (dataset columns
        ``nums`` and ``target``), named ``countdown_reward_func`` with the defaults, else e.g.
        ``countdown_reward_func_format0.2_score1``. See :func:`grpo_kit.countdown.countdown_score`.

    >>> countdown_reward(format_score=0.2).__name__
    'countdown_reward_func_format0.2_score1'
    """
    def reward(prompts=None, completions=None, nums=None, target=None, **kwargs) -> list[float]:
        texts = _texts(completions)
        puzzles = _column(nums, len(texts), "nums"), _column(target, len(texts), "target")
        return [0.0 if n is None or t is None else countdown_score(text, n, t, format_score, score)
                for text, n, t in zip(texts, *puzzles)]

    defaults = (format_score, score) == (0.1, 1.0)
    reward.__name__ = "countdown_reward_func" if defaults else \
        f"countdown_reward_func_format{format_score:g}_score{score:g}"
    reward.__doc__ = (f"Countdown: 0 without <answer>, {format_score:g} when it does not solve the puzzle, "
                      f"{score:g} when it equals the target (TinyZero).")
    return register_reward(_describe(score, ("nums", "target"), binary=False)(reward))


def math_verify_reward(timeout_s: float = DEFAULT_TIMEOUT_S) -> RewardFunc:
    """Correctness checked by math-verify under a per-call timeout; registered under its name.

    The answer is read from the ``<answer>`` tags (the whole completion when it has none, as
    :func:`grpo_kit.answers.extract_xml_answer`) and compared with the ``answer`` column by
    :func:`grpo_kit.verify.math_equal` in a worker process (:class:`grpo_kit.verify.MathVerifier`).

    Args:
        timeout_s: seconds per completion (default 5, as verifiers; oat uses 1).

    Returns:
        A reward function ``(completions, answer, **kwargs) -> list[float | None]``: 1.0 right, 0.0
        wrong or timed out (a run where many time out warns: :data:`grpo_kit.verify.WARN_TIMEOUT_SHARE`),
        ``None`` when the gold answer cannot be parsed (TRL skips that sample, as open-r1 does) or
        the worker cannot start (with a warning). Named ``math_verify_reward_func`` with the default timeout, else
        e.g. ``math_verify_reward_func_timeout1s``.
    """
    def reward(prompts=None, completions=None, answer=None, **kwargs) -> list[float | None]:
        texts = _texts(completions)
        values: list[float | None] = []
        for text, gold in zip(texts, _golds(answer, len(texts))):
            try:
                verdict = None if gold is None else math_verifier(timeout_s)(gold, extract_xml_answer(text))
            except RuntimeError as e:  # the worker cannot start: skip the sample (None) rather than score 0.0
                _warn_once(f"math-verify's worker could not start, so these completions are skipped (None), not "
                           f"scored: {e}")
                verdict = None
            values.append(None if verdict is None else float(verdict))
        return values

    reward.__name__ = "math_verify_reward_func" if timeout_s == DEFAULT_TIMEOUT_S else \
        f"math_verify_reward_func_timeout{timeout_s:g}s"
    reward.__doc__ = f"math-verify correctness of the <answer> against the gold answer ({timeout_s:g} s timeout)."
    return register_reward(_describe(1.0, ("answer",))(reward))


#: Every registered reward by name (its ``__name__``, which TRL logs as ``rewards/<name>/mean``).
REWARD_FUNCS: dict[str, RewardFunc] = {}


def register_reward(func: RewardFunc, max_value: float | None = None, columns: Sequence[str] | None = None,
                    binary: bool | None = None) -> RewardFunc:
    """Add ``func`` to :data:`REWARD_FUNCS` under its ``__name__`` (so configs and notebooks can name it).

    Args:
        func: a reward function in TRL's contract.
        max_value: its largest value per completion (evaluation tables show it; default: the
            function's ``max_value`` attribute, else unknown).
        columns: dataset columns it reads (checked before training).
        binary: whether it is right/wrong (evaluation counts flips and runs McNemar on it).

    Returns:
        ``func``, so this works as a decorator.

    Raises:
        ValueError: another function is registered under the same name.
    """
    name = func.__name__
    existing = REWARD_FUNCS.get(name)
    # A factory called again with the same parameters makes an equal function: replace it.
    if existing is not None and existing is not func and existing.__qualname__ != func.__qualname__:
        raise ValueError(f"a different reward is already registered as {name!r}: rename your function")
    for attribute, value in (("max_value", max_value), ("columns", columns), ("binary", binary)):
        if value is not None:
            setattr(func, attribute, tuple(value) if attribute == "columns" else value)
    REWARD_FUNCS[name] = func
    return func


for _func in (xmlcount_reward_func, soft_format_reward_func, strict_format_reward_func, int_reward_func,
              correctness_reward_func, soft_correctness_reward_func):
    register_reward(_func)

#: The six rewards seed 002 trained with, in its order.
SEED_REWARDS: tuple[str, ...] = tuple(REWARD_FUNCS)

#: TinyZero's Countdown reward with its scores (0 / 0.1 / 1.0); columns ``nums`` and ``target``.
countdown_reward_func = countdown_reward()
#: math-verify correctness with a 5 s timeout per completion; column ``answer``.
math_verify_reward_func = math_verify_reward()


def reward_max(reward: str | RewardFunc) -> float:
    """A reward's largest value per completion, by name or function; NaN when unknown.

    >>> reward_max("correctness_reward_func"), reward_max("strict_format_reward_func")
    (1.0, 0.5)
    """
    func = REWARD_FUNCS.get(reward) if isinstance(reward, str) else reward
    return float(getattr(func, "max_value", math.nan))


#: Each built-in reward's largest value per completion (the "Max Value" column of the seed's tables);
#: :func:`reward_max` also knows rewards registered later.
REWARD_MAX: dict[str, float] = {name: reward_max(func) for name, func in REWARD_FUNCS.items()}


def get_reward_funcs(rewards: Sequence[str | RewardFunc]) -> list[RewardFunc]:
    """Resolve reward names (or functions, passed through) to functions, in order.

    Args:
        rewards: names from :data:`REWARD_FUNCS` and/or callables in TRL's contract.

    Returns:
        ``list`` of callables, one per entry.

    Raises:
        ValueError: a name is not a registered reward (the message lists the known names),
            or the list is empty.

    >>> [f.__name__ for f in get_reward_funcs(["int_reward_func"])]
    ['int_reward_func']
    """
    if not rewards:
        raise ValueError("no reward functions given: name at least one of " + ", ".join(REWARD_FUNCS))
    funcs = []
    for reward in rewards:
        if callable(reward):
            funcs.append(reward)
        elif reward in REWARD_FUNCS:
            funcs.append(REWARD_FUNCS[reward])
        else:
            raise ValueError(f"unknown reward {reward!r}: choose from {', '.join(REWARD_FUNCS)} "
                             "or pass your own function")
    return funcs


class RewardMix:
    """Reward functions with weights: what TRL takes as ``reward_funcs`` and ``GRPOConfig.reward_weights``.

    TRL sums each completion's rewards times their weights and computes the advantage from that
    sum; every reward is still logged as ``rewards/<name>/mean``. Weight 0 therefore means
    "computed and logged, not trained on" (a metric-only reward).

    Args:
        rewards: names and/or functions (weight 1 each, or ``weights``), or a mapping from
            reward (name or function) to weight.
        weights: one per reward, when ``rewards`` is a sequence.

    Raises:
        ValueError: an unknown name, no rewards, a weight count that does not match, a
            non-finite weight, or two rewards with one ``__name__`` (TRL would log them as one).

    >>> mix = RewardMix({"correctness_reward_func": 2.0, "xmlcount_reward_func": 0.0})
    >>> mix.names, mix.weights, mix.trained
    (['correctness_reward_func', 'xmlcount_reward_func'], [2.0, 0.0], ['correctness_reward_func'])
    >>> mix.replace("correctness_reward_func", "math_verify_reward_func").names
    ['math_verify_reward_func', 'xmlcount_reward_func']
    """

    def __init__(self, rewards: Sequence[str | RewardFunc] | Mapping[str | RewardFunc, float],
                 weights: Sequence[float] | None = None) -> None:
        if isinstance(rewards, Mapping):
            if weights is not None:
                raise ValueError("give weights either in the mapping or as weights=, not both")
            rewards, weights = list(rewards), [float(w) for w in rewards.values()]
        rewards = list(rewards)
        weights = [1.0] * len(rewards) if weights is None else [float(w) for w in weights]
        if len(weights) != len(rewards):
            raise ValueError(f"{len(weights)} weights for {len(rewards)} rewards: give one weight per reward")
        if not all(math.isfinite(w) for w in weights):
            raise ValueError(f"weights must be finite numbers, got {weights}")
        self.funcs = get_reward_funcs(rewards)
        self.weights = weights
        names = self.names
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"two rewards are named {repeated}: TRL logs rewards by __name__, so rename one")

    @property
    def names(self) -> list[str]:
        """Each reward's ``__name__`` (its metric name), in order."""
        return [f.__name__ for f in self.funcs]

    @property
    def trained(self) -> list[str]:
        """Names of the rewards with a non-zero weight (those that move the advantage)."""
        return [n for n, w in zip(self.names, self.weights) if w != 0]

    def _index(self, reward: str | RewardFunc) -> int:
        name = reward if isinstance(reward, str) else reward.__name__
        if name not in self.names:
            raise ValueError(f"{name!r} is not in this mix ({', '.join(self.names)})")
        return self.names.index(name)

    def replace(self, old: str | RewardFunc, new: str | RewardFunc, weight: float | None = None) -> RewardMix:
        """A copy with ``old`` swapped for ``new`` (same weight unless ``weight`` is given)."""
        i = self._index(old)
        rewards: list[str | RewardFunc] = list(self.funcs)
        weights = list(self.weights)
        rewards[i] = new
        weights[i] = weights[i] if weight is None else weight
        return RewardMix(rewards, weights)

    def with_weight(self, reward: str | RewardFunc, weight: float) -> RewardMix:
        """A copy with ``reward``'s weight set (0: log it without training on it)."""
        weights = list(self.weights)
        weights[self._index(reward)] = weight
        return RewardMix(list(self.funcs), weights)

    def __add__(self, other: RewardMix) -> RewardMix:
        return RewardMix([*self.funcs, *other.funcs], [*self.weights, *other.weights])

    def __repr__(self) -> str:
        return "RewardMix({" + ", ".join(f"{n!r}: {w:g}" for n, w in zip(self.names, self.weights)) + "})"
