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
import hashlib
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.runs.locks import RunFolderBusy, check_free, hold_lock  # RunFolderBusy: what lock() raises
from grpo_kit.system.files import (
    append_jsonl,
    files_digest,
    model_files,
    read_jsonl,
    sha256_file,
    write_json,
    write_jsonl,
)

__all__ = ["AFTER_STEP", "BASELINE_STEP", "COLAB_DRIVE", "TRAIN_STEP", "RunFolder", "RunFolderBusy", "check_run_dir",
           "enclosing_run", "in_colab", "read_record", "resolve_run_dir"]

#: The steps that write a run folder's files, as a message names them: the notebook and the command.
BASELINE_STEP = "02_baseline_eval (or python -m grpo_kit eval --before)"
TRAIN_STEP = "03_train_grpo (or python -m grpo_kit train)"
AFTER_STEP = "04_post_training_eval (or python -m grpo_kit eval)"

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
        ValueError: an empty ``run_dir`` (:func:`check_run_dir`: ``Path("")`` would be the current folder).
    """
    if not str(run_dir).strip():
        check_run_dir(run_dir)
    run_dir = Path(run_dir)
    if not (in_colab() if use_drive is None else use_drive):
        return run_dir
    if not in_colab():
        raise RuntimeError("use_drive=True needs Google Colab (google.colab.drive); set use_drive=False to keep the "
                           "run folder on this machine")
    if not Path(_DRIVE_MOUNT, "MyDrive").is_dir():
        from google.colab import drive

        drive.mount(_DRIVE_MOUNT)
    return run_dir if run_dir.is_absolute() else Path(drive_root) / run_dir


#: Files only a run folder holds: a folder with one of them is a run folder.
_RUN_MARKERS = ("train_settings.json", "eval_settings.json", "finished.json")


def enclosing_run(path: str | Path) -> tuple[Path, str] | None:
    """The run folder that ``path`` is or lies inside, and the first part of ``path`` below it (``""`` for the run
    folder itself, ``"model"`` for ``RUN/model/x``); ``None`` when it lies in no run folder. A run folder is one that
    holds ``train_settings.json``, ``eval_settings.json`` or ``finished.json``.

    >>> enclosing_run("/") is None
    True
    """
    target = Path(path).resolve()
    for folder in (target, *target.parents):
        if any((folder / name).is_file() for name in _RUN_MARKERS):
            inside = target.relative_to(folder).parts
            return folder, inside[0] if inside else ""
    return None


def read_record(path: Path) -> dict[str, Any]:
    """The JSON object a run folder's record ``path`` holds; ``{}`` when it is missing, damaged or not an object, for a
    reader that can go on without it (the step that needs the file reads it with :meth:`RunFolder.read_settings`, whose
    message says what to do)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _seal(step: Any, digest: Any) -> str:
    """What ``finished.json`` records beside its step: a hash of the step and the weights' digest, so that a step
    edited by hand (a 3-step run made to read 999 in its report and card) is told apart from the one training wrote."""
    return hashlib.sha256(f"grpo_kit finished {step} {digest}".encode()).hexdigest()[:16]


def check_run_dir(path: str | Path) -> None:
    """Refuse a run folder that is no folder of its own: an empty path (``--run-dir ''``, which would write the run's
    files loose into the current folder), or a path inside another run folder (``RUN/model/sub``: it would write into
    that run's ``model/``, which that run's readers then refuse, as a file added after training).

    Raises:
        ValueError: one line naming the path, the run folder it lies in, and what to give instead.
    """
    if not str(path).strip():
        raise ValueError("the run folder is empty (--run-dir ''; notebooks: run_dir=''): name a folder of its own, "
                         "e.g. --run-dir runs/my-run")
    found = enclosing_run(path)
    if found is not None and found[1]:
        run, inside = found
        part = f"{inside}/" if (run / inside).is_dir() else inside
        raise ValueError(f"{path} lies inside the run folder {run} (in its {part}), whose files that run's steps "
                         "write and check: choose a folder outside it, e.g. --run-dir "
                         f"{shlex.quote(str(run.parent / (run.name + '-2')))}")


@dataclass(frozen=True)
class RunFolder:
    """Paths inside one run folder (created on first use).

    Args:
        path: the folder.
        write: this process writes the folder: it is created and must be writable. ``False`` for a command that only
            reads it (``reward-check``, ``compare``, ``view``, ``export`` with its ``--out`` elsewhere), which works on
            a read-only folder too.

    Raises:
        ValueError: ``write`` and the folder cannot be created or written, or is no folder of its own (an empty path,
            or one inside another run folder: :func:`check_run_dir`); the message names it.
    """

    path: Path

    def __init__(self, path: str | Path, write: bool = True) -> None:
        object.__setattr__(self, "path", Path(path))
        if not write:
            return
        check_run_dir(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=self.path).close()  # a file made and gone at once: the folder is writable
        except OSError as e:
            raise ValueError(f"cannot write the run folder {self.path} ({e.strerror or e}): choose a folder you can "
                             "write, e.g. --run-dir runs/<name> under the current directory") from None

    @classmethod
    def existing(cls, path: str | Path, written_by: str = "notebooks 02-03 (or eval --before and train)",
                 write: bool = True) -> RunFolder:
        """The run folder at ``path``, which a reader (notebook 04, ``compare``) needs to exist: a mistyped path is
        named, not created empty. ``write``: see the class.

        Raises:
            FileNotFoundError: no folder at ``path``; the message names it and the steps that write one.
        """
        if not Path(path).is_dir():
            raise FileNotFoundError(f"no run folder at {path}: check the path, or write one with {written_by}")
        return cls(path, write)

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
    recipe = property(lambda self: self.path / "recipe.yaml",
                      doc="the recipe as the run resolved it (TRL's keys; train --config reads it, a resume too)")
    eval_settings = property(lambda self: self.path / "eval_settings.json",
                             doc="the baseline's slice, decoding, route, model and its fingerprint, task and prompt")
    finished = property(lambda self: self.path / "finished.json",
                        doc="written once training saved its model: the step it finished at, when, and the SHA-256 "
                            "of each file of model/")
    evaluated = property(lambda self: self.path / "evaluated.json",
                         doc="written last by the evaluation after training: the step and model digest it measured")
    lock_file = property(lambda self: self.path / ".lock", doc="held by the one process writing the folder")
    lock_holder = property(lambda self: self.path / ".lock-holder.json", doc="who holds the lock (for the message)")
    heldout = property(lambda self: self.path / "heldout", doc="held-out evaluations during training, per step")
    groups = property(lambda self: self.path / "groups",
                      doc="training groups kept per step: prompt, completions, rewards, advantages (Parquet)")
    view = property(lambda self: self.path / "view.html", doc="the run viewer (python -m grpo_kit view)")
    alarms = property(lambda self: self.path / "alarms.jsonl", doc="reward-hacking and stale-weights alarms")
    report = property(lambda self: self.path / "report.md", doc="the before/after report")

    def lock(self, command: str, reading: bool = False) -> contextlib.AbstractContextManager[RunFolder]:
        """Hold the folder's write lock while the block runs: one writer per run folder.

        The lock is ``filelock``'s (an OS lock on ``.lock``), which the operating system releases when its
        process dies, so a killed run's folder is free at once and never needs cleaning up. Nested use in one
        process (the demo, then its training) is allowed.

        Args:
            command: what this process does (``"train"``, ``"eval --before"``; shown to a second writer).
            reading: the block only reads the folder, and holds the lock so that no step rewrites what it reads; a
                folder this process cannot write (read-only, or another user's) is read without it, since the lock
                is a file in the folder.

        Raises:
            RunFolderBusy: another process holds it; the message names it and what to do.
        """
        if reading and not os.access(self.path, os.W_OK):
            return contextlib.nullcontext(self)
        return hold_lock(self.lock_file, self.lock_holder, self.path, command, self)

    def check_free(self, why: str = "") -> None:
        """Refuse to go on while another process writes this folder (a training, a baseline): say who, first, before
        anything else is said of the folder (that its model is missing, that it holds checkpoints). This process's own
        lock, and a folder without a lock file or that this process cannot open, are free.

        Args:
            why: what the other process's writing means for this caller (``"it writes model/ when it finishes"``).

        Raises:
            RunFolderBusy: the message names the process (PID, host, command, since when) and what to do.
        """
        check_free(self.lock_file, self.lock_holder, self.path, why)

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
        if missing := [k for k in keys if not isinstance(data, dict) or k not in data]:
            raise ValueError(f"{path} is damaged or was edited (no {', '.join(missing)}): delete it and run "
                             f"{written_by} again with run_dir={str(self.path)!r}")
        return data

    def finished_step(self) -> int | None:
        """The step training finished at (``finished.json``), or ``None`` when it has not finished.

        Raises:
            ValueError: ``finished.json`` is damaged, or its step was edited (it no longer matches the seal training
                wrote beside it); the message says what to do.
        """
        if not self.finished.is_file():
            return None
        record = self.read_settings(self.finished, "train --resume (it finishes the save again)", ("step",))
        step = record["step"]
        if isinstance(step, bool) or not isinstance(step, int) or (
                (sealed := record.get("seal")) is not None and sealed != _seal(step, record.get("model_digest"))):
            raise ValueError(f"{self.finished} was edited (its step, {step!r}, is not the step training recorded "
                             "there): restore it, or train again into a new run folder; the report and the model "
                             "card would say a wrong number of steps")
        return step

    def mark_finished(self, step: int, alarms: list[dict[str, Any]] | None = None) -> None:
        """Record that training saved its model at ``step`` (written last, after ``model/`` and the log history),
        with the SHA-256 of each file of ``model/`` (:func:`grpo_kit.system.files.model_files`) and their digest, which
        :meth:`check_model` holds ``model/`` to later, and the alarms training raised (``alarms.jsonl``'s, e.g. a
        reward that never judged anything)."""
        files = model_files(self.model)
        digest = files_digest(files)
        write_json(self.finished, {"step": step, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                                   "model_digest": digest, "model_files": files, "alarms": list(alarms or []),
                                   "seal": _seal(step, digest)})

    def check_model(self) -> str | None:
        """Check that ``model/`` still holds what training wrote (``finished.json``'s SHA-256 of each file).

        Returns:
            The trained weights' digest (:func:`grpo_kit.system.files.files_digest`), or ``None`` for a run that
            finished before the kit recorded one (nothing to check against).

        Raises:
            ValueError: training has not finished, or a file of ``model/`` was changed, removed or added since; the
                message names the file and what to do.
        """
        if self.finished_step() is None:
            raise ValueError(f"training in {self.path} has not finished (no {self.finished.name}; model/ may be "
                             f"missing or half-written): run {self.command('train --resume')} to finish it")
        record = self.read_json(self.finished, "train --resume")
        recorded = record.get("model_files")
        if not isinstance(recorded, dict):
            return None
        now = model_files(self.model)
        fix = ("restore model/ as training wrote it (checkpoints/ hold the same weights), or train a new run folder; "
               "nothing that reads model/ trusts it until then")
        changed = [name for name in sorted(set(recorded) | set(now)) if now.get(name) != recorded.get(name)]
        if changed:
            name, held = changed[0], self.finished.name
            why = (f"is missing, but training wrote it ({held} records its SHA-256):" if name not in now else
                   f"was added after training ({held} records no such file): remove it, or" if name not in recorded
                   else f"no longer matches what training wrote (its SHA-256 differs from the one {held} records):")
            raise ValueError(f"{self.model / name} {why} {fix}")
        return str(record.get("model_digest") or files_digest(recorded))

    def mark_evaluated(self, step: int, digest: str | None, settings: dict[str, Any]) -> None:
        """Record what the evaluation after training measured (written last, after its results): the training step,
        the trained weights' digest, the decoding (``settings``: ``max_new_tokens``, ``samples``, ...) and the SHA-256
        of ``trained.jsonl`` (and ``trained_sampled.jsonl``), so that records replaced afterwards are not taken for
        these."""
        files = {p.name: sha256_file(p) for p in (self.trained, self.trained_sampled) if p.is_file()}
        write_json(self.evaluated, {"step": step, "model_digest": digest, **settings, "files": files,
                                    "evaluated": time.strftime("%Y-%m-%d %H:%M:%S")})

    def baseline_files(self) -> dict[str, str]:
        """The SHA-256 of the baseline's records (``baseline.jsonl``, and ``baseline_sampled.jsonl`` when measured), by
        file name: what ``eval_settings.json``, written last by the baseline, records under ``files``."""
        return {p.name: sha256_file(p) for p in (self.baseline, self.baseline_sampled) if p.is_file()}

    def check_baseline(self, path: Path) -> Path:
        """Refuse baseline records (``path``: :attr:`baseline` or :attr:`baseline_sampled`) that are not the ones the
        baseline wrote: their SHA-256 differs from the one ``eval_settings.json`` records, as ``evaluated.json``
        holds ``trained.jsonl`` to its (:meth:`stale_results`). A baseline measured before the kit recorded them has
        nothing to check against. Returns ``path``.

        Raises:
            FileNotFoundError: ``path`` is missing (the message names the step that writes it).
            ValueError: the file was edited or replaced; the message names it and what to do.
        """
        self.require(path, BASELINE_STEP)
        # no settings (a baseline still being measured) or damaged ones, which their reader names: nothing to check
        recorded = read_record(self.eval_settings).get("files")
        if isinstance(recorded, dict) and path.name in recorded and sha256_file(path) != recorded[path.name]:
            raise ValueError(f"{path} is not the file the baseline wrote (its SHA-256 differs from the one "
                             f"{self.eval_settings.name} records: it was edited or replaced), so no table reads it: "
                             f"restore it, or measure the baseline again in a new run folder ({BASELINE_STEP})")
        return path

    def stale_results(self, settings: dict[str, Any] | None = None) -> str | None:
        """Why the evaluation after training (``trained.jsonl``, ``report.md``, ``comparison.csv``) is not of the
        model now in ``model/``; ``None`` when it is current.

        Args:
            settings: decoding settings the results must have been measured with (``eval_settings.json``'s
                ``max_new_tokens``, ``samples``, ...); those the record holds are compared.

        Returns:
            A one-line reason that ends with what to run, or ``None``.
        """
        again = f"run {self.command('eval')} again"
        if "step" not in (record := read_record(self.evaluated)):  # missing or damaged
            return (f"{self.path}'s evaluation after training does not record the step and model it measured (no "
                    f"readable {self.evaluated.name}): {again}")
        try:
            step, digest = self.finished_step(), self.check_model()
        except (OSError, ValueError) as e:
            return str(e)
        if record.get("step") != step:
            return (f"{self.path}'s evaluation after training is of step {record.get('step')}, and the model is now at "
                    f"step {step} (the run was trained further): {again}")
        if record.get("model_digest") != digest:
            return f"{self.path}'s evaluation after training measured other weights than model/ holds now: {again}"
        files = record.get("files") or {}
        for name, recorded in files.items():
            path = self.path / name
            if not path.is_file() or sha256_file(path) != recorded:
                return (f"{path} is not the file the evaluation after training wrote (it was replaced or edited): "
                        f"{again}")
        if self.trained.name not in files:
            return f"{self.path}'s evaluation after training does not record its {self.trained.name}: {again}"
        for key, value in (settings or {}).items():
            if key in record and record[key] != value:
                return (f"{self.path}'s evaluation after training used {key} = {record[key]!r} where the baseline "
                        f"used {value!r}: {again}")
        return None

    def require(self, path: Path, written_by: str) -> Path:
        """Return ``path``, or raise naming the step (``written_by``) that writes it, and on the command line
        ``--trust-task-code`` with the Python it lets run where the run needs it (:meth:`trust_option`).

        Raises:
            RunFolderBusy: ``path`` is missing because another process is writing the folder (a training that has
                not saved its model yet): the message names that process first.
            FileNotFoundError: ``path`` is missing.
        """
        if not path.exists():
            self.check_free(f"it writes {path.name}{'/' if not path.suffix else ''} when it finishes")
            trust = f" (on the command line with{self.trust_option()})" if self.needs_trust() else ""
            raise FileNotFoundError(f"{path} is missing: run {written_by} with run_dir={str(self.path)!r}{trust} "
                                    "first")
        return path

    def foreign_code(self) -> dict[str, Any]:
        """``{label: module:name}`` of the Python other than the kit's own that this run's records name, which the
        commands reading the run import only with ``--trust-task-code``
        (:func:`grpo_kit.tasks.user_code.check_trusted`): ``train_settings.json``'s rewards of your own
        (``reward NAME``), and the code keys of the task file a record names (``task file PATH's loader``). Read
        without importing anything; a missing or damaged record names nothing."""
        from grpo_kit.tasks.reward_registry import foreign_rewards
        from grpo_kit.tasks.task_file import names_code

        trained, evaluated = read_record(self.train_settings), read_record(self.eval_settings)
        found = foreign_rewards(trained)
        for task in dict.fromkeys(record.get("task") for record in (trained, evaluated)):
            found |= {f"task file {task}'s {key}": ref for key, ref in names_code(task).items()}
        return found

    def needs_trust(self) -> bool:
        """Whether the commands that read this run must pass ``--trust-task-code``: its records name Python other
        than the kit's own (:meth:`foreign_code`)."""
        return bool(self.foreign_code())

    def trust_option(self) -> str:
        """``" --trust-task-code (read first the Python it runs: ...)"``, naming each piece of Python this run's
        records name and the file it would be imported from (:func:`grpo_kit.tasks.user_code.where_code_is`), or
        ``""`` where the run needs no trust: a printed command never asks for consent to code it does not name."""
        from grpo_kit.tasks.user_code import where_code_is

        code = self.foreign_code()
        if not code:
            return ""
        names = ", ".join(f"{label}: {ref}" for label, ref in code.items())
        return f" --trust-task-code (read first the Python it runs: {names}; {where_code_is(code.values())})"

    def command(self, action: str) -> str:
        """The command that runs ``action`` (``"eval"``, ``"train --resume"``) on this run, as it can be pasted: the
        folder quoted for a shell, and where the run needs it ``--trust-task-code`` followed by the Python it would
        run and where from (:meth:`trust_option`)."""
        name, _, options = action.partition(" ")
        return " ".join(["python -m grpo_kit", name, "--run-dir", shlex.quote(str(self.path)), *options.split()]
                        ) + self.trust_option()

    def heldout_record(self, step: int) -> Path:
        """Where the held-out evaluation at ``step`` is kept (``heldout/step-<step>.jsonl``)."""
        return self.heldout / f"step-{step:06d}.jsonl"

    def heldout_records(self) -> list[tuple[int, Path]]:
        """The held-out evaluations kept, as ``(step, path)``, oldest step first."""
        steps = ((p.stem.removeprefix("step-"), p) for p in self.heldout.glob("step-*.jsonl"))  # none: no folder
        return sorted((int(step), p) for step, p in steps if step.isdigit())

    def append_alarm(self, alarm: dict[str, Any]) -> None:
        """Add one alarm (a JSON object with its ``kind`` and ``step``) to ``alarms.jsonl``."""
        append_jsonl(self.alarms, alarm)

    def read_alarms(self) -> list[dict[str, Any]]:
        """The alarms raised while training (``alarms.jsonl``; empty when none; a line torn by a kill is skipped)."""
        return read_jsonl(self.alarms) if self.alarms.is_file() else []

    def forget_after(self, step: int) -> None:
        """Drop the held-out records and alarms of steps after ``step`` (a killed run's, redone after resuming)."""
        for kept_step, path in self.heldout_records():
            if kept_step > step:
                path.unlink()
        if self.alarms.is_file():
            write_jsonl(self.alarms, [a for a in self.read_alarms() if a.get("step", 0) <= step])
