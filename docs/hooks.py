"""MkDocs hook for the documentation site (mkdocs.yml `hooks:`).

The kit's docstrings cross-reference with Sphinx roles (``:func:`name```), which mkdocstrings' Google-style
parser leaves as text: the rendered ``:func:<code>name</code>`` becomes ``<code>name</code>``.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:func|class|mod|data|meth|attr|exc|obj|const):<code>(~?)([\w.]+)</code>")


def _name(match: re.Match) -> str:
    short, name = match.groups()
    return f"<code>{name.rsplit('.', 1)[-1] if short else name}</code>"


def on_page_content(html: str, **kwargs) -> str:
    """Drop the Sphinx role before a rendered code span (``:func:<code>x</code>`` -> ``<code>x</code>``); as in
    Sphinx, ``~a.b.c`` shows as ``c``."""
    return _ROLE.sub(_name, html)
