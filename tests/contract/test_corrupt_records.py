"""Records the package cannot trust, hand-written with each store's raw client.

A fractional or over-long number passes DynamoDB's attribute types (and the USABLE
condition), and a Redis counter of 15 digits would grow into one the scripts reject. Every
store must read such a record as corrupt (the breaker then treats it as closed and logs it),
replace it on the next write, and let an operator reset it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from fleetbreaker import CircuitBreaker, DynamoDBStore
from fleetbreaker.errors import CorruptRecordError
from fleetbreaker.record import State
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
