"""RedisStore beyond the shared contract: clock, key layout, TTL, corrupt keys, errors, options.

The contract suite (tests/contract/) already runs every store rule against RedisStore; this
module covers what only Redis has. Everything runs against real redis-server processes.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from devtools.servers import LOOPBACK, RedisServer
from fleetbreaker import (
    CircuitBreaker,
    ConfigError,
    CorruptRecordError,
    RedisStore,
    State,
    StoreError,
)
from fleetbreaker.policy import OVERRIDE_TTL_S
from fleetbreaker.record import Lease, ProbeReport, Record
from tests.support import STORE_POLICY, trip_store

T0 = 1_700_000_000_000  # an arbitrary "now" (in 2023), in epoch ms


MakeStore = Callable[..., RedisStore]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# -- clock ---------------------------------------------------------------------------------


def test_scripts_use_the_server_clock_by_default(make_store: MakeStore, name: str) -> None:
    # GIVEN a store on its default clock and a caller whose clock is years behind
    store = make_store(use_server_time=True)
    before = wall_ms()

    # WHEN it counts a failure
    outcome = store.record_failure(name, STORE_POLICY, T0, None)

    # THEN the record carries the server's time (this host's clock), not the caller's
    after = wall_ms()
    assert outcome.record is not None
    assert before - 1_000 <= outcome.record.updated_at <= after + 1_000
    assert outcome.record.window_start == outcome.record.updated_at


def test_a_caller_clock_far_ahead_cannot_end_the_open_window(
    make_store: MakeStore, name: str
) -> None:
    # GIVEN a breaker opened on the server's clock
    store = make_store(use_server_time=True)
    opened = trip_store(store, name, STORE_POLICY, T0)

    # WHEN a caller whose clock runs a day ahead tries to claim a probe
    claim = store.claim_probe(name, STORE_POLICY, wall_ms() + 86_400_000, "early", opened)

    # THEN the server's clock decides: the window has not ended
    assert claim.token is None
    assert store.load(name, T0).state is State.OPEN  # type: ignore[union-attr]


def test_caller_clock_mode_uses_the_time_passed_in(make_store: MakeStore, name: str) -> None:
    store = make_store(use_server_time=False)

    outcome = store.record_failure(name, STORE_POLICY, T0, None)

    assert outcome.record is not None
    assert outcome.record.updated_at == T0


# -- layout and TTL ------------------------------------------------------------------------


def test_the_record_is_one_hash_with_the_record_fields(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store()

    store.record_failure(name, STORE_POLICY, T0, None)

    assert raw.type(store.key(name)) == "hash"
    assert raw.hgetall(store.key(name)) == {
        "state": "closed",
        "gen": "0",
        "failures": "1",
        "window_start": str(T0),
        "opened_at": "0",
        "open_until": "0",
        "reopens": "0",
        "successes": "0",
        "updated_at": str(T0),
        "expires_at": str(T0 // 1000 + STORE_POLICY.ttl_s),
        "closed_at": "0",
        "window_ms": str(STORE_POLICY.window_ms),
    }


def test_leases_are_fields_of_the_same_hash(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store()
    opened = trip_store(store, name, STORE_POLICY, T0)

    store.claim_probe(name, STORE_POLICY, opened.open_until, "abc", opened)

    fields = raw.hgetall(store.key(name))
    assert fields["probe0_token"] == "0-abc"
    assert fields["probe0_until"] == str(opened.open_until + STORE_POLICY.lease_ms)


def assert_expiry_matches(raw: redis.Redis, key: str, record: Record | None) -> None:
    """The key's PTTL is what is left of the record's expires_at (within a moment)."""
    assert record is not None
    wanted = record.expires_at * 1000 - record.updated_at
    assert wanted - 2_000 < raw.pttl(key) <= wanted


def test_every_write_sets_an_expiry_that_matches_expires_at(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store(use_server_time=False)
    key = store.key(name)
    check = functools.partial(assert_expiry_matches, raw, key)

    # every kind of write once: count, trip, claim, failed probe, successful probe, override
    check(store.record_failure(name, STORE_POLICY, T0, None).record)
    opened = trip_store(store, name, STORE_POLICY, T0)
    check(opened)
    now = opened.open_until
    claim = store.claim_probe(name, STORE_POLICY, now, "a", opened)
    check(claim.record)
    reopened = store.settle_probe(
        name, STORE_POLICY, now, ProbeReport(claim.token or "", False, 1.0), None
    ).record
    check(reopened)
    now = reopened.open_until  # type: ignore[union-attr]
    claim = store.claim_probe(name, STORE_POLICY, now, "b", reopened)
    check(
        store.settle_probe(
            name, STORE_POLICY, now, ProbeReport(claim.token or "", True, 1.0), None
        ).record
    )
    check(store.force_state(name, STORE_POLICY, now, State.DISABLED).record)


def test_expiry_follows_the_server_clock_by_default(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store(use_server_time=True)

    opened = trip_store(store, name, STORE_POLICY, T0)

    assert_expiry_matches(raw, store.key(name), opened)
    assert opened.expires_at == opened.updated_at // 1000 + STORE_POLICY.ttl_s
    assert opened.updated_at > T0


def test_an_override_outlives_the_idle_ttl(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store(use_server_time=True)

    store.force_state(name, STORE_POLICY, T0, State.FORCED_OPEN)

    assert raw.ttl(store.key(name)) > OVERRIDE_TTL_S - 60


# -- corrupt keys --------------------------------------------------------------------------

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
CORRUPT = {
    "unknown state": {**GOOD, "state": "ajar"},
    "no state": {k: v for k, v in GOOD.items() if k != "state"},
    "fractional number": {**GOOD, "gen": "1.5"},
    "number too long to be exact": {**GOOD, "failures": "1234567890123456"},
    "missing number": {k: v for k, v in GOOD.items() if k != "open_until"},
    "empty number": {**GOOD, "expires_at": ""},
}


@pytest.mark.parametrize("fields", CORRUPT.values(), ids=CORRUPT.keys())
def test_a_corrupt_hash_loads_as_corrupt_record_error(
    raw: redis.Redis, make_store: MakeStore, name: str, fields: dict[str, str]
) -> None:
    store = make_store()
    raw.hset(store.key(name), mapping=fields)

    with pytest.raises(CorruptRecordError):
        store.load(name, T0)


@pytest.mark.parametrize("fields", CORRUPT.values(), ids=CORRUPT.keys())
def test_a_write_replaces_a_corrupt_hash_with_a_fresh_record(
    raw: redis.Redis, make_store: MakeStore, name: str, fields: dict[str, str]
) -> None:
    store = make_store()
    raw.hset(store.key(name), mapping={**fields, "stray": "x"})

    outcome = store.record_failure(name, STORE_POLICY, T0, None)

    fresh = Record(
        failures=1,
        window_start=T0,
        updated_at=T0,
        expires_at=T0 // 1000 + STORE_POLICY.ttl_s,
        window_ms=STORE_POLICY.window_ms,
    )
    assert outcome.record == fresh
    assert store.load(name, T0) == fresh
    assert "stray" not in raw.hgetall(store.key(name))


def test_a_key_of_another_type_is_corrupt_and_an_override_replaces_it(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store()
    raw.set(store.key(name), "not a breaker")

    with pytest.raises(CorruptRecordError, match="string"):
        store.load(name, T0)
    forced = store.force_state(name, STORE_POLICY, T0, State.FORCED_OPEN)

    assert forced.transition == (State.CLOSED, State.FORCED_OPEN)
    assert store.load(name, T0).state is State.FORCED_OPEN  # type: ignore[union-attr]


def test_a_malformed_lease_counts_as_free(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store()
    opened = trip_store(store, name, STORE_POLICY, T0)
    now = opened.open_until
    store.claim_probe(name, STORE_POLICY, now, "held", opened)
    raw.hset(store.key(name), "probe0_until", "soon")

    claim = store.claim_probe(name, STORE_POLICY, now, "next", None)

    assert claim.token == "0-next"
    assert claim.record is not None
    assert claim.record.leases == {0: Lease("0-next", now + STORE_POLICY.lease_ms, now)}


def test_the_breaker_reads_a_corrupt_record_as_closed(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store()
    raw.hset(store.key(name), mapping=CORRUPT["unknown state"])
    breaker = CircuitBreaker(name, store=store, clock=lambda: T0)

    assert breaker.call(lambda: "ran") == "ran"
    assert breaker.stats.corrupt_records == 1
    assert not breaker.degraded


# -- errors --------------------------------------------------------------------------------


def test_a_refused_connection_is_a_store_error(
    make_store: MakeStore, refused_port: int, name: str
) -> None:
    store = make_store(url=f"redis://{LOOPBACK}:{refused_port}/0")

    with pytest.raises(StoreError) as info:
        store.load(name, T0)

    assert isinstance(info.value.__cause__, redis.ConnectionError)


def test_an_error_reply_is_a_store_error(
    redis_factory: Callable[[], RedisServer], make_store: MakeStore, name: str
) -> None:
    # GIVEN a cache that is out of memory and may not evict
    server = redis_factory()
    admin = redis.Redis.from_url(server.url)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)
    store = make_store(url=server.url)

    # WHEN a write runs THEN Redis' OOM reply surfaces as a StoreError; reads still work
    with pytest.raises(StoreError, match="maxmemory") as info:
        store.record_failure(name, STORE_POLICY, T0, None)
    assert isinstance(info.value.__cause__, redis.ResponseError)
    assert store.load(name, T0) is None
    admin.close()


def test_scripts_flushed_from_the_server_are_loaded_again(
    raw: redis.Redis, make_store: MakeStore, name: str
) -> None:
    store = make_store()
    store.record_failure(name, STORE_POLICY, T0, None)

    raw.script_flush()
    outcome = store.record_failure(name, STORE_POLICY, T0, None)

    assert outcome.record is not None
    assert outcome.record.failures == 2
    assert raw.script_exists(store._scripts["record_failure"].sha) == [True]


def test_an_injected_client_is_used_as_it_is(redis_server: str, name: str) -> None:
    # decode_responses=True: replies arrive as str instead of bytes
    client = redis.Redis.from_url(redis_server, decode_responses=True)
    store = RedisStore(client=client, use_server_time=False)

    outcome = store.record_failure(name, STORE_POLICY, T0, None)

    assert store.client is client
    assert outcome.record is not None
    assert outcome.record.failures == 1
    store.close()
    client.ping()  # close() leaves a client it did not create alone
    client.close()


# -- keys, options and construction --------------------------------------------------------

OFFLINE = "redis://127.0.0.1:1/0"  # never connected to: redis-py connects on first command


def test_names_with_braces_get_distinct_keys_with_one_hash_tag() -> None:
    store = RedisStore(url=OFFLINE)
    names = ["a{b}c", "a%7Bb%7Dc", "a}b", "{a}", "a", "}", "{", "%"]

    keys = [store.key(name) for name in names]

    assert len(set(keys)) == len(names)
    for key in keys:
        assert key.startswith("fleetbreaker:{")
        assert key.endswith("}")
        assert key.count("{") == 1
        assert key.count("}") == 1


@pytest.mark.parametrize("prefix", ["", "a{b", "a}", 3])
def test_a_key_prefix_must_be_text_without_braces(prefix: Any) -> None:
    with pytest.raises(ConfigError, match="key_prefix"):
        RedisStore(url=OFFLINE, key_prefix=prefix)


def test_the_url_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, redis_server: str, name: str
) -> None:
    monkeypatch.setenv("CIRCUIT_BREAKER_REDIS_URL", redis_server)

    store = RedisStore(use_server_time=False)

    assert store.record_failure(name, STORE_POLICY, T0, None).changed
    store.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a client or a url"),
        ({"url": "http://localhost:6379"}, "redis:// or rediss://"),
        ({"url": OFFLINE, "client": object()}, "not both"),
        ({"url": "rediss://localhost:6379", "ssl": False}, "contradicts"),
        ({"url": OFFLINE, "ssl_ca_certs": "/ca.pem"}, "needs TLS"),
        ({"url": OFFLINE, "socket_timeout": 0}, "socket_timeout"),
        ({"url": OFFLINE, "socket_connect_timeout": True}, "socket_connect_timeout"),
    ],
)
def test_bad_options_fail_at_construction(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], message: str
) -> None:
    monkeypatch.delenv("CIRCUIT_BREAKER_REDIS_URL", raising=False)

    with pytest.raises(ConfigError, match=message):
        RedisStore(**kwargs)


@pytest.mark.store_timeouts  # the defaults themselves, read back
def test_the_default_client_waits_briefly_and_retries_only_broken_connections() -> None:
    store = RedisStore(url=OFFLINE)

    options = store.client.connection_pool.connection_kwargs  # type: ignore[attr-defined]
    retry = options["retry"]
    assert options["socket_timeout"] == 0.2
    assert options["socket_connect_timeout"] == 0.2
    assert retry.get_retries() == 1
    assert retry._supported_errors == (redis.ConnectionError,)


def test_ssl_true_turns_a_redis_url_into_tls() -> None:
    store = RedisStore(url=OFFLINE, ssl=True)

    pool = store.client.connection_pool  # type: ignore[attr-defined]
    assert pool.connection_class is redis.SSLConnection


def test_importing_fleetbreaker_does_not_import_redis() -> None:
    code = (
        "import sys, fleetbreaker\n"
        "assert 'redis' not in sys.modules, 'redis imported'\n"
        "assert fleetbreaker.RedisStore.__name__ == 'RedisStore'\n"
        "assert 'redis' not in sys.modules, 'redis imported by the RedisStore name'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


# -- ElastiCache-style TLS and AUTH --------------------------------------------------------


def test_tls_with_a_private_ca(tls_redis: Any, make_store: MakeStore, name: str) -> None:
    store = make_store(url=tls_redis.url, ssl_ca_certs=str(tls_redis.ca))

    assert store.record_failure(name, STORE_POLICY, T0, None).changed
    assert store.load(name, T0).failures == 1  # type: ignore[union-attr]


def test_ssl_true_reaches_a_tls_only_server(
    tls_redis: Any, make_store: MakeStore, name: str
) -> None:
    url = f"redis://{LOOPBACK}:{tls_redis.port}/0"

    store = make_store(url=url, ssl=True, ssl_ca_certs=str(tls_redis.ca))

    assert store.record_failure(name, STORE_POLICY, T0, None).changed


def test_tls_with_an_untrusted_certificate_is_a_store_error(
    tls_redis: Any, make_store: MakeStore, name: str
) -> None:
    store = make_store(url=tls_redis.url)  # the system CAs do not know the test CA

    with pytest.raises(StoreError, match="certificate"):
        store.load(name, T0)


# The commands the scripts run, plus loading them: the least an ElastiCache RBAC user needs.
BREAKER_ACL = [
    "+evalsha",
    "+script|load",
    "+type",
    "+hgetall",
    "+hset",
    "+hdel",
    "+del",
    "+pexpire",
    "+time",
]


def test_an_rbac_user_with_only_the_breaker_commands(
    redis_factory: Callable[[], RedisServer], make_store: MakeStore, name: str
) -> None:
    # GIVEN a user limited to the breaker's keys and commands (ElastiCache RBAC is Redis ACL)
    server = redis_factory()
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser(
        "breaker",
        enabled=True,
        passwords=["+s3cret"],
        keys=["fleetbreaker:*"],
        commands=BREAKER_ACL,
    )
    admin.set(f"fleetbreaker:{{{name}-other}}", "a string")  # for the DEL of a foreign key
    admin.close()
    store = make_store(url=server.url, username="breaker", password="s3cret")

    # WHEN every operation runs, through every write path (leases dropped: HDEL)
    opened = trip_store(store, name, STORE_POLICY, T0)
    claim = store.claim_probe(name, STORE_POLICY, opened.open_until, "a", None)
    closed = store.settle_probe(
        name, STORE_POLICY, opened.open_until, ProbeReport(claim.token or "", True, 1.0), None
    )
    replaced = store.force_state(f"{name}-other", STORE_POLICY, T0, State.DISABLED)
    store.use_server_time = True  # and on the server's clock (TIME)
    counted = store.record_failure(name, STORE_POLICY, T0, None)

    # THEN they all work
    assert closed.transition == (State.HALF_OPEN, State.CLOSED)
    assert replaced.transition == (State.CLOSED, State.DISABLED)
    assert counted.record is not None
    assert counted.record.updated_at > T0


def test_a_wrong_password_is_a_store_error(
    redis_factory: Callable[[], RedisServer], make_store: MakeStore, name: str
) -> None:
    server = redis_factory()
    admin = redis.Redis.from_url(server.url)
    admin.config_set("requirepass", "s3cret")
    admin.close()

    with pytest.raises(StoreError):
        make_store(url=server.url, password="wrong").load(name, T0)
    assert make_store(url=server.url, password="s3cret").load(name, T0) is None


def test_a_breaker_without_a_store_uses_redis_when_its_url_is_set(
    monkeypatch: pytest.MonkeyPatch, redis_server: str
) -> None:
    # GIVEN both variables, as a stack that adds a cache to its table sets them
    monkeypatch.setenv("CIRCUIT_BREAKER_REDIS_URL", redis_server)
    monkeypatch.setenv("CIRCUIT_BREAKER_TABLE", "CircuitBreakers")

    breaker = CircuitBreaker("payment-api")

    assert isinstance(breaker.store, RedisStore)
    assert breaker.call(lambda: "ran") == "ran"
    breaker.store.close()


# -- the failure weight across the Python <-> Lua seam ---------------------------------------


def _record_failure_script(store: RedisStore, name: str, *args: str) -> None:
    """Run record_failure's script itself, with exactly the ARGV given."""
    from fleetbreaker.stores.redis_scripts import policy_json

    script = store._scripts["record_failure"]
    keys = store.keys(name)
    store.client.eval(script.source, len(keys), *keys, str(T0), policy_json(STORE_POLICY), *args)


def test_the_script_counts_the_weight_it_is_given(make_store: MakeStore, name: str) -> None:
    store = make_store()

    _record_failure_script(store, name, "2")

    assert store.load(name, T0).failures == 2


def test_the_script_counts_one_when_no_weight_is_given(make_store: MakeStore, name: str) -> None:
    # GIVEN a caller from before failure weights (its ARGV ends with the policy)
    store = make_store()

    _record_failure_script(store, name)

    assert store.load(name, T0).failures == 1


def test_the_store_sends_the_weight_as_the_scripts_third_argument(
    make_store: MakeStore, name: str
) -> None:
    store = make_store()
    sent: list[tuple[Any, ...]] = []
    evalsha = store.client.evalsha

    def recording(sha: str, numkeys: int, *rest: Any) -> Any:
        sent.append(rest[numkeys:])
        return evalsha(sha, numkeys, *rest)

    store.client.evalsha = recording  # type: ignore[method-assign]

    store.record_failure(name, STORE_POLICY, T0, None, 3)

    assert sent[-1][2] == "3"
    assert store.load(name, T0).state is State.OPEN
