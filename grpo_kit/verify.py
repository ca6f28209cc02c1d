"""Math answers checked with math-verify (Hugging Face's ``math_verify``), under a per-call timeout.

sympy can take unbounded time on hostile or unlucky input, and math-verify's own timeouts use
``signal.alarm``, which works only in a process's main thread. So the check runs in a worker
process (``python -m grpo_kit.verify``; one per timeout setting), started on first use and
reused; a call that does not answer within ``timeout_s`` kills that worker, counts as wrong, and
the next call starts a fresh one. Peers do the same under a timeout (oat 1 s, verifiers 5 s;
REFERENCE section 4).

The worker is a module of its own started with the interpreter, not a ``multiprocessing`` child,
so it never re-runs the user's script (a training script without an ``if __name__ == "__main__"``
guard works), and it imports sympy and math-verify and makes a first parse *before* it reports
ready: that start (about 1.5 s) is never charged to a check's timeout. A run in which more than
:data:`WARN_TIMEOUT_SHARE` of the checks time out warns loudly, since it is training on zeros.
"""

from __future__ import annotations

import atexit
import importlib
import json
import logging
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_TIMEOUT_S", "WARN_TIMEOUT_SHARE", "MathVerifier", "math_equal", "math_verifier"]

#: Seconds per check (verifiers' 5 s; oat uses 1 s).
DEFAULT_TIMEOUT_S = 5.0
#: Share of timed-out checks (after at least 20 checks) from which a verifier warns.
WARN_TIMEOUT_SHARE = 0.2
_WARN_AFTER_CHECKS = 20
_STARTUP_TIMEOUT_S = 120.0  # starting Python and importing sympy is not part of a check's time


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


def _path_of(check: Callable[[str, str], bool | None] | str) -> str:
    """``module:qualified.name`` of a check function (what the worker imports)."""
    if isinstance(check, str):
        return check
    return f"{check.__module__}:{check.__qualname__}"


def _load(path: str) -> Callable[[str, str], bool | None]:
    module, _, name = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


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
        self.timeout_s, self.check_path = timeout_s, _path_of(check)
        self.checks = self.timeouts = 0
        self._warned = False
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._selector: selectors.BaseSelector | None = None
        self._log: Any = None

    def _start(self) -> None:
        # The worker sees this process's import path, so a check defined in the caller's code imports there too.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))}
        self._log = tempfile.TemporaryFile(mode="w+")
        self._process = subprocess.Popen([sys.executable, "-m", "grpo_kit.verify", self.check_path],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                         bufsize=1, env=env)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._process.stdout, selectors.EVENT_READ)
        if not self._selector.select(_STARTUP_TIMEOUT_S) or self._process.stdout.readline().strip() != '"ready"':
            self._log.seek(0)
            tail = "\n".join(self._log.read().strip().splitlines()[-10:])
            self.close()
            raise RuntimeError(f"the math-verify worker did not start within {_STARTUP_TIMEOUT_S:.0f} s:\n{tail}")

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                stream.close()
            self._selector.close()
            self._log.close()
        self._process = self._selector = self._log = None

    def __call__(self, gold: str, prediction: str) -> bool | None:
        """Check one answer: ``True``/``False``, ``None`` when the gold cannot be parsed, ``False`` on timeout.

        Raises:
            RuntimeError: the worker could not be started at all (the message holds its last output).
        """
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self.close()
                self._start()
            self.checks += 1
            result = self._ask(gold, prediction)
            self._warn_if_mostly_timeouts()
            return result

    def _ask(self, gold: str, prediction: str) -> bool | None:
        try:
            self._process.stdin.write(json.dumps([gold, prediction]) + "\n")
            self._process.stdin.flush()
            if self._selector.select(self.timeout_s):
                line = self._process.stdout.readline()
                if line:
                    return json.loads(line)
        except (BrokenPipeError, OSError, ValueError):  # the worker died mid-check
            self.close()
            return False
        self.timeouts += 1
        self.close()
        return False

    def _warn_if_mostly_timeouts(self) -> None:
        if self._warned or self.checks < _WARN_AFTER_CHECKS or self.timeouts / self.checks <= WARN_TIMEOUT_SHARE:
            return
        self._warned = True
        message = (f"math-verify: {self.timeouts} of {self.checks} checks timed out (timeout_s={self.timeout_s:g}): "
                   "those completions score 0.0, so the run is training on zeros. Raise the timeout "
                   "(math_verify_reward(timeout_s=...)) or check the answers the policy writes.")
        print(f"[grpo_kit] WARNING {message}", file=sys.stderr, flush=True)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


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


def _serve(check_path: str) -> None:
    """The worker: import the check, make a first check (imports sympy), say ready, then answer each JSON line."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns on every call that we time it out
    check = _load(check_path)
    try:
        check("1", "1")
    except Exception:
        pass
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        gold, prediction = json.loads(line)
        try:
            result = check(gold, prediction)
            result = None if result is None else bool(result)
        except Exception:
            result = False
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _serve(sys.argv[1])
