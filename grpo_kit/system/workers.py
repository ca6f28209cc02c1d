"""The kit's one protocol for child processes: a Python serving one handler, speaking JSON lines.

Two parts of the kit run code in a process of its own: vLLM (its memory goes back to the GPU when
the process ends) and the tiny policy's warm start under ``accelerate launch`` (its trainer must not
join the launch's process group). math-verify's checks need none: the kit calls rewards in the main
thread, where the kit's ``SIGALRM`` timeout around a check works (:mod:`grpo_kit.tasks.math_verify`).
Each names a handler ``module:function``; :class:`Worker` starts the child, waits until it is ready,
and sends it requests:

- ``call(payload)``: the handler's return value;
- ``stream(payload)``: the values a generator handler yields, each as soon as it exists.

A payload that is a list is passed as positional arguments, a dict as keyword arguments. The child
is a module started with the interpreter, not a ``multiprocessing`` child, so it never re-runs the
user's script (a script without an ``if __name__ == "__main__"`` guard works). It sees the parent's
import path. Its protocol channel is a copy of its standard output taken at start; everything else
it prints, C libraries included, goes to its standard error, which goes to a temporary file shown
when it fails (or, with ``stderr="inherit"``, to the parent's). It dies with its parent: a watchdog
thread ends it, and every process it started, within about a second of the parent's death, SIGKILL
included.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import pkgutil
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Worker", "WorkerError"]

_WATCH_EVERY_S = 0.5


class WorkerError(RuntimeError):
    """The child failed: it could not start, it died, or its handler raised (the message says which,
    with the last lines it printed)."""


class Worker:
    """A child Python serving one handler over JSON lines (see the module docstring).

    Args:
        target: the handler, ``"module:function"`` (as :func:`pkgutil.resolve_name` reads it), importable in the
            child.
        env: the child's environment (default this process's); the parent's import path is added.
        stderr: ``"file"`` (kept in a temporary file, shown on failure, deleted on close) or ``"inherit"``.

    Attributes:
        start_timeout_s: how long starting the child and importing its handler may take (s).

    Raises on use:
        WorkerError: the child did not start, died, or its handler raised.
    """

    start_timeout_s = 120.0

    def __init__(self, target: str, env: Mapping[str, str] | None = None, stderr: str = "file") -> None:
        if stderr not in ("file", "inherit"):
            raise ValueError(f"stderr must be 'file' or 'inherit', got {stderr!r}")
        self.target, self.stderr = target, stderr
        self._env = dict(os.environ if env is None else env)
        self._process: subprocess.Popen | None = None
        self._log: Any = None

    @property
    def running(self) -> bool:
        """Whether the child is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the child and wait until it is ready (a running child is left as it is)."""
        if self.running:
            return
        self.close()
        env = dict(self._env)
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        paths += [p for p in sys.path if p and os.path.isdir(p) and p not in paths]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["GRPO_KIT_WORKER_PARENT"] = str(os.getpid())
        self._log = tempfile.TemporaryFile(mode="w+") if self.stderr == "file" else None
        # -c rather than -m: runpy would warn that this module is already imported
        self._process = subprocess.Popen([sys.executable, "-c", _CHILD, self.target], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._log, env=env, start_new_session=True)
        # select on the pipe before anything is read: the buffered reader below holds nothing yet, and the child
        # writes nothing after its first line until it is sent a request
        if not select.select([self._process.stdout], [], [], self.start_timeout_s)[0]:
            tail = self.log_tail()
            self.close()
            raise WorkerError(f"the worker {self.target} did not start within {self.start_timeout_s:g} s:\n{tail}")
        message = self._read()
        if message.get("ready") is not True:
            error = self._failure(message, "start")
            self.close()
            raise error

    def call(self, payload: Any = None) -> Any:
        """Send one request to a handler that returns, and return its result.

        Raises:
            WorkerError: see the class.
        """
        self._send(payload)
        message = self._read()
        if "result" not in message:
            raise self._failure(message, "request")
        return message["result"]

    def stream(self, payload: Any = None) -> Iterator[Any]:
        """Send one request to a generator handler and yield what it yields, as it comes.

        Raises:
            WorkerError: see the class.
        """
        self._send(payload)
        while "result" not in (message := self._read()):
            if "item" not in message:
                raise self._failure(message, "request")
            yield message["item"]

    def _send(self, payload: Any) -> None:
        self.start()
        try:
            self._process.stdin.write((json.dumps(payload) + "\n").encode())
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._failure({}, "request") from None

    def _read(self) -> dict[str, Any]:
        """The next protocol message; ``{}`` when the child died."""
        line = self._process.stdout.readline()
        if not line:
            self._process.wait()
            return {}
        return json.loads(line)

    def _failure(self, message: dict[str, Any], during: str) -> WorkerError:
        """The error to raise: the handler raised (the child lives on), or the child died (it is cleaned up)."""
        if "error" in message:
            return WorkerError(f"the worker {self.target} raised {message['error']}:\n{message.get('traceback', '')}")
        code = self._process.poll() if self._process is not None else None
        tail = self.log_tail()
        self.close()
        return WorkerError(f"the worker {self.target} died during the {during} (exit {code}):\n{tail}")

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines the child wrote to its standard error (with ``stderr="file"``)."""
        if self._log is None or self._log.closed:
            return ""
        self._log.flush()
        self._log.seek(0)
        return "\n".join(self._log.read().strip().splitlines()[-lines:])

    def close(self) -> None:
        """Stop the child and every process it started (a later request starts a new one)."""
        if self._process is not None:
            if self._process.poll() is None:
                try:
                    os.killpg(self._process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                with contextlib.suppress(OSError):  # a request's bytes a dead child never read: flushed in vain
                    stream.close()
        if self._log is not None:
            self._log.close()
        self._process = self._log = None

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- the child --------------------------------------------------------------------------------------


def _serve(target: str) -> None:
    parent = int(os.environ.get("GRPO_KIT_WORKER_PARENT", os.getppid()))
    if os.getppid() != parent:  # the parent died before this line ran
        os._exit(1)

    def follow_parent() -> None:  # end this process group when the parent is gone (reparented), even SIGKILLed
        while os.getppid() == parent:
            time.sleep(_WATCH_EVERY_S)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=follow_parent, daemon=True, name="grpo_kit-follow-parent").start()
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # what anything else prints (vLLM's log, C libraries) goes to stderr, not the protocol
    sys.stdout = sys.stderr

    def say(**message: Any) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    def fail(e: BaseException) -> None:
        say(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())

    try:
        handler = pkgutil.resolve_name(target)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        fail(e)
        return
    say(ready=True)
    for line in sys.stdin:  # ends when the parent closes the pipe (it closed the worker, or exited)
        payload = json.loads(line)
        args, kwargs = (payload, {}) if isinstance(payload, list) else \
            ((), payload) if isinstance(payload, dict) else (() if payload is None else (payload,), {})
        try:
            result = handler(*args, **kwargs)
            if inspect.isgenerator(result):
                for item in result:
                    say(item=item)
                result = None
            say(result=result)
        except Exception as e:  # noqa: BLE001
            fail(e)


_CHILD = "import sys; from grpo_kit.system.workers import _serve; _serve(sys.argv[1])"
