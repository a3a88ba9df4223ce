"""The command line's own checks, in-process: usage errors word for word (one line, the
help to see, a suggestion only for a near miss), numbers and durations refused with the
value given, and global options kept wherever they are given."""

from __future__ import annotations

import pytest

from fleetbreaker import cli
from tests.cli.conftest import one_line_error, run_in_process


def test_a_missing_argument_is_one_line_pointing_at_the_command_s_help() -> None:
    result = run_in_process(["--table", "CircuitBreakers", "status"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: the following arguments are required: name"
        " (see fleetbreaker status --help)"
    )


def test_an_unknown_word_lists_the_commands_and_suggests_none() -> None:
    result = run_in_process(["--table", "CircuitBreakers", "explode"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: argument COMMAND: invalid choice: 'explode' (choose from 'list',"
        " 'status', 'open', 'disable', 'reset', 'tune', 'create-table', 'doctor', 'watch')"
        " (see fleetbreaker --help)"
    )


def test_a_setting_that_is_not_a_number_is_refused_quoting_it() -> None:
    result = run_in_process(["--table", "T", "tune", "x", "--recovery-timeout", "soon"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: argument --recovery-timeout: must be a number, got 'soon'"
        " (see fleetbreaker tune --help)"
    )


def test_a_window_of_0_seconds_is_refused() -> None:
    result = run_in_process(["--table", "T", "--window", "0", "status", "x"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: argument --window: must be a positive number of seconds,"
        " got '0' (see fleetbreaker --help)"
    )


GLOBALS = [
    ("--table", "CircuitBreakers", "table", "CircuitBreakers"),
    ("--redis-url", "rediss://cache:6379", "redis_url", "rediss://cache:6379"),
    ("--endpoint-url", "http://localhost:8000", "endpoint_url", "http://localhost:8000"),
    ("--region", "eu-west-1", "region", "eu-west-1"),
    ("--stack", "fleetbreaker", "stack", "fleetbreaker"),
    ("--window", "30", "window", 30.0),
]


@pytest.mark.parametrize(("option", "value", "dest", "parsed"), GLOBALS)
@pytest.mark.parametrize("where", ["before", "after"])
def test_a_global_option_is_kept_before_or_after_the_command(
    option: str, value: str, dest: str, parsed: object, where: str
) -> None:
    # GIVEN the option before the command, or after it
    given = [option, value, "status", "x"] if where == "before" else ["status", "x", option, value]

    # WHEN the command line is parsed
    args = cli.build_parser().parse_args(given)

    # THEN the command sees the value given (the command's copy does not reset it)
    assert getattr(args, dest) == parsed


@pytest.mark.parametrize("where", ["before", "after"])
def test_json_is_kept_before_or_after_the_command(where: str) -> None:
    given = ["--json", "list"] if where == "before" else ["list", "--json"]

    assert cli.build_parser().parse_args(given).json is True


def test_tune_without_settings_names_every_option_it_takes() -> None:
    result = run_in_process(["--table", "T", "tune", "x"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: tune needs at least one of --failure-threshold, --window-seconds,"
        " --recovery-timeout, --half-open-max-probes, --half-open-successes,"
        " --failure-rate-threshold, --minimum-calls, --slow-call-duration,"
        " --slow-call-rate-threshold, --min-containers, --mode, or --clear"
    )


def test_tune_with_settings_and_clear_is_refused() -> None:
    result = run_in_process(["--table", "T", "tune", "x", "--clear", "--minimum-calls", "3"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: tune takes settings or --clear, not both"
    )


def test_an_empty_breaker_name_is_refused_before_any_store_is_opened() -> None:
    result = run_in_process(["--table", "CircuitBreakers", "status", ""])

    assert result.code == 2
    assert one_line_error(result) == "fleetbreaker: error: breaker name must not be empty"


def test_no_command_is_a_usage_error_asking_for_one() -> None:
    result = run_in_process(["--table", "CircuitBreakers"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: the following arguments are required: COMMAND"
        " (see fleetbreaker --help)"
    )
