"""A write whose attempt times out takes effect at most once, and its caller learns its fate.

A loopback proxy in front of moto's server forwards every request at once (so the first
UpdateItem applies) but holds back the reply to the first UpdateItem past the client's
read timeout. botocore re-sends a fenced write (a claim, a settle): its operation id,
or its fences and then its token, show the first attempt applied. A count (a failure) is
never re-sent, since no fence stops a second ADD once another write has replaced the id:
the store reads the item back and takes it as counted. ``while_delayed`` makes another
container write between the attempt and the re-send or read-back.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest
from botocore.config import Config

from devtools import servers
from fleetbreaker import DynamoDBStore, State
from fleetbreaker.record import ProbeReport
from tests.faults.garble import GarbleProxy
from tests.support import FakeClock, make_policy

pytestmark = pytest.mark.realtime  # replies held past the store's read timeout

POLICY = make_policy(failure_threshold=2, recovery_timeout=10)
POLICY3 = make_policy(failure_threshold=3, recovery_timeout=10)
NAME = "payment-api"
# The store's client as a breaker builds it (two attempts, botocore's legacy retries), but
# with 1 s timeouts instead of its 0.2 s connect and 0.3 s read: the timeout that matters
# here is the one the proxy provokes by holding a reply; every other reply (the re-send, the
# read-back) comes from moto's server, which a busy machine can slow past 0.3 s.
HELD = Config(connect_timeout=1.0, read_timeout=1.0)
DELAY_S = 2.0  # past the read timeout: botocore would re-send the write
# The crowded case waits for another container's write before its read-back: on a busy
# machine that can take longer than 1 s, so that store reads for up to 2 s.
CROWDED_READ_TIMEOUT_S = 2.0
CROWDED_DELAY_S = 3.0


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
    """The store as a breaker builds it (two attempts; HELD's timeouts), via the proxy."""
    return DynamoDBStore(table[1], endpoint_url=proxy.endpoint_url, boto_config=HELD)


def test_a_retried_failure_counts_once(
    direct: DynamoDBStore, retried: DynamoDBStore, proxy: GarbleProxy
) -> None:
    now = FakeClock()()

    outcome = retried.record_failure(NAME, POLICY, now, None)

    assert proxy.seen["UpdateItem"] == 1  # not re-sent: read back
    assert proxy.seen["GetItem"] == 1
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

    assert proxy.seen["UpdateItem"] == 1
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

    assert proxy.seen["UpdateItem"] == 2  # fenced: botocore re-sends it
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

    assert proxy.seen["UpdateItem"] == 2  # fenced: botocore re-sends it
    assert settled.changed
    assert settled.transition == (State.HALF_OPEN, State.CLOSED)
    assert direct.load(NAME, later).state is State.CLOSED


# -- another container writes between the attempt and the read-back ------------------------


@pytest.fixture
def crowded(table: tuple[str, str], direct: DynamoDBStore) -> Iterator[GarbleProxy]:
    """The delayed reply's hold starts with another container's failure on the same breaker."""
    url = urllib.parse.urlsplit(table[0])
    now = FakeClock()()

    def other_container() -> None:
        direct.record_failure(NAME, POLICY3, now, direct.load(NAME, now))

    with GarbleProxy(
        (url.hostname or "127.0.0.1", url.port or 80),
        delay_first=("UpdateItem", CROWDED_DELAY_S),
        while_delayed=other_container,
    ) as proxy:
        yield proxy


def test_a_failure_whose_id_was_overwritten_is_never_counted_twice(
    table: tuple[str, str], direct: DynamoDBStore, crowded: GarbleProxy
) -> None:
    # GIVEN a container whose failure applies but whose answer is lost, while another
    # container's failure replaces the operation id on the item
    store = DynamoDBStore(
        table[1],
        endpoint_url=crowded.endpoint_url,
        boto_config=Config(connect_timeout=1.0, read_timeout=CROWDED_READ_TIMEOUT_S),
    )
    now = FakeClock()()

    # WHEN its failure is counted
    outcome = store.record_failure(NAME, POLICY3, now, None)

    # THEN it is taken as counted (its id is gone, so it cannot know; never sent twice), and
    # the item holds both failures once each: a re-send would have made it 3 and, with
    # threshold 3, opened the fleet on two failing calls. No store error: the container
    # stays on the shared breaker.
    assert outcome.changed
    assert outcome.record.failures == 2  # the proxy holds the read-back until the other's write
    assert crowded.seen["UpdateItem"] == 1  # sent once (the other container writes directly)
    stored = direct.load(NAME, now)
    assert stored.state is State.CLOSED
    assert stored.failures == 2


def test_a_claim_whose_id_was_overwritten_still_learns_it_holds_the_probe(
    table: tuple[str, str], direct: DynamoDBStore
) -> None:
    # GIVEN an open breaker with two probe slots; a container's claim applies but its answer
    # is lost, while another container takes the second slot
    policy = make_policy(failure_threshold=1, recovery_timeout=10, half_open_max_probes=2)
    now = FakeClock()()
    opened = direct.record_failure(NAME, policy, now, None).record
    later = opened.open_until
    url = urllib.parse.urlsplit(table[0])

    def other_container() -> None:
        seen = direct.load(NAME, later)
        assert direct.claim_probe(NAME, policy, later, "other", seen).token is not None

    with GarbleProxy(
        (url.hostname or "127.0.0.1", url.port or 80),
        delay_first=("UpdateItem", CROWDED_DELAY_S),
        while_delayed=other_container,
    ) as proxy:
        store = DynamoDBStore(table[1], endpoint_url=proxy.endpoint_url, boto_config=HELD)

        # WHEN it claims
        claim = store.claim_probe(NAME, policy, later, "mine", opened)

    # THEN it learns from its token on the item that it holds a probe (it is not told
    # "reject" while its lease keeps the slot from everyone else)
    assert claim.token is not None
    assert proxy.seen["UpdateItem"] == 2  # re-sent; its fences fail, its token is there
    stored = direct.load(NAME, later)
    tokens = [lease.token for lease in stored.leases.values()]
    assert len(tokens) == 2
    assert claim.token in tokens
