"""A run folder: the files one before/after experiment writes and reads, in one place.

Notebook 02 (or ``python -m grpo_kit eval --before``) writes the baseline evaluation and, once it
finished, its settings; 03 (or ``python -m grpo_kit train``) the checkpoints, the trained model, the
trainer's log history and what it trained; 04 (or ``python -m grpo_kit eval``) reads both and writes
the evaluation after training. The demo writes the same files. Keeping the names here lets each step
check that the earlier ones ran. On Colab each notebook runs in its own runtime, so the folder goes
on Google Drive (:func:`resolve_run_dir`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from grpo_kit.system.files import append_jsonl, read_jsonl, write_json, write_jsonl

__all__ = ["COLAB_DRIVE", "RunFolder", "RunFolderBusy", "in_colab", "resolve_run_dir"]

# One lock object per folder in this process, so that a step that holds it (the demo) can call another that takes
# it too (train): filelock counts the nested acquisitions of one object.
_LOCKS: dict[Path, FileLock] = {}


class RunFolderBusy(ValueError):
    """Another process is writing this run folder (the message names it: PID, host, command, since when)."""

#: Where run folders go on Colab: the mounted Google Drive, which outlives a runtime.
COLAB_DRIVE = "/content/drive/MyDrive/grpo_kit"
_DRIVE_MOUNT = "/content/drive"


def in_colab() -> bool:
    """Whether this Python runs in a Google Colab runtime."""
    return "google.colab" in sys.modules or os.environ.get("COLAB_RELEASE_TAG") is not None


def resolve_run_dir(run_dir: str | Path, use_drive: bool | None = None, drive_root: str = COLAB_DRIVE) -> Path:
    """Where a run folder lives: on Google Drive in Colab (mounted on first use), as given elsewhere.

    Each Colab notebook runs in its own runtime and a runtime's disk is gone when it ends, so
    notebooks 02 -> 03 -> 04 share their run folder through Drive.

    Args:
        run_dir: the run folder; a relative path is placed under ``drive_root`` on Drive.
        use_drive: ``None`` (default): Drive in Colab, the local path elsewhere; ``True`` / ``False``
            to choose.
        drive_root: the Drive folder that holds run folders.

    Returns:
        The folder's path (not created).

    Raises:
        RuntimeError: ``use_drive=True`` outside Colab.
    """
    run_dir = Path(run_dir)
    use_drive = in_colab() if use_drive is None else use_drive
    if not use_drive:
        return run_dir
    if not in_colab():
        raise RuntimeError("use_drive=True needs Google Colab (google.colab.drive); set use_drive=False to keep the "
                           "run folder on this machine")
    if not Path(_DRIVE_MOUNT, "MyDrive").is_dir():
        from google.colab import drive

        drive.mount(_DRIVE_MOUNT)
    return run_dir if run_dir.is_absolute() else Path(drive_root) / run_dir


@dataclass(frozen=True)
class RunFolder:
    """Paths inside one run folder (created on first use).

    Raises:
        ValueError: the folder cannot be created or written (the message names it).
    """

    path: Path

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", Path(path))
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".write-test-{os.getpid()}"
            probe.write_text("", encoding="utf-8")
            probe.unlink()
        except OSError as e:
            raise ValueError(f"cannot write the run folder {self.path} ({e.strerror or e}): choose a folder you can "
                             "write, e.g. --run-dir runs/<name> under the current directory") from None

    baseline = property(lambda self: self.path / "baseline.jsonl", doc="records of the evaluation before training")
    trained = property(lambda self: self.path / "trained.jsonl", doc="records of the evaluation after training")
    baseline_sampled = property(lambda self: self.path / "baseline_sampled.jsonl", doc="sampled records, before")
    trained_sampled = property(lambda self: self.path / "trained_sampled.jsonl", doc="sampled records, after")
    generations = property(lambda self: self.path / "generations.jsonl", doc="the generation cache")
    comparison = property(lambda self: self.path / "comparison.csv", doc="the before/after table")
    before_after = property(lambda self: self.path / "before_after.png", doc="the before/after chart")
    model = property(lambda self: self.path / "model", doc="the trained LoRA adapter or full model")
    checkpoints = property(lambda self: self.path / "checkpoints", doc="checkpoint-<step>/ folders (resume)")
    log_history = property(lambda self: self.path / "log_history.json", doc="the GRPO trainer's log history")
    curves = property(lambda self: self.path / "training_curves.png", doc="reward, length and held-out curves")
    train_settings = property(lambda self: self.path / "train_settings.json",
                              doc="what the run trains: preset, task, model and its fingerprint, rewards, prompt")
    eval_settings = property(lambda self: self.path / "eval_settings.json",
                             doc="the baseline's slice, decoding, route, model and its fingerprint, task and prompt")
    finished = property(lambda self: self.path / "finished.json",
                        doc="written once training saved its model: the step it finished at, and when")
    lock_file = property(lambda self: self.path / ".lock", doc="held by the one process writing the folder")
    lock_holder = property(lambda self: self.path / ".lock-holder.json", doc="who holds the lock (for the message)")
    heldout = property(lambda self: self.path / "heldout", doc="held-out evaluations during training, per step")
    alarms = property(lambda self: self.path / "alarms.jsonl", doc="reward-hacking and stale-weights alarms")
    report = property(lambda self: self.path / "report.md", doc="the before/after report")

    @contextlib.contextmanager
    def lock(self, command: str) -> Iterator[RunFolder]:
        """Hold the folder's write lock while the block runs: one writer per run folder.

        The lock is ``filelock``'s (an OS lock on ``.lock``), which the operating system releases when its
        process dies, so a killed run's folder is free at once and never needs cleaning up. Nested use in one
        process (the demo, then its training) is allowed.

        Args:
            command: what this process does (``"train"``, ``"eval --before"``; shown to a second writer).

        Raises:
            RunFolderBusy: another process holds it; the message names it and what to do.
        """
        lock = _LOCKS.setdefault(self.path.resolve(), FileLock(self.lock_file))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            try:
                holder = json.loads(self.lock_holder.read_text(encoding="utf-8"))
                who = (f"process {holder['pid']} on {holder['host']} ({holder['command']}, since "
                       f"{holder['started']})")
            except (OSError, ValueError, KeyError, TypeError):
                who = "another process"
            raise RunFolderBusy(f"{self.path} is being written by {who}: wait for it to finish (or stop it), or "
                                "choose another run folder") from None
        try:
            if lock.lock_counter == 1:
                write_json(self.lock_holder, {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                                              "started": time.strftime("%Y-%m-%d %H:%M:%S")})
            yield self
        finally:
            if lock.lock_counter == 1:
                self.lock_holder.unlink(missing_ok=True)
            lock.release()

    def write_json(self, path: Path, data: Any) -> Path:
        """Write ``data`` as indented JSON to ``path`` (one of this folder's paths), whole or not at all; returns it."""
        return write_json(path, data)

    def read_json(self, path: Path, written_by: str) -> Any:
        """Read a JSON file of this run.

        Raises:
            FileNotFoundError: the file is missing; the message names the step that writes it.
        """
        self.require(path, written_by)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is damaged ({e}): delete it and run {written_by} again with "
                             f"run_dir={str(self.path)!r}") from None

    def read_settings(self, path: Path, written_by: str, keys: tuple[str, ...]) -> dict[str, Any]:
        """Read a settings file of this run (:meth:`read_json`) that must be a JSON object with ``keys``.

        Raises:
            FileNotFoundError: the file is missing.
            ValueError: it is damaged, not an object, or lacks a key; the message names the file and what to rerun.
        """
        data = self.read_json(path, written_by)
        missing = [k for k in keys if not isinstance(data, dict) or k not in data]
        if missing:
            raise ValueError(f"{path} is damaged or was edited (no {', '.join(missing)}): delete it and run "
                             f"{written_by} again with run_dir={str(self.path)!r}")
        return data

    def finished_step(self) -> int | None:
        """The step training finished at (``finished.json``), or ``None`` when it has not finished.

        Raises:
            ValueError: ``finished.json`` is damaged (the message says what to do).
        """
        if not self.finished.is_file():
            return None
        record = self.read_settings(self.finished, "train --resume (it finishes the save again)", ("step",))
        return int(record["step"])

    def mark_finished(self, step: int) -> None:
        """Record that training saved its model at ``step`` (written last, after ``model/`` and the log history)."""
        write_json(self.finished, {"step": step, "finished": time.strftime("%Y-%m-%d %H:%M:%S")})

    def require(self, path: Path, written_by: str) -> Path:
        """Return ``path``, or raise ``FileNotFoundError`` naming the step (``written_by``) that writes it."""
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run {written_by} with run_dir={str(self.path)!r} first")
        return path

    def heldout_record(self, step: int) -> Path:
        """Where the held-out evaluation at ``step`` is kept (``heldout/step-<step>.jsonl``)."""
        return self.heldout / f"step-{step:06d}.jsonl"

    def heldout_records(self) -> list[tuple[int, Path]]:
        """The held-out evaluations kept, as ``(step, path)``, oldest step first."""
        if not self.heldout.is_dir():
            return []
        return sorted((int(p.stem.removeprefix("step-")), p) for p in self.heldout.glob("step-*.jsonl"))

    def append_alarm(self, alarm: dict[str, Any]) -> None:
        """Add one alarm (a JSON object with its ``kind`` and ``step``) to ``alarms.jsonl``."""
        append_jsonl(self.alarms, alarm)

    def read_alarms(self) -> list[dict[str, Any]]:
        """The alarms raised while training (``alarms.jsonl``; empty when none; a line torn by a kill is skipped)."""
        return read_jsonl(self.alarms) if self.alarms.is_file() else []

    def keep_alarms(self, up_to_step: int) -> None:
        """Drop the alarms of steps after ``up_to_step`` (a killed run's, redone after resuming)."""
        if self.alarms.is_file():
            write_jsonl(self.alarms, [a for a in self.read_alarms() if a.get("step", 0) <= up_to_step])
