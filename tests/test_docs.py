"""The documentation site's build is strict and its navigation holds the pages other work writes into."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_docs_builds_strictly_and_does_not_hide_the_warnings_strict_counts():
    """mkdocs's --quiet drops warnings before --strict counts them: with it a broken link built fine."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndocs: ", 1)[1].split("\n\n", 1)[0]
    command = next(line for line in recipe.splitlines() if "mkdocs build" in line)
    assert "--strict" in command and not re.search(r"\s(--quiet|-q)\b", command), command
    test = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]  # the site is built beside the main suite
    assert re.search(r"\$\(MAKE\) [^;]*\bdocs\b", test), "make test must build the site"


def test_every_page_the_nav_names_exists_and_the_shared_pages_are_in_it():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = re.findall(r"^\s*- (?:[^:\n]+: )?([\w./-]+\.(?:md|ipynb))\s*$", config, re.M)
    assert {"concepts/run-folder.md", "tutorials/your-own-data.md", "get-started/install.md"} <= set(pages)
    missing = [page for page in pages if not (ROOT / "docs" / page).is_file()]
    assert not missing, missing


def test_the_api_reference_lists_every_module():
    """The reference pages name their modules (``::: grpo_kit.x.y``): a new module must be added to one."""
    listed = set(re.findall(r"^::: ([\w.]+)$", "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "reference").glob("*.md")), re.M))
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "grpo_kit").rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py") and "shipped" not in p.parts}
    assert not modules - listed, sorted(modules - listed)


def test_no_wrapped_line_of_prose_starts_as_a_heading():
    """Python-Markdown reads '#3504), so ...' at the start of a line as a heading (CommonMark would not): a wrapped
    issue number must not open a line outside code blocks."""
    found = []
    for page in (ROOT / "docs").rglob("*.md"):
        fenced = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and re.match(r"#+[^#\s]", line):
                found.append(f"{page.relative_to(ROOT)}:{number}: {line[:60]}")
    assert not found, found
