"""The help an operator reads: `fleetbreaker --help` and every command's `--help`, word for
word as reviewed in tests/cli/help.txt. A change to an option, a default shown, a metavar or
a sentence shows up in that file's diff, where a reviewer sees what operators will read.

After a deliberate change, rewrite the file and review its diff:

    COLUMNS=100 .venv/bin/python -c \
        'import tests.cli.test_help as t; t.REVIEWED.write_text(t.every_help())'

argparse's layout is that of the dev venv's Python (3.11).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fleetbreaker import cli

REVIEWED = Path(__file__).with_name("help.txt")


def every_help() -> str:
    """The top-level help, then each command's, in the order `--help` lists them."""
    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    pages = [("fleetbreaker --help", parser.format_help())]
    pages += [
        (f"fleetbreaker {name} --help", sub.format_help()) for name, sub in commands.choices.items()
    ]
    return "".join(f"$ {command}\n{text}\n" for command, text in pages)


def test_every_help_page_is_the_reviewed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a terminal 100 columns wide (argparse wraps to COLUMNS)
    monkeypatch.setenv("COLUMNS", "100")

    # WHEN every help page is rendered
    shown = every_help()

    # THEN it is the reviewed text
    assert shown == REVIEWED.read_text()
