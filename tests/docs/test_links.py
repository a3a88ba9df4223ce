"""Relative links in README.md, docs/*.md and bench/README.md: each file and #anchor exists.

Anchors follow GitHub's rule for headings: lower case, punctuation dropped, spaces to hyphens,
and "-1", "-2", ... for repeated headings. Links inside fenced code blocks are not links.
External links (http, https, mailto) are not followed: the tests run without a network.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from devtools.servers import REPO_ROOT

DOCS = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    REPO_ROOT / "bench" / "README.md",
]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = ("http://", "https://", "mailto:")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub generates for the headings of a markdown file."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """The relative links in ``path`` whose file or anchor does not exist, as messages."""
    problems = []
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = match.group(1) or match.group(2)
            if target.startswith(EXTERNAL):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / unquote(file_part)).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"{path.name}: {target}: no such file {linked}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{path.name}: {target}: no heading #{anchor} in {linked.name}")
    return problems


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    # GIVEN a documentation page WHEN its relative links are followed
    problems = broken_links(page)
    # THEN every file and heading they name exists
    assert problems == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    # GIVEN the README's links
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    linked = {m.group(1).partition("#")[0] for m in LINK.finditer(readme) if m.group(1)}
    # WHEN compared with the pages in docs/
    pages = {f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md")}
    # THEN none is unreachable from the README
    assert pages - linked == set()


def test_the_readme_fits_on_a_few_screens() -> None:
    # GIVEN the README WHEN its lines are counted THEN it stays short; details go to docs/
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250


def test_a_missing_file_and_a_missing_heading_are_reported(tmp_path: Path) -> None:
    # GIVEN a page linking to a real heading, a missing heading and a missing file
    (tmp_path / "other.md").write_text("# Other page\n\n## Store `name` (S): the table\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#store-name-s-the-table) [self](#page)\n"
        "[gone](other.md#nowhere) [lost](missing.md)\n"
        "```\n[in a fence](not-checked.md)\n```\n"
    )
    # WHEN its links are checked
    problems = broken_links(page)
    # THEN exactly the two broken ones are reported, by name
    assert len(problems) == 2
    assert "no heading #nowhere" in problems[0]
    assert "missing.md" in problems[1]


def test_repeated_headings_get_numbered_anchors(tmp_path: Path) -> None:
    # GIVEN a page with the same heading twice
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Set-up\n\n## Set-up\n")
    # WHEN its anchors are generated THEN the second is numbered as GitHub numbers it
    assert anchors(page) == {"title", "set-up", "set-up-1"}
