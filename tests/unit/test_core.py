"""The call path's core: what an admission plans, what an ending returns, and the Mode
that live tuning swaps whole (count <-> rate, shadow <-> enforce) without losing a call."""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, MemoryStore, State
from fleetbreaker.calls import COUNTED, PROBING, UNCOUNTED
from fleetbreaker.core import CallCore, Mode, build_mode
from fleetbreaker.policy import Policy
from fleetbreaker.record import Decision, Outcome, Record
from fleetbreaker.results import Admission
from fleetbreaker.tuning import encode_tuned
from tests.support import Dependency, FakeClock, breaker_on

CONFIG = BreakerConfig(failure_threshold=2, recovery_timeout=10, recovery_jitter=0.0)
RATE = BreakerConfig(failure_rate_threshold=0.5, recovery_jitter=0.0)


def core_of(breaker: CircuitBreaker) -> CallCore:
    return breaker._core


# -- the plan of a call ----------------------------------------------------------------------


def test_a_closed_admission_plans_a_counted_call(clock: FakeClock) -> None:
    core = core_of(breaker_on(MemoryStore(), clock, CONFIG, listeners=[]))
    call = core.plan(core.admit(clock()), clock())
    assert call is not None
    assert call.kind is COUNTED


def test_a_rejection_plans_no_call(clock: FakeClock) -> None:
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.force_open()
    core = core_of(breaker)
    assert core.plan(core.admit(clock()), clock()) is None


def test_a_probe_admission_plans_a_probe_with_its_token(clock: FakeClock) -> None:
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.record(False)
    breaker.record(False)
    clock.advance(10)
    core = core_of(breaker)
    admission = core.admit(clock())
    call = core.plan(admission, clock())
    assert call is not None
    assert (call.kind, call.token) == (PROBING, admission.token)


def test_a_disabled_breaker_plans_a_call_counted_nowhere(clock: FakeClock) -> None:
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.disable()
    core = core_of(breaker)
    call = core.plan(core.admit(clock()), clock())
    assert call is not None
    assert call.kind is UNCOUNTED


# -- how a call ended: the request it needs ----------------------------------------------------


def test_a_success_needs_no_store_request_under_the_count_policy(clock: FakeClock) -> None:
    core = core_of(breaker_on(MemoryStore(), clock, CONFIG, listeners=[]))
    call = core.closed(clock())
    assert core.returned(call, "ok") is None


def test_a_failure_is_a_request_that_counts_only_once_sent(clock: FakeClock) -> None:
    # GIVEN a closed breaker that opens on two failures, one already counted
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.record(False)
    core = core_of(breaker)
    # WHEN a call's failure is judged
    request = core.raised(core.closed(clock()), ConnectionError("down"))
    # THEN nothing was written yet; the request writes it, and the breaker opens
    assert request is not None
    assert breaker.snapshot().state is State.CLOSED
    request()
    assert breaker.snapshot().state is State.OPEN


def test_an_ignored_exception_needs_no_request(clock: FakeClock) -> None:
    config = BreakerConfig(failure_threshold=1, ignored_exceptions=(KeyError,))
    core = core_of(breaker_on(MemoryStore(), clock, config, listeners=[]))
    assert core.raised(core.closed(clock()), KeyError("absent")) is None


def test_an_interrupted_probe_is_a_request_that_releases_its_lease(clock: FakeClock) -> None:
    # GIVEN a breaker whose only probe slot is taken by a call
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.record(False)
    breaker.record(False)
    clock.advance(10)
    core = core_of(breaker)
    call = core.plan(core.admit(clock()), clock())
    assert call is not None
    assert breaker.check().decision is Decision.REJECT  # the slot is held
    # WHEN the call is interrupted, and its request sent
    request = core.interrupted(call)
    assert request is not None
    result = request()
    # THEN the lease was given back, nothing counted, and the next check probes
    assert result.applied is True
    assert breaker.check().decision is Decision.PROBE


def test_an_interrupted_counted_call_counts_nothing(clock: FakeClock) -> None:
    breaker = breaker_on(MemoryStore(), clock, RATE, listeners=[], slow_call_duration=1.0)
    core = core_of(breaker)
    call = core.closed(clock())
    assert core.interrupted(call) is None
    breaker.flush()
    assert breaker.snapshot().calls == 0


# -- the Mode --------------------------------------------------------------------------------


def test_build_mode_hands_over_a_strategy_of_the_same_kind() -> None:
    # GIVEN a count-policy mode, WHEN one with other numbers is built from it
    made: list[Any] = []

    def make_counting(config: BreakerConfig, policy: Policy) -> Any:
        made.append(config)
        return FakeCounting("rate" if config.reporting else "count")

    def make_shadow(config: BreakerConfig) -> Any:
        return object()

    first = build_mode(
        CONFIG, Policy.from_config(CONFIG), make_counting=make_counting, make_shadow=make_shadow
    )
    tuned = BreakerConfig(failure_threshold=7, mode="shadow")
    second = build_mode(
        tuned,
        Policy.from_config(tuned),
        make_counting=make_counting,
        make_shadow=make_shadow,
        previous=first,
    )
    # THEN the strategy was kept (and adopted the numbers), the shadow stage built
    assert second.counting is first.counting
    assert first.counting.adopted == [tuned]
    assert len(made) == 1
    assert (first.name, second.name) == ("enforce", "shadow")


class FakeCounting:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.adopted: list[BreakerConfig] = []

    def adopt(self, config: BreakerConfig, policy: Policy) -> None:
        self.adopted.append(config)


def test_a_mode_is_immutable(clock: FakeClock) -> None:
    mode = core_of(breaker_on(MemoryStore(), clock, CONFIG, listeners=[])).mode
    assert isinstance(mode, Mode)
    with pytest.raises(AttributeError):
        mode.shadow = None  # type: ignore[misc]


def tune(store: MemoryStore, clock: FakeClock, values: dict[str, Any]) -> None:
    text = encode_tuned(values) if values else ""
    store.tune("payment-api", Policy.from_config(CONFIG), clock(), text, None)
    clock.advance(1.0)  # past cache_ttl: the next call's refresh brings it


def calls_in_window(store: MemoryStore, clock: FakeClock) -> int:
    reader = breaker_on(store, clock, RATE, listeners=[])
    return reader.snapshot().calls


def test_tuning_count_to_rate_and_back_loses_no_call(clock: FakeClock) -> None:
    # GIVEN a breaker deployed with the count policy
    store, dep = MemoryStore(), Dependency()
    breaker = breaker_on(store, clock, CONFIG, listeners=[])
    breaker.call(dep)
    # WHEN an operator tunes it to the rate policy, it makes 5 calls, and the tuning is cleared
    tune(store, clock, {"failure_rate_threshold": 0.5})
    for _ in range(5):
        breaker.call(dep)
    assert core_of(breaker).mode.counting.kind == "rate"
    tune(store, clock, {})
    breaker.call(dep)
    # THEN it is back on the count policy, and the 5 calls it tallied under the rate policy
    # were reported before its tally was replaced (none lost)
    assert core_of(breaker).mode.counting.kind == "count"
    assert calls_in_window(store, clock) == 5


def test_tuning_shadow_and_back_keeps_the_tally(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with calls tallied
    store, dep = MemoryStore(), Dependency()
    breaker = breaker_on(store, clock, RATE, listeners=[])
    for _ in range(5):
        breaker.call(dep)
    strategy = core_of(breaker).mode.counting
    # WHEN it is tuned to shadow and back to enforce, calling in between
    tune(store, clock, {"mode": "shadow"})
    breaker.call(dep)
    assert breaker.mode == "shadow"
    tune(store, clock, {"mode": "enforce"})
    breaker.call(dep)
    assert breaker.mode == "enforce"
    breaker.flush()
    # THEN the same strategy counted every call
    assert core_of(breaker).mode.counting is strategy
    assert calls_in_window(store, clock) == 7


def test_an_admission_needing_the_store_is_undecided_from_the_cache(clock: FakeClock) -> None:
    core = core_of(breaker_on(MemoryStore(), clock, CONFIG, listeners=[]))
    assert core.admit_cached(clock()) is None  # nothing cached yet
    assert isinstance(core.admit(clock()), Admission)
    assert core.admit_cached(clock()) is core.allow_closed


def test_a_swap_that_replaces_the_rate_strategy_reports_its_tally_first(
    clock: FakeClock,
) -> None:
    # GIVEN a rate-policy breaker with 5 calls tallied and not reported (its cache is fresh:
    # no refresh has sent them)
    store, dep = MemoryStore(), Dependency()
    breaker = breaker_on(store, clock, RATE, listeners=[])
    for _ in range(5):
        breaker.call(dep)
    # WHEN a store answer brings a tuning to the count policy (adopted mid-interval)
    core_of(breaker).adopt(CONFIG)
    # THEN the rate strategy reported its 5 calls before it was replaced
    assert core_of(breaker).mode.counting.kind == "count"
    assert calls_in_window(store, clock) == 5


def test_a_timed_call_ends_cleanly_after_slow_calls_were_tuned_off(clock: FakeClock) -> None:
    # GIVEN a rate-policy call timed for slow calls, running
    store = MemoryStore()
    timed = BreakerConfig(failure_rate_threshold=0.5, slow_call_duration=1.0)
    breaker = breaker_on(store, clock, timed, listeners=[])
    core = core_of(breaker)
    call = core.closed(clock())
    # WHEN slow calls are tuned off before it ends, 2 s later
    core.adopt(RATE)
    clock.advance(2)
    # THEN it ends as a good call (no slow call to count, nothing raised)
    assert core.returned(call, "ok") is None
    breaker.flush()
    snapshot = breaker_on(store, clock, RATE, listeners=[]).snapshot()
    assert (snapshot.calls, snapshot.slow_calls) == (1, 0)


# -- the store's answers: one place ----------------------------------------------------------


def test_a_shared_answer_handed_to_the_core_is_cached(clock: FakeClock) -> None:
    # GIVEN a breaker whose view holds nothing yet
    core = core_of(breaker_on(MemoryStore(), clock, CONFIG, listeners=[]))
    opened = Record(gen=3, state=State.OPEN, opened_at=clock(), open_until=clock() + 10_000)
    # WHEN a shared store's answer is handed to the core
    core.answered(Outcome(opened), clock())
    # THEN the view serves it from the cache
    assert core.view.cached(clock()) == (True, opened)


def test_a_local_twins_answer_is_never_cached_as_the_fleets(clock: FakeClock) -> None:
    # GIVEN a breaker that has cached the fleet's closed record
    core = core_of(breaker_on(MemoryStore(), clock, CONFIG, listeners=[]))
    core.answered(Outcome(None), clock())
    opened = Record(gen=3, state=State.OPEN, opened_at=clock(), open_until=clock() + 10_000)
    # WHEN the local twin's answer (degraded) is handed to the core
    core.answered(Outcome(opened, local=True), clock())
    # THEN the cache still holds the fleet's record
    assert core.view.cached(clock()) == (True, None)
