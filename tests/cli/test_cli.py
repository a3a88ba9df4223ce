"""The `fleetbreaker` CLI, each command a process of its own (forked from a server that has
imported it: tests/cli/forked.py) against moto's server, dynalite and redis-server: every
command, the --json keys, the exit codes, and live tuning reaching a running breaker within
cache_ttl.
"""

from __future__ import annotations

import re

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, State
from fleetbreaker.breaker import system_clock
from fleetbreaker.policy import Policy
from fleetbreaker.record import Report
from fleetbreaker.tuning import Action, decode_tuned
from tests.cli.conftest import (
    MOTO_ARN,
    POLICY,
    Backend,
    Running,
    fail,
    load,
    one_line_error,
)
from tests.support import Dependency, FakeClock

JSON_KEYS = {
    "name",
    "state",
    "generation",
    "failures",
    "calls",
    "slow_calls",
    "containers",
    "window_seconds",
    "open_until",
    "retry_after",
    "tuned",
    "last_action",
    "last_change",
    "error",
    "mode",
}


# -- list and status -------------------------------------------------------------------------


def test_list_shows_every_breaker_with_its_state_and_failures(backend: Backend, name: str) -> None:
    # GIVEN one breaker with a failure and one that tripped
    fail(backend, f"{name}-a", 1)
    fail(backend, f"{name}-b", POLICY.failure_threshold)

    # WHEN the operator lists the breakers as JSON
    result = backend.run("list", "--json")

    # THEN both are there, one object per line, with their state and failures
    assert result.code == 0, result.err
    listed = {entry["name"]: entry for entry in result.json_lines()}
    assert (listed[f"{name}-a"]["state"], listed[f"{name}-a"]["failures"]) == ("closed", 1)
    assert listed[f"{name}-b"]["state"] == "open"
    assert listed[f"{name}-b"]["open_until"].endswith("Z")


def test_list_prints_aligned_columns(backend: Backend, name: str) -> None:
    fail(backend, f"{name}-a", 1)
    fail(backend, f"{name}-long-name", POLICY.failure_threshold)

    result = backend.run("list")

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "STATE",
        "FAILURES",
        "CALLS",
        "OPEN",
        "UNTIL",
        "LAST",
        "CHANGE",
    ]
    state_column = lines[0].index("STATE")
    ours = [line for line in lines[1:] if line.startswith(name)]
    assert len(ours) == 2
    assert {line[state_column:].split()[0] for line in ours} == {"closed", "open"}
    assert "\x1b[" not in result.out  # not a terminal: no colour


def test_status_json_has_the_stable_keys(backend: Backend, name: str) -> None:
    fail(backend, name, POLICY.failure_threshold)

    result = backend.run("status", name, "--json")

    assert result.code == 0, result.err
    (status,) = result.json_lines()
    assert set(status) == JSON_KEYS
    assert status["state"] == "open"
    assert status["generation"] == 1
    assert 0 < status["retry_after"] <= POLICY.base_open_ms / 1000
    # The count policy counts no calls: none shown (null), not zero; no failing container.
    assert (status["calls"], status["slow_calls"], status["containers"]) == (None, None, 0)
    assert status["tuned"] == {}
    assert status["last_action"] is None


def test_status_of_an_unknown_breaker_exits_1(backend: Backend, name: str) -> None:
    result = backend.run("status", name)

    assert result.code == 1
    assert f"breaker {name!r} not found" in one_line_error(result)


# A MemoryStore holds parsed records only: there is no corrupt record to plant in it.
@pytest.mark.parametrize(
    "backend", ["moto_server", "dynalite", "redis", "in_process"], indirect=True
)
def test_a_corrupt_record_is_listed_as_corrupt(backend: Backend, name: str) -> None:
    # GIVEN a record this package did not write, next to a good one
    if backend.kind == "redis":
        backend.store.client.hset(backend.store.key(f"{name}-bad"), mapping={"state": "melted"})
    else:
        backend.store.client.put_item(
            TableName=backend.store.table_name,
            Item={"name": {"S": f"{name}-bad"}, "state": {"S": "melted"}},
        )
    fail(backend, f"{name}-good", 1)

    # WHEN the operator lists the breakers
    result = backend.run("list", "--json")

    # THEN the walk goes on past the bad one, which says what is wrong with it
    assert result.code == 0, result.err
    listed = {entry["name"]: entry for entry in result.json_lines()}
    assert listed[f"{name}-bad"]["state"] == "corrupt"
    assert "state" in listed[f"{name}-bad"]["error"]
    assert listed[f"{name}-good"]["state"] == "closed"


def test_an_action_time_past_any_date_is_shown_and_the_list_goes_on(
    backend: Backend, name: str
) -> None:
    # GIVEN a record whose last action is stamped 1e17 ms (year 3 million), next to a good one
    from fleetbreaker.tuning import Action

    backend.store.tune(name, POLICY, system_clock(), "", Action("tune", "ops", None, 10**17))
    fail(backend, f"{name}-good", 1)

    # WHEN the operator asks for its status and for the list
    status = backend.run("status", name, "--json")
    listed = backend.run("list", "--json")

    # THEN both answer: the time is shown as the number it is, and the list goes on past it
    assert status.code == 0, status.err
    assert status.json_lines()[0]["last_action"]["at"] == f"{10**17} ms (not a date)"
    assert listed.code == 0, listed.err
    names = {entry["name"] for entry in listed.json_lines()}
    assert {name, f"{name}-good"} <= names


def test_control_characters_from_the_store_are_printed_escaped(backend: Backend, name: str) -> None:
    # GIVEN a breaker whose name and operator reason carry ESC and BEL (written by anyone)
    from fleetbreaker import State
    from fleetbreaker.tuning import Action

    hostile = f"{name}-\x1b[2J\x07"
    action = Action("forced_open", "ops\x1b]0;x\x07", "\x1b[31mred\x07", system_clock())
    for breaker in (hostile, name):
        backend.store.force_state(breaker, POLICY, system_clock(), State.FORCED_OPEN, action=action)

    # WHEN the operator lists the breakers and asks for a status, as text
    listed = backend.run("list")
    status = backend.run("status", name)
    shown = backend.run("list", "--json")

    # THEN no control character reaches the terminal: each is printed as an escape
    for result in (listed, status):
        assert result.code == 0, result.err
        assert "\x1b" not in result.out
        assert "\x07" not in result.out
    assert f"{name}-\\x1b[2J\\x07" in listed.out
    assert "\\x1b[31mred\\x07" in status.out
    # AND JSON output keeps the exact text (json escapes it)
    [entry] = [e for e in shown.json_lines() if e["name"] == hostile]
    assert entry["last_action"]["reason"] == "\x1b[31mred\x07"
    assert "\x1b" not in shown.out


# -- overrides -------------------------------------------------------------------------------


def test_open_forces_the_breaker_open_and_records_who_why_and_when(
    backend: Backend, name: str
) -> None:
    before = system_clock()

    result = backend.run("open", name, "--create", "--reason", "provider incident 42", "--json")

    assert result.code == 0, result.err
    record = load(backend, name)
    assert record.state is State.FORCED_OPEN
    action = Action.decode(record.last_action)
    assert action is not None
    assert (action.action, action.by, action.reason) == (
        "forced_open",
        MOTO_ARN,
        "provider incident 42",
    )
    assert before <= action.at <= system_clock()
    (shown,) = result.json_lines()
    assert shown["last_action"]["by"] == MOTO_ARN
    assert shown["last_action"]["reason"] == "provider incident 42"


def test_disable_then_reset_shows_closed_and_records_both_actions(
    backend: Backend, name: str
) -> None:
    fail(backend, name, POLICY.failure_threshold)

    disabled = backend.run("disable", name, "--reason", "load test", "--json")
    reset = backend.run("reset", name, "--reason", "done", "--json")

    assert (disabled.code, reset.code) == (0, 0), disabled.err + reset.err
    assert disabled.json_lines()[0]["state"] == "disabled"
    assert disabled.json_lines()[0]["last_action"]["action"] == "disabled"
    (shown,) = reset.json_lines()
    assert shown["state"] == "closed"
    assert shown["last_action"]["action"] == "reset"
    assert load(backend, name).state is State.CLOSED


# Each action by its effect: what a breaker already running on the same store sees once its
# cache_ttl has passed, and whether its next call reaches the dependency.


def test_open_stops_a_running_breaker_s_calls(
    backend: Backend, name: str, running: Running
) -> None:
    # GIVEN a running breaker, closed, whose calls reach the dependency
    assert running.next_call_reaches_the_dependency()

    # WHEN an operator forces it open and the breaker's cache_ttl passes
    result = backend.run("open", name, "--create", "--reason", "provider incident")
    assert result.code == 0, result.err
    running.wait_cache_ttl()

    # THEN the breaker sees it forced open and its next call does not reach the dependency
    assert running.breaker.state is State.FORCED_OPEN
    assert not running.next_call_reaches_the_dependency()


def test_disable_lets_a_running_breaker_s_failing_calls_through_uncounted(
    backend: Backend, name: str, running: Running
) -> None:
    # GIVEN a running breaker that sees its breaker open and rejects calls
    fail(backend, name, POLICY.failure_threshold)
    running.wait_cache_ttl()
    assert running.breaker.state is State.OPEN
    assert not running.next_call_reaches_the_dependency()

    # WHEN an operator disables it and the breaker's cache_ttl passes
    result = backend.run("disable", name, "--reason", "load test")
    assert result.code == 0, result.err
    running.wait_cache_ttl()

    # THEN the breaker sees it disabled, and every call reaches the failing dependency,
    # more failures than the threshold, none of them counted
    assert running.breaker.state is State.DISABLED
    running.dependency.failing = True
    calls = POLICY.failure_threshold + 1
    assert all(running.next_call_reaches_the_dependency() for _ in range(calls))
    running.wait_cache_ttl()
    assert running.breaker.state is State.DISABLED
    assert running.next_call_reaches_the_dependency()


@pytest.mark.parametrize("override", ["open", "disable"])
def test_reset_gives_a_running_breaker_its_rules_back(
    backend: Backend, name: str, running: Running, override: str
) -> None:
    # GIVEN a running breaker under an operator override
    assert backend.run(override, name, "--create", "--reason", "incident").code == 0
    running.wait_cache_ttl()
    assert running.breaker.state is {"open": State.FORCED_OPEN, "disable": State.DISABLED}[override]

    # WHEN an operator resets it and the breaker's cache_ttl passes
    result = backend.run("reset", name, "--reason", "over")
    assert result.code == 0, result.err
    running.wait_cache_ttl()

    # THEN the breaker is closed: its calls reach the dependency, and failures count again
    # (the threshold's worth opens it, and the next call is rejected)
    assert running.breaker.state is State.CLOSED
    running.dependency.failing = True
    assert all(running.next_call_reaches_the_dependency() for _ in range(POLICY.failure_threshold))
    assert running.breaker.state is State.OPEN
    assert not running.next_call_reaches_the_dependency()


def test_reset_of_an_unknown_breaker_exits_1_and_writes_nothing(
    backend: Backend, name: str
) -> None:
    result = backend.run("reset", name, "--reason", "typo")

    assert result.code == 1
    assert "not found" in one_line_error(result)
    assert load(backend, name) is None


@pytest.mark.parametrize(
    ("command", "options", "action"),
    [
        ("open", ["--create"], "forced_open"),
        ("disable", ["--create"], "disabled"),
        ("tune", ["--failure-threshold", "3"], "tune"),
    ],
)
def test_an_action_without_a_reason_is_stored_without_one(
    dynamodb_backend: Backend, name: str, command: str, options: list[str], action: str
) -> None:
    # WHEN an operator acts without --reason (optional on every command that acts)
    result = dynamodb_backend.run(command, name, *options, "--json")
    # THEN it is done and stored with who and when, and no reason
    assert result.code == 0, result.err
    shown = result.json_lines()[0]["last_action"]
    assert (shown["action"], shown["by"], shown["reason"]) == (action, MOTO_ARN, None)


def test_reset_without_a_reason_releases_the_override(dynamodb_backend: Backend, name: str) -> None:
    assert dynamodb_backend.run("open", name, "--create", "--reason", "drill").code == 0

    result = dynamodb_backend.run("reset", name)

    assert result.code == 0, result.err
    assert load(dynamodb_backend, name).state is State.CLOSED


# -- tuning ----------------------------------------------------------------------------------


def test_a_tuned_threshold_reaches_a_running_breaker_within_cache_ttl(
    backend: Backend, name: str
) -> None:
    # GIVEN a running breaker (threshold 5) that has read its record into its cache
    clock = FakeClock(system_clock())
    config = BreakerConfig(failure_threshold=5, cache_ttl=1.0, store_deadline_seconds=30)
    breaker = CircuitBreaker(name, store=backend.store, config=config, clock=clock)
    dep = Dependency()
    assert breaker.call(dep) == "ok"

    # WHEN an operator tunes the threshold to 2 and cache_ttl passes
    result = backend.run("tune", name, "--failure-threshold", "2", "--reason", "fail faster")
    assert result.code == 0, result.err
    clock.advance(config.cache_ttl)

    # THEN two failures open the breaker, and its next call does not reach the dependency
    dep.failing = True
    for _ in range(2):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    assert breaker.state is State.OPEN
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)
    assert dep.calls == 3


def test_tune_stores_the_settings_and_status_shows_them(backend: Backend, name: str) -> None:
    result = backend.run(
        "tune", name, "--recovery-timeout", "12.5", "--half-open-max-probes", "3", "--json"
    )

    assert result.code == 0, result.err
    assert decode_tuned(load(backend, name).tuned) == {
        "half_open_max_probes": 3,
        "recovery_timeout": 12.5,
    }
    status = backend.run("status", name, "--json").json_lines()[0]
    assert status["tuned"] == {"half_open_max_probes": 3, "recovery_timeout": 12.5}
    assert status["last_action"]["action"] == "tune"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["--failure-threshold", "0"], "failure_threshold must be a positive integer"),
        (["--failure-threshold", "2.5"], "must be a whole number"),
        (["--half-open-max-probes", "17"], "half_open_max_probes must be at most 16"),
        (["--recovery-timeout", "-1"], "recovery_timeout must be a positive number"),
        (["--window-seconds", "nan"], "window_seconds must be a finite number"),
        # Past what a container can live with (the clock, thread waits, 14-digit records).
        (["--window-seconds", "1e15"], "window_seconds must be a positive number of seconds up"),
        (["--slow-call-duration", "1e11"], "slow_call_duration must be a positive number"),
        (["--window-seconds", "1e400"], "window_seconds must be a finite number"),
        (["--failure-threshold", "1" + "0" * 400], "failure_threshold must be a positive integer"),
        ([], "tune needs at least one of"),
        (["--clear", "--failure-threshold", "3"], "settings or --clear, not both"),
    ],
)
def test_a_bad_tuning_is_refused_with_exit_2_and_nothing_stored(
    dynamodb_backend: Backend, name: str, options: list[str], problem: str
) -> None:
    result = dynamodb_backend.run("tune", name, *options)

    assert result.code == 2
    assert problem in one_line_error(result)
    assert load(dynamodb_backend, name) is None


def test_tune_mode_switches_the_fleet_and_status_shows_it(backend: Backend, name: str) -> None:
    # GIVEN a breaker nobody tuned: its containers run their deployed BREAKER_MODE
    fail(backend, name, 1)
    before = backend.run("status", name, "--json").json_lines()[0]
    assert before["mode"] is None
    assert re.search(r"^mode +as deployed \(BREAKER_MODE\)$", backend.run("status", name).out, re.M)

    # WHEN an operator switches it to shadow
    result = backend.run("tune", name, "--mode", "shadow", "--reason", "rollout")

    # THEN the record carries the mode every container applies, and status shows it
    assert result.code == 0, result.err
    assert decode_tuned(load(backend, name).tuned) == {"mode": "shadow"}
    assert re.search(r"^mode +shadow$", result.out, re.M)
    assert backend.run("status", name, "--json").json_lines()[0]["mode"] == "shadow"


def test_tune_refuses_an_unknown_mode(backend: Backend, name: str) -> None:
    result = backend.run("tune", name, "--mode", "observe")
    assert result.code == 2
    assert "argument --mode: invalid choice: 'observe'" in result.err
    assert load(backend, name) is None


def test_tune_clear_removes_every_live_setting(backend: Backend, name: str) -> None:
    backend.run("tune", name, "--failure-threshold", "2")

    result = backend.run("tune", name, "--clear")

    assert result.code == 0, result.err
    assert load(backend, name).tuned == ""


# -- watch -----------------------------------------------------------------------------------


def test_watch_refreshes_the_status(backend: Backend, name: str) -> None:
    fail(backend, name, 1)

    result = backend.run("watch", name, "--json", "--count", "3", "--interval", "0.01")

    assert result.code == 0, result.err
    lines = result.json_lines()
    assert [line["name"] for line in lines] == [name] * 3
    # watch adds when each frame was read
    assert all(set(line) == JSON_KEYS | {"at"} for line in lines)


def test_watch_of_an_unknown_breaker_exits_1(dynamodb_backend: Backend, name: str) -> None:
    result = dynamodb_backend.run("watch", name, "--count", "1")

    assert result.code == 1


# -- figures of the rate policy's window --------------------------------------------------

RATE_POLICY = Policy.from_config(
    BreakerConfig(
        failure_rate_threshold=0.9,
        minimum_calls=1000,
        window_seconds=30,
        slow_call_duration=1.0,
        min_containers=3,
    )
)


def report_calls(backend: Backend, name: str) -> None:
    """Two containers' reports into a rate-policy window: 15 calls, 5 failures, 1 slow."""
    for report in (Report("c1", calls=10, failures=3, slow=1), Report("c2", calls=5, failures=2)):
        now = system_clock()
        backend.store.report(name, RATE_POLICY, now, report, backend.store.load(name, now))


@pytest.mark.parametrize("how", ["option", "environment"])
def test_status_counts_the_window_the_functions_use(backend: Backend, name: str, how: str) -> None:
    # GIVEN a breaker whose functions count calls over a 30 s window
    report_calls(backend, name)

    # WHEN status is asked for that window, by --window or the functions' variable
    if how == "option":
        result = backend.run("status", name, "--json", "--window", "30")
    else:
        result = backend.run("status", name, "--json", env={"BREAKER_WINDOW_SECONDS": "30"})

    # THEN it shows the window's figures
    assert result.code == 0, result.err
    (status,) = result.json_lines()
    figures = ("calls", "failures", "slow_calls", "containers")
    assert {key: status[key] for key in figures} == {
        "calls": 15,
        "failures": 5,
        "slow_calls": 1,
        "containers": 2,
    }


def test_status_counts_the_window_the_record_stores_without_window(
    backend: Backend, name: str
) -> None:
    # GIVEN reports into a 30 s window, the record storing that window
    report_calls(backend, name)

    # WHEN status is asked with no --window and no BREAKER_WINDOW_SECONDS
    result = backend.run("status", name, "--json")

    # THEN the figures are the 30 s window's, and the window is shown
    assert result.code == 0, result.err
    (status,) = result.json_lines()
    assert (status["calls"], status["failures"], status["window_seconds"]) == (15, 5, 30.0)


def test_a_window_other_than_the_records_is_not_used_and_says_so(
    backend: Backend, name: str
) -> None:
    # GIVEN reports into a 30 s window, the record storing that window
    report_calls(backend, name)

    # WHEN status is asked over 5 s windows
    result = backend.run("status", name, "--output", "jsonl", "--window", "5")

    # THEN the record's window counts, and stderr says --window was not used
    assert result.code == 0, result.err
    (status,) = result.json_lines()
    assert (status["calls"], status["window_seconds"]) == (15, 30.0)
    assert result.err.strip() == (
        f"fleetbreaker: note: --window 5 not used for {name}: "
        "its record is counted over its own 30 s window"
    )


def test_an_unreadable_window_variable_exits_2(backend: Backend, name: str) -> None:
    result = backend.run("status", name, env={"BREAKER_WINDOW_SECONDS": "soon"})

    assert result.code == 2
    assert "BREAKER_WINDOW_SECONDS" in one_line_error(result)
