"""Griffe extension for the documentation site's API reference (mkdocs.yml, mkdocstrings' ``extensions``).

The kit's docstrings are Google style with doctest examples written inline (``>>> ...``) and, where arguments
share one description, one line naming them all (``confidence, seed: ...``). Markdown would read a doctest's
``[...]`` as a link and griffe expects one argument per line, so each docstring is rewritten once, before it
is parsed: doctest blocks become ``pycon`` code blocks, and a line naming several arguments becomes one line per
argument with the shared description.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_SHARED = re.compile(r"^(\s+)(\w+(?:, \w+)+): (.*)$")
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Keyword Args|Keyword Arguments|Other Parameters):\s*$")


def rewrite(text: str) -> str:
    """The docstring ``text`` with doctest blocks fenced and shared argument lines split (see the module)."""
    out: list[str] = []
    in_doctest = False
    in_fence = False
    in_args = False
    indent = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if in_doctest:
            if stripped:
                out.append(line)
                continue
            out.append(f"{indent}```")
            in_doctest = False
        if not in_fence and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out += [f"{indent}```pycon", line]
            in_doctest = True
            continue
        if _SECTION.match(line):
            in_args = True
        elif stripped and not line.startswith((" ", "\t")):
            in_args = False
        shared = _SHARED.match(line) if in_args else None
        if shared:
            space, names, description = shared.groups()
            out += [f"{space}{name}: {description}" for name in names.split(", ")]
            continue
        out.append(line)
    if in_doctest:
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Rewrite every docstring with :func:`rewrite` as griffe loads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
