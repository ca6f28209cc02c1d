"""Files written whole or not at all, JSON-lines files that survive a torn last line, and the YAML files a user writes
(recipes, task files) read one way.

A whole file is written to a temporary file in the same folder, flushed to disk (``fsync``) and
renamed over the target (``os.replace`` is atomic on POSIX and Windows): a reader sees the old file
or the new one, never half of one, whatever kills the writer. Temporary files and folders are created with the
user's umask (:func:`new_beside`), as a plain ``open`` would, so a run folder shared by a team stays readable to it.
Records that grow one at a time (generation caches, alarms) are appended a line at a time; a line cut short by a kill
is skipped when read and never glued to the next one. A saved model folder is hashed one way (:func:`model_files`):
a run records it, a merge and a generation cache are kept by it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = ["MAX_YAML_BYTES", "DiskFull", "append_jsonl", "files_digest", "follow_umask", "json_or_none", "model_files",
           "new_beside", "out_of_space", "read_jsonl", "read_yaml", "replaced", "sha256_file", "write_json",
           "write_jsonl", "write_text"]

#: The largest recipe or task file read, in bytes: they hold keys, and their data lives in data files (PyYAML reads
#: about 0.5 MB a second, so a 16 MB file given by mistake would be read for half a minute before being refused).
MAX_YAML_BYTES = 1 << 20
#: How the libraries that save weights say a write failed for want of space, where they raise no ``OSError``:
#: safetensors ("No space left on device (os error 28)"), torch's zip writer (``inline_container.cc``: "unexpected
#: pos", "file write failed", which say only that fewer bytes were written than asked).
_NO_SPACE = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")
_SHORT_WRITE = ("unexpected pos", "file write failed")
#: Free space below which a short write is taken for a full disk, in bytes.
_NEARLY_FULL = 64 << 20


def out_of_space(error: BaseException, folder: str | Path) -> bool:
    """Whether ``error`` is a write into ``folder`` that failed for want of space: an ``OSError`` saying so
    (``ENOSPC``, ``EDQUOT``), a library's error quoting it (safetensors'), or torch's short write while the disk
    holding ``folder`` has less than 64 MiB free."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    if any(words in text for words in _NO_SPACE):
        return True
    return any(words in text for words in _SHORT_WRITE) and _free_bytes(folder) < _NEARLY_FULL


def _free_bytes(folder: str | Path) -> int:
    """Free bytes on the disk holding ``folder`` (its nearest existing parent's)."""
    path = Path(folder).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


class DiskFull(OSError):
    """A write that failed for want of space, said as one: what was being written, the disk's free space, what the
    writing library said, and what to do (:attr:`fix`), which ``python -m grpo_kit`` prints after it.

    Args:
        folder: where it was writing (the error's ``filename``).
        doing: what was being written (``"training saved checkpoint-20"``).
        cause: the library's own error.
        fix: what to do once space is freed.
    """

    def __init__(self, folder: str | Path, doing: str, cause: BaseException, fix: str) -> None:
        said = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(errno.ENOSPC, f"the disk is full ({_free_bytes(folder) / 2**20:.1f} MiB free) while "
                                       f"{doing} ({type(cause).__name__}: {said})", str(folder))
        self.fix = fix



def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically, creating its folder; returns the path.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_text(folder / "a.txt", "hello").read_text()
    'hello'
    """
    with replaced(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return Path(path)


def new_beside(path: str | Path, tag: str, folder: bool = False) -> Path:
    """A new empty file (or folder) beside ``path``, named ``.<name>.<tag><random>``, created with the user's umask.

    ``tempfile.mkstemp`` and ``mkdtemp`` create theirs 0600 and 0700 whatever the umask (their docs), and renamed into
    place they would leave every file the kit writes unreadable to the rest of a team sharing a run folder.

    Raises:
        OSError: the folder cannot be written (``FileExistsError``: the random name is taken).

    >>> import tempfile, pathlib, os
    >>> mask = os.umask(0o022)
    >>> made = new_beside(pathlib.Path(tempfile.mkdtemp()) / "report.md", "tmp-")
    >>> _ = os.umask(mask)
    >>> made.name.startswith(".report.md.tmp-"), oct(made.stat().st_mode & 0o777)
    (True, '0o644')
    """
    path = Path(path)
    # 64 random bits: a name already taken is never met in practice, and O_EXCL / mkdir refuse one rather than reuse it
    candidate = path.with_name(f".{path.name}.{tag}{secrets.token_hex(8)}{'' if folder else path.suffix}")
    if folder:
        os.mkdir(candidate, 0o777)  # the umask applies, as to any folder the user makes
    else:
        os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    return candidate


def follow_umask(folder: str | Path) -> Path:
    """Give the files under ``folder`` that were created 0600 the user's umask (0644 under the usual 0022).

    safetensors' ``save_file`` (which transformers, peft and Unsloth save weights through) creates its file 0600
    whatever the umask, so a model, a checkpoint or an export would be unreadable to the rest of a team sharing the run
    folder while everything else in it is readable. Files given another mode on purpose are left alone.

    Returns:
        ``folder``.

    >>> import tempfile, pathlib, os
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> (folder / "model.safetensors").touch(mode=0o600)
    >>> mask = os.umask(0o022)
    >>> _ = follow_umask(folder)
    >>> _ = os.umask(mask)
    >>> oct((folder / "model.safetensors").stat().st_mode & 0o777)
    '0o644'
    """
    probe = new_beside(Path(folder) / "umask", "probe-")  # created as a plain open would: its mode is the umask's
    try:
        mode = probe.stat().st_mode & 0o777
    finally:
        probe.unlink()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600:
            path.chmod(mode)
    return Path(folder)


@contextlib.contextmanager
def replaced(path: str | Path) -> Iterator[Path]:
    """Write ``path`` whole or not at all: the block writes the temporary file it is given (same folder, created),
    which is then synced and renamed over ``path``; if the block raises, ``path`` is untouched.

    For writers that take a file name (``fig.savefig``); text and JSON have :func:`write_text`, :func:`write_json`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_beside(path, "")
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON to ``path`` atomically (values JSON cannot hold are written as text)."""
    return write_text(path, json.dumps(data, indent=1, default=str))


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> Path:
    """Write one JSON object per line to ``path`` atomically."""
    return write_text(path, "".join(json.dumps(row) + "\n" for row in rows))


def append_jsonl(path: str | Path, row: Any, sync: bool = True) -> None:
    """Append one JSON line to ``path``; a torn last line left by a kill is ended first, so it stays one
    unreadable line instead of spoiling this one.

    Args:
        path: the file (created with its folder).
        row: a JSON-able value.
        sync: flush it to disk (``fsync``) before returning; ``False`` leaves that to the operating system
            (a cache whose lost lines are only redone).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torn = False
    if path.is_file() and path.stat().st_size > 0:
        with path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(("\n" if torn else "") + json.dumps(row) + "\n")
        f.flush()
        if sync:
            os.fsync(f.fileno())


def read_jsonl(path: str | Path, skip_torn: bool = True) -> list[Any]:
    """The JSON lines of ``path``, in order; blank lines are skipped.

    Args:
        path: the file.
        skip_torn: skip lines that do not parse (a write cut short by a kill); ``False`` raises instead.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: with ``skip_torn=False``, a line that is not JSON (the message names the file and line).
    """
    rows = []
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                if not skip_torn:
                    raise ValueError(f"{path}:{number} is not a JSON line ({e}): the file is damaged") from None
    return rows


def json_or_none(path: str | Path) -> Any:
    """The JSON value in ``path``, or ``None`` when the file is missing, unreadable or not JSON (a reader that
    treats a damaged file as an absent one)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, hex, read in 1 MiB blocks (model weights do not fit in memory twice)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: Full-file SHA-256s this process computed, by resolved path, size, mtime and inode: a file not touched since is not
#: read again (a run's weights are checked at each step that reads them).
_HASHED: dict[tuple[str, int, int, int], str] = {}


def model_files(folder: Path, most: int | None = None) -> dict[str, str]:
    """The SHA-256 of each file of a saved model folder (path relative to it -> hex), its ``README.md`` card
    excepted; empty when there is no folder. Config, tokenizer and adapter files count: each changes what loads.

    Args:
        folder: the model folder.
        most: hash each file's size and only its first ``most`` bytes (a cache key: the first MiB tells a model's
            weights apart without reading gigabytes); ``None``: every byte (a record checked file by file).

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "README.md").write_text("card"), (folder / "w").write_bytes(b"ab")
    >>> list(model_files(folder)), model_files(folder)["w"] == sha256_file(folder / "w") != model_files(folder, 1)["w"]
    (['w'], True)
    >>> model_files(folder, most=1)["w"] == hashlib.sha256(b"2:a").hexdigest()  # the size, then the first byte
    True
    """
    out = {}
    for path in sorted(folder.rglob("*")):  # none where there is no folder
        name = path.relative_to(folder).as_posix()
        if not path.is_file() or name == "README.md":
            continue
        stat = path.stat()
        if most is not None:
            with path.open("rb") as f:
                out[name] = hashlib.sha256(f"{stat.st_size}:".encode() + f.read(most)).hexdigest()
        else:
            key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
            out[name] = _HASHED[key] if key in _HASHED else _HASHED.setdefault(key, sha256_file(path))
    return out


def files_digest(files: dict[str, str]) -> str:
    """One SHA-256 over :func:`model_files`' names and hashes: a model folder's digest (a run's ``model_digest``).

    >>> files_digest({"a": "00"}) == files_digest({"a": "00"}) != files_digest({"a": "01"})
    True
    """
    return hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in sorted(files.items()))
                          .encode()).hexdigest()


def read_yaml(path: str | Path, what: str) -> Any:
    """The YAML value in a file a user wrote (a recipe, a task file), every problem one line naming the file.

    YAML says a mapping's keys are unique, and PyYAML keeps the last of two silently: a key given twice is refused.
    A merge key (``<<: *anchor``) is read as YAML 1.1 defines it (the mapping's own keys over the merged ones).

    Args:
        path: the file.
        what: what the file is, for the messages (``"a recipe"``, ``"a task file"``).

    Raises:
        ValueError: no such file (or a folder), larger than :data:`MAX_YAML_BYTES`, not UTF-8 (the byte), not YAML or
            a key given twice (the line).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is {'a folder' if path.is_dir() else 'not there'}: give the path of {what} "
                         "(a YAML file)")
    if (size := path.stat().st_size) > MAX_YAML_BYTES:
        raise ValueError(f"{path} holds {size / 2**20:.1f} MiB, and {what} is a few kilobytes of keys (at most "
                         f"{MAX_YAML_BYTES // 2**20} MiB is read): give the YAML file of keys; rows of data go in the "
                         "data files it names")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}): save it as UTF-8") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ValueError(f"{where}: {problem}" if problem.startswith("the key ") else
                         f"{where} is not YAML ({problem}): fix {what} at that line") from None


@functools.cache
def _unique_key_loader() -> type:
    """A ``yaml.SafeLoader`` that refuses a mapping naming one key twice (a merge key's keys excepted); libyaml's
    parser (``CSafeLoader``, the same safe constructor) where PyYAML was built with it, about 8 times faster."""
    class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, Hashable):
                    continue  # PyYAML's own error names it
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice (only the "
                                                            "last would be read): keep one", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader
