"""The call path's core: what an admission plans, what an ending returns, and the Mode
that live tuning swaps whole (count <-> rate, shadow <-> enforce) without losing a call."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, MemoryStore, State
from fleetbreaker.calls import COUNTED, PROBING, UNCOUNTED
from fleetbreaker.core import CallCore, Mode, build_mode
from fleetbreaker.policy import Policy
from fleetbreaker.record import Decision, Outcome, Record
from fleetbreaker.results import Admission
from fleetbreaker.rules import sliding_window
from fleetbreaker.tuning import encode_tuned
from fleetbreaker.window import WindowCounts
from tests.support import (
    Dependency,
    FakeClock,
    RecordingListener,
    breaker_on,
    objects_reachable_from,
)

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


def test_a_closed_call_that_succeeds_asks_the_count_policy_nothing(clock: FakeClock) -> None:
    # GIVEN a count-policy breaker whose strategy refuses to be asked for a ticket, a report
    # due, or a call's end (it counts failures only: it has none of them to give)
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    counting = core_of(breaker).mode.counting
    assert counting.failures_only

    def not_asked(*_: Any) -> None:
        raise AssertionError("the count policy was asked about a call that succeeded")

    for step in ("due", "start", "end"):
        setattr(counting, step, not_asked)
    # WHEN calls succeed, closed and healthy (the drivers' fast path) and not
    assert breaker.call(lambda: "ok") == "ok"
    clock.advance(5)
    assert breaker.call(lambda: "ok") == "ok"
    # THEN none was asked: the core knows a success of the count policy counts nowhere


def test_a_failure_is_a_request_that_counts_only_once_sent(clock: FakeClock) -> None:
    # GIVEN a closed breaker that opens on two failures, one already counted
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.record(False)
    core = core_of(breaker)
    # WHEN a call's failure is judged
    request = core.raised(core.closed(clock()), ConnectionError("down"))
    # THEN nothing was written yet; the request, handed back to the core, writes it, and
    # the breaker opens (the write's answer, returned to the core, is cached at once)
    assert request is not None
    assert breaker.snapshot().state is State.CLOSED
    core.send(request)
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
    result = core.send(request)
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


# -- what the mutation run found unasserted (issue 43) ------------------------------------------


def opened(clock: FakeClock, **settings: Any) -> CircuitBreaker:
    """A breaker opened by CONFIG's two failures, at ``clock``'s time (probe due in 10 s)."""
    breaker = breaker_on(MemoryStore(), clock, CONFIG, **settings)
    breaker.record(False)
    breaker.record(False)
    return breaker


def test_a_retune_that_stays_in_shadow_mode_keeps_its_shadow_stage(clock: FakeClock) -> None:
    # GIVEN a breaker in shadow mode
    core = core_of(breaker_on(MemoryStore(), clock, CONFIG, listeners=[], mode="shadow"))
    stage = core.mode.shadow
    assert stage is not None
    # WHEN it is tuned to other numbers, still in shadow mode
    core.adopt(dataclasses.replace(CONFIG, failure_threshold=7, mode="shadow"))
    # THEN the new mode holds the same shadow stage
    assert core.mode.policy.failure_threshold == 7
    assert core.mode.shadow is stage


def test_an_admission_without_a_time_is_decided_at_the_clocks(clock: FakeClock) -> None:
    # GIVEN an open breaker whose recovery timeout has just passed on the clock
    breaker = opened(clock, listeners=[])
    clock.advance(10)
    # WHEN the core decides a call without being given a time
    admission = core_of(breaker).admit()
    # THEN it was decided at the clock's time: the probe is due
    assert admission.decision is Decision.PROBE


def test_an_admissions_probe_lease_lasts_what_it_was_given(clock: FakeClock) -> None:
    # GIVEN an open breaker due to probe, and a call that says it takes at most 2 s
    breaker = opened(clock, listeners=[])
    clock.advance(10)
    claimed = core_of(breaker).admit(clock(), lease_ms=2_000)
    assert claimed.decision is Decision.PROBE
    clock.advance(1)
    assert breaker.check().decision is Decision.REJECT  # the slot is held meanwhile
    # WHEN the 2 s pass with no verdict (the whole lease is probe_lease_seconds, 10 s)
    clock.advance(1.5)
    # THEN the lease has ended: the next check probes
    assert breaker.check().decision is Decision.PROBE


def test_a_quiet_admission_is_told_to_the_decision_hooks_once_announced(
    clock: FakeClock,
) -> None:
    # GIVEN a breaker whose listener hears decisions
    listener = RecordingListener()
    core = core_of(breaker_on(MemoryStore(), clock, CONFIG, listeners=[listener]))
    # WHEN a call is decided quietly (on a worker thread), THEN no hook heard it
    admission = core.admit_quietly()
    assert listener.count("on_decision") == 0
    # WHEN it is announced, THEN the hooks hear it once
    core.announce(admission)
    assert listener.values("on_decision", "decision") == [Decision.ALLOW]


def test_a_retune_within_the_rate_policy_sends_no_report_early(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with 5 calls tallied and not reported
    store, dep = MemoryStore(), Dependency()
    breaker = breaker_on(store, clock, RATE, listeners=[])
    for _ in range(5):
        breaker.call(dep)
    # WHEN it is tuned to another rate (the strategy is handed over, not replaced)
    core_of(breaker).adopt(dataclasses.replace(RATE, failure_rate_threshold=0.7))
    # THEN nothing was reported: the tally waits for its interval, and goes then
    assert calls_in_window(store, clock) == 0
    breaker.flush()
    assert calls_in_window(store, clock) == 5


def test_a_store_with_no_record_is_followed_as_untuned_without_a_warning(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a breaker on a store that holds no record of it
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    # WHEN it reads the store (nothing there)
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        assert breaker.state is State.CLOSED
    # THEN it follows the deployed settings, and logs nothing about a tuning
    assert core_of(breaker).mode.config == CONFIG
    assert [r.getMessage() for r in caplog.records] == []


def test_a_timed_call_that_raised_no_longer_runs(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker timing calls for slowness (1 s)
    breaker = breaker_on(MemoryStore(), clock, RATE, listeners=[], slow_call_duration=1.0)
    core = core_of(breaker)
    # WHEN a timed call raises, and 2 s pass
    core.raised(core.closed(clock()), ConnectionError("down"))
    clock.advance(2)
    # THEN the watcher finds no hung call: the call ended
    assert breaker.report_hung_calls() == 0


def test_an_interrupted_timed_call_no_longer_runs(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker timing calls for slowness (1 s)
    breaker = breaker_on(MemoryStore(), clock, RATE, listeners=[], slow_call_duration=1.0)
    core = core_of(breaker)
    # WHEN a timed call is interrupted, and 2 s pass
    assert core.interrupted(core.closed(clock())) is None
    clock.advance(2)
    # THEN the watcher finds no hung call: it counts nowhere, not even as slow
    assert breaker.report_hung_calls() == 0


def test_a_rejection_with_a_fallback_tells_the_listeners_who_why_and_when(
    clock: FakeClock,
) -> None:
    # GIVEN an open breaker, 10 s from its probe, with a listener
    listener = RecordingListener()
    breaker = opened(clock, listeners=[listener])
    core = core_of(breaker)
    admission = core.admit(clock())
    # WHEN its rejection is served by a fallback
    core.reject(admission, fallback=lambda *_: "cached")
    # THEN the listeners heard the rejection and the fallback, each with the breaker's name
    # and state (and the rejection with when to come back)
    assert listener.args("on_rejected") == [("payment-api", State.OPEN, 10.0)]
    assert listener.args("on_fallback") == [("payment-api", State.OPEN)]


def test_a_refusal_tells_the_listeners_who_why_and_when(clock: FakeClock) -> None:
    # GIVEN an open breaker, 10 s from its probe, with a listener
    listener = RecordingListener()
    core = core_of(opened(clock, listeners=[listener]))
    admission = core.admit(clock())
    # WHEN a call is refused (no fallback)
    with pytest.raises(CircuitOpenError):
        core.refuse(admission)
    # THEN the listeners heard the rejection with the breaker's name, state and retry time
    assert listener.args("on_rejected") == [("payment-api", State.OPEN, 10.0)]
    assert listener.count("on_fallback") == 0


def test_a_probe_whose_result_the_config_calls_a_failure_reopens(clock: FakeClock) -> None:
    # GIVEN an open breaker due to probe, whose config calls a None result a failure
    breaker = opened(clock, listeners=[], failure_result=lambda result: result is None)
    clock.advance(10)
    core = core_of(breaker)
    call = core.plan(core.admit(clock()), clock())
    assert call is not None
    assert call.kind is PROBING
    # WHEN the probe returns None, and its settle is sent
    request = core.returned(call, None)
    assert request is not None
    core.send(request)
    # THEN the probe failed: the breaker is open again
    assert breaker.snapshot().state is State.OPEN


def test_a_rate_breaker_counts_into_the_generation_a_refresh_brings(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker that read its record, then an operator's reset elsewhere
    # that starts a new generation of the record
    store, dep = MemoryStore(), Dependency()
    breaker = breaker_on(store, clock, RATE, listeners=[])
    breaker.call(dep)
    breaker.flush()
    operator = breaker_on(store, clock, RATE, listeners=[])
    operator.force_open()
    operator.reset()
    clock.advance(1.0)  # past cache_ttl: the next call's refresh brings the new generation
    # WHEN it makes 3 calls and reports them
    for _ in range(3):
        breaker.call(dep)
    breaker.flush()
    # THEN the store counted them in the new generation's window
    assert calls_in_window(store, clock) == 3


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


def test_a_flushed_reports_answer_reaches_the_cache(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker holding 3 calls not reported yet
    breaker = breaker_on(MemoryStore(), clock, RATE, listeners=[])
    core = core_of(breaker)
    dep = Dependency()
    breaker.call(dep)  # its first refresh: a read
    for _ in range(3):
        breaker.call(dep)
    # WHEN they are flushed (before a snapshot)
    breaker.flush()
    # THEN the report's answer came back to the core: the cache holds the window with them
    hit, record = core.view.cached(clock())
    assert hit
    assert record is not None
    assert window_of(record, RATE, clock).calls == 4


def test_a_tune_from_rate_to_count_caches_the_old_strategys_last_report(
    clock: FakeClock,
) -> None:
    # GIVEN a rate-policy breaker holding calls not reported yet
    breaker = breaker_on(MemoryStore(), clock, RATE, listeners=[])
    core = core_of(breaker)
    dep = Dependency()
    for _ in range(3):
        breaker.call(dep)
    # WHEN the core adopts the count policy (the rate strategy flushes before it goes)
    core.adopt(CONFIG)
    # THEN the flush's answer reached the cache: nothing it said was lost
    assert core.mode.counting.kind == "count"
    hit, record = core.view.cached(clock())
    assert hit
    assert record is not None
    assert window_of(record, RATE, clock).calls == 3


def test_the_slow_call_watchers_sweep_hands_its_report_to_the_core(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker timing slow calls, one call running past the duration
    slow = dataclasses.replace(RATE, slow_call_duration=1.0)
    breaker = breaker_on(MemoryStore(), clock, slow, listeners=[])
    core = core_of(breaker)
    breaker.call(Dependency())
    call = core.closed(clock())
    clock.advance(2)
    # WHEN the process's watcher sweeps this breaker (its entry, as its thread would)
    watcher = core.mode.counting._watcher  # type: ignore[attr-defined]
    assert watcher.sweep() is True
    # THEN the report of the hung call came back to the core: the cache holds it
    hit, record = core.view.cached(clock())
    assert hit
    assert record is not None
    assert window_of(record, slow, clock).slow == 1
    core.interrupted(call)


def test_the_slow_call_watcher_keeps_no_breaker_alive(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker timing slow calls, whose watcher entry is running
    import gc
    import weakref

    slow = dataclasses.replace(RATE, slow_call_duration=1.0)
    breaker = breaker_on(MemoryStore(), clock, slow, listeners=[])
    breaker.call(Dependency())
    watcher = core_of(breaker).mode.counting._watcher  # type: ignore[attr-defined]
    gone = weakref.ref(breaker)
    # WHEN the breaker is dropped
    del breaker
    gc.collect()
    # THEN nothing the watcher holds kept it (or its strategy) alive: its sweep says so
    assert gone() is None
    assert watcher.sweep() is False


def window_of(record: Record, config: BreakerConfig, clock: FakeClock) -> WindowCounts:
    return sliding_window(Policy.from_config(config)).counts(record, clock())


def test_a_thread_kept_from_the_refresh_reads_the_store_itself_and_its_answer_is_taken(
    clock: FakeClock,
) -> None:
    # GIVEN a breaker whose cached view went stale after another container forced the
    # breaker open, and whose refresh another thread keeps past the wait (its claim fails)
    store = MemoryStore()
    breaker = breaker_on(store, clock, CONFIG, listeners=[])
    assert breaker.state is State.CLOSED
    breaker_on(store, clock, CONFIG, listeners=[]).force_open()
    clock.advance(2)
    core = core_of(breaker)
    core.view.begin_refresh = lambda: False
    # WHEN the core reads the record
    record = core.read(clock())
    # THEN it read the store on this thread, and took the answer: the fleet's record, cached
    assert record is not None
    assert record.state is State.FORCED_OPEN
    assert core.view.cached(clock()) == (True, record)


# -- no way back from the parts to the core ---------------------------------------------------


class _SharedMemoryStore(MemoryStore):
    """A MemoryStore standing for a store every process reaches: its reads are shared."""

    process_local = False
    sharing_identity = "one table every process reaches"


@pytest.mark.parametrize(
    "config",
    [
        CONFIG,
        dataclasses.replace(RATE, slow_call_duration=5.0, minimum_calls=2),
        dataclasses.replace(CONFIG, mode="shadow"),
    ],
    ids=["count", "rate-slow-calls", "shadow"],
)
def test_no_part_below_the_core_holds_a_way_back_to_it(
    config: BreakerConfig, clock: FakeClock, tmp_path: Any
) -> None:
    # GIVEN a breaker with shared reads, a fallback and a listener, which has run good,
    # failing and probing calls (so every part, the slow-call watcher's entry too, is built)
    breaker = CircuitBreaker(
        "payment-api",
        store=_SharedMemoryStore(),
        config=config,
        fallback=lambda admission, *args: "fallback",
        listeners=[RecordingListener()],
        clock=clock,
        shared_refresh_dir=tmp_path,
    )
    dep = Dependency()
    breaker.call(dep)
    dep.failing = True
    for _ in range(3):
        with contextlib.suppress(ConnectionError):  # the third may meet the fallback
            breaker.call(dep)
    clock.advance(31)
    dep.failing = False
    breaker.call(dep)
    breaker.flush()
    core = core_of(breaker)
    # WHEN every object each part of the core holds is followed (the view, the pipeline,
    # the probes, the mode with its strategy and context, the shared reads, the watcher)
    parts = {name: part for name, part in vars(core).items() if not isinstance(part, str)}
    assert {"view", "pipeline", "mode", "_probes"} <= parts.keys()
    # THEN none reaches the core or the breaker: every store answer comes back up as a value
    reached = {name: objects_reachable_from(part, limit=200_000) for name, part in parts.items()}
    leading_back = [
        name for name, objects in reached.items() if any(o is core or o is breaker for o in objects)
    ]
    assert leading_back == []
    # (the walk went everywhere: the shared reads and, timing slow calls, the watcher entry)
    kinds = {type(obj).__name__ for objects in reached.values() for obj in objects}
    assert "SharedReads" in kinds
    assert ("SlowCallWatcher" in kinds) == (config.slow_call_duration is not None)
