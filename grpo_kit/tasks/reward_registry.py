"""Rewards by name: every built-in reward in one mapping (:data:`BUILTIN_REWARDS`), a reward of your own as
``module:function`` (:func:`import_reward`, :func:`reward_path`), and the weighted set a run trains with
(:class:`RewardSet`), checked once as TRL will call it (:func:`probe`).

The mapping sits above every module that defines a reward (:mod:`grpo_kit.tasks.rewards`,
:mod:`grpo_kit.tasks.answer_types`, :mod:`grpo_kit.tasks.countdown`, :mod:`grpo_kit.tasks.math_verify`) and lists
their functions by hand: no function registers itself when its module is imported, and none of those modules reads
the mapping, so the tasks wing imports one way.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from grpo_kit.tasks.answer_types import choice_correctness_reward_func, text_correctness_reward_func
from grpo_kit.tasks.countdown import countdown_reward_func
from grpo_kit.tasks.math_verify import math_verify_reward_func
from grpo_kit.tasks.rewards import (
    Reward,
    RewardFunc,
    as_values,
    correctness_reward_func,
    guarded,
    int_reward_func,
    r1_format_reward_func,
    r1_tag_count_reward_func,
    soft_correctness_reward_func,
    soft_format_reward_func,
    strict_format_reward_func,
    xmlcount_reward_func,
)
from grpo_kit.tasks.user_code import check_trusted, import_named, untrusted

__all__ = ["BUILTIN_REWARDS", "RewardSet", "foreign_rewards", "import_reward", "probe", "recorded_paths",
           "reward_path"]

#: Every built-in reward by name (``--rewards NAME``, a task file's ``rewards:``, notebook parameters), as open-r1's
#: ``REWARD_FUNCS_REGISTRY``. Read-only: a user's own function is passed as an object, never added here.
BUILTIN_REWARDS: Mapping[str, RewardFunc] = MappingProxyType({func.__name__: func for func in (
    correctness_reward_func, soft_correctness_reward_func, int_reward_func, strict_format_reward_func,
    soft_format_reward_func, xmlcount_reward_func, text_correctness_reward_func, choice_correctness_reward_func,
    countdown_reward_func, math_verify_reward_func, r1_format_reward_func, r1_tag_count_reward_func)})


def reward_path(func: RewardFunc) -> str | None:
    """``module:function`` of a reward of your own that another process can import again (what a run folder
    records); ``None`` for a built-in reward, or a function defined in a notebook or inside another function.

    >>> from grpo_kit.tasks.rewards import texts
    >>> reward_path(texts), reward_path(correctness_reward_func) is None
    ('grpo_kit.tasks.rewards:texts', True)
    """
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
    builtin = BUILTIN_REWARDS.get(getattr(func, "__name__", None)) is func
    return None if builtin or not module or module == "__main__" or "<" in qualname else f"{module}:{qualname}"


def import_reward(path: str, what: str = "--rewards") -> RewardFunc:
    """The reward function ``module:function`` names, imported (from the current folder too).

    Raises:
        ValueError: a malformed path, a module that cannot be imported (whatever it raised, ``SystemExit``
            included), or a name that is not a function; the message starts with ``what``.
    """
    module, _, function = path.strip().partition(":")
    if not module or not function:
        raise ValueError(f"{what} {path!r}: write module:function, e.g. my_rewards:length_penalty")
    found = import_named(path, what)
    if not callable(found):
        raise ValueError(f"{what} {path!r}: {module!r} has a {type(found).__name__}, not a function, named "
                         f"{function!r}; give module:function of a reward function (TRL's contract) importable from "
                         "the current folder")
    return found


class RewardSet:
    """The rewards a run trains with, and their weights: TRL's ``reward_funcs`` and ``GRPOConfig.reward_weights``.

    TRL sums each completion's rewards times their weights and computes the advantage from that
    sum; every reward is still logged as ``rewards/<name>/mean``. Weight 0 therefore means
    "computed and logged, not trained on" (a metric-only reward).

    Args:
        rewards: built-in names (:data:`BUILTIN_REWARDS`), functions in TRL's contract, or
            :class:`Reward` objects (weight 1 each, or ``weights``); or a mapping from any of those to its weight.
        weights: one per reward, when ``rewards`` is a sequence.

    Raises:
        ValueError: an unknown name, no rewards, a weight count that does not match, a weight that is not
            a finite number, every weight 0, a function that cannot take ``completions``, or two rewards with
            one ``__name__`` (TRL would log them as one).

    >>> rewards = RewardSet({"correctness_reward_func": 2.0, "xmlcount_reward_func": 0.0})
    >>> rewards.names, rewards.weights, rewards.trained
    (['correctness_reward_func', 'xmlcount_reward_func'], [2.0, 0.0], ['correctness_reward_func'])
    >>> rewards.replace("correctness_reward_func", "soft_correctness_reward_func").names
    ['soft_correctness_reward_func', 'xmlcount_reward_func']
    """

    def __init__(self, rewards: Sequence[str | RewardFunc | Reward] | Mapping[Any, float],
                 weights: Sequence[float] | None = None) -> None:
        if isinstance(rewards, RewardSet):
            rewards, weights = rewards.rewards, rewards.weights if weights is None else weights
        elif isinstance(rewards, Mapping):
            if weights is not None:
                raise ValueError("give weights either in the mapping or as weights=, not both")
            rewards, weights = list(rewards), list(rewards.values())
        elif isinstance(rewards, str) or callable(rewards):
            rewards = [rewards]
        rewards = list(rewards)
        if not rewards:
            raise ValueError("no reward functions given: name at least one of " + ", ".join(BUILTIN_REWARDS))
        weights = [1.0] * len(rewards) if weights is None else list(weights)
        if len(weights) != len(rewards):
            raise ValueError(f"{len(weights)} weights for {len(rewards)} rewards: give one weight per reward")
        if any(isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) for w in weights):
            raise ValueError(f"reward weights must be finite numbers, got {weights}")
        unknown = [r for r in rewards if isinstance(r, str) and r not in BUILTIN_REWARDS]
        if unknown:
            raise ValueError(f"unknown reward {unknown[0]!r}: choose from {', '.join(BUILTIN_REWARDS)} or pass "
                             "your own function")
        self.rewards: list[Reward] = [Reward.of(BUILTIN_REWARDS[r] if isinstance(r, str) else r) for r in rewards]
        self.weights: list[float] = [float(w) for w in weights]
        names = self.names
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"two rewards are named {repeated}: TRL logs rewards by __name__, so rename one")
        if not any(self.weights):
            raise ValueError(f"every reward weight is 0 ({self}): nothing would be trained on; give at least one "
                             "reward a non-zero weight")

    @property
    def funcs(self) -> list[RewardFunc]:
        """The functions, in order (TRL's ``reward_funcs``)."""
        return [r.func for r in self.rewards]

    @property
    def checked_funcs(self) -> list[RewardFunc]:
        """The functions with their output checked (:func:`guarded`): what the trainer and evaluation call."""
        return [guarded(f) for f in self.funcs]

    @property
    def names(self) -> list[str]:
        """Each reward's ``__name__`` (its metric name), in order."""
        return [r.name for r in self.rewards]

    @property
    def trained(self) -> list[str]:
        """Names of the rewards with a non-zero weight (those that move the advantage)."""
        return [n for n, w in zip(self.names, self.weights) if w != 0]

    @property
    def columns(self) -> list[str]:
        """The dataset columns these rewards read, in order, once each."""
        return list(dict.fromkeys(c for r in self.rewards for c in r.columns))

    def _index(self, reward: str | RewardFunc | Reward) -> int:
        name = reward if isinstance(reward, str) else reward.name if isinstance(reward, Reward) else reward.__name__
        if name not in self.names:
            raise ValueError(f"{name!r} is not in this set ({', '.join(self.names)})")
        return self.names.index(name)

    def replace(self, old: str | RewardFunc | Reward, new: str | RewardFunc | Reward,
                weight: float | None = None) -> RewardSet:
        """A copy with ``old`` swapped for ``new`` (same weight unless ``weight`` is given)."""
        i = self._index(old)
        rewards, weights = list(self.rewards), list(self.weights)
        rewards[i], weights[i] = new, weights[i] if weight is None else weight
        return RewardSet(rewards, weights)

    def with_weight(self, reward: str | RewardFunc | Reward, weight: float) -> RewardSet:
        """A copy with ``reward``'s weight set (0: log it without training on it)."""
        return self.replace(reward, self.rewards[self._index(reward)], weight)

    def to_record(self) -> dict[str, Any]:
        """What a run folder records of the set (``train_settings.json``), read back by :meth:`from_record`:
        ``{"rewards": {name: weight}, "reward_functions": {name: "module:function" or None}}``, the latter for the
        rewards of your own only (:func:`reward_path`; ``None``: defined where another process cannot import it).

        >>> RewardSet({"correctness_reward_func": 2.0}).to_record()
        {'rewards': {'correctness_reward_func': 2.0}, 'reward_functions': {}}
        """
        return {"rewards": dict(zip(self.names, self.weights)),
                "reward_functions": {r.name: reward_path(r.func) for r in self.rewards
                                     if r.name not in BUILTIN_REWARDS}}

    @classmethod
    def from_record(cls, record: Mapping[str, Any], what: str = "the run's reward", source: Any = "the record",
                    trust_remote_code: bool = False) -> RewardSet:
        """The set :meth:`to_record` recorded: built-in rewards by name, your own imported again by
        ``module:function`` (from the current folder too) only with ``trust_remote_code`` (:func:`recorded_paths`).

        Raises:
            ValueError: the record names no rewards; it names rewards of your own and ``trust_remote_code`` is off
                (one line naming them, their modules and ``source``, before anything is imported); a reward of your
                own was defined where it cannot be imported again (a notebook), or its module no longer imports; the
                message names it and starts with ``what``.

        >>> RewardSet.from_record({"rewards": {"xmlcount_reward_func": 0.5}})
        RewardSet({'xmlcount_reward_func': 0.5})
        """
        weights = record.get("rewards")
        if not isinstance(weights, Mapping) or not weights:
            raise ValueError(f"{what}s are not recorded: give them (--rewards NAME=WEIGHT ...)")
        paths = recorded_paths(record, source, trust_remote_code)
        rewards: list[Any] = []
        for name in weights:
            if name in BUILTIN_REWARDS and name not in paths:
                rewards.append(name)
            elif paths.get(name) is None:
                raise ValueError(f"{what} {name} was defined where another process cannot import it (a notebook): "
                                 "pass it again (notebook: rewards = {...: weight}; command line: --rewards "
                                 "module:function=WEIGHT)")
            else:
                rewards.append(import_reward(paths[name], what=what))
        return cls(rewards, list(weights.values()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RewardSet) and (self.funcs, self.weights) == (other.funcs, other.weights)

    def __repr__(self) -> str:
        return "RewardSet({" + ", ".join(f"{n!r}: {w:g}" for n, w in zip(self.names, self.weights)) + "})"

    def __str__(self) -> str:  # as --rewards takes them, as the log lines say them
        return " ".join(f"{n}={w:g}" for n, w in zip(self.names, self.weights))


def _kit_rewards(labels: Sequence[str]) -> dict[str, frozenset[str]]:
    """For each label, the ``module:function`` of every built-in reward: the only rewards a record may name without
    ``trust_remote_code`` (:func:`grpo_kit.tasks.user_code.check_trusted`)."""
    own = frozenset(f"{func.__module__}:{func.__qualname__}" for func in BUILTIN_REWARDS.values())
    return dict.fromkeys(labels, own)


def _recorded(record: Mapping[str, Any], source: Any) -> Mapping[str, Any]:
    """A record's ``reward_functions`` (:meth:`RewardSet.to_record`); ``{}`` when it has none.

    Raises:
        ValueError: it is not a mapping (the record was edited).
    """
    paths = record.get("reward_functions") or {}
    if not isinstance(paths, Mapping):
        raise ValueError(f"{source}: reward_functions must map reward names to module:function, got {paths!r:.80}: "
                         "the file was edited")
    return paths


def foreign_rewards(record: Mapping[str, Any]) -> dict[str, Any]:
    """``{"reward NAME": module:function}`` of the rewards a run's record names that are not built into the kit: what
    reading them needs ``trust_remote_code`` for (:func:`recorded_paths`); read without importing anything, and empty
    for a record whose ``reward_functions`` is damaged (its reader says so)."""
    try:
        paths = _recorded(record, "the record")
    except ValueError:
        return {}
    named = {f"reward {name}": path for name, path in paths.items()}
    return untrusted(named, _kit_rewards(list(named)))


def recorded_paths(record: Mapping[str, Any], source: Any, trust_remote_code: bool = False, given: Sequence[str] = ()
                   ) -> Mapping[str, str | None]:
    """``{name: "module:function" or None}`` of the rewards of your own a run's record names
    (:meth:`RewardSet.to_record`), less those named in ``given`` (the caller holds them): a record arrives with a run
    folder, which may come from anywhere, so anything but a built-in reward's own ``module:function`` is imported only
    with ``trust_remote_code``, as a task file's Python (:func:`grpo_kit.tasks.user_code.check_trusted`).

    Raises:
        ValueError: ``reward_functions`` is not a mapping (the record was edited), or names other Python without
            ``trust_remote_code``: one line naming each reward, its module and ``source``.
    """
    paths = {name: path for name, path in _recorded(record, source).items() if name not in given}
    named = {f"reward {name}": path for name, path in paths.items()}
    check_trusted(source, named, "reading its rewards", trust_remote_code, _kit_rewards(list(named)))
    return paths


def probe(rewards: RewardSet, rows: Sequence[Mapping[str, Any]], completions: Sequence[str]) -> None:
    """Call every reward once as TRL will (keyword arguments, the rows' dataset columns), before any model loads.

    Args:
        rewards: the rewards to check.
        rows: a few dataset rows (dicts with ``prompt`` and the columns the rewards read).
        completions: one completion text per row (e.g. the gold answer in the answer format).

    Raises:
        ValueError: a reward raised (``SystemExit`` included), or did not return a list (or numpy array) of one
            number (or ``None``) per completion; the message names the reward and what it returned. (NaN, infinity
            and numbers beyond :data:`LARGEST_REWARD` pass here: :func:`guarded` skips them during training, with a
            warning.)
    """
    n = len(rows)
    columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"} if rows else {}
    chats = [[{"role": "assistant", "content": text}] for text in completions]
    for reward in rewards.rewards:
        try:  # each reward gets its own copies: one that edits its arguments in place cannot break the next
            out = as_values(reward.func(prompts=copy.deepcopy([row["prompt"] for row in rows]),
                                        completions=copy.deepcopy(chats), completion_ids=[[]] * n,
                                        **copy.deepcopy(columns)))
        except BaseException as e:  # noqa: BLE001 - reported with the reward's name; sys.exit included
            if isinstance(e, KeyboardInterrupt):
                raise
            raise ValueError(f"reward {reward.name} raised {type(e).__name__}: {e} when called as TRL calls it "
                             f"({reward.name}(prompts=..., completions=[[{{'role': 'assistant', 'content': ...}}]], "
                             f"{', '.join(columns)}=..., **kwargs)); fix it before training") from None
        good = isinstance(out, Sequence) and not isinstance(out, (str, bytes)) and len(out) == n and all(
            v is None or isinstance(v, numbers.Real) for v in out)
        if not good:  # NaN and inf are numbers: the trainer's guard (guarded) skips them with a warning
            raise ValueError(f"reward {reward.name} returned {out!r:.200} for {n} completions: a reward returns a "
                             "list with one number (or None: cannot judge) per completion")
