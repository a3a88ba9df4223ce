"""The admission pipeline's stages, one behaviour at a time: the claim barrier, a lost or
refused probe claim, thinning's answer, and shadow mode's marker.

MemoryStore (or a MemoryStore that answers a claim as a store deciding on its own clock
does: Redis' TIME), a hand-moved clock; the stages themselves where a breaker cannot reach a
case (a barrier on another generation).
"""

from __future__ import annotations

import logging
import random
from types import SimpleNamespace
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, MemoryStore
from fleetbreaker.admission import LOST_CLAIM_RETRY_MS, ClaimBarrier, ClaimThinning, ProbeClaim
from fleetbreaker.events import BreakerListener
from fleetbreaker.frozen import replace
from fleetbreaker.record import Decision, Outcome, Record, State
from fleetbreaker.results import Admission, RecordResult
from fleetbreaker.rules import Verdict
from tests.support import Dependency, FakeClock, FlakyStore, RecordingListener, make_policy

CONFIG = BreakerConfig(failure_threshold=2, recovery_timeout=10, recovery_jitter=0.0)
PROBE = Verdict(Decision.PROBE, State.OPEN)
POLICY = make_policy(CONFIG)
# The barrier reads nothing of the mode (its stage signature is every stage's).
ANY_MODE: Any = None


class StoreClock(MemoryStore):
    """Refuses every probe claim for ``refuse_ms`` on its own clock, as Redis does when its
    TIME is behind ours; counts the claims it was asked for."""

    def __init__(self, refuse_ms: int) -> None:
        super().__init__()
        self.refuse_ms = refuse_ms
        self.claims = 0

    def claim_probe(
        self, name: str, policy: Any, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        self.claims += 1
        if self.refuse_ms:
            return Outcome(self.load(name, now_ms), retry_after_ms=self.refuse_ms)
        return super().claim_probe(name, policy, now_ms, nonce, observed)


def opened(store: MemoryStore, clock: FakeClock, config: BreakerConfig = CONFIG) -> CircuitBreaker:
    breaker = CircuitBreaker("payment-api", store=store, config=config, clock=clock)
    dep = Dependency()
    dep.failing = True
    for _ in range(config.failure_threshold):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    assert breaker.state is State.OPEN
    return breaker


def rejection(breaker: CircuitBreaker) -> CircuitOpenError:
    with pytest.raises(CircuitOpenError) as raised:
        breaker.call(lambda: "ok")
    return raised.value


# -- a claim the store refused until a time of its own ----------------------------------------


def test_a_claim_refused_on_the_stores_clock_rejects_until_the_time_it_said() -> None:
    # GIVEN an open breaker whose open window has ended on our clock, but whose store says
    # "not for another 2 s" on its own
    clock, store = FakeClock(), StoreClock(refuse_ms=2000)
    breaker = opened(store, clock)
    clock.advance(10)
    # WHEN a call comes
    admission = breaker.check()
    # THEN it is rejected for the 2 s the store said, the breaker still open
    assert (admission.decision, admission.state) == (Decision.REJECT, State.OPEN)
    assert admission.retry_after_s == 2.0
    assert store.claims == 1


def test_calls_while_the_store_refuses_are_rejected_without_asking_it_again() -> None:
    # GIVEN a claim the store refused for 2 s
    clock, store = FakeClock(), StoreClock(refuse_ms=2000)
    breaker = opened(store, clock)
    clock.advance(10)
    breaker.check()
    # WHEN another call comes 0.5 s later
    clock.advance(0.5)
    admission = breaker.check()
    # THEN it is rejected for the 1.5 s left, and no claim was sent for it
    assert (admission.decision, admission.state) == (Decision.REJECT, State.OPEN)
    assert admission.retry_after_s == 1.5
    assert store.claims == 1


def test_the_store_is_asked_again_once_its_refusal_has_run_out() -> None:
    # GIVEN a claim the store refused for 2 s, and a store that now grants claims
    clock, store = FakeClock(), StoreClock(refuse_ms=2000)
    breaker = opened(store, clock)
    clock.advance(10)
    breaker.check()
    store.refuse_ms = 0
    # WHEN a call comes exactly 2 s later
    clock.advance(2)
    admission = breaker.check()
    # THEN it claims again, and wins the probe
    assert store.claims == 2
    assert (admission.decision, admission.state) == (Decision.PROBE, State.HALF_OPEN)


def test_a_barrier_holds_only_for_the_generation_it_was_set_on() -> None:
    # GIVEN a barrier set on generation 4 until t=5000
    barrier = ClaimBarrier()
    barrier.bar(4, 5000)
    # WHEN a probe verdict comes at t=1000 for generation 4 and for generation 5
    same = barrier(PROBE, Record(gen=4, state=State.OPEN), 1000, ANY_MODE, None)
    newer = barrier(PROBE, Record(gen=5, state=State.OPEN), 1000, ANY_MODE, None)
    # THEN the first is rejected for the 4 s left (state kept); the second passes unchanged
    assert same == Verdict(Decision.REJECT, State.OPEN, 4000)
    assert newer is PROBE


def test_a_barrier_lets_a_verdict_without_a_record_pass() -> None:
    barrier = ClaimBarrier()
    barrier.bar(0, 5000)
    assert barrier(PROBE, None, 1000, ANY_MODE, None) is PROBE


# -- a claim lost to other containers -------------------------------------------------------


class Contended:
    """A probe lease's claims as a contended DynamoDB item answers them: every conditional
    write lost to other containers, the record read back still open and due."""

    name = "payment-api"

    def __init__(self, found: Record) -> None:
        self.found = found

    def claim(self, policy: Any, now_ms: int, observed: Record | None) -> Outcome:
        return Outcome(self.found)


def test_a_container_that_loses_every_race_for_a_probe_is_told_to_come_back_soon() -> None:
    # GIVEN an open record whose window has ended, each claim of it lost to another container
    found = Record(state=State.OPEN, opened_at=1, open_until=1000)
    claim = ProbeClaim(Contended(found), ClaimBarrier(), lambda: False)  # type: ignore[arg-type]
    mode: Any = SimpleNamespace(policy=POLICY)
    # WHEN this container claims
    verdict, _, _ = claim(PROBE, found, 2000, mode, None)
    # THEN it is rejected (still open), to retry after the lost-race pause, not a window
    assert verdict == Verdict(Decision.REJECT, State.OPEN, LOST_CLAIM_RETRY_MS)


def test_a_won_probe_is_a_probe_admission_with_its_token() -> None:
    # GIVEN an open breaker whose open window has ended
    clock, store = FakeClock(), MemoryStore()
    breaker = opened(store, clock)
    clock.advance(10)
    # WHEN a call comes
    admission = breaker.check()
    # THEN it is this breaker's probe, half-open, with a token and nothing to wait for
    assert admission.name == "payment-api"
    assert (admission.decision, admission.state) == (Decision.PROBE, State.HALF_OPEN)
    assert admission.token is not None
    assert admission.retry_after_s == 0.0
    assert admission.degraded is False


def test_a_stale_view_does_not_reject_a_breaker_another_probe_closed() -> None:
    # GIVEN a container that saw the breaker open and due (its cached view), and another
    # container whose probe then closed it
    clock, store = FakeClock(), MemoryStore()
    config = replace(CONFIG, cache_ttl=5.0)
    stale = opened(store, clock, config)
    prober = CircuitBreaker("payment-api", store=store, config=config, clock=clock)
    clock.advance(10)
    token = prober.check().token
    assert token is not None
    assert prober.record(True, token=token).state is State.CLOSED
    # WHEN the stale container's call comes (its view still says open)
    admission = stale.check()
    # THEN its lost claim shows the closed record, and the call is allowed
    assert (admission.decision, admission.state) == (Decision.ALLOW, State.CLOSED)


# -- thinning -------------------------------------------------------------------------------


class Draw(random.Random):
    draw = 0.99

    def random(self) -> float:
        return self.draw


def test_a_probe_thinned_out_is_rejected_as_a_lost_race() -> None:
    # GIVEN thinning at weight 2 and a draw that falls outside the 1-in-2
    thinning = ClaimThinning(Draw())
    mode: Any = SimpleNamespace(counting=SimpleNamespace(claim_weight=lambda _now: 2))
    # WHEN a probe verdict passes it
    verdict = thinning(PROBE, Record(state=State.OPEN), 1000, mode, None)
    # THEN it is a rejection to retry after the lost-race pause
    assert verdict == Verdict(Decision.REJECT, State.OPEN, LOST_CLAIM_RETRY_MS)


# -- shadow mode ------------------------------------------------------------------------------


def test_a_shadow_admission_names_its_breaker_and_tells_the_decision_hook_allow() -> None:
    # GIVEN an open shadow breaker with a decision listener
    clock, store, listener = FakeClock(), MemoryStore(), RecordingListener()
    shadow = replace(CONFIG, mode="shadow")
    breaker = CircuitBreaker(
        "payment-api", store=store, config=shadow, clock=clock, listeners=[listener]
    )
    dep = Dependency()
    dep.failing = True
    for _ in range(2):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    listener.clear()
    # WHEN a call is checked while an enforcing breaker would reject it
    admission = breaker.check()
    # THEN it is allowed, marked, named, not degraded; the hook heard an allow while open
    assert (admission.decision, admission.shadow) == (Decision.ALLOW, Decision.REJECT)
    assert admission.name == "payment-api"
    assert admission.degraded is False
    assert listener.args("on_decision") == [("payment-api", Decision.ALLOW, State.OPEN)]


def test_a_shadow_outcome_while_it_would_reject_says_why_it_was_not_counted() -> None:
    # GIVEN an open shadow breaker
    clock, store = FakeClock(), MemoryStore()
    breaker = opened(store, clock, replace(CONFIG, mode="shadow"))
    # WHEN a failure is recorded without a token
    result = breaker.record(False)
    # THEN nothing is counted, and the detail says shadow mode left it out
    assert (result.applied, result.state) == (False, State.OPEN)
    assert result.detail == "shadow: breaker is open; not counted"


def test_a_shadow_outcome_while_closed_counts_as_usual() -> None:
    # GIVEN a closed shadow breaker
    clock, store = FakeClock(), MemoryStore()
    breaker = CircuitBreaker(
        "payment-api", store=store, config=replace(CONFIG, mode="shadow"), clock=clock
    )
    # WHEN a failure is recorded without a token
    result = breaker.record(False)
    # THEN it is counted in the fleet's window
    assert (result.applied, result.state, result.detail) == (True, State.CLOSED, "failure counted")
    assert store.load("payment-api", clock()) is not None


# -- the count policy's successes -------------------------------------------------------------


def test_a_recorded_success_writes_nothing_and_reports_the_breakers_state() -> None:
    # GIVEN an open count-policy breaker
    clock, store = FakeClock(), MemoryStore()
    breaker = opened(store, clock)
    before = store.load("payment-api", clock())
    # WHEN a success is recorded without a token
    result = breaker.record(True)
    # THEN it is accepted without a write, and the result says the breaker is open
    assert (result.applied, result.state) == (True, State.OPEN)
    assert result.detail == "success: nothing to write"
    assert store.load("payment-api", clock()) == before


# -- degraded answers and the decision hook ---------------------------------------------------


def test_a_call_allowed_on_local_state_says_it_is_degraded() -> None:
    # GIVEN a breaker whose store is down, with a decision listener
    clock, store, listener = FakeClock(), FlakyStore(), RecordingListener()
    store.down = True
    breaker = CircuitBreaker(
        "payment-api", store=store, config=CONFIG, clock=clock, listeners=[listener]
    )
    # WHEN a call is checked
    admission = breaker.check()
    # THEN it is allowed, closed, marked degraded, and the hook heard the allow
    assert admission == Admission("payment-api", Decision.ALLOW, State.CLOSED, 0.0, None, True)
    assert listener.args("on_decision") == [("payment-api", Decision.ALLOW, State.CLOSED)]


def test_a_call_rejected_on_local_state_says_it_is_degraded() -> None:
    # GIVEN a breaker whose store is down, tripped on its local state
    clock, store = FakeClock(), FlakyStore()
    store.down = True
    breaker = opened(store, clock)
    # WHEN a call is checked
    admission = breaker.check()
    # THEN it is this breaker's rejection, degraded, with no token
    assert (admission.name, admission.decision, admission.state) == (
        "payment-api",
        Decision.REJECT,
        State.OPEN,
    )
    assert admission.token is None
    assert admission.degraded is True
    assert admission.retry_after_s == CONFIG.recovery_timeout


class Broken(BreakerListener):
    def on_decision(self, name: str, decision: Decision, state: State) -> None:
        raise RuntimeError("listener bug")


def test_a_failing_decision_listener_is_logged_by_name_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener = Broken()
    breaker = CircuitBreaker(
        "payment-api", store=MemoryStore(), config=CONFIG, clock=FakeClock(), listeners=[listener]
    )
    with caplog.at_level(logging.ERROR, logger="fleetbreaker"):
        assert breaker.call(lambda: "ok") == "ok"
    assert "Broken" in caplog.text
    assert "on_decision" in caplog.text


def test_a_stale_view_that_finds_the_breaker_just_closed_is_the_ramps_to_judge() -> None:
    # GIVEN a recovery ramp (10 s), a container that saw the breaker open and due, and
    # another container whose probe then closed it; the stale one's draw is over the
    # ramp's first share
    clock, store = FakeClock(), MemoryStore()
    config = replace(CONFIG, cache_ttl=5.0, recovery_ramp_seconds=10)
    opened(store, clock, config)
    stale_rng = Draw()
    stale_rng.draw = 0.5
    stale = CircuitBreaker("payment-api", store=store, config=config, clock=clock, rng=stale_rng)
    assert stale.check().decision is Decision.REJECT  # reads the open record
    prober = CircuitBreaker("payment-api", store=store, config=config, clock=clock)
    clock.advance(10)
    token = prober.check().token
    assert token is not None
    prober.record(True, token=token)
    # WHEN the stale container's call comes, its claim finding the closed record
    admission = stale.check()
    # THEN the ramp turns it away, as closed, for a short while
    assert (admission.decision, admission.state) == (Decision.REJECT, State.CLOSED)
    assert 0 < admission.retry_after_s <= 1.0


def test_a_shadow_outcome_that_finds_the_probe_slot_taken_counts_nowhere() -> None:
    # GIVEN a shadow container that saw the breaker open and due (its cached view), and an
    # enforcing container that then took the only probe slot
    clock, store = FakeClock(), MemoryStore()
    config = replace(CONFIG, cache_ttl=15.0)
    enforcing = opened(store, clock, config)
    shadow = CircuitBreaker(
        "payment-api", store=store, config=replace(config, mode="shadow"), clock=clock
    )
    assert shadow.check().shadow is Decision.REJECT  # reads the open record
    clock.advance(10)
    assert enforcing.check().decision is Decision.PROBE
    # WHEN the shadow container records a failure without a token
    result = shadow.record(False)
    # THEN it settles nothing, says why, and counts as a call an enforcing breaker rejects
    assert result == RecordResult(False, State.HALF_OPEN, "shadow: probe slot taken; not counted")
    assert shadow.stats.would_rejects == 2


def test_a_lost_claim_that_finds_the_breaker_closed_returns_the_allow_and_the_record() -> None:
    # GIVEN a claim lost because another container's probe closed the breaker a moment ago
    found = Record(gen=3, state=State.CLOSED, closed_at=1990)
    claim = ProbeClaim(Contended(found), ClaimBarrier(), lambda: False)  # type: ignore[arg-type]
    mode: Any = SimpleNamespace(policy=POLICY)
    # WHEN this container claims
    observed = Record(gen=2, state=State.OPEN, open_until=1000)
    answer, seen, answers = claim(PROBE, observed, 2000, mode, None)
    # THEN the claim judges nothing past the rules: an allow, as closed, with the record it
    # found, for the pipeline's stages (the recovery ramp's one place) to judge, and the
    # claim's answer as a value for the core (a probe's: heard even from the local twin)
    assert answer == Verdict(Decision.ALLOW, State.CLOSED)
    assert seen is found
    assert [(a.outcome.record, a.at_ms, a.from_probe) for a in answers] == [(found, 2000, True)]


def test_the_recovery_ramp_has_one_place_the_pipelines_stages() -> None:
    # GIVEN the probe claim's constructor
    import inspect

    # THEN it takes no ramp: a lost claim's allow goes back through the pipeline's stages
    assert "ramp" not in inspect.signature(ProbeClaim).parameters


# -- which stages a verdict meets -------------------------------------------------------------


def test_a_stage_is_skipped_for_exactly_the_verdicts_it_would_pass_unchanged() -> None:
    # GIVEN a pipeline's stages, each set to act: the barrier barred on the record's
    # generation, thinning at a weight and a draw that turn a claim away, the recovery ramp
    # just after a close with a draw that turns a call away, and shadow mode on
    now = 50_000
    config = replace(CONFIG, recovery_ramp_seconds=10)
    breaker = CircuitBreaker(
        "payment-api", store=MemoryStore(), config=config, clock=FakeClock(), rng=Draw()
    )
    pipeline = breaker._core.pipeline
    record = Record(state=State.CLOSED, gen=4, closed_at=now - 1)
    pipeline.barrier.bar(4, now + 10_000)
    mode: Any = SimpleNamespace(
        policy=POLICY,
        counting=SimpleNamespace(claim_weight=lambda _now: 5),
        shadow=SimpleNamespace(
            admit=lambda verdict: Admission("payment-api", Decision.ALLOW, verdict.state)
        ),
    )
    verdicts = [Verdict(decision, state, 7) for decision in Decision for state in State]
    stages = pipeline._stages
    assert {stage for _, stage in stages} > {pipeline.barrier, pipeline.thinning, pipeline.ramp}
    for acts_on, stage in stages:
        # WHEN every verdict passes the stage
        changed = {v.decision for v in verdicts if stage(v, record, now, mode, None) is not v}
        # THEN the decisions it changes a verdict of are those the pipeline hands it: a
        # verdict it is skipped for would have passed it unchanged
        assert changed == set(acts_on), stage
