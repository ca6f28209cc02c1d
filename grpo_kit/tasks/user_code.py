"""Python a user names as ``module:name`` (a reward on the command line, a task file's loader or rules): imported with
one line for whatever goes wrong, naming the file and line where the module failed, never a traceback and never an exit
of the kit's own."""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

__all__ = ["import_named"]


def _where(error: BaseException) -> str:
    """Where a module's import failed: ``file:line`` of a syntax error, else of the innermost frame outside Python's
    import machinery (``""`` when there is none)."""
    if isinstance(error, SyntaxError) and error.filename:
        return f" at {error.filename}:{error.lineno}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<frozen ")]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def import_named(ref: str, what: str) -> Any:
    """The object ``module:name`` names (``name`` may be dotted), its module imported from the current folder too.

    Args:
        ref: ``module:name``.
        what: how the message names where ``ref`` came from (``"--rewards"``, ``"task.yaml: loader:"``).

    Returns:
        The object.

    Raises:
        ValueError: a malformed ``ref``; a module that cannot be found, or whose import raised anything (a syntax
            error, a ``NameError``, ``sys.exit``: ``SystemExit`` included, Ctrl-C excepted), naming the file and line;
            no such name in it. Each message starts with ``what`` and ``ref``.
    """
    module, _, name = str(ref).strip().partition(":")
    if not module or not name:
        raise ValueError(f"{what} {ref!r}: write module:name, e.g. my_module:my_function")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # python -m puts the current folder first; a console script does not
    try:
        found: Any = importlib.import_module(module)
    except BaseException as e:  # noqa: BLE001 - a user's module may raise anything, sys.exit included
        if isinstance(e, KeyboardInterrupt):
            raise
        if isinstance(e, ModuleNotFoundError) and e.name == module.split(".")[0]:
            raise ValueError(f"{what} {ref!r}: no module {module!r} can be imported from here (the current folder "
                             "and the installed packages): check its name, or run from the folder that holds it"
                             ) from None
        lines = str(e).strip().splitlines()
        raise ValueError(f"{what} {ref!r}: importing {module!r} failed with {type(e).__name__}"
                         f"{': ' + lines[0] if lines else ''}{_where(e)}; fix the module (it must import without side "
                         "effects) or its name") from None
    missing = object()
    for part in name.split("."):
        found = getattr(found, part, missing)
        if found is missing:
            raise ValueError(f"{what} {ref!r}: module {module!r} has no {name!r}")
    return found
