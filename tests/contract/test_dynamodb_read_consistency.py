"""Which DynamoDB reads are eventually consistent, per call site (docs/architecture.md).

The cache's refresh read (``load``) is an eventually consistent GetItem: half a read unit,
its staleness bounded by ``cache_ttl`` because every write is fenced and returns the fresh
record. A read whose answer decides a write (a settle whose caller predates its claim, an
operator override, a tune, the read after a lost race whose answer carried no item) is
strongly consistent. Each GetItem the store sends is captured on its way out through a
botocore ``provide-client-params`` hook on the client, against moto in-process.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import CircuitBreaker, DynamoDBStore
from fleetbreaker.config import BreakerConfig
from fleetbreaker.record import ProbeReport, State
from tests.contract.test_store_contract import T0, half_open, open_breaker
from tests.support import STORE_POLICY, FakeClock

NAME = "payment-api"


class GetItems:
    """The ConsistentRead of every GetItem a client sends, in order."""

    def __init__(self) -> None:
        self.consistent: list[bool | None] = []

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        self.consistent.append(params.get("ConsistentRead"))

    def during(self, action: Any) -> list[bool | None]:
        self.consistent.clear()
        action()
        return list(self.consistent)


@pytest.fixture
def captured(moto_inprocess_store: DynamoDBStore) -> tuple[DynamoDBStore, GetItems]:
    """The contract's moto in-process store, its GetItems captured on their way out."""
    gets = GetItems()
    moto_inprocess_store.client.meta.events.register("provide-client-params.dynamodb.GetItem", gets)
    return moto_inprocess_store, gets


def test_a_load_is_an_eventually_consistent_read(
    captured: tuple[DynamoDBStore, GetItems],
) -> None:
    # GIVEN a store built as a function builds it WHEN the breaker's cache refreshes
    store, gets = captured
    # THEN its one GetItem is eventually consistent
    assert gets.during(lambda: store.load(NAME, T0)) == [False]


def test_a_breaker_refreshing_its_cache_reads_eventually_consistently(
    captured: tuple[DynamoDBStore, GetItems],
) -> None:
    # GIVEN a breaker on the store, its cache empty
    store, gets = captured
    # (a deadline a loaded machine's moto cannot miss: the read is the point, not its time)
    config = BreakerConfig(store_deadline_seconds=30)
    breaker = CircuitBreaker(NAME, store=store, config=config, clock=FakeClock())
    # WHEN it reads its state THEN the refresh is one eventually consistent GetItem
    assert gets.during(lambda: breaker.state) == [False]


def test_consistent_read_true_makes_loads_strongly_consistent(
    captured: tuple[DynamoDBStore, GetItems],
) -> None:
    # GIVEN a store asked for strongly consistent loads
    _, gets = captured
    store = DynamoDBStore("CircuitBreakers", boto3_client=captured[0].client, consistent_read=True)
    # WHEN it loads THEN the read is strongly consistent
    assert gets.during(lambda: store.load(NAME, T0)) == [True]


def test_a_settle_whose_caller_predates_its_claim_reads_strongly_consistently(
    captured: tuple[DynamoDBStore, GetItems],
) -> None:
    # GIVEN a half-open breaker and a probe token, the caller's view taken before the claim
    store, gets = captured
    now, token = half_open(store, NAME)
    report = ProbeReport(token=token, success=True)
    # WHEN the probe is settled from that view THEN the read that decides it is consistent
    assert gets.during(lambda: store.settle_probe(NAME, STORE_POLICY, now, report, None)) == [True]


@pytest.mark.parametrize("target", [State.FORCED_OPEN, State.DISABLED, State.CLOSED])
def test_an_operator_override_reads_strongly_consistently(
    captured: tuple[DynamoDBStore, GetItems], target: State
) -> None:
    # GIVEN an open breaker WHEN an operator forces a state THEN its read is consistent
    store, gets = captured
    open_breaker(store, NAME)
    assert gets.during(lambda: store.force_state(NAME, STORE_POLICY, T0, target)) == [True]


def test_a_tune_reads_strongly_consistently(captured: tuple[DynamoDBStore, GetItems]) -> None:
    # GIVEN an open breaker WHEN an operator tunes it THEN its read is consistent
    store, gets = captured
    open_breaker(store, NAME)
    assert gets.during(lambda: store.tune(NAME, STORE_POLICY, T0, '{"mode": "shadow"}', None)) == [
        True
    ]


def test_a_lost_race_without_an_item_reads_strongly_consistently(
    captured: tuple[DynamoDBStore, GetItems],
) -> None:
    # GIVEN a caller holding a probe lease on a record that has since been deleted
    store, gets = captured
    now, token = half_open(store, NAME)
    held = store.load(NAME, now)
    store.client.delete_item(TableName="CircuitBreakers", Key={"name": {"S": NAME}})
    report = ProbeReport(token=token, success=True)
    # WHEN its settle loses (the failed condition returns no item) THEN the read that tells
    # "absent" from "endpoint ignores ALL_OLD" is strongly consistent
    assert gets.during(lambda: store.settle_probe(NAME, STORE_POLICY, now, report, held)) == [True]


def test_the_breakers_writes_read_nothing(captured: tuple[DynamoDBStore, GetItems]) -> None:
    # GIVEN a closed breaker
    store, gets = captured

    def count_to_the_trip() -> None:
        seen = None
        for _ in range(STORE_POLICY.failure_threshold):
            seen = store.record_failure(NAME, STORE_POLICY, T0, seen).record
        assert seen is not None
        assert seen.state is State.OPEN

    # WHEN failures are counted up to the trip, each from the record the last one returned
    # THEN no GetItem is sent: every write returns the fresh record itself
    assert gets.during(count_to_the_trip) == []


def test_a_counts_read_back_reads_strongly_consistently(
    captured: tuple[DynamoDBStore, GetItems],
) -> None:
    # GIVEN a failure count whose answer is lost in a way that may have applied it
    # (refuse_blind_resend raises this from botocore's needs-retry; here before sending)
    from fleetbreaker.stores.dynamodb.wire import _MaybeApplied

    store, gets = captured

    def lost(**_: Any) -> None:
        raise _MaybeApplied("read timeout")

    store.client.meta.events.register("before-call.dynamodb.UpdateItem", lost)
    # WHEN the store reads the item back instead of re-sending THEN that read is consistent
    assert gets.during(lambda: store.record_failure(NAME, STORE_POLICY, T0, None)) == [True]
