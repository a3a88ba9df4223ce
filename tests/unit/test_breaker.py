"""CircuitBreaker behaviour on MemoryStore with a hand-moved clock."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

import pytest

from fleetbreaker import (
    Admission,
    BreakerConfig,
    CircuitBreaker,
    CircuitOpenError,
    ConfigError,
    Decision,
    InvalidTokenError,
    MemoryStore,
    State,
)
from tests.support import Dependency, FakeClock, FlakyStore, quiet_rng, trip

CONFIG = BreakerConfig(failure_threshold=3, recovery_timeout=10, recovery_jitter=0.0)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def dep() -> Dependency:
    return Dependency()


def make(store: Any, clock: FakeClock, config: BreakerConfig = CONFIG, **kw: Any) -> CircuitBreaker:
    kw.setdefault("rng", quiet_rng())  # no census write inside a test that counts requests
    return CircuitBreaker("payment-api", store=store, config=config, clock=clock, **kw)


# -- closed ------------------------------------------------------------------------------------


def test_successful_calls_in_closed_state_write_nothing(store, clock, dep) -> None:
    breaker = make(store, clock)

    results = [breaker.call(dep) for _ in range(100)]

    assert results == ["ok"] * 100
    assert store.stats.writes == 0
    assert store.stats.reads == 1  # one load, then the cache answers for cache_ttl


def test_healthy_steady_state_reads_once_per_cache_ttl(store, clock, dep) -> None:
    breaker = make(store, clock)

    for _ in range(10):
        for _ in range(50):
            breaker.call(dep)
        clock.advance(CONFIG.cache_ttl)

    assert store.stats.reads == 10
    assert store.stats.writes == 0


def test_threads_finding_the_cache_stale_wait_for_one_store_read(store, clock, dep) -> None:
    release = threading.Event()
    entered = threading.Event()

    class SlowStore(MemoryStore):
        """load() blocks, once armed, until the test releases it."""

        armed = False

        def load(self, name: str, now_ms: int) -> Any:
            if self.armed:
                entered.set()
                assert release.wait(10)
            return super().load(name, now_ms)

    slow = SlowStore()
    # A deadline past the test's own waits: the slow read is slow, not failed.
    patient = dataclasses.replace(CONFIG, store_deadline_seconds=30)
    breaker, tripper = make(slow, clock, patient), make(slow, clock, patient)
    breaker.call(dep)  # GIVEN a container whose last read said closed
    trip(tripper, dep)  # AND the fleet tripped since
    clock.advance(CONFIG.cache_ttl)
    reads_before = slow.stats.reads
    slow.armed = True
    outcomes: list[str] = []

    def call() -> None:
        try:
            breaker.call(dep)
            outcomes.append("ran")
        except CircuitOpenError:
            outcomes.append("rejected")

    first = threading.Thread(target=call)
    first.start()
    assert entered.wait(10)

    # WHEN its threads find the cache stale while one of them is reading the store
    others = [threading.Thread(target=call) for _ in range(7)]
    for thread in others:
        thread.start()
    for thread in others:
        thread.join(0.2)
    assert all(thread.is_alive() for thread in others)  # waiting, not acting on "closed"
    release.set()
    for thread in [first, *others]:
        thread.join()

    # THEN one read serves them all, and none of them calls the tripped dependency
    assert slow.stats.reads == reads_before + 1
    assert outcomes == ["rejected"] * 8
    assert dep.calls == 4


def test_a_cold_container_sends_one_read_for_all_its_threads(clock, dep) -> None:
    release = threading.Event()
    entered = threading.Event()

    class SlowStore(MemoryStore):
        def load(self, name: str, now_ms: int) -> Any:
            entered.set()
            assert release.wait(10)
            return super().load(name, now_ms)

    store = SlowStore()
    # A deadline past the test's own waits: the slow read is slow, not failed.
    breaker = make(store, clock, dataclasses.replace(CONFIG, store_deadline_seconds=30))
    first = threading.Thread(target=breaker.call, args=(dep,))
    first.start()
    assert entered.wait(10)
    others = [threading.Thread(target=breaker.call, args=(dep,)) for _ in range(7)]
    for thread in others:
        thread.start()
    for thread in others:
        thread.join(0.2)  # they wait for the first read instead of sending their own

    assert all(thread.is_alive() for thread in others)
    release.set()
    for thread in [first, *others]:
        thread.join()
    assert store.stats.reads == 1
    assert dep.calls == 8


def test_failures_from_two_containers_add_up_to_one_trip(store, clock, dep) -> None:
    first, second = make(store, clock), make(store, clock)
    dep.failing = True

    for breaker in (first, second, first):
        with pytest.raises(ConnectionError):
            breaker.call(dep)

    assert first.state is State.OPEN
    clock.advance(CONFIG.cache_ttl)  # the other container learns it after its cache ages
    assert second.state is State.OPEN


def test_open_breaker_rejects_without_calling_the_dependency(store, clock, dep) -> None:
    breaker = make(store, clock)
    trip(breaker, dep)
    clock.advance(4)

    with pytest.raises(CircuitOpenError) as caught:
        breaker.call(dep)

    assert dep.calls == 3
    assert caught.value.name == "payment-api"
    assert caught.value.state is State.OPEN
    assert caught.value.retry_after == pytest.approx(6.0)


def test_fallback_gets_the_admission_and_the_call_arguments(store, clock, dep) -> None:
    seen: list[Any] = []

    def fallback(circuit: Admission, order: str, *, amount: int) -> str:
        seen.append((circuit, order, amount))
        return "queued"

    breaker = make(store, clock, fallback=fallback)
    trip(breaker, dep)

    assert breaker.call(dep, "order-1", amount=5) == "queued"
    circuit, order, amount = seen[0]
    assert (order, amount) == ("order-1", 5)
    assert circuit.decision is Decision.REJECT
    assert circuit.state is State.OPEN
    assert circuit.retry_after_s == pytest.approx(10.0)


def test_decorator_forms_keep_the_function_and_its_name(store, clock, dep) -> None:
    breaker = make(store, clock)

    @breaker
    def charge(amount: int) -> int:
        return amount * 2

    @breaker(fallback=lambda circuit, amount: -1)
    def refund(amount: int) -> int:
        raise ConnectionError("down")

    assert charge(21) == 42
    assert charge.__name__ == "charge"
    for _ in range(3):
        with pytest.raises(ConnectionError):
            refund(1)
    assert refund(1) == -1
    with pytest.raises(CircuitOpenError):
        charge(1)


# -- classification ---------------------------------------------------------------------------


def test_ignored_exceptions_pass_through_uncounted(store, clock) -> None:
    config = BreakerConfig(failure_threshold=1, ignored_exceptions=(KeyError,))
    breaker = make(store, clock, config)

    def lookup() -> None:
        raise KeyError("not found is not an outage")

    for _ in range(5):
        with pytest.raises(KeyError):
            breaker.call(lookup)

    assert breaker.state is State.CLOSED


def test_only_listed_exception_types_count(store, clock) -> None:
    config = BreakerConfig(failure_threshold=1, failure_exceptions=(TimeoutError,))
    breaker = make(store, clock, config)

    with pytest.raises(ValueError, match="bad input"):
        breaker.call(lambda: (_ for _ in ()).throw(ValueError("bad input")))
    assert breaker.state is State.CLOSED
    with pytest.raises(TimeoutError):
        breaker.call(lambda: (_ for _ in ()).throw(TimeoutError()))
    clock.advance(1)
    assert breaker.state is State.OPEN


def test_predicate_decides_over_types(store, clock) -> None:
    config = BreakerConfig(failure_threshold=1, is_failure=lambda exc: "503" in str(exc))
    breaker = make(store, clock, config)

    with pytest.raises(RuntimeError):
        breaker.call(lambda: (_ for _ in ()).throw(RuntimeError("404")))
    assert breaker.state is State.CLOSED
    with pytest.raises(RuntimeError):
        breaker.call(lambda: (_ for _ in ()).throw(RuntimeError("503")))
    assert breaker.state is State.OPEN


def test_a_failing_result_counts_but_is_still_returned(store, clock) -> None:
    config = BreakerConfig(failure_threshold=2, failure_result=lambda status: status >= 500)
    breaker = make(store, clock, config)

    answers = [breaker.call(lambda: 503), breaker.call(lambda: 200), breaker.call(lambda: 502)]

    assert answers == [503, 200, 502]
    assert breaker.state is State.OPEN


# -- recovery -----------------------------------------------------------------------------------


def test_after_the_open_window_one_probe_runs_and_closes(store, clock, dep) -> None:
    breaker = make(store, clock)
    trip(breaker, dep)
    clock.advance(10)
    dep.failing = False

    assert breaker.call(dep) == "ok"

    assert breaker.state is State.CLOSED
    assert dep.calls == 4


def test_probe_failure_reopens_for_twice_as_long(store, clock, dep) -> None:
    breaker = make(store, clock)
    trip(breaker, dep)
    clock.advance(10)

    with pytest.raises(ConnectionError):
        breaker.call(dep)
    clock.advance(19.9)
    with pytest.raises(CircuitOpenError) as caught:
        breaker.call(dep)
    clock.advance(0.1)
    dep.failing = False
    breaker.call(dep)

    assert caught.value.retry_after == pytest.approx(0.1)
    assert breaker.state is State.CLOSED


def test_racing_threads_get_exactly_the_probe_budget(store, clock) -> None:
    config = BreakerConfig(failure_threshold=1, recovery_timeout=1, half_open_max_probes=2)
    breakers = [make(store, clock, config) for _ in range(4)]
    with pytest.raises(ConnectionError):
        breakers[0].call(lambda: (_ for _ in ()).throw(ConnectionError()))
    clock.advance(1)
    decisions: list[Decision] = []
    lock = threading.Lock()
    start = threading.Barrier(32)

    def contender(breaker: CircuitBreaker) -> None:
        start.wait()
        admission = breaker.check()
        with lock:
            decisions.append(admission.decision)

    threads = [threading.Thread(target=contender, args=(breakers[i % 4],)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert decisions.count(Decision.PROBE) == 2
    assert decisions.count(Decision.REJECT) == 30


def test_a_prober_whose_lease_expired_cannot_undo_the_next_probe(store, clock, dep) -> None:
    config = BreakerConfig(failure_threshold=1, recovery_timeout=1, probe_lease_seconds=5)
    slow, fast = make(store, clock, config), make(store, clock, config)
    trip(slow, dep, times=1)
    clock.advance(1)
    late = slow.check()
    clock.advance(5)
    fresh = fast.check()

    closed = fast.record(True, fresh.token)
    stale = slow.record(False, late.token)

    assert (late.decision, fresh.decision) == (Decision.PROBE, Decision.PROBE)
    assert closed.applied
    assert closed.state is State.CLOSED
    assert not stale.applied
    assert "stale" in stale.detail
    assert store.load("payment-api", clock()).state is State.CLOSED


def test_record_rejects_a_token_it_did_not_issue(store, clock) -> None:
    with pytest.raises(InvalidTokenError, match="not a probe token"):
        make(store, clock).record(True, "garbage")


# -- operator overrides ----------------------------------------------------------------------


def test_force_open_rejects_everything_until_reset(store, clock, dep) -> None:
    breaker = make(store, clock)

    breaker.force_open()
    clock.advance(10**6)
    with pytest.raises(CircuitOpenError) as caught:
        breaker.call(dep)
    breaker.reset()

    assert caught.value.state is State.FORCED_OPEN
    assert breaker.call(dep) == "ok"


def test_disabled_runs_everything_and_records_nothing(store, clock, dep) -> None:
    breaker = make(store, clock)
    breaker.disable()
    writes = store.stats.writes
    dep.failing = True

    for _ in range(10):
        with pytest.raises(ConnectionError):
            breaker.call(dep)

    assert dep.calls == 10
    assert breaker.state is State.DISABLED
    assert store.stats.writes == writes


# -- store trouble ------------------------------------------------------------------------------


def test_store_errors_never_reach_the_call_and_degrade_to_local(clock, dep, caplog) -> None:
    store = FlakyStore()
    store.down = True
    breaker = make(store, clock)

    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        assert breaker.call(dep) == "ok"
        trip(breaker, dep)
        with pytest.raises(CircuitOpenError):
            breaker.call(dep)

    assert breaker.degraded
    assert breaker.stats.degradations == 1
    assert "running on local state" in caplog.text


def test_store_is_left_alone_during_the_backoff(clock, dep) -> None:
    store = FlakyStore()
    store.down = True
    breaker = make(store, clock)
    breaker.call(dep)
    calls = store.calls

    for _ in range(20):
        breaker.call(dep)
        clock.advance(0.2)  # 4 s in all: inside the 5 s back-off
    store.down = False
    clock.advance(1.1)
    breaker.call(dep)

    assert store.calls == calls + 1
    assert not breaker.degraded


def test_last_seen_open_keeps_rejecting_while_the_store_is_down(clock, dep) -> None:
    store = FlakyStore()
    breaker = make(store, clock)
    trip(breaker, dep)
    store.down = True
    clock.advance(2)  # cache is stale: the next read fails and degrades

    with pytest.raises(CircuitOpenError):
        breaker.call(dep)
    clock.advance(8)  # open window over: the local breaker probes
    dep.failing = False
    assert breaker.call(dep) == "ok"
    assert breaker.degraded


def test_operator_actions_fail_loudly_when_the_store_is_down(clock) -> None:
    store = FlakyStore()
    store.down = True

    with pytest.raises(Exception, match="store is down"):
        make(store, clock).force_open()


# -- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 1025, "1025 bytes"),
        ("a\nb", "control characters"),
        (42, "must be a string"),
    ],
)
def test_bad_names_fail_at_construction(name: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CircuitBreaker(name, store=MemoryStore())


def test_a_non_callable_fallback_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match="fallback must be callable"):
        CircuitBreaker("x", store=MemoryStore(), fallback="nope")  # type: ignore[arg-type]


def test_no_store_and_no_table_variable_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.delenv("CIRCUIT_BREAKER_TABLE", raising=False)

    with pytest.raises(ConfigError, match="CIRCUIT_BREAKER_TABLE"):
        CircuitBreaker("x")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("failure_threshold", 0, "failure_threshold must be a positive integer"),
        ("failure_threshold", True, "failure_threshold must be a positive integer"),
        ("half_open_max_probes", 0, "half_open_max_probes"),
        ("half_open_max_probes", 17, "at most 16"),
        ("half_open_successes", -1, "half_open_successes"),
        ("window_seconds", 0, "window_seconds must be a positive number"),
        ("recovery_timeout", -5, "recovery_timeout must be a positive number"),
        ("recovery_timeout", float("nan"), "recovery_timeout"),
        ("probe_lease_seconds", 0, "probe_lease_seconds"),
        ("cache_ttl", -0.5, "cache_ttl must be a non-negative number"),
        ("recovery_backoff", 0.5, "recovery_backoff must be at least 1"),
        ("recovery_jitter", 1.5, "recovery_jitter must be between 0 and 1"),
        ("max_recovery_timeout", 1, "max_recovery_timeout must be at least recovery_timeout"),
        ("record_ttl_seconds", 60, "record_ttl_seconds must outlast"),
        ("failure_exceptions", (ValueError, "x"), "tuple of exception classes"),
        ("is_failure", 3, "is_failure must be callable"),
        # Past what the clock, the thread APIs and the record's 14 digits can hold.
        ("window_seconds", 1e308, "window_seconds must be a positive number of seconds up to"),
        ("window_seconds", 10**400, "window_seconds .* an integer of 401 digits"),
        ("recovery_timeout", 1e12, "recovery_timeout must be a positive number of seconds"),
        ("max_recovery_timeout", 1e308, "max_recovery_timeout must be a positive number"),
        ("probe_lease_seconds", 1e15, "probe_lease_seconds must be a positive number"),
        ("store_deadline_seconds", 1e10, "store_deadline_seconds .* up to 900"),
        ("store_backoff_seconds", 1e300, "store_backoff_seconds must be a non-negative"),
        ("cache_ttl", 1e12, "cache_ttl must be a non-negative number"),
        ("recovery_ramp_seconds", 1e12, "recovery_ramp_seconds must be a non-negative"),
        ("record_ttl_seconds", 10**15, "record_ttl_seconds must be a positive integer up to"),
        ("slow_call_duration", 1e11, "slow_call_duration must be a positive number"),
        ("report_interval", 10**400, "report_interval must be a positive number"),
        ("recovery_backoff", 1e308, "recovery_backoff must be at least 1 .* at most 100"),
        ("failure_threshold", 10**400, "failure_threshold must be a positive integer up to"),
        ("minimum_calls", 10**15, "minimum_calls must be a positive integer up to"),
        ("half_open_successes", 10**10, "half_open_successes must be a positive integer up to"),
        ("failure_rate_threshold", 10**400, "failure_rate_threshold must be a fraction"),
    ],
)
def test_invalid_config_fails_at_construction(field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BreakerConfig(**{field: value})


def test_config_is_frozen() -> None:
    with pytest.raises(AttributeError):
        CONFIG.failure_threshold = 9  # type: ignore[misc]


def test_fractional_recovery_timeouts_are_honoured(store, clock, dep) -> None:
    config = BreakerConfig(failure_threshold=1, recovery_timeout=0.25)
    breaker = make(store, clock, config)
    trip(breaker, dep, times=1)

    clock.advance(0.249)
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)
    clock.advance(0.001)
    dep.failing = False
    assert breaker.call(dep) == "ok"


def test_config_from_environment_variables() -> None:
    env = {
        "BREAKER_FAILURE_THRESHOLD": "3",
        "BREAKER_RECOVERY_TIMEOUT": "2.5",
        "BREAKER_CACHE_TTL": "",
    }

    config = BreakerConfig.from_env(env, failure_result=bool)

    assert config.failure_threshold == 3
    assert config.recovery_timeout == 2.5
    assert config.cache_ttl == 1.0
    assert config.failure_result is bool


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BREAKER_FAILURE_THRESHOLD": "five"}, "BREAKER_FAILURE_THRESHOLD must be a whole number"),
        ({"BREAKER_FAILURE_THRESHOLD": "0"}, "BREAKER_FAILURE_THRESHOLD: failure_threshold must"),
        ({"BREAKER_CACHE_TTL": "-1"}, "BREAKER_CACHE_TTL: cache_ttl must be a non-negative"),
    ],
)
def test_config_from_bad_environment_names_the_variable(env: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BreakerConfig.from_env(env)


def test_a_name_with_a_lone_surrogate_is_a_config_error(store) -> None:
    with pytest.raises(ConfigError, match="valid Unicode"):
        CircuitBreaker("payment-\udcff", store=store)


def test_a_token_that_is_not_text_is_refused_before_the_store(store, clock) -> None:
    breaker = make(store, clock)

    with pytest.raises(InvalidTokenError):
        breaker.record(True, "0-\udcff")
    assert store.stats.requests == 0
