"""The fenced code blocks of the docs, for the tests that run them as written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from devtools.servers import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
# A block that is deliberately not runnable says so on its first line, with the reason, so a
# reader sees it too: "# fragment: <why>".
FRAGMENT = re.compile(r"\A#\s*fragment:\s*(\S.*)$", re.M)
# Stand-ins for what the examples call "yours" (myapp.payments, myapp.inventory).
READER = Path(__file__).resolve().parent / "reader"


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"

    @property
    def fragment(self) -> str | None:
        """The stated reason when the block is a fragment, else None."""
        match = FRAGMENT.match(self.code)
        return match.group(1).strip() if match else None


def blocks(path: Path, *languages: str) -> list[Block]:
    """The fenced blocks of ``path`` in these languages, in order."""
    text = path.read_text(encoding="utf-8")
    return [
        Block(path, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) in languages
    ]


def every_block(*languages: str) -> list[Block]:
    return [block for path in DOCS for block in blocks(path, *languages)]
