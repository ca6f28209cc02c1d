"""Math answers checked with math-verify (Hugging Face's ``math_verify``), under a per-call timeout.

sympy can take unbounded time on hostile or unlucky input, and math-verify's own timeouts use
``signal.alarm``, which works only in a process's main thread. So the check runs in one worker
process per timeout setting (started on first use, spawned, reused); a call that does not answer
within ``timeout_s`` kills that worker, counts as wrong, and the next call starts a fresh one.
Peers do the same under a timeout (oat 1 s, verifiers 5 s; REFERENCE section 4).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_TIMEOUT_S", "MathVerifier", "math_equal", "math_verifier"]

#: Seconds per check (verifiers' 5 s; oat uses 1 s).
DEFAULT_TIMEOUT_S = 5.0
_STARTUP_TIMEOUT_S = 120.0  # spawning and importing sympy is not part of a check's time


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


def _serve(connection: Any, check: Callable[[str, str], bool | None]) -> None:
    """Worker loop: answer each ``(gold, prediction)`` with ``check``'s result (``False`` on an error)."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns on every call that we time it out
    connection.send("ready")
    while True:
        try:
            gold, prediction = connection.recv()
        except (EOFError, OSError):
            return
        try:
            connection.send(check(gold, prediction))
        except Exception:
            connection.send(False)


class MathVerifier:
    """A worker process that checks answers with ``check`` (default :func:`math_equal`), each under a timeout.

    Args:
        timeout_s: seconds per check; a check that takes longer returns ``False`` and restarts
            the worker.
        check: a picklable ``(gold, prediction) -> bool | None`` run in the worker.

    Attributes:
        timeouts: how many checks have timed out.
    """

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S,
                 check: Callable[[str, str], bool | None] = math_equal) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s, self.check, self.timeouts = timeout_s, check, 0
        self._lock = threading.Lock()
        self._process: Any = None
        self._connection: Any = None

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # fork is unsafe once torch or CUDA threads exist
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, self.check), daemon=True)
        self._process.start()
        child.close()
        if not self._connection.poll(_STARTUP_TIMEOUT_S):
            self.close()
            raise RuntimeError("the math-verify worker did not start")
        self._connection.recv()

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        if self._process is not None:
            self._process.kill()
            self._process.join()
            self._connection.close()
        self._process = self._connection = None

    def __call__(self, gold: str, prediction: str) -> bool | None:
        """Check one answer: ``True``/``False``, ``None`` when the gold cannot be parsed, ``False`` on timeout.

        Raises:
            RuntimeError: the worker could not be started at all.
        """
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._start()
            try:
                self._connection.send((gold, prediction))
                if self._connection.poll(self.timeout_s):
                    return self._connection.recv()
            except (EOFError, OSError):  # the worker died mid-check
                self.close()
                return False
            self.timeouts += 1
            self.close()
            return False


_VERIFIERS: dict[float, MathVerifier] = {}


def math_verifier(timeout_s: float = DEFAULT_TIMEOUT_S) -> MathVerifier:
    """The shared :class:`MathVerifier` for ``timeout_s`` (one worker process per timeout setting)."""
    if timeout_s not in _VERIFIERS:
        _VERIFIERS[timeout_s] = MathVerifier(timeout_s)
    return _VERIFIERS[timeout_s]


@atexit.register
def _close_all() -> None:
    for verifier in _VERIFIERS.values():
        verifier.close()
