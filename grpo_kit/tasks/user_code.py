"""Python a user names as ``module:name`` (a reward on the command line, a task file's loader or rules): imported with
one line for whatever goes wrong, naming the file and line where the module failed, never a traceback and never an exit
of the kit's own. Python named by what arrives with data (a task file, a run folder's record) is imported only when the
caller trusts it, or when it is, exactly, a name the kit itself defines for that role (:func:`check_trusted`): being in
a ``grpo_kit`` module is not enough, since ``module:name`` may walk that module's globals to anything
(``grpo_kit.policy.devices:os.system``)."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import traceback
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["TRUST", "check_trusted", "import_named", "untrusted", "where_code_is"]

#: How a caller says that Python arriving with data may run, as a message names it.
TRUST = "--trust-task-code (in Python and the notebooks: trust_remote_code=True)"
_NOTHING: Mapping[str, Collection[str]] = MappingProxyType({})


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


def _module_file(module: str) -> str | None:
    """The file ``module`` (dotted: a submodule) would be imported from, found without running any of its code: the
    top-level name through the import system's finders (``importlib.util.find_spec`` of a top-level name executes
    nothing), each submodule through ``importlib.machinery.PathFinder`` on its package's folders (``find_spec`` of a
    submodule would import the package); the current folder counts, as :func:`import_named` puts it on the path.
    ``None``: not found; ``"built into Python"`` for a built-in or frozen module."""
    parts = module.strip().split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    try:
        spec = importlib.util.find_spec(parts[0]) or importlib.machinery.PathFinder.find_spec(parts[0], [os.getcwd()])
        for depth in range(1, len(parts)):
            locations = spec.submodule_search_locations if spec is not None else None
            if not locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth + 1]), list(locations))
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin if spec.origin not in (None, "built-in", "frozen") else "built into Python"


def where_code_is(refs: Iterable[Any]) -> str:
    """Where each module of ``module:name`` values would be imported from, found without running it
    (:func:`_module_file`): ``"rows: /data/rows.py; os: built into Python"``, once per module.

    >>> where_code_is(["json:loads", "nowhere_at_all:f"])  # doctest: +ELLIPSIS
    'json: .../json/__init__.py; nowhere_at_all: not found from here'
    """
    modules = dict.fromkeys(str(ref).partition(":")[0].strip() for ref in refs)
    return "; ".join(f"{module or '(no module)'}: {_module_file(module) or 'not found from here'}"
                     for module in modules)


def untrusted(named: Mapping[str, Any], kit: Mapping[str, Collection[str]] = _NOTHING) -> dict[str, Any]:
    """The entries of ``{label: "module:name" or None}`` that :func:`check_trusted` refuses without consent: each that
    is not, exactly, one of the names the kit itself defines for that label's role (``kit[label]``, e.g. the loaders of
    the kit's own task files); the module being ``grpo_kit``'s is not enough, since a name may be a dotted path through
    the module's globals (``grpo_kit.policy.devices:os.system``).

    >>> untrusted({"loader": "grpo_kit.tasks.gsm8k:load_gsm8k", "rules": None},
    ...           {"loader": {"grpo_kit.tasks.gsm8k:load_gsm8k"}})
    {}
    >>> untrusted({"loader": "grpo_kit.tasks.user_code:importlib.import_module"})
    {'loader': 'grpo_kit.tasks.user_code:importlib.import_module'}
    """
    return {label: ref for label, ref in named.items()
            if ref is not None and (not isinstance(ref, str) or ref.strip() not in kit.get(label, ()))}


def check_trusted(source: Any, named: Mapping[str, Any], action: str, trust_remote_code: bool = False,
                  kit: Mapping[str, Collection[str]] = _NOTHING) -> None:
    """Refuse Python that arrived with data unless the caller trusts it: importing a module runs its code, so as
    ``datasets.load_dataset`` and ``transformers``' ``from_pretrained`` run code that came with a dataset or a model
    only with ``trust_remote_code=True``, the kit imports a module that a task file or a run folder's record names
    only when whoever runs the kit says so, never the file itself. Without consent a file may name only what the kit
    defines for that role (``kit``: its own task files' loaders and rules, its built-in rewards), exactly.

    Args:
        source: the file that names the Python (for the message).
        named: ``{label: "module:name" or None}``, e.g. ``{"loader": "rows:load"}``; ``None`` names nothing.
        action: what would import it, as the message says it (``"loading it"``).
        trust_remote_code: the caller's consent (``--trust-task-code`` on the command line).
        kit: ``{label: the module:name values of the kit's own for that label's role}``.

    Raises:
        ValueError: untrusted code; one line naming each label, its ``module:name`` and where the module would be
            imported from, said before anything is imported.
    """
    foreign = untrusted(named, kit)
    if not foreign or trust_remote_code:
        return
    names = ", ".join(f"{label}: {ref}" for label, ref in foreign.items())
    raise ValueError(f"{source} names Python that {action} would import and run ({names}; "
                     f"{where_code_is(foreign.values())}), and nothing was imported: read that code, and if you "
                     f"trust it pass {TRUST}")
