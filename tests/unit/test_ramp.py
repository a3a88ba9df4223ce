"""Recovery ramp: after a close, each container admits a linearly growing share of calls.

MemoryStore, a hand-moved clock, and a random source whose next draw the test sets.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, ConfigError, MemoryStore
from fleetbreaker.admission import RAMP_MIN_SHARE as MIN_SHARE
from fleetbreaker.admission import RAMP_RETRY_AFTER_MS as RETRY_AFTER_MS
from fleetbreaker.admission import RecoveryRamp, ramp_share
from fleetbreaker.record import Bucket, CensusBucket, Decision, Record, State
from fleetbreaker.rules import Verdict
from tests.support import Dependency, FakeClock

ALLOW = Verdict(Decision.ALLOW, State.CLOSED)
RAMP = BreakerConfig(
    failure_threshold=3, recovery_timeout=10, recovery_jitter=0.0, recovery_ramp_seconds=10
)

# The ramp reads nothing of the mode (its stage signature is every stage's).
ANY_MODE: Any = None


class SetDraw(random.Random):
    """``random()`` returns ``draw``: the test decides which side of the share a call falls."""

    draw = 0.0

    def random(self) -> float:
        return self.draw


class CountingStore(MemoryStore):
    """Counts the store operations the breaker sends."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def load(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        return super().load(*args, **kwargs)

    def record_failure(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        return super().record_failure(*args, **kwargs)


def recovered(
    config: BreakerConfig = RAMP, **kw: Any
) -> tuple[CircuitBreaker, FakeClock, SetDraw, Dependency]:
    """A breaker that opened on three failures and just closed through a successful probe."""
    clock, rng, dep = FakeClock(), SetDraw(), Dependency()
    kw.setdefault("store", MemoryStore())
    breaker = CircuitBreaker("payment-api", config=config, clock=clock, rng=rng, **kw)
    dep.failing = True
    for _ in range(config.failure_threshold):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    clock.advance(config.recovery_timeout)
    dep.failing = False
    assert breaker.call(dep) == "ok"  # the probe
    assert breaker.state is State.CLOSED
    return breaker, clock, rng, dep


# -- the shape ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed_ms", "share"),
    [(-5, MIN_SHARE), (0, MIN_SHARE), (5_000, 0.55), (9_999, 0.99991), (10_000, 1.0)],
)
def test_the_share_grows_linearly_from_the_minimum_to_all(elapsed_ms: int, share: float) -> None:
    # GIVEN a 10 s ramp, THEN the share at each moment lies on the line from 10 % to 100 %
    assert ramp_share(elapsed_ms, 10_000) == pytest.approx(share)


def test_no_ramp_admits_everything() -> None:
    assert ramp_share(0, 0) == 1.0
    assert ramp_share(-5, 0) == 1.0  # a clock behind the close, no ramp: still all


def test_a_one_millisecond_ramp_starts_at_the_minimum() -> None:
    assert ramp_share(0, 1) == MIN_SHARE


def stage(draw: float, seconds: float = 10) -> RecoveryRamp:
    rng = SetDraw()
    rng.draw = draw
    return RecoveryRamp(seconds, rng)


def test_the_ramp_counts_its_length_in_milliseconds() -> None:
    assert stage(0.0, 2.5).ramp_ms == 2500


@pytest.mark.parametrize(
    "since_close",
    [
        {"failures": 2, "window_start": 1_200},
        {"buckets": {0: Bucket(0, calls=1, failures=0, slow=0, reports=1)}},
        {"census": {0: CensusBucket(0, 7)}},
        {"failing": {"c1": 1}},
        {"updated_at": 1_900},
    ],
)
def test_writes_since_the_close_keep_its_time(since_close: dict[str, Any]) -> None:
    # GIVEN a record closed by a recovery at 1,000, then written to (counts, census writes)
    record = Record(State.CLOSED, gen=4, opened_at=100, closed_at=1_000, **since_close)

    # THEN a call drawing above the minimum share at the close is still turned away
    assert stage(0.5)(ALLOW, record, 1_000, ANY_MODE, None).decision is Decision.REJECT


def test_a_call_is_admitted_only_below_the_share() -> None:
    # GIVEN a ramp at its close, THEN a draw equal to the share is turned away (draws are
    # uniform in [0, 1): P(draw < share) is the share), one just below it runs
    fresh = Record(State.CLOSED, gen=3, opened_at=500, closed_at=1_000)
    assert stage(MIN_SHARE)(ALLOW, fresh, 1_000, ANY_MODE, None).decision is Decision.REJECT
    assert stage(MIN_SHARE - 1e-9)(ALLOW, fresh, 1_000, ANY_MODE, None) is ALLOW


@pytest.mark.parametrize(
    ("elapsed_ms", "retry_after_ms"),
    [(0, RETRY_AFTER_MS), (9_500, 500), (9_999, 1)],
)
def test_a_turned_away_call_retries_at_most_when_the_ramp_ends(
    elapsed_ms: int, retry_after_ms: int
) -> None:
    # GIVEN a 10 s ramp, THEN a call turned away waits a second at most, never past its end
    fresh = Record(State.CLOSED, gen=3, opened_at=500, closed_at=1_000)
    ramped = stage(0.999999)(ALLOW, fresh, 1_000 + elapsed_ms, ANY_MODE, None)
    assert (ramped.decision, ramped.retry_after_ms) == (Decision.REJECT, retry_after_ms)


def test_a_record_no_recovery_closed_does_not_ramp() -> None:
    # GIVEN closed records that no recovery wrote (never tripped, a reset of a closed one)
    # THEN every call runs, whatever it draws
    for record in (None, Record(State.CLOSED, gen=4, updated_at=123), Record(State.CLOSED)):
        assert stage(0.999)(ALLOW, record, 1_000, ANY_MODE, None) is ALLOW


# -- the breaker -------------------------------------------------------------------------------


def test_right_after_the_close_a_call_above_the_share_is_rejected_briefly() -> None:
    # GIVEN a breaker that just closed, with a 10 s ramp
    breaker, _clock, rng, dep = recovered()
    calls = dep.calls

    # WHEN a call draws above the 10 % admitted at the close
    rng.draw = 0.5
    with pytest.raises(CircuitOpenError) as rejected:
        breaker.call(dep)

    # THEN it is rejected without reaching the dependency, closed, with a short retry_after
    assert dep.calls == calls
    assert rejected.value.state is State.CLOSED
    assert 0 < rejected.value.retry_after <= 1.0

    # WHEN a call draws below it THEN it runs
    rng.draw = 0.05
    assert breaker.call(dep) == "ok"


def test_halfway_through_the_ramp_about_half_the_calls_run() -> None:
    # GIVEN a breaker 5 s into a 10 s ramp (55 % admitted)
    breaker, clock, rng, dep = recovered()
    clock.advance(5)

    # WHEN calls draw just below and just above the share THEN only the first runs
    rng.draw = 0.54
    assert breaker.call(dep) == "ok"
    rng.draw = 0.56
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)


def test_after_the_ramp_every_call_runs() -> None:
    # GIVEN a breaker whose ramp has ended
    breaker, clock, rng, dep = recovered()
    clock.advance(10)
    # WHEN a call draws the highest value THEN it runs
    rng.draw = 0.999
    assert breaker.call(dep) == "ok"


def test_without_a_ramp_every_call_runs_right_after_the_close() -> None:
    # GIVEN the default config (no ramp), just closed
    breaker, _clock, rng, dep = recovered(BreakerConfig(failure_threshold=3, recovery_timeout=10))
    # WHEN a call draws the highest value THEN it runs
    rng.draw = 0.999
    assert breaker.call(dep) == "ok"


def test_the_ramp_costs_no_store_request() -> None:
    # GIVEN a just-closed breaker whose cached record outlives the ramp
    store = CountingStore()
    config = BreakerConfig(
        failure_threshold=3, recovery_timeout=10, recovery_ramp_seconds=10, cache_ttl=60
    )
    breaker, clock, rng, dep = recovered(config, store=store)
    before = store.requests

    # WHEN 200 calls, admitted or rejected, are spread over the ramp
    for step in range(200):
        clock.advance(0.05)
        rng.draw = (step * 0.37) % 1.0
        with contextlib.suppress(CircuitOpenError):
            breaker.call(dep)

    # THEN none of them sent a store request
    assert store.requests == before


def test_a_failure_during_the_ramp_counts_and_does_not_restart_it() -> None:
    # GIVEN a breaker 5 s into its ramp
    breaker, clock, rng, dep = recovered()
    clock.advance(5)

    # WHEN an admitted call fails
    rng.draw = 0.0
    dep.failing = True
    with pytest.raises(ConnectionError):
        breaker.call(dep)
    dep.failing = False

    # THEN the failure is counted, and the ramp goes on where it was (neither restarted nor
    # ended): 5.5 s in, 59.5 % are admitted
    assert breaker.store.load("payment-api", clock()).failures == 1
    clock.advance(0.5)
    rng.draw = 0.58
    assert breaker.call(dep) == "ok"
    rng.draw = 0.6
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)


def test_failures_during_the_ramp_still_open_the_breaker() -> None:
    # GIVEN a breaker at the start of its ramp
    breaker, _clock, rng, dep = recovered()
    rng.draw = 0.0  # every call admitted

    # WHEN three admitted calls fail
    dep.failing = True
    for _ in range(3):
        with pytest.raises(ConnectionError):
            breaker.call(dep)

    # THEN the breaker is open again
    assert breaker.state is State.OPEN


def test_a_call_the_ramp_turns_away_gets_the_fallback() -> None:
    # GIVEN a just-closed breaker with a fallback
    seen: list[Any] = []
    breaker, _clock, rng, dep = recovered(fallback=lambda admission: seen.append(admission))

    # WHEN a call draws above the share
    rng.draw = 0.9
    breaker.call(dep)

    # THEN the fallback answered it, told the breaker is closed and turned it away
    [admission] = seen
    assert (admission.state, admission.allowed) == (State.CLOSED, False)


# -- configuration -----------------------------------------------------------------------------


def test_a_negative_ramp_is_refused() -> None:
    with pytest.raises(ConfigError, match="recovery_ramp_seconds must be a non-negative"):
        BreakerConfig(recovery_ramp_seconds=-1)


def test_the_ramp_is_read_from_the_environment() -> None:
    # GIVEN BREAKER_RECOVERY_RAMP_SECONDS, THEN from_env reads it, and names it when bad
    config = BreakerConfig.from_env({"BREAKER_RECOVERY_RAMP_SECONDS": "30"})
    assert config.recovery_ramp_seconds == 30.0
    with pytest.raises(ConfigError, match="BREAKER_RECOVERY_RAMP_SECONDS"):
        BreakerConfig.from_env({"BREAKER_RECOVERY_RAMP_SECONDS": "soon"})


# -- a close stamped by a clock that runs ahead ------------------------------------------------


def test_a_close_stamped_ahead_of_our_clock_ramps_from_when_we_first_saw_it() -> None:
    # GIVEN a 10 s ramp and a close written by a container whose clock runs 30 s ahead
    ramp = stage(0.5)
    ahead = Record(State.CLOSED, gen=3, opened_at=500, closed_at=31_000)
    # WHEN this container first sees it at 1 s, THEN the ramp starts then (50 % is above
    # the 10 % admitted at its start)
    assert ramp(ALLOW, ahead, 1_000, ANY_MODE, None).decision is Decision.REJECT
    # AND 10 s later the ramp has ended, though the close is still 20 s in our future
    assert ramp(ALLOW, ahead, 11_000, ANY_MODE, None) is ALLOW


def test_a_close_stamped_ahead_is_halfway_through_after_half_the_ramp() -> None:
    # GIVEN the same skewed close, first seen at 1 s
    ramp = stage(0.5)
    ahead = Record(State.CLOSED, gen=3, opened_at=500, closed_at=31_000)
    ramp(ALLOW, ahead, 1_000, ANY_MODE, None)
    # THEN 6 s later the share is past 50 %: a 0.5 draw runs (clamped per call, it never would)
    assert ramp(ALLOW, ahead, 7_000, ANY_MODE, None) is ALLOW


def test_a_new_close_stamped_ahead_starts_its_own_ramp() -> None:
    # GIVEN a skewed close first seen at 1 s, and a later recovery (a new generation)
    ramp = stage(0.5)
    ramp(ALLOW, Record(State.CLOSED, gen=3, opened_at=500, closed_at=31_000), 1_000, ANY_MODE, None)
    later = Record(State.CLOSED, gen=5, opened_at=500, closed_at=60_000)
    # THEN the new one ramps from when it was first seen, not from the old one's sight
    assert ramp(ALLOW, later, 20_000, ANY_MODE, None).decision is Decision.REJECT
