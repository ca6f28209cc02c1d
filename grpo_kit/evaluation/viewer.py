"""The run viewer's page: one self-contained HTML file (no network, no server) drawn from
:func:`grpo_kit.runs.view.view_data`.

The data travel inside the page as gzip-compressed JSON in base64 (a 1,319-question, 250-step run's completions
fit in a fifth of their size), which the browser inflates with its own ``DecompressionStream`` (Chromium 80,
Firefox 113, Safari 16.4). The page's script (``viewer_page.html`` beside this module) builds every element with
``textContent``, never ``innerHTML``, so a completion holding ``<script>`` shows as text and never runs. Long
lists page (25 questions a page, one training step at a time). The training groups, most of a long run's
bytes, travel in blocks of their own that are inflated once the page has drawn itself.
"""

from __future__ import annotations

import base64
import gzip
import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["MARK", "viewer_html", "written_by_view"]

#: The page's first line: what ``view`` looks for before replacing a file (a file without it is the user's).
MARK = "<!-- grpo_kit view: written by python -m grpo_kit view -->"


def viewer_html(data: dict[str, Any], title: str = "grpo_kit: what the model did") -> str:
    """The viewer page of ``data`` (:func:`grpo_kit.runs.view.view_data`) as one HTML document.

    Args:
        data: the JSON-safe dict the page shows.
        title: the page's title (escaped).

    Returns:
        the HTML text, starting with :data:`MARK`.
    """
    import html

    # Each run's training groups travel in a block of their own, inflated after the page is drawn.
    runs = [{**run, "groups": {k: v for k, v in run["groups"].items() if k != "groups"}} for run in data["runs"]]
    blocks = "".join(f'<script id="groups-{i}" type="application/octet-stream">{_packed(run["groups"]["groups"])}'
                     "</script>\n" for i, run in enumerate(data["runs"]))
    page = resources.files("grpo_kit.evaluation").joinpath("viewer_page.html").read_text(encoding="utf-8")
    return MARK + "\n" + page.replace("__TITLE__", html.escape(title)).replace(
        "__DATA__", _packed({**data, "runs": runs})).replace("<!--__GROUPS__-->", blocks)


def written_by_view(path: str | Path) -> bool:
    """Whether the file ``path`` begins with :data:`MARK` (``view`` wrote it, and may replace it); ``False`` for a
    file that cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(len(MARK)) == MARK
    except OSError:
        return False


def _packed(value: Any) -> str:
    """``value`` as gzip-compressed JSON in base64 (no character of it can end a ``<script>`` block)."""
    return base64.b64encode(gzip.compress(json.dumps(value, separators=(",", ":")).encode("utf-8"), 6,
                                          mtime=0)).decode("ascii")
