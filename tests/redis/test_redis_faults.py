"""The breaker on RedisStore when Redis misbehaves: killed, restarted empty, hung, black-holed.

DESIGN.md: a store error never reaches the protected call, the call is never held up for
more than a small budget, and the breaker runs on a per-container local breaker until the
store answers again. Time moves only by the fake clock. No test times the machine: a call is
shown cut short by what the code did (the client gave up on a server that holds the answer, or
the breaker's deadline fired) and by how often the store was asked, never by a stopwatch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from devtools.servers import BlackholeServer, RedisServer
from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, RedisStore, State
from fleetbreaker.errors import StoreDeadlineError
from tests.faults.trickle import TrickleProxy
from tests.support import Dependency, FakeClock, RecordingListener, breaker_on, trip

pytestmark = pytest.mark.realtime  # servers killed and paused, deadlines, on the wall clock

CONFIG = BreakerConfig(
    failure_threshold=3, recovery_timeout=10, recovery_jitter=0.0, store_backoff_seconds=5
)


@pytest.fixture
def dep() -> Dependency:
    return Dependency()


@pytest.fixture
def events() -> RecordingListener:
    return RecordingListener()


@pytest.fixture
def breaker_at(
    clock: FakeClock, events: RecordingListener
) -> Iterator[Callable[[str], CircuitBreaker]]:
    """A breaker on a RedisStore at `url`, with the store's default (short) timeouts."""
    stores: list[RedisStore] = []

    def make(url: str) -> CircuitBreaker:
        store = RedisStore(url=url, use_server_time=False)  # the fake clock drives the rules
        stores.append(store)
        return breaker_on(store, clock, CONFIG, listeners=[events])

    yield make
    for store in stores:
        store.close()


def outcome(fn: Callable[[], Any]) -> Any:
    """What ``fn()`` returned, or the exception it raised."""
    try:
        return fn()
    except Exception as exc:
        return exc


def cut_short(error: BaseException) -> bool:
    """The store operation ended by the code's own doing on a server that held its answer:
    the client's socket timeout, or the breaker's deadline (StoreDeadlineError)."""
    return isinstance(error, StoreDeadlineError) or isinstance(error.__cause__, redis.TimeoutError)


# -- killed --------------------------------------------------------------------------------


def test_a_killed_server_degrades_to_the_local_breaker(
    redis_factory: Callable[[], RedisServer],
    breaker_at: Callable[[str], CircuitBreaker],
    clock: FakeClock,
    dep: Dependency,
    events: RecordingListener,
) -> None:
    # GIVEN a healthy breaker whose Redis then crashes
    server = redis_factory()
    breaker = breaker_at(server.url)
    assert breaker.call(dep) == "ok"
    server.kill()
    clock.advance(CONFIG.cache_ttl)

    # WHEN calls keep coming
    result = outcome(lambda: breaker.call(dep))

    # THEN they run on the local breaker, after one store attempt the client gave up on (the
    # connection refused), and the degradation is reported
    assert result == "ok"
    assert events.count("on_store_call_start") == 2  # the healthy load, then the refused one
    assert breaker.degraded
    assert events.count("on_degraded") == 1
    assert isinstance(events.values("on_store_error", "error")[0].__cause__, redis.ConnectionError)
    # and the local breaker still protects the dependency
    trip(breaker, dep)
    dep.failing = False
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)


def test_a_breaker_seen_open_keeps_rejecting_after_the_server_dies(
    redis_factory: Callable[[], RedisServer],
    breaker_at: Callable[[str], CircuitBreaker],
    clock: FakeClock,
    dep: Dependency,
) -> None:
    # GIVEN the fleet's breaker is open, then Redis crashes
    server = redis_factory()
    breaker = breaker_at(server.url)
    trip(breaker, dep)
    dep.failing = False
    server.kill()
    clock.advance(CONFIG.cache_ttl)

    # WHEN a call comes before the open window ends THEN it is rejected without running
    result = outcome(lambda: breaker.call(dep))
    assert isinstance(result, CircuitOpenError)
    assert dep.calls == CONFIG.failure_threshold

    # and once the window ends, the local breaker lets a probe through
    clock.advance(CONFIG.recovery_timeout)
    assert breaker.call(dep) == "ok"
    assert breaker.state is State.CLOSED


def test_the_breaker_recovers_when_the_server_is_back(
    redis_factory: Callable[[], RedisServer],
    breaker_at: Callable[[str], CircuitBreaker],
    clock: FakeClock,
    dep: Dependency,
    events: RecordingListener,
) -> None:
    server = redis_factory()
    breaker = breaker_at(server.url)
    breaker.call(dep)
    server.stop()
    clock.advance(CONFIG.cache_ttl)
    breaker.call(dep)
    assert breaker.degraded

    server.restart()  # same port, no data
    clock.advance(CONFIG.store_backoff_seconds)

    assert breaker.call(dep) == "ok"
    assert not breaker.degraded
    assert events.count("on_recovered") == 1


# -- restarted with its data lost ----------------------------------------------------------


def test_a_restart_that_loses_the_data_reads_closed_and_reloads_scripts(
    redis_factory: Callable[[], RedisServer],
    breaker_at: Callable[[str], CircuitBreaker],
    clock: FakeClock,
    dep: Dependency,
) -> None:
    # GIVEN an open breaker, and Redis restarted in between: data and script cache are gone
    server = redis_factory()
    breaker = breaker_at(server.url)
    trip(breaker, dep)
    dep.failing = False
    server.restart()
    raw = redis.Redis.from_url(server.url)
    assert raw.dbsize() == 0
    scripts = breaker.store._scripts.values()
    assert raw.script_exists(*(s.sha for s in scripts)) == [False] * len(scripts)
    clock.advance(CONFIG.cache_ttl)

    # WHEN the breaker is used again
    state = breaker.state
    result = breaker.call(dep)

    # THEN it reads closed and runs the call, on the shared store (the pooled connection the
    # restart broke is replaced, NOSCRIPT is answered by loading the script)
    assert state is State.CLOSED
    assert result == "ok"
    assert not breaker.degraded
    assert raw.script_exists(breaker.store._scripts["load"].sha) == [True]
    raw.close()


def test_a_probe_whose_lease_was_lost_in_a_restart_settles_as_stale(
    redis_factory: Callable[[], RedisServer],
    breaker_at: Callable[[str], CircuitBreaker],
    clock: FakeClock,
    dep: Dependency,
) -> None:
    # GIVEN a probe admitted just before Redis restarted empty
    server = redis_factory()
    breaker = breaker_at(server.url)
    trip(breaker, dep)
    dep.failing = False
    clock.advance(CONFIG.recovery_timeout)
    admission = breaker.check()
    assert admission.token is not None
    server.restart()

    # WHEN the probe reports
    result = breaker.record(False, admission.token)

    # THEN nothing is written (no lease any more) and the breaker reads closed
    assert not result.applied
    assert result.state is State.CLOSED
    assert not breaker.degraded


# -- hung: accepts, never answers ----------------------------------------------------------


def test_a_server_that_never_answers_costs_one_timeout_then_nothing(
    blackhole: BlackholeServer,
    breaker_at: Callable[[str], CircuitBreaker],
    clock: FakeClock,
    dep: Dependency,
    events: RecordingListener,
) -> None:
    breaker = breaker_at(blackhole.redis_url)

    # WHEN the first call meets the hung store
    first = breaker.call(dep)
    store_calls = events.count("on_store_call_start")
    # and more calls come during the store back-off
    rest = [breaker.call(dep) for _ in range(50)]

    # THEN the first is cut short (the server still holds its answer), no exception reaches
    # the caller, and the store is not asked again until the back-off ends
    assert first == "ok"
    errors = events.values("on_store_error", "error")
    assert cut_short(errors[0]), repr(errors[0])
    assert rest == ["ok"] * 50
    assert store_calls == 1
    assert events.count("on_store_call_start") == store_calls
    assert events.count("on_store_error") == 1

    # WHEN the back-off ends THEN the store is tried again, cut the same way
    clock.advance(CONFIG.store_backoff_seconds)
    assert breaker.call(dep) == "ok"
    assert events.count("on_store_call_start") == 2
    errors = events.values("on_store_error", "error")
    assert len(errors) == 2
    assert cut_short(errors[1]), repr(errors[1])


def test_a_paused_server_degrades_then_recovers_when_resumed(
    redis_factory: Callable[[], RedisServer],
    breaker_at: Callable[[str], CircuitBreaker],
    clock: FakeClock,
    dep: Dependency,
    events: RecordingListener,
) -> None:
    # GIVEN an open breaker whose Redis then hangs (SIGSTOP: connections accepted, no replies)
    server = redis_factory()
    breaker = breaker_at(server.url)
    trip(breaker, dep)
    dep.failing = False
    server.pause()
    clock.advance(CONFIG.cache_ttl)

    # WHEN a call comes THEN it is rejected from the last state seen, the store's answer cut
    # short (the paused server holds it)
    result = outcome(lambda: breaker.call(dep))
    assert isinstance(result, CircuitOpenError)
    error = events.values("on_store_error", "error")[0]
    assert cut_short(error), repr(error)

    # WHEN Redis resumes and the back-off ends THEN the fleet's record is in charge again
    server.resume()
    clock.advance(CONFIG.store_backoff_seconds)
    assert breaker.state is State.OPEN
    assert not breaker.degraded
    assert events.count("on_recovered") == 1


# -- the deadline: a passed client with no timeouts, a reply that trickles ----------------------


def test_a_passed_client_with_no_socket_timeouts_costs_one_deadline_per_backoff(
    blackhole: BlackholeServer, clock: FakeClock, dep: Dependency
) -> None:
    # GIVEN the user's own redis client with no socket timeouts, on a server that accepts
    # connections and never answers
    client = redis.Redis.from_url(blackhole.redis_url)
    calls = RecordingListener()
    store = RedisStore(client=client, use_server_time=False)
    breaker = CircuitBreaker(
        "payment-api", store=store, config=CONFIG, clock=clock, listeners=[calls]
    )

    # WHEN the first call meets it (the client alone would wait forever)
    first = breaker.call(dep)
    # and calls keep coming until just before the back-off ends
    rest = [breaker.call(dep) for _ in range(50)]
    clock.advance(CONFIG.store_backoff_seconds - 0.001)
    rest.append(breaker.call(dep))

    # THEN the first was cut by the breaker's deadline (nothing else could end it), the rest
    # are answered from local state, and the store saw one attempt in the back-off
    assert first == "ok"
    assert isinstance(calls.values("on_store_error", "error")[0], StoreDeadlineError)
    assert rest == ["ok"] * 51
    assert calls.count("on_store_call_start") == 1

    # WHEN the back-off ends THEN one more attempt, cut the same way
    clock.advance(0.001)
    assert breaker.call(dep) == "ok"
    assert calls.count("on_store_call_start") == 2
    assert isinstance(calls.values("on_store_error", "error")[1], StoreDeadlineError)


def test_a_passed_client_with_no_socket_timeouts_gets_one_log_line(
    blackhole: BlackholeServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(blackhole.redis_url)

    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        RedisStore(client=client)

    (line,) = [r.getMessage() for r in caplog.records]
    assert "socket_timeout=None" in line
    assert "store_deadline_seconds bounds each store operation" in line


def test_a_reply_trickling_in_from_redis_is_cut_at_the_deadline(
    redis_factory: Callable[[], RedisServer],
    clock: FakeClock,
    dep: Dependency,
    events: RecordingListener,
) -> None:
    # GIVEN redis-server behind a proxy that sends each reply one byte per 100 ms: every
    # socket read gets a byte well inside the store's 0.2 s socket timeout
    server = redis_factory()
    with TrickleProxy(("127.0.0.1", server.port)) as proxy:
        store = RedisStore(url=proxy.redis_url, use_server_time=False)
        breaker = CircuitBreaker(
            "payment-api", store=store, config=CONFIG, clock=clock, listeners=[events]
        )

        # WHEN a call needs the store
        result = breaker.call(dep)
        store.close()

    # THEN the store operation ends at the deadline, as a store error, and the call runs
    assert result == "ok"
    assert isinstance(events.values("on_store_error", "error")[0], StoreDeadlineError)
    assert breaker.stats.store_errors == 1
    assert breaker.degraded
