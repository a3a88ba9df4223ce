"""The plain count policy's census: its fleet-size signal, the refreshes and failure writes
it stretches and thins for a large fleet, and nothing changed for a small one."""

from __future__ import annotations

import random
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError
from fleetbreaker.policy import Policy
from fleetbreaker.record import WINDOW_BUCKETS, Bucket, Record, State
from fleetbreaker.refresh import (
    CENSUS_MEAN_MS,
    TARGET_FAILURE_WRITES_PER_S,
    census_fleet_size,
    failure_weight,
)
from fleetbreaker.stores.memory import MemoryStore
from tests.support import FakeClock

CONFIG = BreakerConfig(failure_threshold=5, window_seconds=60, cache_ttl=1.0)
COUNT = Policy.from_config(CONFIG)
NAME = "payment-api"


def census_record(containers: int, now_ms: int, policy: Policy = COUNT) -> Record:
    """A closed record whose buckets hold the census writes of ``containers`` containers, as
    read at the start of a bucket (``now_ms`` is rounded down to one)."""
    per_bucket = round(containers * policy.bucket_ms / CENSUS_MEAN_MS)
    current = now_ms // policy.bucket_ms
    buckets = {
        (current - age) % WINDOW_BUCKETS: Bucket(current - age, per_bucket, 0, 0, per_bucket)
        for age in range(1, WINDOW_BUCKETS)
    }
    return Record(updated_at=now_ms, expires_at=now_ms // 1000 + 3600, buckets=buckets)


class Draws(random.Random):
    """A random source whose ``random()`` the test sets (the rest is a seeded Random)."""

    def __init__(self, draw: float) -> None:
        super().__init__(7)
        self.draw = draw

    def random(self) -> float:
        return self.draw


def breaker_on(store: MemoryStore, clock: FakeClock, rng: random.Random | None = None) -> Any:
    clock.now = clock.now // COUNT.bucket_ms * COUNT.bucket_ms  # census_record's time
    return CircuitBreaker(
        NAME, store=store, config=CONFIG, clock=clock, rng=rng or random.Random(1), listeners=[]
    )


def fleet_of(
    containers: int, clock: FakeClock, rng: random.Random | None = None
) -> tuple[MemoryStore, Any]:
    """A MemoryStore holding the census of ``containers`` containers, and a breaker on it."""
    store = MemoryStore()
    store.seed(NAME, census_record(containers, clock()))
    return store, breaker_on(store, clock, rng)


# -- the signal ----------------------------------------------------------------------------


@pytest.mark.parametrize("containers", [300, 1_000, 5_000])
def test_the_census_writes_in_the_window_tell_the_fleets_size(containers: int) -> None:
    now = 1_800_000_000_000 // COUNT.bucket_ms * COUNT.bucket_ms
    size = census_fleet_size(census_record(containers, now), COUNT, now)

    assert size == pytest.approx(containers, rel=0.05, abs=2)


def test_a_record_without_census_writes_tells_nothing() -> None:
    now = 1_800_000_000_000
    assert census_fleet_size(None, COUNT, now) is None
    assert census_fleet_size(Record(failures=2, window_start=now), COUNT, now) is None


def test_a_fleet_that_just_grew_shows_in_its_newest_buckets() -> None:
    # GIVEN census writes of 5,000 containers in the newest bucket only (they just started)
    now = 1_800_000_000_000
    current = now // COUNT.bucket_ms
    per_bucket = round(5_000 * COUNT.bucket_ms / CENSUS_MEAN_MS)
    bucket = Bucket(current - 1, per_bucket, 0, 0, per_bucket)
    record = Record(buckets={(current - 1) % WINDOW_BUCKETS: bucket})

    # WHEN read at the end of the next bucket's first moment, THEN most of them show
    size = census_fleet_size(record, COUNT, current * COUNT.bucket_ms)
    assert size is not None
    assert size >= 4_900


@pytest.mark.parametrize(
    ("containers", "weight"), [(16, 1), (300, 1), (301, 2), (1_000, 4), (5_000, 17)]
)
def test_a_failure_counts_once_up_to_the_target_and_more_past_it(
    containers: int, weight: int
) -> None:
    assert failure_weight(containers) == weight
    assert containers / weight <= TARGET_FAILURE_WRITES_PER_S


# -- what a container does with it ---------------------------------------------------------


def test_a_census_write_replaces_the_refresh_read_when_due(clock: FakeClock) -> None:
    # GIVEN a count-policy breaker whose census is due at once (an exponential draw of 0)
    store = MemoryStore()
    breaker = breaker_on(store, clock, Draws(0.0))

    # WHEN it refreshes its view
    assert breaker.state is State.CLOSED

    # THEN that refresh was one census write (a report of one call), not a read
    assert (store.stats.reads, store.stats.writes) == (0, 1)
    record = store.load(NAME, clock())
    assert sum(bucket.reports for bucket in record.buckets.values()) == 1


def test_census_writes_come_about_once_per_mean_interval(clock: FakeClock) -> None:
    # GIVEN a breaker refreshing every second for 20 mean census intervals
    store = MemoryStore()
    breaker = breaker_on(store, clock, random.Random(3))
    seconds = 20 * CENSUS_MEAN_MS // 1000
    for _ in range(seconds):
        breaker.state  # noqa: B018
        clock.advance(1.0)

    # THEN it wrote about 20 census writes, and read the rest of the time
    assert 8 <= store.stats.writes <= 35
    assert store.stats.reads + store.stats.writes == seconds


def test_no_census_while_open(clock: FakeClock) -> None:
    # GIVEN an open breaker and a census that is due
    store = MemoryStore()
    breaker = breaker_on(store, clock, Draws(0.0))
    breaker.force_open()
    clock.advance(1.0)
    writes = store.stats.writes

    # WHEN it refreshes, THEN it reads (a report changes nothing while open)
    assert breaker.state is State.FORCED_OPEN
    assert store.stats.writes == writes


def test_a_small_fleet_refreshes_every_cache_ttl(clock: FakeClock) -> None:
    # GIVEN the census of 16 containers in the record
    store, breaker = fleet_of(16, clock)

    breaker.state  # noqa: B018
    reads = store.stats.reads
    clock.advance(CONFIG.cache_ttl)
    breaker.state  # noqa: B018

    # THEN its view is stale after cache_ttl: a second read
    assert store.stats.reads == reads + 1


def test_a_large_fleet_keeps_its_view_longer_but_at_most_twice_cache_ttl(
    clock: FakeClock,
) -> None:
    # GIVEN the census of 5,000 containers (their refreshes at cache_ttl would take 2,500
    # read units/s on one item)
    store, breaker = fleet_of(5_000, clock, Draws(0.5))  # jitter's middle: 5,000 / 3,000 s

    breaker.state  # noqa: B018
    reads = store.stats.reads
    clock.advance(1.6)
    breaker.state  # noqa: B018
    assert store.stats.reads == reads  # still fresh at 1.6 s
    clock.advance(0.1)
    breaker.state  # noqa: B018
    assert store.stats.reads == reads + 1


def test_a_small_fleet_writes_every_failure(clock: FakeClock) -> None:
    # GIVEN the census of 16 containers, WHEN five calls fail in a row
    store, breaker = fleet_of(16, clock, Draws(0.99))

    for _ in range(CONFIG.failure_threshold):
        with pytest.raises(ZeroDivisionError):
            breaker.call(lambda: 1 / 0)

    # THEN each was written and counted once: the fifth opened the breaker
    assert store.load(NAME, clock()).state is State.OPEN
    with pytest.raises(CircuitOpenError):
        breaker.call(lambda: None)


def test_a_large_fleet_writes_a_failure_it_draws_and_counts_it_by_the_weight(
    clock: FakeClock,
) -> None:
    # GIVEN the census of 5,000 containers (weight 17) and a draw under 1 / 17
    store, breaker = fleet_of(5_000, clock, Draws(0.05))
    breaker.state  # noqa: B018

    # WHEN one call fails
    with pytest.raises(ZeroDivisionError):
        breaker.call(lambda: 1 / 0)

    # THEN its one write counted 17 failures: past the threshold of 5, the breaker opened
    assert store.load(NAME, clock()).state is State.OPEN


def test_a_large_fleet_skips_a_failure_it_does_not_draw(clock: FakeClock) -> None:
    # GIVEN the census of 5,000 containers (weight 17) and a draw over 1 / 17
    store, breaker = fleet_of(5_000, clock, Draws(0.5))
    breaker.state  # noqa: B018
    writes = store.stats.writes

    # WHEN one call fails, THEN nothing is written and the result says so
    with pytest.raises(ZeroDivisionError):
        breaker.call(lambda: 1 / 0)
    assert store.stats.writes == writes
    result = breaker.record(False)
    assert not result.applied
    assert "1 in 17" in result.detail


def test_a_count_policy_snapshot_shows_its_failures_beside_the_census(clock: FakeClock) -> None:
    # GIVEN 5,000 containers' census and two failures counted
    store, breaker = fleet_of(5_000, clock, Draws(0.01))
    for _ in range(2):
        store.record_failure(NAME, COUNT, clock(), None)

    snapshot = breaker.snapshot()

    # THEN it shows the two failures, and the census writes as the window's calls
    assert snapshot.failures == 2
    assert snapshot.calls == sum(b.calls for b in store.load(NAME, clock()).buckets.values())


def test_a_large_fleet_claims_the_probe_only_when_it_draws(clock: FakeClock) -> None:
    # GIVEN 5,000 containers' census seen, then an open breaker whose window has ended
    store, breaker = fleet_of(5_000, clock, Draws(0.5))
    breaker.state  # noqa: B018
    store.record_failure(NAME, COUNT, clock(), None, CONFIG.failure_threshold)
    clock.advance(CONFIG.recovery_timeout)
    writes = store.stats.writes

    # WHEN it draws over 1 / 17, THEN it is turned away without a claim write
    with pytest.raises(CircuitOpenError):
        breaker.call(lambda: None)
    assert store.stats.writes == writes

    # WHEN it draws under 1 / 17, THEN it claims the probe
    breaker.rng.draw = 0.01  # type: ignore[attr-defined]
    assert breaker.call(lambda: "probed") == "probed"
    assert store.load(NAME, clock()).state is State.CLOSED


def test_a_small_fleet_claims_the_probe_on_its_first_call(clock: FakeClock) -> None:
    # GIVEN 16 containers' census seen (weight 1), then an open breaker whose window has ended
    store, breaker = fleet_of(16, clock, Draws(0.99))
    breaker.state  # noqa: B018
    store.record_failure(NAME, COUNT, clock(), None, CONFIG.failure_threshold)
    clock.advance(CONFIG.recovery_timeout)

    # WHEN a call comes, whatever it draws, THEN it claims the probe
    assert breaker.call(lambda: "probed") == "probed"


class StoreWithoutReport:
    """A store written before the report operation: it has the five count-policy ones."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.stats = self.inner.stats

    def __getattr__(self, operation: str) -> Any:
        if operation == "report":
            raise AttributeError(operation)
        return getattr(self.inner, operation)


def test_a_store_without_a_report_operation_is_read_never_written(clock: FakeClock) -> None:
    # GIVEN a count-policy breaker on such a store, its census due at once
    store = StoreWithoutReport()
    breaker = CircuitBreaker(
        NAME, store=store, config=CONFIG, clock=clock, rng=Draws(0.0), listeners=[]
    )

    # WHEN it refreshes, THEN it reads (no census write it cannot send, no degradation)
    assert breaker.state is State.CLOSED
    assert (store.stats.reads, store.stats.writes) == (1, 0)
    assert not breaker.degraded
