"""Records the package cannot trust, hand-written with each store's raw client.

A fractional or over-long number passes DynamoDB's attribute types (and the USABLE
condition), and a Redis counter of 15 digits would grow into one the scripts reject. Every
store must read such a record as corrupt (the breaker then treats it as closed and logs it),
replace it on the next write, and let an operator reset it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore, rules
from fleetbreaker import record as schema
from fleetbreaker.errors import CorruptRecordError
from fleetbreaker.record import Record, State
from tests.contract.conftest import make_store
from tests.contract.test_store_contract import T0
from tests.support import STORE_POLICY

Writer = Callable[[str, dict[str, str]], None]

GOOD = {
    "state": "closed",
    "gen": "4",
    "failures": "1",
    "window_start": str(T0),
    "opened_at": "0",
    "open_until": "0",
    "reopens": "0",
    "successes": "0",
    "updated_at": str(T0),
    "expires_at": str(T0 // 1000 + 3_600),
}
TEXT_FIELDS = {"state", "probe0_token"}

UNTRUSTED = {
    "fractional gen": {**GOOD, "gen": "4.5"},
    "fractional window_start": {**GOOD, "window_start": f"{T0}.5"},
    "gen of 41 digits": {**GOOD, "gen": "1E+40"},
    "gen of 15 digits": {**GOOD, "gen": "999999999999999"},
}
# A fractional lease expiry: DynamoDB's claim condition compares it as a number, so the
# parser must not call the slot free. Redis' scripts and parser agree it is free
# (tests/redis: test_a_malformed_lease_counts_as_free), so it is not corrupt there.
FRACTIONAL_LEASE = {
    **GOOD,
    "state": "half_open",
    "gen": "5",
    "probe0_token": "0-held",
    "probe0_until": f"{T0 + 1_000}.5",
}
DYNAMODB_ONLY = {"fractional lease expiry": FRACTIONAL_LEASE}


BACKENDS = ["moto", "moto_server", "dynalite", "redis"]


@pytest.fixture
def raw_store(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Writer]]:
    """A store plus a function that writes a breaker's raw fields behind its back."""
    store = make_store(request, request.param)
    if isinstance(store, DynamoDBStore):

        def put(name: str, fields: dict[str, str]) -> None:
            item = {k: {"S" if k in TEXT_FIELDS else "N": v} for k, v in fields.items()}
            store.client.put_item(TableName=store.table_name, Item={"name": {"S": name}, **item})

        yield store, put
        return
    client = redis.Redis.from_url(request.getfixturevalue("redis_server"))

    def hset(name: str, fields: dict[str, str]) -> None:
        client.hset(store.key(name), mapping=fields)

    yield store, hset
    client.close()


def cases(store: Any) -> dict[str, dict[str, str]]:
    return {**UNTRUSTED, **DYNAMODB_ONLY} if isinstance(store, DynamoDBStore) else UNTRUSTED


ALL_CASES = [*UNTRUSTED, *DYNAMODB_ONLY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Each case only on the stores where it is corrupt (CI fails on any skipped test).
    if "raw_store" in metafunc.fixturenames and "case" not in metafunc.fixturenames:
        metafunc.parametrize("raw_store", BACKENDS, indirect=True)
    if "case" in metafunc.fixturenames:
        pairs = [
            (backend, case)
            for backend in BACKENDS
            for case in ALL_CASES
            if backend != "redis" or case in UNTRUSTED
        ]
        metafunc.parametrize(
            ("raw_store", "case"),
            pairs,
            indirect=["raw_store"],
            ids=[f"{backend}-{case}" for backend, case in pairs],
        )


def write_case(raw_store: tuple[Any, Writer], name: str, case: str) -> Any:
    store, put = raw_store
    put(name, cases(store)[case])
    return store


def test_an_untrusted_record_loads_as_corrupt(
    raw_store: tuple[Any, Writer], name: str, case: str
) -> None:
    store = write_case(raw_store, name, case)

    with pytest.raises(CorruptRecordError):
        store.load(name, T0)


def test_the_next_failure_replaces_an_untrusted_record(
    raw_store: tuple[Any, Writer], name: str, case: str
) -> None:
    store = write_case(raw_store, name, case)

    outcome = store.record_failure(name, STORE_POLICY, T0, None)

    assert outcome.changed
    assert outcome.record.state is State.CLOSED
    assert outcome.record.failures == 1
    assert store.load(name, T0) == outcome.record


def test_an_operator_reset_replaces_an_untrusted_record(
    raw_store: tuple[Any, Writer], name: str, case: str
) -> None:
    store = write_case(raw_store, name, case)

    outcome = store.force_state(name, STORE_POLICY, T0, State.CLOSED)

    assert outcome.record.state is State.CLOSED
    assert store.load(name, T0) == outcome.record


def test_an_open_record_with_a_15_digit_gen_grants_no_probe(
    raw_store: tuple[Any, Writer], name: str
) -> None:
    store, put = raw_store
    put(name, {**GOOD, "state": "open", "gen": "999999999999999", "open_until": str(T0 - 1)})

    claim = store.claim_probe(name, STORE_POLICY, T0, "probe", None)

    assert claim.token is None
    with pytest.raises(CorruptRecordError):  # left as it was, for the next write to replace
        store.load(name, T0)


def test_the_breaker_reads_an_untrusted_record_as_closed_and_counts_it(
    raw_store: tuple[Any, Writer], name: str
) -> None:
    store, put = raw_store
    put(name, {**GOOD, "state": "open", "gen": "4.5", "open_until": str(T0 + 60_000)})
    breaker = CircuitBreaker(name, store=store, clock=lambda: T0)

    assert breaker.call(lambda: "ran") == "ran"
    assert breaker.stats.corrupt_records == 1
    assert not breaker.degraded


# -- census writes: they count the fleet, never decide (or undo) its state -----------------


def raw_fields(store: Any, name: str) -> dict[str, str]:
    """The breaker's stored fields as text, read behind the store's back."""
    if isinstance(store, DynamoDBStore):
        item = store.client.get_item(
            TableName=store.table_name, Key={"name": {"S": name}}, ConsistentRead=True
        ).get("Item", {})
        return {k: next(iter(v.values())) for k, v in item.items() if k != "name"}
    raw = store.client.hgetall(store.key(name))
    return {k.decode(): v.decode() for k, v in raw.items()}


def census_slice(count: str) -> dict[str, str]:
    """The census ring's current slice (at T0) holding ``count``."""
    idx, slot = rules.census_slot(STORE_POLICY, T0)
    return {
        schema.census_field(slot, schema.CENSUS_INDEX): str(idx),
        schema.census_field(slot, schema.CENSUS_COUNT): count,
    }


# The largest count a record holds (record.MAX_CENSUS_COUNT): one digit more is corrupt.
MAX_CENSUS_COUNT = 10**schema.MAX_RECORD_DIGITS - 1
OPEN = {**GOOD, "state": "open", "opened_at": str(T0), "open_until": str(T0 + 60_000)}
KEPT = ("state", "gen", "opened_at", "open_until")


OPEN_VIEW = Record(
    state=State.OPEN,
    gen=4,
    opened_at=T0,
    open_until=T0 + 60_000,
    updated_at=T0,
    expires_at=T0 // 1000 + 3_600,
)


@pytest.mark.parametrize("observed", [None, OPEN_VIEW], ids=["no view", "open view"])
def test_a_census_write_never_replaces_an_untrusted_record(
    raw_store: tuple[Any, Writer], name: str, case: str, observed: Record | None
) -> None:
    # GIVEN an open breaker's record the store cannot read
    store, put = raw_store
    fields = dict(cases(store)[case])
    if fields["state"] == "closed":
        fields.update({k: OPEN[k] for k in ("state", "opened_at", "open_until")})
    put(name, fields)
    before = raw_fields(store, name)

    # WHEN a census write lands (with no view, or the open view the container last had)
    with pytest.raises(CorruptRecordError):
        store.census(name, STORE_POLICY, T0, observed)

    # THEN the record is as it was: unreadable, for a counted write or an operator to replace
    after = raw_fields(store, name)
    assert {k: after.get(k) for k in KEPT} == {k: before.get(k) for k in KEPT}
    with pytest.raises(CorruptRecordError):
        store.load(name, T0)


def test_a_census_write_never_closes_an_open_record_with_a_forged_census(
    raw_store: tuple[Any, Writer], name: str
) -> None:
    # GIVEN an open breaker whose census slice holds 15 digits (DynamoDB cannot read the
    # record; Redis drops the slice)
    store, put = raw_store
    put(name, {**OPEN, **census_slice("999999999999999")})

    # WHEN census writes land, as the containers' refreshes send them
    for step in range(2):
        with contextlib.suppress(CorruptRecordError):
            store.census(name, STORE_POLICY, T0 + step, None)

    # THEN the breaker is still open, of the same generation
    after = raw_fields(store, name)
    assert {k: after[k] for k in KEPT} == {k: OPEN[k] for k in KEPT}


def test_a_full_census_slice_stays_full_and_readable(
    raw_store: tuple[Any, Writer], name: str
) -> None:
    # GIVEN an open breaker whose census slice holds the largest count a record holds
    store, put = raw_store
    put(name, {**OPEN, **census_slice(str(MAX_CENSUS_COUNT))})

    # WHEN a census write lands
    outcome = store.census(name, STORE_POLICY, T0 + 1, store.load(name, T0 + 1))

    # THEN the slice stays at that count, and the record stays readable and open
    record = store.load(name, T0 + 1)
    assert record == outcome.record
    assert record.state is State.OPEN
    assert [c.count for c in record.census.values()] == [MAX_CENSUS_COUNT]


class AlwaysCensus(random.Random):
    """A random source whose census is due at every refresh."""

    def random(self) -> float:
        return 0.0


def test_a_breaker_whose_census_falls_on_an_unreadable_open_record_never_closes_it(
    raw_store: tuple[Any, Writer], name: str
) -> None:
    # GIVEN an open breaker whose census slice holds 15 digits, and a container whose
    # refreshes are all census writes
    store, put = raw_store
    put(name, {**OPEN, **census_slice("999999999999999")})
    now = [T0]
    breaker = CircuitBreaker(
        name,
        store=store,
        clock=lambda: now[0],
        rng=AlwaysCensus(),
        config=BreakerConfig(store_deadline_seconds=30),
    )

    # WHEN it refreshes its view, again and again
    for _ in range(5):
        breaker.state  # noqa: B018
        now[0] += 1_500

    # THEN the record still holds the open breaker, of the same generation
    after = raw_fields(store, name)
    assert {k: after[k] for k in KEPT} == {k: OPEN[k] for k in KEPT}
