"""The record schema across the Python <-> Lua seam: names come from fleetbreaker.record only.

RedisStore fills the schema's names into its Lua scripts and parses the scripts' replies with
the same schema. These tests rename stored fields in the schema (the one place they are
spelled) and check both sides follow; and that a field renamed on one side only is caught by
the first store operation, never read as "closed". tests/unit/test_record_schema.py checks
statically that no other module, and no Lua source, spells a stored name.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from fleetbreaker import RedisStore, State, StoreError
from fleetbreaker import record as schema
from fleetbreaker.record import ProbeReport, Report
from tests.support import STORE_CONFIG, make_policy, trip_store

T0 = 1_700_000_000_000

POLICY = make_policy(STORE_CONFIG, failure_threshold=2, half_open_max_probes=2)
# Reports with a quorum of two containers: buckets and both quorum maps get written.
QUORUM = make_policy(
    STORE_CONFIG,
    failure_threshold=5,
    failure_rate_threshold=0.5,
    minimum_calls=4,
    slow_call_duration=0.1,
    slow_call_rate_threshold=0.5,
    min_containers=2,
)

MakeStore = Callable[..., RedisStore]


def _renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give every stored name in the schema another spelling (the Record stays as it is)."""
    monkeypatch.setattr(schema, "STATE", "phase")
    monkeypatch.setattr(
        schema, "NUMBER_FIELDS", {a: f"n_{n}" for a, n in schema.NUMBER_FIELDS.items()}
    )
    monkeypatch.setattr(schema, "TEXT_FIELDS", {a: f"t_{n}" for a, n in schema.TEXT_FIELDS.items()})
    optional = {a: f"o_{n}" for a, n in schema.OPTIONAL_NUMBER_FIELDS.items()}
    monkeypatch.setattr(schema, "OPTIONAL_NUMBER_FIELDS", optional)
    monkeypatch.setattr(schema, "census_field", lambda slot, code: f"z{slot}{code}")
    monkeypatch.setattr(
        schema, "lease_fields", lambda slot: (f"L{slot}tok", f"L{slot}end", f"L{slot}at")
    )
    monkeypatch.setattr(schema, "bucket_field", lambda slot, code: f"b{slot}{code}")
    monkeypatch.setattr(schema, "QUORUM_CODES", {"fz": "failing", "sz": "slowing"})
    monkeypatch.setattr(schema, "QUORUM_SEPARATOR", "|")


def _stored_names(slot_count: int = schema.MAX_PROBE_SLOTS) -> set[str]:
    """Every fixed name the schema (as patched) gives a stored field."""
    names = {schema.STATE, *schema.NUMBER_FIELDS.values(), *schema.TEXT_FIELDS.values()}
    names.update(schema.OPTIONAL_NUMBER_FIELDS.values())
    for slot in range(slot_count):
        names.update(schema.lease_fields(slot))
    for slot in range(schema.WINDOW_BUCKETS):
        names.update(schema.bucket_field(slot, code) for code in schema.BUCKET_CODES)
        names.update(schema.census_field(slot, code) for code in schema.CENSUS_CODES)
    return names


@pytest.fixture
def renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    _renamed(monkeypatch)


def _fields(raw: redis.Redis, store: RedisStore, name: str) -> set[str]:
    return set(raw.hgetall(store.key(name)))


def test_a_renamed_schema_reaches_both_the_scripts_and_the_parser(
    renamed: None, make_store: MakeStore, raw: redis.Redis, name: str
) -> None:
    # GIVEN a schema whose every stored name is spelled differently, and a store built on it
    store = make_store()
    allowed = _stored_names()

    # WHEN a container sends a census write, and the breaker trips, probes, fails a probe,
    # probes again and recovers
    counted = store.census(name, POLICY, T0 - 1, None).record
    assert counted is not None
    assert [bucket.count for bucket in counted.census.values()] == [1]
    opened = trip_store(store, name, POLICY, T0)
    assert opened.state is State.OPEN
    assert opened.open_until == T0 + 5_000
    assert _fields(raw, store, name) <= allowed
    claim = store.claim_probe(name, POLICY, T0 + 5_000, "a", opened)
    assert claim.token is not None
    assert _fields(raw, store, name) <= allowed
    failed = store.settle_probe(name, POLICY, T0 + 5_001, ProbeReport(claim.token, False), None)
    assert failed.transition == (State.HALF_OPEN, State.OPEN)
    assert failed.record is not None
    assert failed.record.reopens == 1
    again = store.claim_probe(name, POLICY, T0 + 60_000, "b", failed.record)
    assert again.token is not None
    closed = store.settle_probe(name, POLICY, T0 + 60_001, ProbeReport(again.token, True), None)

    # THEN every operation read back what the previous one wrote, under the new names only
    assert closed.transition == (State.HALF_OPEN, State.CLOSED)
    assert store.load(name, T0 + 60_002) == closed.record
    assert closed.record is not None
    assert closed.record.opened_at == T0 + 5_001
    assert closed.record.closed_at == T0 + 60_001
    assert closed.record.window_ms == POLICY.window_ms
    assert closed.record.census == counted.census  # every transition carried it
    assert _fields(raw, store, name) <= allowed


def test_a_renamed_schema_carries_the_window_quorum_and_operator_fields(
    renamed: None, make_store: MakeStore, raw: redis.Redis, name: str
) -> None:
    # GIVEN a renamed schema, and live settings and an operator action stored with the record
    store = make_store()
    tuned = store.tune(name, QUORUM, T0, '{"minimum_calls":4}', None)
    assert tuned is not None
    assert tuned.tuned == '{"minimum_calls":4}'

    # WHEN one container reports failures and slow calls (a bucket and both quorum maps)
    first = store.report(name, QUORUM, T0, Report("c-1", calls=2, failures=1, slow=1), None)

    # THEN the window and the quorum are stored and read back under the new names
    assert first.record is not None
    assert first.record.failing == {"c-1": T0}
    assert first.record.slowing == {"c-1": T0}
    assert [(b.calls, b.failures, b.slow) for b in first.record.buckets.values()] == [(2, 1, 1)]
    slot = (T0 // QUORUM.bucket_ms) % schema.WINDOW_BUCKETS
    window = {schema.bucket_field(slot, code) for code in schema.BUCKET_CODES}
    assert _fields(raw, store, name) - _stored_names() == {"fz|c-1", "sz|c-1"}
    assert window <= _fields(raw, store, name)

    # WHEN a second container's report trips the breaker, and an operator forces it open
    second = store.report(name, QUORUM, T0 + 1, Report("c-2", calls=2, failures=1, slow=1), None)
    forced = store.force_state(name, QUORUM, T0 + 2, State.FORCED_OPEN)

    # THEN both transitions keep the operator's settings, under their new name
    assert second.transition == (State.CLOSED, State.OPEN)
    assert second.record is not None
    assert second.record.tuned == '{"minimum_calls":4}'
    assert forced.record is not None
    assert forced.record.tuned == '{"minimum_calls":4}'
    assert schema.TEXT_FIELDS["tuned"] in _fields(raw, store, name)
    assert _fields(raw, store, name) <= _stored_names()


def test_a_field_renamed_in_lua_only_fails_the_first_operation(
    monkeypatch: pytest.MonkeyPatch, make_store: MakeStore, name: str
) -> None:
    # GIVEN scripts built from a renamed schema, and a Python parser back on the real one
    _renamed(monkeypatch)
    store = make_store()
    monkeypatch.undo()

    # WHEN a failure is recorded THEN the reply does not parse: a store error, never "closed"
    with pytest.raises(StoreError, match="wrong shape"):
        store.record_failure(name, POLICY, T0, None)


def test_a_field_renamed_in_python_only_fails_the_first_operation(
    monkeypatch: pytest.MonkeyPatch, make_store: MakeStore, name: str
) -> None:
    # GIVEN scripts built from the real schema, and a Python parser on a renamed one
    store = make_store()
    monkeypatch.setattr(
        schema, "NUMBER_FIELDS", {**schema.NUMBER_FIELDS, "open_until": "open_until_ms"}
    )

    # WHEN a failure is recorded THEN the reply does not parse: a store error, never "closed"
    with pytest.raises(StoreError, match="open_until_ms"):
        store.record_failure(name, POLICY, T0, None)
