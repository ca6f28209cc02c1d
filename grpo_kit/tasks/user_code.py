"""Python a user names as ``module:name`` (a reward on the command line, a task file's loader or rules): imported with
one line for whatever goes wrong, naming the file and line where the module failed, never a traceback and never an exit
of the kit's own. Python named by what arrives with data (a task file, a run folder's record) is imported only when the
caller trusts it (:func:`check_trusted`)."""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Mapping
from typing import Any

__all__ = ["TRUST", "check_trusted", "import_named", "untrusted"]

#: How a caller says that Python arriving with data may run, as a message names it.
TRUST = "--trust-task-code (in Python and the notebooks: trust_remote_code=True)"


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


def _outside_kit(ref: Any) -> bool:
    """Whether a ``module:name`` names a module outside the ``grpo_kit`` package."""
    module = str(ref).partition(":")[0].strip()
    return module != "grpo_kit" and not module.startswith("grpo_kit.")


def _module_origin(ref: Any) -> str:
    """Where ``module:name``'s top-level module would be imported from, found without running it
    (``importlib.util.find_spec`` of a top-level name executes nothing)."""
    import importlib.util

    top = str(ref).partition(":")[0].strip().split(".")[0]
    try:
        spec = importlib.util.find_spec(top) if top else None
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f"{top or ref!r}: not found from here"
    return f"{top}: {spec.origin if spec.origin not in (None, 'built-in', 'frozen') else 'built into Python'}"


def untrusted(named: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``{label: "module:name" or None}`` that :func:`check_trusted` refuses without consent: those
    naming a module outside ``grpo_kit``."""
    return {label: ref for label, ref in named.items() if ref is not None and _outside_kit(ref)}


def check_trusted(source: Any, named: Mapping[str, Any], action: str, trust_remote_code: bool = False) -> None:
    """Refuse Python that arrived with data unless the caller trusts it: importing a module runs its code, so as
    ``datasets.load_dataset`` and ``transformers``' ``from_pretrained`` run code that came with a dataset or a model
    only with ``trust_remote_code=True``, the kit imports a module that a task file or a run folder's record names
    only when whoever runs the kit says so, never the file itself. The kit's own modules (``grpo_kit.*``) need
    nothing.

    Args:
        source: the file that names the Python (for the message).
        named: ``{label: "module:name" or None}``, e.g. ``{"loader": "rows:load"}``; ``None`` names nothing.
        action: what would import it, as the message says it (``"loading it"``).
        trust_remote_code: the caller's consent (``--trust-task-code`` on the command line).

    Raises:
        ValueError: untrusted code; one line naming each label, its ``module:name`` and where the module would be
            imported from, said before anything is imported.
    """
    foreign = untrusted(named)
    if not foreign or trust_remote_code:
        return
    names = ", ".join(f"{label}: {ref}" for label, ref in foreign.items())
    origins = "; ".join(dict.fromkeys(_module_origin(ref) for ref in foreign.values()))
    raise ValueError(f"{source} names Python that {action} would import and run ({names}; {origins}), and nothing "
                     f"was imported: read that code, and if you trust it pass {TRUST}")
