"""One writer per folder: the OS lock a run folder (``.lock``) or an export folder (``.<name>.lock`` beside it) is
written under, and who holds it (``.lock-holder.json``: PID, host, command, since when), which a second writer is told
first, before anything else is said of the folder.

The lock is ``filelock``'s (an OS lock on the file), which the operating system releases when its process dies, so a
killed run's folder is free at once and never needs cleaning up.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from grpo_kit.system.files import write_json

__all__ = ["RunFolderBusy", "check_free", "hold_lock"]


class RunFolderBusy(ValueError):
    """Another process is writing this run folder (the message names it: PID, host, command, since when)."""


def _busy(holder_file: Path, what: Path, why: str = "") -> RunFolderBusy:
    """The error for a lock another process holds: the process as ``holder_file`` records it named first, then
    ``why`` this matters, then what to do."""
    try:
        holder = json.loads(holder_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        holder = {}
    holder = holder if isinstance(holder, dict) else {}
    who = (f"process {holder['pid']} on {holder['host']} ({holder['command']}, since {holder['started']})"
           if {"pid", "host", "command", "started"} <= holder.keys() else "another process")
    return RunFolderBusy(f"{what} is being written by {who}{': ' + why if why else ''}: wait for it to finish (or "
                         "stop it), or choose another folder")


@contextlib.contextmanager
def hold_lock(lock_file: Path, holder_file: Path, what: Path, command: str, value: Any = None) -> Iterator[Any]:
    """Hold the write lock ``lock_file`` while the block runs (a run folder's, or an export folder's beside it).

    A lock file beside ``what`` (an export's) is removed with its holder record when the block leaves no ``what``
    behind (an export refused, e.g. for a full disk), so a refusal leaves nothing beside ``--out``; filelock (4.x)
    refuses a lock on a file unlinked while it waited, so a second writer never holds a removed one.

    Args:
        lock_file: the file ``filelock`` locks (created with its folder).
        holder_file: where the holder is recorded (PID, host, command, since when) for a second writer's message.
        what: the folder the lock guards (named in the message).
        command: what this process does with it.
        value: what the ``with`` statement yields.

    Raises:
        RunFolderBusy: another process holds it; the message names that process and what to do.
    """
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    # one lock object per file in this process (is_singleton), so that a step that holds it (the demo) can call
    # another that takes it too (train): filelock counts the nested acquisitions of one object
    lock = FileLock(lock_file, is_singleton=True)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise _busy(holder_file, what) from None
    outermost = lock.lock_counter == 1
    try:
        if outermost:
            write_json(holder_file, {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                                     "started": time.strftime("%Y-%m-%d %H:%M:%S")})
        yield value
    finally:
        if outermost:
            holder_file.unlink(missing_ok=True)
        lock.release()
        if outermost and lock_file.parent != Path(what) and not Path(what).exists():
            lock_file.unlink(missing_ok=True)


def check_free(lock_file: Path, holder_file: Path, what: Path, why: str = "") -> None:
    """Refuse to go on while another process holds ``lock_file``: a probe that takes the lock and gives it back at
    once. This process's own lock (nested), no lock file, and one this process cannot open are free.

    Args:
        lock_file, holder_file, what: as :func:`hold_lock` takes them.
        why: what the other process's writing means for this caller, said after who it is.

    Raises:
        RunFolderBusy: the message names the process (PID, host, command, since when) and what to do.
    """
    if not lock_file.is_file():
        return
    lock = FileLock(lock_file, is_singleton=True)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise _busy(holder_file, what, why) from None
    except OSError:  # a folder this process cannot write: nothing it could race with here
        return
    lock.release()
