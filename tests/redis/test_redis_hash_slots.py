"""Every key a breaker uses maps to one Redis Cluster slot, so its scripts run on one node.

The slot is computed here from the cluster specification (CRC16/XMODEM of the hash tag, mod
16384), checked against redis-py's helper and against a real cluster-mode redis-server, and
a whole breaker lifecycle then runs through redis-py's cluster client.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot as redis_py_key_slot

from devtools.servers import LOOPBACK, RedisServer
from fleetbreaker import CircuitBreaker, CircuitOpenError, RedisStore, State
from fleetbreaker.record import ProbeReport
from tests.redis.conftest import ClusterRedisServer
from tests.support import STORE_CONFIG, Dependency, FakeClock, make_policy

SLOTS = 16384
OFFLINE = "redis://127.0.0.1:1/0"  # never connected to

NAMES = [
    "payment-api",
    "a{b}c",
    "{payment}",
    "}x",
    "x{}y",
    "{",
    "}",
    "{}",
    "%7B",
    "with space",
    "orders:eu-west-1",
    "支付",
    "é" * 300,
]


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def cluster_slot(key: bytes) -> int:
    """The slot of a key: only the part inside the first non-empty {...} counts, if any."""
    start = key.find(b"{")
    if start != -1:
        end = key.find(b"}", start + 1)
        if end != -1 and end != start + 1:
            key = key[start + 1 : end]
    return crc16_xmodem(key) % SLOTS


def escaped(name: str) -> str:
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def test_the_slot_function_matches_the_specification_examples() -> None:
    # From the Redis Cluster specification: CRC16 of "123456789" is 0x31C3, and only the
    # first non-empty hash tag counts.
    assert crc16_xmodem(b"123456789") == 0x31C3
    assert cluster_slot(b"{user1000}.following") == cluster_slot(b"user1000")
    assert cluster_slot(b"foo{}{bar}") == crc16_xmodem(b"foo{}{bar}") % SLOTS
    assert cluster_slot(b"foo{{bar}}zap") == cluster_slot(b"{bar")


@pytest.mark.parametrize("name", NAMES)
def test_every_key_of_a_breaker_is_in_the_slot_of_its_name(name: str) -> None:
    store = RedisStore(url=OFFLINE)

    slots = {cluster_slot(key.encode()) for key in store.keys(name)}

    # the hash tag is the whole (escaped) name, whatever braces the name holds
    assert slots == {crc16_xmodem(escaped(name).encode()) % SLOTS}
    assert {redis_py_key_slot(key.encode()) for key in store.keys(name)} == slots


def test_a_prefix_does_not_move_a_breaker_to_another_slot() -> None:
    default, custom = RedisStore(url=OFFLINE), RedisStore(url=OFFLINE, key_prefix="team-a:cb")

    for name in NAMES:
        assert {cluster_slot(k.encode()) for k in default.keys(name)} == {
            cluster_slot(k.encode()) for k in custom.keys(name)
        }


def test_a_breaker_writes_no_key_it_does_not_declare(
    redis_factory: Callable[[], RedisServer],
) -> None:
    # GIVEN an empty private server
    server = redis_factory()
    store = RedisStore(url=server.url, use_server_time=False)
    clock = FakeClock()
    breaker = CircuitBreaker("a{b}c", store=store, clock=clock, listeners=[])
    dep = Dependency()

    # WHEN the breaker trips, probes, reopens, closes and is overridden
    dep.failing = True
    for _ in range(breaker.config.failure_threshold):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)
    clock.advance(breaker.config.recovery_timeout)
    with pytest.raises(ConnectionError):
        breaker.call(dep)
    clock.advance(breaker.config.max_recovery_timeout)
    dep.failing = False
    assert breaker.call(dep) == "ok"
    breaker.force_open()

    # THEN the only key on the server is the one the store declares
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    assert set(raw.keys("*")) == set(store.keys("a{b}c"))
    raw.close()
    store.close()


@pytest.mark.parametrize("name", NAMES)
def test_a_cluster_node_agrees_on_the_slot(cluster_redis: ClusterRedisServer, name: str) -> None:
    node = redis.Redis(host=LOOPBACK, port=cluster_redis.port)
    store = RedisStore(url=OFFLINE)

    for key in store.keys(name):
        assert node.cluster("KEYSLOT", key) == cluster_slot(key.encode())
    node.close()


POLICY = make_policy(
    STORE_CONFIG, failure_threshold=2, half_open_max_probes=2, half_open_successes=2
)


def test_every_operation_runs_on_redis_cluster(cluster_redis: ClusterRedisServer) -> None:
    # GIVEN redis-py's cluster client on a cluster-mode server, which refuses a script whose
    # keys span slots (CROSSSLOT) and routes each EVALSHA by its keys' slot
    client = RedisCluster(host=LOOPBACK, port=cluster_redis.port)
    store = RedisStore(client=client, use_server_time=False)
    name, t0 = "payment-{eu}", 1_700_000_000_000

    # WHEN every operation runs once
    store.record_failure(name, POLICY, t0, None)
    opened = store.record_failure(name, POLICY, t0, None).record
    assert opened is not None
    claims = [store.claim_probe(name, POLICY, opened.open_until, n, None) for n in "ab"]
    tokens = [claim.token or "" for claim in claims]
    first = store.settle_probe(
        name, POLICY, opened.open_until, ProbeReport(tokens[0], True, 1.0), None
    )
    second = store.settle_probe(
        name, POLICY, opened.open_until, ProbeReport(tokens[1], True, 1.0), None
    )
    forced = store.force_state(name, POLICY, opened.open_until, State.FORCED_OPEN)

    # THEN they behave as on a single server
    assert opened.state is State.OPEN
    assert tokens == ["0-a", "1-b"]
    assert first.transition is None
    assert second.transition == (State.HALF_OPEN, State.CLOSED)
    assert forced.transition == (State.CLOSED, State.FORCED_OPEN)
    assert store.load(name, opened.open_until).state is State.FORCED_OPEN  # type: ignore[union-attr]
    client.close()
