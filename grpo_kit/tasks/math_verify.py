"""Math answers checked with math-verify (Hugging Face's ``math_verify``) under a per-call timeout, and the
reward built on it.

sympy can take unbounded time on hostile or unlucky input, so every check runs under a timeout around the whole
check (a ``SIGALRM`` timer raising math-verify's own ``TimeoutException``), and math-verify's ``parse``
and ``verify`` are called with ``raise_on_error=True``: without it they catch the timeout themselves, return "no
answer" and let the check go on, unbounded, with the next parse (a 1 s check then took 8 s on a 200,000-character
sum). The timer fires again every :data:`_REFIRE_S` until the check ends: Python ignores an exception raised in
a finalizer or a ``gc`` callback, so math-verify's one-shot ``signal.alarm`` (``math_verify.utils.timeout``) is lost
when it lands in one (hypothesis's ``gc`` callback did, and a 1 s check ran 66 s). A timer works in a process's
main thread, which is where TRL calls a plain reward function (trl
1.16.0, ``GRPOTrainer._calculate_rewards``) and where the kit's evaluation checks answers; a check called from
another thread runs without it, as TRL's own ``accuracy_reward`` does. A check that times out counts as wrong;
peers check under a timeout too (oat 1 s, verifiers 5 s). math-verify and sympy are imported, and a first answer
parsed, before the first timed check, so that start (about 1.5 s) is never charged to a check. A run in which more
than :data:`WARN_TIMEOUT_SHARE` of the checks time out warns loudly, since it is training on zeros.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import threading
import warnings
from collections.abc import Callable
from typing import Any

from grpo_kit.tasks.answer_format import extract_xml_answer
from grpo_kit.tasks.rewards import RewardFunc, describe, per_answer

__all__ = ["DEFAULT_TIMEOUT_S", "WARN_TIMEOUT_SHARE", "MathVerifier", "math_answer", "math_equal", "math_verifier",
           "math_verify_reward", "math_verify_reward_func"]

log = logging.getLogger(__name__)

#: Seconds per check (verifiers' 5 s; oat uses 1 s).
DEFAULT_TIMEOUT_S = 5.0
#: Share of timed-out checks (after at least 20 checks) from which a verifier warns.
WARN_TIMEOUT_SHARE = 0.2
_WARN_AFTER_CHECKS = 20
#: Seconds between the timer's later firings, once a check is past its timeout.
_REFIRE_S = 0.05
_MATH_MODE = re.compile(r"(?<!\\)\$")  # a dollar not escaped: math mode is written out already


def _latex(text: str) -> str:
    """Put a bare answer (``\\frac{1}{2}``, ``(3, \\pi/2)``, ``\\$36``) in math mode, so LaTeX extraction reads all
    of it; an escaped ``\\$`` is a dollar sign, not math mode (three of MATH-500's gold answers, e.g. ``\\$18.90``,
    were otherwise read as nothing, so no completion could be judged right on them).

    >>> _latex("\\\\$36"), _latex("$x$")
    ('$\\\\$36$', '$x$')
    """
    return text if _MATH_MODE.search(text) or "\\boxed" in text or "\\(" in text else f"${text}$"


def _balanced(text: str) -> bool:
    """Whether ``text``'s braces ``{}`` pair up (escaped ``\\{`` and ``\\}`` are literal braces), in one pass.

    >>> _balanced("\\\\frac{1}{2}"), _balanced("\\\\frac{1}{2"), _balanced("\\\\{1, 2\\\\}"), _balanced("}{")
    (True, False, True, False)
    """
    depth, escaped = 0, False
    for char in text:
        if escaped:  # the character after a backslash (\\{, and the second of \\\\, LaTeX's line break)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in "{}":
            depth += 1 if char == "{" else -1
            if depth < 0:
                return False
    return depth == 0


def math_answer(text: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """A gold answer of ``answer_type: math`` as the task keeps it (stripped), or ``None`` when no completion could
    be judged against it: its braces do not pair (``\\frac{1}{2``), or math-verify reads no mathematical object
    from it (only its text back), or reading it takes longer than ``timeout_s`` (main thread only, as
    :class:`MathVerifier`). A plain number is taken at once; anything else is parsed as :func:`math_equal` parses a
    gold answer (a few milliseconds each; about 1.5 s for sympy's import, once).

    >>> math_answer(" \\\\frac{1}{2} "), math_answer("\\\\frac{1}{2"), math_answer("72")
    ('\\\\frac{1}{2}', None, '72')
    """
    from math_verify import parse
    from math_verify.errors import TimeoutException

    from grpo_kit.tasks.numbers import exact_number

    text = text.strip()
    if not text or not _balanced(text):
        return None
    if exact_number(text) is not None:
        return text
    timed = _timer(timeout_s, TimeoutException) if threading.current_thread() is threading.main_thread() \
        else contextlib.nullcontext()
    try:
        with timed:
            parsed = parse(_latex(text), parsing_timeout=None, raise_on_error=True)
    except Exception:  # noqa: BLE001 - sympy raises many kinds, a timeout among them: not readable
        return None
    return text if any(not isinstance(item, str) for item in parsed) else None


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
    # raise_on_error: a timeout around this check ends it (math-verify would catch it and parse on)
    parsed = parse(_latex(prediction), parsing_timeout=None, raise_on_error=True) or \
        parse(prediction, parsing_timeout=None, raise_on_error=True)
    return bool(parsed) and bool(verify(gold_parsed, parsed, timeout_seconds=None, raise_on_error=True))


class MathVerifier:
    """Checks answers with ``check`` (default :func:`math_equal`), each under a timeout.

    Args:
        timeout_s: seconds per check; a check that takes longer returns ``False``.
        check: a ``(gold, prediction) -> bool | None`` function.

    Attributes:
        checks: how many checks were asked for.
        timeouts: how many of them timed out.
    """

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S,
                 check: Callable[[str, str], bool | None] = math_equal) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s, self.check = timeout_s, check
        self.checks = self.timeouts = 0
        self._warned = False

    def __call__(self, gold: str, prediction: str) -> bool | None:
        """Check one answer: ``True``/``False``, ``None`` when the gold cannot be parsed, ``False`` on timeout or
        when the check raised."""
        from math_verify.errors import TimeoutException

        if not self.checks:  # imports sympy and math-verify (whose every timed call warns: quieted) untimed
            logging.getLogger("math_verify").setLevel(logging.ERROR)
            math_equal("1", "1")
        self.checks += 1
        timed = _timer(self.timeout_s, TimeoutException) if threading.current_thread() is threading.main_thread() \
            else contextlib.nullcontext()
        try:
            with timed:
                result = self.check(gold, prediction)
            result = None if result is None else bool(result)
        except TimeoutException:
            self.timeouts += 1
            result = False
        except Exception:  # noqa: BLE001 - sympy raises many kinds: wrong, not a crash
            result = False
        if not self._warned and self.checks >= _WARN_AFTER_CHECKS and self.timeouts / self.checks > WARN_TIMEOUT_SHARE:
            self._warned = True
            message = (f"math-verify: {self.timeouts} of {self.checks} checks timed out (timeout_s={self.timeout_s:g}):"
                       " those completions score 0.0, so the run is training on zeros. Raise the timeout "
                       "(math_verify_reward(timeout_s=...)) or check the answers the policy writes.")
            log.warning(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return result


@contextlib.contextmanager
def _timer(timeout_s: float, error: type[BaseException]) -> Any:
    """Raise ``error`` in the main thread after ``timeout_s`` seconds, and every :data:`_REFIRE_S` after that until
    the block ends (one firing may land in a finalizer, where Python ignores it); the previous handler is restored."""
    def expire(signum: int, frame: Any) -> None:
        raise error(f"check took longer than {timeout_s:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s, _REFIRE_S)
    try:
        yield
    finally:
        while True:
            try:
                signal.setitimer(signal.ITIMER_REAL, 0)
                break
            except error:  # a firing that landed as the timer stopped: stop it again
                continue
        signal.signal(signal.SIGALRM, previous)


_VERIFIERS: dict[float, MathVerifier] = {}


def math_verifier(timeout_s: float = DEFAULT_TIMEOUT_S) -> MathVerifier:
    """The shared :class:`MathVerifier` for ``timeout_s`` (its counts are the run's)."""
    if timeout_s not in _VERIFIERS:
        _VERIFIERS[timeout_s] = MathVerifier(timeout_s)
    return _VERIFIERS[timeout_s]


def _verdicts(completions: Any, answer: Any, timeout_s: float) -> list[float | None]:
    check = math_verifier(timeout_s)
    verdicts = per_answer(completions, answer, lambda text, gold: check(gold, extract_xml_answer(text)), unread=None)
    return [None if verdict is None else float(verdict) for verdict in verdicts]


@describe("math-verify correctness", 1.0, columns=("answer",))
def math_verify_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float | None]:
    """math-verify correctness: the answer read from the ``<answer>`` tags (the whole completion when it has none, as
    :func:`grpo_kit.tasks.answer_format.extract_xml_answer`) compared with the ``answer`` column by :func:`math_equal`
    under a 5 s timeout per completion (:class:`MathVerifier`).

    Returns:
        1.0 right, 0.0 wrong or timed out (a run where many time out warns: :data:`WARN_TIMEOUT_SHARE`), ``None`` when
        the gold answer cannot be parsed (TRL skips that sample, as open-r1 does).

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
