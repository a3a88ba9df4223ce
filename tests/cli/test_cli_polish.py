"""What a newcomer meets first: help on every tune flag, an empty `list` that says so, `watch`
frames that say when they were read, and a suggestion for a mistyped command."""

from __future__ import annotations

import argparse
from datetime import datetime

import pytest

from fleetbreaker import cli
from tests.cli.conftest import Backend, fail, one_line_error, run_in_process


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = commands.choices[name]
    return found


def test_every_tune_option_has_help() -> None:
    # GIVEN the tune command's options, one per tunable setting plus --clear and --reason
    parser = cli.build_parser()
    tune = subcommand(parser, "tune")
    # (the global options are listed once, by `fleetbreaker --help`, and hidden here)
    globals_ = {a.dest for a in parser._actions if a.option_strings}
    own = [a for a in tune._actions if a.option_strings and a.dest not in globals_]
    # THEN each says what it does
    missing = [a.option_strings[0] for a in own if not a.help or a.help == argparse.SUPPRESS]
    assert missing == []
    assert {a.dest for a in own} >= set(cli.TUNE_HELP)


def test_tune_help_shows_each_settings_help() -> None:
    text = subcommand(cli.build_parser(), "tune").format_help()

    assert "--min-containers INT  open only when the failures came from" in text


def test_an_empty_list_says_so(dynamodb_backend: Backend) -> None:
    # GIVEN a table that holds no breaker
    table = dynamodb_backend.options[dynamodb_backend.options.index("--table") + 1]
    # WHEN list runs THEN it says the store is empty, and exits 0
    result = dynamodb_backend.run("list")
    assert result.code == 0, result.err
    assert result.out == f"no breakers in table {table!r}\n"
    # AND as JSON Lines there is no line at all
    as_json = dynamodb_backend.run("list", "--json")
    assert (as_json.code, as_json.out) == (0, "")


def test_a_list_with_breakers_does_not_say_it_is_empty(
    dynamodb_backend: Backend, name: str
) -> None:
    fail(dynamodb_backend, name, 1)

    result = dynamodb_backend.run("list")

    assert result.code == 0, result.err
    assert "no breakers" not in result.out
    assert name in result.out


def iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_piped_watch_frames_carry_the_time_they_were_read(
    dynamodb_backend: Backend, name: str
) -> None:
    # GIVEN a breaker WHEN watch runs into a pipe for two frames
    fail(dynamodb_backend, name, 1)
    result = dynamodb_backend.run("watch", name, "--count", "2", "--interval", "0.05")
    # THEN each frame starts with the time it was read, in order
    assert result.code == 0, result.err
    frames = [frame for frame in result.out.split("\n\n") if frame.strip()]
    assert len(frames) == 2
    stamps = [iso(frame.splitlines()[0].removeprefix("at ")) for frame in frames]
    assert all(frame.splitlines()[1].split() == ["name", name] for frame in frames)
    assert stamps[0] < stamps[1]


def test_piped_watch_json_lines_carry_at(dynamodb_backend: Backend, name: str) -> None:
    fail(dynamodb_backend, name, 1)

    result = dynamodb_backend.run("watch", name, "--count", "2", "--interval", "0.05", "--json")

    assert result.code == 0, result.err
    lines = result.json_lines()
    assert [line["name"] for line in lines] == [name, name]
    assert iso(lines[0]["at"]) < iso(lines[1]["at"])


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("stauts", "status"), ("lst", "list"), ("create-tabel", "create-table"), ("rest", "reset")],
)
def test_a_mistyped_command_suggests_the_nearest(typed: str, meant: str) -> None:
    result = run_in_process(["--table", "CircuitBreakers", typed, "x"])

    assert result.code == 2
    assert f"did you mean {meant!r}?" in one_line_error(result)


def test_a_word_like_no_command_gets_no_suggestion() -> None:
    result = run_in_process(["--table", "CircuitBreakers", "explode"])

    assert result.code == 2
    assert "did you mean" not in one_line_error(result)


def test_a_reason_past_500_characters_exits_2_with_the_limit_in_one_line() -> None:
    # GIVEN a reason one character past the limit (checked before any store is reached)
    result = run_in_process(["--table", "CircuitBreakers", "open", "x", "--reason", "r" * 501])

    # THEN the command is refused as a usage error naming the limit, and nothing else
    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: reason is 501 characters; the limit is 500"
    )
    assert result.out == ""
