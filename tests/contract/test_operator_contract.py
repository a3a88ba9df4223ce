"""The operators' part of the store contract: listing, live tuning, recorded actions.

Every store (memory, moto, moto server, dynalite, redis) must agree; times are explicit.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools import servers
from fleetbreaker import DynamoDBStore
from fleetbreaker.record import State
from fleetbreaker.tuning import Action, decode_tuned
from tests.contract.test_store_contract import T0, fail_n, open_breaker
from tests.support import STORE_POLICY


@pytest.fixture
def store(admin_store: Any) -> Any:
    """Operators reach the shared store itself, never a breaker's FallbackStore."""
    return admin_store


ACTION = Action("forced_open", "arn:aws:sts::123456789012:assumed-role/ops/alice", "incident", T0)
TUNED = '{"failure_threshold":2}'


def test_listing_names_every_live_breaker_with_its_record(store: Any, name: str) -> None:
    # GIVEN two breakers, one closed with a failure and one open
    fail_n(store, f"{name}-a", 1)
    opened = open_breaker(store, f"{name}-b")

    # WHEN the store lists its breakers
    listed = {entry.name: entry for entry in store.list_records(T0)}

    # THEN both are there with their records
    assert listed[f"{name}-a"].record.failures == 1
    assert listed[f"{name}-b"].record == opened
    assert listed[f"{name}-b"].error is None


def test_listing_leaves_out_expired_records(store: Any, name: str) -> None:
    fail_n(store, name, 1)

    later = T0 + (STORE_POLICY.ttl_s + 1) * 1000
    listed = {entry.name for entry in store.list_records(later)}

    assert name not in listed


def test_tuning_a_breaker_without_a_record_creates_a_closed_one_carrying_it(
    store: Any, name: str
) -> None:
    record = store.tune(name, STORE_POLICY, T0, TUNED, None)

    assert record.state is State.CLOSED
    assert decode_tuned(store.load(name, T0).tuned) == {"failure_threshold": 2}


def test_tuning_with_an_action_records_it_and_the_time(store: Any, name: str) -> None:
    # GIVEN no record, WHEN an operator tunes the breaker
    now = T0 + 1_234  # not a whole second: the expiry is in whole seconds all the same
    tune = Action("tune", ACTION.by, "fail faster", now)
    store.tune(name, STORE_POLICY, now, TUNED, tune)

    # THEN the new record carries the action, and says when it was written
    record = store.load(name, now)
    assert Action.decode(record.last_action) == tune
    assert record.updated_at == now
    assert record.expires_at == now // 1000 + STORE_POLICY.ttl_s


def test_tuning_leaves_the_state_and_generation_alone(store: Any, name: str) -> None:
    opened = open_breaker(store, name)

    store.tune(name, STORE_POLICY, T0 + 1, TUNED, None)

    after = store.load(name, T0 + 1)
    assert (after.state, after.gen, after.open_until) == (State.OPEN, opened.gen, opened.open_until)
    assert after.tuned == TUNED


def test_tuned_settings_survive_a_trip_and_a_reset(store: Any, name: str) -> None:
    # GIVEN a tuned breaker
    store.tune(name, STORE_POLICY, T0, TUNED, None)

    # WHEN it trips, and an operator resets it
    open_breaker(store, name)
    reset = store.force_state(name, STORE_POLICY, T0 + 1, State.CLOSED)

    # THEN the settings are still stored with it
    assert reset.record.tuned == TUNED
    assert store.load(name, T0 + 1).tuned == TUNED


def test_clearing_the_tuning_removes_it(store: Any, name: str) -> None:
    store.tune(name, STORE_POLICY, T0, TUNED, None)

    store.tune(name, STORE_POLICY, T0 + 1, "", None)

    assert store.load(name, T0 + 1).tuned == ""


# A merging tune (fleetbreaker tune without --replace) writes only over the settings it merged
# into: ``expected``.
MERGED = '{"failure_threshold":2,"mode":"shadow"}'


def test_a_tune_expecting_the_stored_settings_writes(store: Any, name: str) -> None:
    store.tune(name, STORE_POLICY, T0, TUNED, None)

    record = store.tune(name, STORE_POLICY, T0 + 1, MERGED, None, expected=TUNED)

    assert record.tuned == MERGED
    assert store.load(name, T0 + 1).tuned == MERGED


def test_a_tune_expecting_other_settings_writes_nothing(store: Any, name: str) -> None:
    # GIVEN settings another operator changed since this one read them
    store.tune(name, STORE_POLICY, T0, '{"mode":"shadow"}', None)

    # WHEN this one's merge lands, expecting what it read (none)
    record = store.tune(name, STORE_POLICY, T0 + 1, TUNED, ACTION, expected="")

    # THEN nothing is written, and the answer is the record as it stands
    assert record.tuned == '{"mode":"shadow"}'
    stored = store.load(name, T0 + 1)
    assert (stored.tuned, stored.last_action) == ('{"mode":"shadow"}', "")


def test_a_tune_expecting_no_settings_writes_on_a_breaker_without_a_record(
    store: Any, name: str
) -> None:
    record = store.tune(name, STORE_POLICY, T0, TUNED, None, expected="")

    assert record.tuned == TUNED
    assert store.load(name, T0).state is State.CLOSED


def test_a_tune_expecting_settings_on_a_breaker_without_a_record_writes_nothing(
    store: Any, name: str
) -> None:
    record = store.tune(name, STORE_POLICY, T0, MERGED, None, expected=TUNED)

    assert record is None
    assert store.load(name, T0) is None


def test_a_forced_state_records_the_operator_action(store: Any, name: str) -> None:
    outcome = store.force_state(name, STORE_POLICY, T0, State.FORCED_OPEN, action=ACTION)

    assert Action.decode(outcome.record.last_action) == ACTION
    assert Action.decode(store.load(name, T0).last_action) == ACTION


def test_a_second_operator_action_replaces_the_first(store: Any, name: str) -> None:
    # GIVEN a breaker forced open by one operator
    store.force_state(name, STORE_POLICY, T0, State.FORCED_OPEN, action=ACTION)

    # WHEN another resets it
    reset = Action("reset", "bob", "provider is back", T0 + 1)
    outcome = store.force_state(name, STORE_POLICY, T0 + 1, State.CLOSED, action=reset)

    # THEN the reset is the last action recorded
    assert Action.decode(outcome.record.last_action) == reset
    assert Action.decode(store.load(name, T0 + 1).last_action) == reset


def test_the_last_action_survives_later_transitions(store: Any, name: str) -> None:
    # GIVEN an operator reset recorded on the breaker
    reset = Action("reset", "alice", "recovered", T0)
    store.force_state(name, STORE_POLICY, T0, State.CLOSED, action=reset)

    # WHEN the fleet trips it on its own
    opened = open_breaker(store, name, now=T0 + 1)

    # THEN the last operator action is still the reset
    assert Action.decode(opened.last_action) == reset


def test_a_force_without_an_action_keeps_the_previous_one(store: Any, name: str) -> None:
    store.force_state(name, STORE_POLICY, T0, State.FORCED_OPEN, action=ACTION)

    outcome = store.force_state(name, STORE_POLICY, T0 + 1, State.CLOSED)

    assert Action.decode(outcome.record.last_action) == ACTION


def test_names_with_braces_and_percent_signs_list_as_themselves(store: Any, name: str) -> None:
    # Redis escapes these in its keys; the listing must give the names back unchanged.
    odd = [f"{name}-{{x}}", f"{name}-%7B", f"{name}-%25}}"]
    for breaker in odd:
        fail_n(store, breaker, 1)

    listed = {entry.name for entry in store.list_records(T0)}

    assert set(odd) <= listed


@pytest.mark.parametrize("backend", ["moto_server", "dynalite"])
def test_a_dynamodb_listing_follows_every_scan_page(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    # GIVEN five breakers in a table of their own, scanned two items per page
    endpoint = request.getfixturevalue(f"{backend}_server" if backend == "dynalite" else backend)
    table = servers.make_table(endpoint)
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
    names = {f"{name}-{i}" for i in range(5)}
    for breaker in names:
        fail_n(store, breaker, 1)

    # WHEN the store lists them
    listed = {entry.name for entry in store.list_records(T0, page_size=2)}

    # THEN every page was read
    assert listed == names
