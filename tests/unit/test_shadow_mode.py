"""Shadow mode on MemoryStore with a hand-moved clock: observe the fleet's breaker, never act.

The acceptance test (6 failing calls, threshold 2, then ``tune --mode enforce``) runs on every
store in tests/contract/test_shadow_contract.py; these pin the rules one at a time.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from fleetbreaker import (
    BreakerConfig,
    CircuitBreaker,
    CircuitOpenError,
    ConfigError,
    Decision,
    MemoryStore,
    State,
)
from fleetbreaker.cli import POLICY
from fleetbreaker.events import LoggingListener
from fleetbreaker.tuning import apply_tuning, encode_tuned
from tests.support import Dependency, FakeClock, RecordingListener

CONFIG = BreakerConfig(failure_threshold=2, recovery_timeout=10, recovery_jitter=0.0)
SHADOW = BreakerConfig(failure_threshold=2, recovery_timeout=10, recovery_jitter=0.0, mode="shadow")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def make(store: Any, clock: FakeClock, config: BreakerConfig = SHADOW, **kw: Any) -> CircuitBreaker:
    return CircuitBreaker("payment-api", store=store, config=config, clock=clock, **kw)


def fail_times(breaker: CircuitBreaker, dep: Dependency, times: int) -> None:
    dep.failing = True
    for _ in range(times):
        with pytest.raises(ConnectionError):
            breaker.call(dep)


# -- config --------------------------------------------------------------------------------


def test_mode_defaults_to_enforce() -> None:
    assert BreakerConfig().mode == "enforce"


@pytest.mark.parametrize("mode", ["Shadow", "observe", "", None, 1])
def test_an_unknown_mode_is_refused_naming_the_field(mode: object) -> None:
    with pytest.raises(ConfigError, match=r"^mode must be one of enforce, shadow"):
        BreakerConfig(mode=mode)  # type: ignore[arg-type]


def test_breaker_mode_comes_from_the_environment() -> None:
    assert BreakerConfig.from_env({"BREAKER_MODE": "shadow"}).mode == "shadow"


def test_a_bad_breaker_mode_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"^BREAKER_MODE: mode must be one of"):
        BreakerConfig.from_env({"BREAKER_MODE": "dry-run"})


def test_mode_is_tunable_and_checked() -> None:
    assert apply_tuning(CONFIG, {"mode": "shadow"}).mode == "shadow"
    with pytest.raises(ConfigError, match="mode must be one of"):
        apply_tuning(CONFIG, {"mode": "off"})


# -- never rejects -------------------------------------------------------------------------


def test_a_shadow_breaker_trips_but_runs_every_call(store, clock) -> None:
    # GIVEN a shadow breaker with a threshold of 2
    events = RecordingListener()
    breaker = make(store, clock, listeners=[events])
    dep = Dependency()
    # WHEN 6 calls fail
    fail_times(breaker, dep, 6)
    # THEN all reached the dependency, the shared breaker is open, 4 would have been rejected
    assert dep.calls == 6
    assert breaker.snapshot().state is State.OPEN
    assert events.count("on_would_reject") == 4
    assert breaker.stats.would_rejects == 4
    assert events.count("on_rejected") == 0
    assert set(events.values("on_decision", "decision")) == {Decision.ALLOW}
    # AND the record holds exactly what an enforcing fleet's would: one trip, generation 1
    changes = events.values("on_state_change", "change")
    assert [(c.before, c.after, c.generation, c.reason.value) for c in changes] == [
        (State.CLOSED, State.OPEN, 1, "failure_threshold")
    ]


def test_calls_it_would_reject_count_nowhere(store, clock) -> None:
    # GIVEN an open shadow breaker
    breaker = make(store, clock)
    dep = Dependency()
    fail_times(breaker, dep, 2)
    writes = store.stats.writes
    # WHEN more calls fail while it is open
    fail_times(breaker, dep, 5)
    # THEN none of them wrote to the store (an enforcing fleet would not have made them)
    assert store.stats.writes == writes


def test_an_enforcing_container_rejects_what_the_shadow_one_lets_through(store, clock) -> None:
    # GIVEN a shadow and an enforcing container on the same breaker
    shadow = make(store, clock)
    enforce = make(store, clock, CONFIG)
    dep = Dependency()
    # WHEN the shadow container's failures trip it
    fail_times(shadow, dep, 2)
    # THEN the enforcing container rejects, from the same shared record
    with pytest.raises(CircuitOpenError):
        enforce.call(dep)
    assert shadow.call(lambda: "ran") == "ran"


def test_a_shadow_breaker_never_uses_the_fallback(store, clock) -> None:
    used: list[Any] = []
    breaker = make(store, clock, fallback=lambda circuit: used.append(circuit))
    dep = Dependency()
    fail_times(breaker, dep, 2)
    dep.failing = False
    assert breaker.call(dep) == "ok"
    assert used == []


def test_a_shadow_breaker_runs_calls_through_an_operator_override(store, clock) -> None:
    # GIVEN an operator forced the breaker open
    events = RecordingListener()
    breaker = make(store, clock, listeners=[events])
    breaker.force_open()
    # WHEN a call runs in shadow mode, THEN it runs and is counted as a would-be rejection
    assert breaker.call(lambda: "ran") == "ran"
    assert [(s, r) for _, s, r in events.args("on_would_reject")] == [(State.FORCED_OPEN, 10.0)]


def test_check_says_what_enforce_would_have_decided(store, clock) -> None:
    breaker = make(store, clock)
    fail_times(breaker, Dependency(), 2)
    admission = breaker.check()
    assert (admission.decision, admission.state, admission.shadow) == (
        Decision.ALLOW,
        State.OPEN,
        Decision.REJECT,
    )
    assert admission.allowed
    assert admission.would_reject
    assert admission.token is None
    assert admission.retry_after_s == 0.0


# -- recovery ------------------------------------------------------------------------------


def test_a_shadow_fleet_half_opens_and_closes_as_an_enforcing_one(store, clock) -> None:
    # GIVEN an open shadow breaker whose open window has passed
    events = RecordingListener()
    breaker = make(store, clock, listeners=[events])
    dep = Dependency()
    fail_times(breaker, dep, 2)
    clock.advance(10)
    # WHEN the next call succeeds
    dep.failing = False
    assert breaker.call(dep) == "ok"
    # THEN it settled the probe: half_open, then closed, generations 2 and 3
    changes = events.values("on_state_change", "change")
    assert [(c.after, c.generation, c.reason.value) for c in changes[1:]] == [
        (State.HALF_OPEN, 2, "open_window_elapsed"),
        (State.CLOSED, 3, "probe_succeeded"),
    ]
    assert breaker.snapshot().state is State.CLOSED


def test_a_failed_shadow_probe_reopens_the_breaker(store, clock) -> None:
    breaker = make(store, clock)
    dep = Dependency()
    fail_times(breaker, dep, 2)
    clock.advance(10)
    fail_times(breaker, dep, 1)
    snapshot = breaker.snapshot()
    assert (snapshot.state, snapshot.generation) == (State.OPEN, 3)


def test_a_shadow_call_never_holds_the_probe_lease_an_enforcing_container_needs(
    store, clock
) -> None:
    # GIVEN an open breaker, past its open window, shared by a shadow and an enforcing container
    events = RecordingListener()
    shadow = make(store, clock, listeners=[events])
    enforce = make(store, clock, CONFIG)
    fail_times(shadow, Dependency(), 2)
    clock.advance(10)
    seen: list[Decision] = []

    def slow_dependency() -> str:
        # WHILE the shadow container's call is still running, the enforcing one asks
        seen.append(enforce.check().decision)
        return "ok"

    # WHEN the shadow container's call runs
    assert shadow.call(slow_dependency) == "ok"
    # THEN the enforcing container got the probe: the shadow call held no lease
    assert seen == [Decision.PROBE]
    # AND the shadow call, which lost the slot, counts as a would-be rejection, not a probe
    assert [state for _, state, _ in events.args("on_would_reject")] == [State.HALF_OPEN]
    assert store.load("payment-api", clock()).state is State.HALF_OPEN  # type: ignore[union-attr]


def test_the_shadow_probes_lease_is_bounded_by_the_store_deadline(store, clock) -> None:
    # GIVEN a shadow breaker whose probe is settled after the call (probe leases of 10 s)
    calls: list[Any] = []

    class Watching(MemoryStore):
        def claim_probe(self, name: str, policy: Any, now_ms: int, nonce: str, observed: Any):
            calls.append(policy.lease_ms)
            return super().claim_probe(name, policy, now_ms, nonce, observed)

    watched = Watching()
    breaker = make(watched, clock)
    fail_times(breaker, Dependency(), 2)
    clock.advance(10)
    # WHEN its call ends and it claims the probe
    breaker.call(lambda: "ok")
    # THEN the lease it asked for lasts two store deadlines, not a probe's 10 s
    assert calls == [2000]


def test_record_without_token_settles_a_due_probe_in_shadow_mode(store, clock) -> None:
    # GIVEN a shadow gate's breaker: check said allow (a probe was due), the step succeeded
    breaker = make(store, clock)
    fail_times(breaker, Dependency(), 2)
    clock.advance(10)
    assert breaker.check().shadow is Decision.PROBE
    # WHEN the outcome is recorded without a token
    result = breaker.record(True)
    # THEN the fleet's breaker closed
    assert (result.applied, result.state) == (True, State.CLOSED)


def test_record_while_it_would_reject_counts_nothing(store, clock) -> None:
    breaker = make(store, clock)
    fail_times(breaker, Dependency(), 2)
    result = breaker.record(False)
    assert (result.applied, result.state) == (False, State.OPEN)


# -- live switch ---------------------------------------------------------------------------


def test_tuning_the_mode_switches_a_running_breaker_within_cache_ttl(store, clock) -> None:
    # GIVEN an open shadow breaker (cache_ttl 1 s)
    breaker = make(store, clock)
    dep = Dependency()
    fail_times(breaker, dep, 2)
    assert breaker.mode == "shadow"
    # WHEN an operator tunes the mode to enforce
    store.tune("payment-api", POLICY, clock(), encode_tuned({"mode": "enforce"}), None)
    # THEN once the cache has aged, the next call is rejected
    clock.advance(1.0)
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)
    assert breaker.mode == "enforce"
    assert breaker.snapshot().mode == "enforce"
    # AND clearing the tuning returns it to its deployed mode
    store.tune("payment-api", POLICY, clock(), "", None)
    clock.advance(1.0)
    assert breaker.call(lambda: "ran") == "ran"
    assert breaker.mode == "shadow"


def test_snapshot_shows_the_mode(store, clock) -> None:
    assert make(store, clock).snapshot().as_dict()["mode"] == "shadow"
    assert make(store, clock, CONFIG).snapshot().as_dict()["mode"] == "enforce"


# -- the log line --------------------------------------------------------------------------


def test_would_reject_is_logged_at_most_once_per_second_per_breaker(
    store, clock, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN an open shadow breaker logging through a listener on the test's clock
    breaker = make(store, clock, listeners=[LoggingListener(clock=clock)])
    fail_times(breaker, Dependency(), 2)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        # WHEN 5 calls run within one second, then one more a second later
        for _ in range(5):
            breaker.call(lambda: None)
            clock.advance(0.1)
        clock.advance(0.5)
        breaker.call(lambda: None)
    # THEN two lines: the first call's, then one counting the 5 since
    lines = [r for r in caplog.records if getattr(r, "breaker_event", None) == "would_reject"]
    assert [r.count for r in lines] == [1, 5]  # type: ignore[attr-defined]
    assert lines[0].getMessage() == (
        "circuit payment-api (shadow): would have rejected 1 call(s); breaker is open"
    )
