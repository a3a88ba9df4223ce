"""The CLI in an incident: an override never lands on a mistyped name, and what `list` and
`status` show of a breaker that just tripped."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, RedisStore, State, StoreError
from fleetbreaker.breaker import system_clock
from fleetbreaker.policy import Policy
from fleetbreaker.record import ProbeReport, Report
from tests.cli.conftest import POLICY, Backend, fail, load, one_line_error

# -- open and disable of a name the store has never seen --------------------------------------


@pytest.mark.parametrize("command", ["open", "disable"])
def test_an_override_of_an_unknown_name_changes_nothing_and_suggests_the_nearest(
    backend: Backend, name: str, command: str
) -> None:
    # GIVEN a store that knows the breaker inventory-api (it failed once)
    real = f"{name}-inventory-api"
    fail(backend, real, 1)

    # WHEN the operator mistypes it
    typo = f"{name}-inventroy-api"
    result = backend.run(command, typo, "--reason", "INC-1")

    # THEN the command fails, names the typed name, and suggests the real one
    assert result.code == 1
    error = one_line_error(result)
    assert f"breaker {typo!r} not found" in error
    assert f"did you mean {real!r}" in error  # the nearest first (a shared Redis lists more)
    assert "--create" in error
    # AND nothing was written: no record under the typo, the real one untouched
    assert load(backend, typo) is None
    assert load(backend, real).state is State.CLOSED


def test_an_override_of_an_unknown_name_with_nothing_near_suggests_nothing(
    memory_backend: Backend, name: str
) -> None:
    fail(memory_backend, "payment-api", 1)

    result = memory_backend.run("open", name)

    assert result.code == 1
    assert "did you mean" not in one_line_error(result)
    assert load(memory_backend, name) is None


@pytest.mark.parametrize(
    ("command", "state"), [("open", State.FORCED_OPEN), ("disable", State.DISABLED)]
)
def test_create_forces_a_breaker_the_store_has_never_seen(
    backend: Backend, name: str, command: str, state: State
) -> None:
    # GIVEN a healthy breaker that has never failed: the store holds no record of it
    assert load(backend, name) is None

    # WHEN the operator overrides it with --create
    result = backend.run(command, name, "--create", "--reason", "known outage")

    # THEN the override is stored
    assert result.code == 0, result.err
    assert load(backend, name).state is state


def test_an_override_of_a_known_name_needs_no_create(memory_backend: Backend, name: str) -> None:
    fail(memory_backend, name, 1)

    result = memory_backend.run("open", name)

    assert result.code == 0, result.err
    assert load(memory_backend, name).state is State.FORCED_OPEN


def test_reset_takes_no_create(memory_backend: Backend, name: str) -> None:
    result = memory_backend.run("reset", name, "--create")

    assert result.code == 2
    assert "unrecognized arguments: --create" in one_line_error(result)


# -- the failures that tripped a breaker ------------------------------------------------------


def test_list_shows_the_failures_that_tripped_a_breaker(backend: Backend, name: str) -> None:
    # GIVEN a breaker that just tripped on the threshold's worth of failures
    fail(backend, name, POLICY.failure_threshold)
    assert load(backend, name).state is State.OPEN

    # WHEN the operator lists the breakers, as text and as JSON
    text = backend.run("list")
    as_json = backend.run("list", "--output", "json")

    # THEN both show the failures that tripped it, not the empty window's 0
    assert text.code == as_json.code == 0, text.err + as_json.err
    (row,) = [line.split() for line in text.out.splitlines() if line.startswith(name)]
    assert row[1:3] == ["open", str(POLICY.failure_threshold)]
    (listed,) = [entry for entry in json.loads(as_json.out) if entry["name"] == name]
    assert listed["failures"] == POLICY.failure_threshold


def test_status_shows_the_failures_that_tripped_a_breaker(backend: Backend, name: str) -> None:
    fail(backend, name, POLICY.failure_threshold)

    result = backend.run("status", name)

    assert result.code == 0, result.err
    assert re.search(rf"^failures +{POLICY.failure_threshold}$", result.out, re.M), result.out


RATE = Policy.from_config(BreakerConfig(failure_rate_threshold=0.3, minimum_calls=10))


def test_status_shows_the_window_s_failures_that_tripped_a_rate_policy_breaker(
    backend: Backend, name: str
) -> None:
    # GIVEN a rate-policy breaker tripped by a report of 4 failures in 10 calls (40 %)
    now = system_clock()
    backend.store.report(name, RATE, now, Report("c1", calls=10, failures=4), None)
    assert load(backend, name).state is State.OPEN

    # WHEN the operator asks for its status
    result = backend.run("status", name, "--output", "json")

    # THEN it shows those 4 failures
    assert result.code == 0, result.err
    assert json.loads(result.out)["failures"] == 4


def test_a_reset_breaker_starts_again_from_no_failures(backend: Backend, name: str) -> None:
    # GIVEN a tripped breaker, reset by an operator
    fail(backend, name, POLICY.failure_threshold)
    assert backend.run("reset", name).code == 0

    # WHEN one more failure comes
    fail(backend, name, 1)

    # THEN its window holds that one failure, not the trip's
    result = backend.run("status", name, "--output", "json")
    assert json.loads(result.out)["failures"] == 1
    assert load(backend, name).state is State.CLOSED


@pytest.mark.parametrize("command", [["status"], ["reset"], ["watch", "--count", "1"]])
def test_every_command_on_an_unknown_name_suggests_the_nearest(
    memory_backend: Backend, command: list[str]
) -> None:
    # GIVEN a store that knows inventory-api WHEN a command names it mistyped
    fail(memory_backend, "inventory-api", 1)

    result = memory_backend.run(command[0], "inventroy-api", *command[1:])

    # THEN it is not found, and the real name is suggested
    assert result.code == 1
    assert one_line_error(result).endswith(
        "breaker 'inventroy-api' not found in table 'cli-memory'; did you mean 'inventory-api'?"
    )


def test_a_store_that_refuses_the_listing_still_says_not_found(
    memory_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an operator allowed GetItem but not Scan (the listing fails)
    def denied(now_ms: int) -> Any:
        raise StoreError("AccessDeniedException: not authorized to perform dynamodb:Scan")

    monkeypatch.setattr(memory_backend.store, "list_records", denied)

    # WHEN an override names a breaker the store has no record of
    result = memory_backend.run("open", "inventroy-api")

    # THEN it is refused as not found (no suggestion), nothing written
    assert result.code == 1
    assert "not found in table 'cli-memory', nothing changed (" in one_line_error(result)
    assert load(memory_backend, "inventroy-api") is None


@pytest.fixture
def caller_clock_store(backend: Backend) -> Iterator[Any]:
    """The backend's store deciding on the times the test passes (Redis: not its TIME)."""
    if backend.kind != "redis":
        yield backend.store
        return
    store = RedisStore(url=backend.options[1], socket_timeout=5.0, use_server_time=False)
    yield store
    store.close()


def test_a_breaker_reopened_by_a_failed_probe_still_shows_the_failures_that_tripped_it(
    backend: Backend, caller_clock_store: Any, name: str
) -> None:
    # GIVEN a breaker tripped by the threshold's worth of failures, its open window over
    store = caller_clock_store
    now = system_clock()
    for _ in range(POLICY.failure_threshold):
        store.record_failure(name, POLICY, now, store.load(name, now))
    later = now + POLICY.base_open_ms + 1_000

    # WHEN a probe is claimed (half-open), then fails (open again, for longer)
    claimed = store.claim_probe(name, POLICY, later, "probe1", store.load(name, later))
    assert claimed.token is not None
    half_open = backend.run("status", name, "--output", "json")
    report = ProbeReport(claimed.token, success=False)
    store.settle_probe(name, POLICY, later + 1, report, store.load(name, later + 1))
    reopened = backend.run("status", name, "--output", "json")

    # THEN both still show the failures that tripped it
    assert (json.loads(half_open.out)["state"], json.loads(half_open.out)["failures"]) == (
        "half_open",
        POLICY.failure_threshold,
    )
    assert (json.loads(reopened.out)["state"], json.loads(reopened.out)["failures"]) == (
        "open",
        POLICY.failure_threshold,
    )
