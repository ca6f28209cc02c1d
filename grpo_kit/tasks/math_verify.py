"""Math answers checked with math-verify (Hugging Face's ``math_verify``) under a per-call timeout, and the
reward built on it.

sympy can take unbounded time on hostile or unlucky input, and math-verify's own timeouts use
``signal.alarm``, which works only in a process's main thread. So the check runs in a worker
process (:class:`grpo_kit.system.workers.Worker`; one per timeout setting), started on first use and
reused; a call that does not answer within ``timeout_s`` kills that worker, counts as wrong, and
the next call starts a fresh one. Peers check under a timeout too (oat 1 s, verifiers 5 s).

The worker imports sympy and math-verify and makes a first parse *before* it reports ready, so that
start (about 1.5 s) is never charged to a check's timeout. A run in which more than
:data:`WARN_TIMEOUT_SHARE` of the checks time out warns loudly, since it is training on zeros.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any

from grpo_kit.system.workers import Worker, WorkerError
from grpo_kit.tasks.answer_format import extract_xml_answer
from grpo_kit.tasks.rewards import RewardFunc, describe, golds, texts

__all__ = ["DEFAULT_TIMEOUT_S", "WARN_TIMEOUT_SHARE", "MathVerifier", "math_equal", "math_verifier",
           "math_verify_reward", "math_verify_reward_func"]

log = logging.getLogger(__name__)

#: Seconds per check (verifiers' 5 s; oat uses 1 s).
DEFAULT_TIMEOUT_S = 5.0
#: Share of timed-out checks (after at least 20 checks) from which a verifier warns.
WARN_TIMEOUT_SHARE = 0.2
_WARN_AFTER_CHECKS = 20


def _latex(text: str) -> str:
    """Put a bare answer (``\\frac{1}{2}``, ``(3, \\pi/2)``) in math mode, so LaTeX extraction reads all of it."""
    return text if "$" in text or "\\boxed" in text or "\\(" in text else f"${text}$"


def math_equal(gold: str, prediction: str) -> bool | None:
    """Whether ``prediction`` states the same mathematical answer as ``gold`` (math-verify; no timeout).

    Args:
        gold: the reference answer, LaTeX without delimiters (MATH-500's ``answer``) or a number.
        prediction: an answer or a whole completion (math-verify finds ``\\boxed{}`` or the last
            expression); a bare answer is read in math mode first, then as plain text.

    Returns:
        ``True``/``False``; ``None`` when ``gold`` cannot be parsed (TRL then skips the sample).

    >>> math_equal("\\\\frac{1}{2}", "0.5"), math_equal("72", "The answer is 71."), math_equal("", "1")
    (True, False, None)
    """
    from math_verify import parse, verify

    gold_parsed = parse(_latex(gold), parsing_timeout=None)
    if not gold_parsed:
        return None
    parsed = parse(_latex(prediction), parsing_timeout=None) or parse(prediction, parsing_timeout=None)
    return bool(parsed) and bool(verify(gold_parsed, parsed, timeout_seconds=None))


def warm_up() -> None:
    """The worker's first check, made before it says it is ready (imports sympy; quiets math-verify, which
    warns on every call that it is timed from outside)."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    math_equal("1", "1")


def _path_of(check: Callable[[str, str], bool | None] | str) -> str:
    """``module:qualified.name`` of a check function (what the worker imports)."""
    return check if isinstance(check, str) else f"{check.__module__}:{check.__qualname__}"


class MathVerifier:
    """A worker process that checks answers with ``check`` (default :func:`math_equal`), each under a timeout.

    Args:
        timeout_s: seconds per check; a check that takes longer returns ``False`` and restarts the
            worker. The worker's start (Python, imports, a first parse) is not counted.
        check: a ``(gold, prediction) -> bool | None`` function importable by name from the worker (a
            module-level function), or its ``"module:name"``.

    Attributes:
        checks: how many checks were asked for.
        timeouts: how many of them timed out.
    """

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S,
                 check: Callable[[str, str], bool | None] | str = math_equal) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self.worker = Worker(_path_of(check), warm_up=f"{__name__}:warm_up")
        self.checks = self.timeouts = 0
        self._warned = False
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        self.worker.close()

    def __call__(self, gold: str, prediction: str) -> bool | None:
        """Check one answer: ``True``/``False``, ``None`` when the gold cannot be parsed, ``False`` on timeout or
        when the check raised.

        Raises:
            RuntimeError: the worker could not be started at all (the message holds its last output).
        """
        with self._lock:
            self.worker.start()  # a start that fails raises: nothing was checked
            self.checks += 1
            try:
                result = self.worker.call([gold, prediction], timeout_s=self.timeout_s)
                result = None if result is None else bool(result)
            except TimeoutError:
                self.timeouts += 1
                result = False
            except WorkerError:  # the check raised or the worker died mid-check: wrong, not a crash
                result = False
            self._warn_if_mostly_timeouts()
            return result

    def _warn_if_mostly_timeouts(self) -> None:
        if self._warned or self.checks < _WARN_AFTER_CHECKS or self.timeouts / self.checks <= WARN_TIMEOUT_SHARE:
            return
        self._warned = True
        message = (f"math-verify: {self.timeouts} of {self.checks} checks timed out (timeout_s={self.timeout_s:g}): "
                   "those completions score 0.0, so the run is training on zeros. Raise the timeout "
                   "(math_verify_reward(timeout_s=...)) or check the answers the policy writes.")
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


_VERIFIERS: dict[float, MathVerifier] = {}


def math_verifier(timeout_s: float = DEFAULT_TIMEOUT_S) -> MathVerifier:
    """The shared :class:`MathVerifier` for ``timeout_s`` (one worker process per timeout setting)."""
    if timeout_s not in _VERIFIERS:
        _VERIFIERS[timeout_s] = MathVerifier(timeout_s)
    return _VERIFIERS[timeout_s]


_warned: set[str] = set()


def _verdicts(completions: Any, answer: Any, timeout_s: float) -> list[float | None]:
    found = texts(completions)
    values: list[float | None] = []
    for text, gold in zip(found, golds(answer, len(found))):
        try:
            verdict = None if gold is None else math_verifier(timeout_s)(gold, extract_xml_answer(text))
        except RuntimeError as e:  # the worker cannot start: skip the sample (None) rather than score 0.0
            message = f"math-verify's worker could not start, so these completions are skipped (None): {e}"
            if message not in _warned:
                _warned.add(message)
                log.warning(message)
            verdict = None
        values.append(None if verdict is None else float(verdict))
    return values


@describe("math-verify correctness", 1.0, columns=("answer",))
def math_verify_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float | None]:
    """math-verify correctness: the answer read from the ``<answer>`` tags (the whole completion when it has none, as
    :func:`grpo_kit.tasks.answer_format.extract_xml_answer`) compared with the ``answer`` column by :func:`math_equal`
    in a worker process (:class:`MathVerifier`) under a 5 s timeout per completion.

    Returns:
        1.0 right, 0.0 wrong or timed out (a run where many time out warns: :data:`WARN_TIMEOUT_SHARE`), ``None`` when
        the gold answer cannot be parsed (TRL skips that sample, as open-r1 does) or the worker cannot start (with a
        warning).

    >>> math_verify_reward_func(completions=["<answer>\\\\frac{1}{2}</answer>", "<answer>0.4</answer>"],
    ...                         answer=["0.5", "0.5"])
    [1.0, 0.0]
    """
    return _verdicts(completions, answer, DEFAULT_TIMEOUT_S)


def math_verify_reward(timeout_s: float = DEFAULT_TIMEOUT_S) -> RewardFunc:
    """:func:`math_verify_reward_func` with another timeout per completion (oat uses 1 s).

    Returns:
        A reward function ``(completions, answer, **kwargs) -> list[float | None]`` named e.g.
        ``math_verify_reward_func_timeout1s`` (:func:`math_verify_reward_func` itself with the default timeout).
    """
    if timeout_s == DEFAULT_TIMEOUT_S:
        return math_verify_reward_func

    def reward(prompts=None, completions=None, answer=None, **kwargs) -> list[float | None]:
        return _verdicts(completions, answer, timeout_s)

    reward.__name__ = reward.__qualname__ = f"math_verify_reward_func_timeout{timeout_s:g}s"
    reward.__doc__ = f"math-verify correctness of the <answer> against the gold answer ({timeout_s:g} s timeout)."
    return describe("math-verify correctness", 1.0, columns=("answer",))(reward)
