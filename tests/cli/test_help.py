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


def command_pages() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


GLOBAL_OPTIONS = ["--table", "--redis-url", "--endpoint-url", "--region", "--profile", "--stack"]


@pytest.mark.parametrize("command", sorted(command_pages()))
def test_each_command_s_page_describes_it_its_arguments_and_an_example(command: str) -> None:
    # GIVEN one command's help page
    sub = command_pages()[command]
    page = sub.format_help()

    # THEN it has a description, each argument has its own help, and an example runs it
    assert sub.description
    assert len(sub.description) > 40
    for action in sub._actions:
        if action.help != argparse.SUPPRESS and action.dest != "help":
            assert action.help, (command, action.dest)
    assert "Example:\n  fleetbreaker " in page
    assert f" {command} " in page.split("Example:\n", 1)[1].splitlines()[0] + " "
    # AND the global options are not repeated on it: the top-level page lists them once
    assert not any(option in page.split("Example:")[0] for option in GLOBAL_OPTIONS)
    assert "`fleetbreaker --help`" in page


def test_the_global_options_are_listed_once_on_the_top_level_page() -> None:
    page = cli.build_parser().format_help()

    for option in GLOBAL_OPTIONS:
        assert page.count(f"  {option} ") == 1, option


def test_a_global_option_after_the_command_still_counts() -> None:
    # GIVEN the store options after the command, and before it
    after = cli.build_parser().parse_args(["status", "x", "--table", "T", "--region", "r"])
    before = cli.build_parser().parse_args(["--table", "T", "--region", "r", "status", "x"])

    # THEN both name the same store
    assert (after.table, after.region) == (before.table, before.region) == ("T", "r")
