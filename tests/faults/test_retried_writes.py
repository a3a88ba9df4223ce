"""A write botocore re-sends after its read timeout takes effect once, and its caller learns so.

A loopback proxy in front of moto's server forwards every request at once (so the first
UpdateItem applies) but holds back the reply to the first UpdateItem past the client's
0.3 s read timeout; botocore then re-sends the same request, which must not apply again.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest

from devtools import servers
from fleetbreaker import BreakerConfig, DynamoDBStore, State
from fleetbreaker.state import Policy, ProbeReport
from tests.faults.garble import GarbleProxy
from tests.support import FakeClock

POLICY = Policy.from_config(BreakerConfig(failure_threshold=2, recovery_timeout=10))
POLICY3 = Policy.from_config(BreakerConfig(failure_threshold=3, recovery_timeout=10))
NAME = "payment-api"
DELAY_S = 1.0  # past the store's 0.3 s read timeout: botocore re-sends the write


@pytest.fixture
def table(moto_server: str) -> tuple[str, str]:
    return moto_server, servers.make_table(moto_server)


@pytest.fixture
def direct(table: tuple[str, str]) -> DynamoDBStore:
    endpoint, name = table
    return DynamoDBStore(name, boto3_client=servers.dynamodb_client(endpoint))


@pytest.fixture
def proxy(table: tuple[str, str]) -> Iterator[GarbleProxy]:
    url = urllib.parse.urlsplit(table[0])
    with GarbleProxy(
        (url.hostname or "127.0.0.1", url.port or 80), delay_first=("UpdateItem", DELAY_S)
    ) as proxy:
        yield proxy


@pytest.fixture
def retried(table: tuple[str, str], proxy: GarbleProxy) -> DynamoDBStore:
    """The store as a breaker builds it (0.3 s read timeout, two attempts), via the proxy."""
    return DynamoDBStore(table[1], endpoint_url=proxy.endpoint_url)


def test_a_retried_failure_counts_once(
    direct: DynamoDBStore, retried: DynamoDBStore, proxy: GarbleProxy
) -> None:
    now = FakeClock()()

    outcome = retried.record_failure(NAME, POLICY, now, None)

    assert proxy.seen["UpdateItem"] == 2  # botocore did re-send it
    assert outcome.changed
    assert outcome.record.failures == 1
    stored = direct.load(NAME, now)
    assert stored.state is State.CLOSED  # threshold 2: one failure does not open
    assert stored.failures == 1


def test_a_retried_counted_failure_counts_once(
    direct: DynamoDBStore, retried: DynamoDBStore, proxy: GarbleProxy
) -> None:
    now = FakeClock()()
    seen = direct.record_failure(NAME, POLICY3, now, None).record

    outcome = retried.record_failure(NAME, POLICY3, now, seen)

    assert proxy.seen["UpdateItem"] == 2
    assert outcome.record.failures == 2
    assert direct.load(NAME, now).failures == 2


def test_a_retried_claim_grants_the_probe(
    direct: DynamoDBStore, retried: DynamoDBStore, proxy: GarbleProxy
) -> None:
    now = FakeClock()()
    direct.record_failure(NAME, POLICY, now, None)
    opened = direct.record_failure(NAME, POLICY, now, direct.load(NAME, now)).record
    assert opened.state is State.OPEN

    claim = retried.claim_probe(NAME, POLICY, opened.open_until, "probe", opened)

    assert proxy.seen["UpdateItem"] == 2
    assert claim.token is not None
    assert claim.transition == (State.OPEN, State.HALF_OPEN)
    stored = direct.load(NAME, opened.open_until)
    assert [lease.token for lease in stored.leases.values()] == [claim.token]


def test_a_retried_settle_reports_applied(
    direct: DynamoDBStore, retried: DynamoDBStore, proxy: GarbleProxy
) -> None:
    now = FakeClock()()
    direct.record_failure(NAME, POLICY, now, None)
    opened = direct.record_failure(NAME, POLICY, now, direct.load(NAME, now)).record
    later = opened.open_until
    claim = direct.claim_probe(NAME, POLICY, later, "probe", opened)

    settled = retried.settle_probe(
        NAME, POLICY, later, ProbeReport(claim.token, True), claim.record
    )

    assert proxy.seen["UpdateItem"] == 2
    assert settled.changed
    assert settled.transition == (State.HALF_OPEN, State.CLOSED)
    assert direct.load(NAME, later).state is State.CLOSED
