"""The seven ways the census once misled a small fleet (issue: guarantees that compose), each
as one seeded trial of a fleet on a virtual clock.

Every trial returns what went wrong, or nothing. The guarantees it holds the fleet to:

- the count policy opens on exactly ``failure_threshold`` failures written in the window,
  each counted once (a small fleet's failures are never thinned);
- the fleet sends at most ``failure_threshold`` + containers failing calls before every
  container rejects;
- a census write never trips, and a fleet that tuned away from the rate policy does not trip
  on what that policy left in the record;
- a close always ramps, also for containers that slept through the outage.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from fleetbreaker import BreakerConfig
from fleetbreaker.policy import Policy
from fleetbreaker.record import WINDOW_BUCKETS, CensusBucket, Record, State
from fleetbreaker.tuning import encode_tuned
from tests.fleet.harness import Fleet

Scenario = Callable[[Any, int, str], list[str]]

# Emulators answer slower than DynamoDB: a deadline no loaded machine misses (the deadline
# is not what these trials are about).
SLOW_STORE = 30.0


def count_config(**changes: Any) -> BreakerConfig:
    values: dict[str, Any] = {
        "failure_threshold": 5,
        "window_seconds": 60,
        "cache_ttl": 1.0,
        "recovery_timeout": 30,
        "store_deadline_seconds": SLOW_STORE,
    }
    values.update(changes)
    return BreakerConfig(**values)


def outage(fleet: Fleet, limit_s: float = 10.0) -> tuple[int, int]:
    """Fail every call until every active container has been turned away (or ``limit_s``):
    (failing calls sent, the clock when the outage began)."""
    since = {i: c.rejected for i, c in enumerate(fleet.containers)}
    before, started = fleet.failing_sent(), fleet.clock()
    fleet.failing = True
    fleet.run_for(limit_s, stop=lambda: fleet.all_rejecting(since))
    return fleet.failing_sent() - before, started


def exact_open(fleet: Fleet, sent: int, started: int, containers: int) -> list[str]:
    """What the outage that began at ``started`` broke of the count policy's guarantees."""
    problems = []
    threshold = fleet.config.failure_threshold
    trips = [at for at in fleet.ledger.trips if at >= started]
    if len(trips) != 1:
        return [f"{len(trips)} trips in the outage"]
    window_ms = round(fleet.config.window_seconds * 1000)
    written = fleet.ledger.written_since(max(started, trips[0] - window_ms), trips[0])
    if written != [1] * threshold:
        problems.append(f"opened on failure writes of weights {written}")
    if sent > threshold + containers:
        problems.append(f"{sent} failing calls sent (bound {threshold + containers})")
    if fleet.ledger.census_transitions:
        problems.append("a census write made a transition")
    return problems


def census_of(containers: float, now_ms: int, policy: Policy, rng: random.Random) -> Record:
    """A closed record holding the census ``containers`` containers sent over the window
    ending at ``now_ms`` (each slice a Poisson draw)."""
    bucket = policy.bucket_ms
    current = now_ms // bucket
    census = {}
    for age in range(WINDOW_BUCKETS):
        span = now_ms - current * bucket if age == 0 else bucket
        mean = containers * span / 200_000
        census[(current - age) % WINDOW_BUCKETS] = CensusBucket(current - age, poisson(rng, mean))
    return Record(updated_at=now_ms, expires_at=now_ms // 1000 + 86_400, census=census)


def poisson(rng: random.Random, mean: float) -> int:
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    count, total = 0, rng.expovariate(1.0)
    while total < mean:
        count += 1
        total += rng.expovariate(1.0)
    return count


# -- the scenarios ------------------------------------------------------------------------


def one_container_short_window(store: Any, seed: int, name: str) -> list[str]:
    """One container, window_seconds=1, threshold 3: its own census write lands 0 to 200 ms
    before the outage (once read as 1,000 to 2,000 containers)."""
    config = count_config(failure_threshold=3, window_seconds=1)
    fleet = Fleet(store, config, seed=seed, name=name)
    fleet.add(1, period_s=0.05)
    fleet.run_for(0.5 + 4.5 * fleet.rng.random())
    store.census(name, Policy.from_config(config), fleet.clock(), None)
    fleet.run_for(0.2 * fleet.rng.random())
    sent, started = outage(fleet, 3.0)
    return exact_open(fleet, sent, started, 1)


def hundred_reset_after_long_open(store: Any, seed: int, name: str) -> list[str]:
    """100 containers reset after a 15-minute open, then an outage."""
    fleet = Fleet(store, count_config(), seed=seed, name=name)
    fleet.add(100, period_s=1.0)
    fleet.run_for(3)
    fleet.containers[0].breaker.force_open()
    # Most sleep through the override; a few keep calling (and refreshing) now and then.
    fleet.set_active(range(5, 100), False)
    fleet.set_period(range(5), 10.0)
    fleet.run_for(15 * 60)
    fleet.containers[0].breaker.reset()
    fleet.set_period(range(5), 1.0)
    fleet.set_active(range(5, 100), True)
    fleet.run_for(10 * fleet.rng.random())
    sent, started = outage(fleet)
    return exact_open(fleet, sent, started, 100)


def scale_in_from_5000(store: Any, seed: int, name: str) -> list[str]:
    """5,000 containers' census in the record, then only 10 left; an outage from a slice and
    3 s after the scale-in (the census's documented settling time) to a window later."""
    config = count_config()
    policy = Policy.from_config(config)
    fleet = Fleet(store, config, seed=seed, name=name)
    from tests.fleet.harness import seed_record

    seed_record(store, name, census_of(5_000, fleet.clock(), policy, fleet.rng))
    fleet.add(10, period_s=0.5)
    settle_s = policy.bucket_ms / 1000 + 3
    fleet.run_for(settle_s + 60 * fleet.rng.random())
    sent, started = outage(fleet)
    return exact_open(fleet, sent, started, 10)


def ten_after_the_rate_policy(store: Any, seed: int, name: str) -> list[str]:
    """10 containers ran the rate policy (reports fill the window), then the count policy
    is deployed: an outage."""
    rate = count_config(failure_rate_threshold=0.5, minimum_calls=20)
    fleet = Fleet(store, rate, seed=seed, name=name)
    fleet.add(10, period_s=0.2)
    fleet.run_for(5 + 15 * fleet.rng.random())
    count = count_config()
    for index in range(10):
        fleet.retune(index, count)
    fleet.config = count
    fleet.run_for(10 * fleet.rng.random())
    sent, started = outage(fleet)
    return exact_open(fleet, sent, started, 10)


def tune_clear_from_the_rate_policy(store: Any, seed: int, name: str) -> list[str]:
    """A count-policy fleet tuned to the rate policy runs with 10 % failures (well past the
    count threshold, under the rate one), then ``tune --clear``: no trip and no call turned
    away in the 10 s after it (once: a trip a second after the clear); then an outage opens
    it exactly."""
    config = count_config()
    policy = Policy.from_config(config)
    fleet = Fleet(store, config, seed=seed, name=name)
    fleet.add(10, period_s=0.2)
    fleet.run_for(2)
    store.tune(name, policy, fleet.clock(), encode_tuned({"failure_rate_threshold": 0.5}), None)
    fleet.noise = 0.1
    fleet.run_for(5 + 10 * fleet.rng.random())
    fleet.noise = 0.0
    store.tune(name, policy, fleet.clock(), "", None)
    cleared = fleet.clock()
    rejected = sum(c.rejected for c in fleet.containers)
    fleet.run_for(10)
    problems = []
    if any(at >= cleared for at in fleet.ledger.trips):
        problems.append("tripped after tune --clear with no new failure")
    turned_away = sum(c.rejected for c in fleet.containers) - rejected
    if turned_away:
        problems.append(f"{turned_away} healthy calls turned away after tune --clear")
    sent, started = outage(fleet)
    return problems + exact_open(fleet, sent, started, 10)


def a_slice_past_any_fleet(store: Any, seed: int, name: str) -> list[str]:
    """A census slice holding 10^13 writes (a valid stored number), anywhere in the window;
    10 containers, then an outage of 20 failing calls a second."""
    config = count_config()
    policy = Policy.from_config(config)
    fleet = Fleet(store, config, seed=seed, name=name)
    current = fleet.clock() // policy.bucket_ms
    age = fleet.rng.randrange(WINDOW_BUCKETS)
    slot = (current - age) % WINDOW_BUCKETS
    from tests.fleet.harness import seed_record

    bogus = Record(
        updated_at=fleet.clock(),
        expires_at=fleet.clock() // 1000 + 86_400,
        census={slot: CensusBucket(current - age, 10**13)},
    )
    seed_record(store, name, bogus)
    fleet.add(10, period_s=0.5)
    fleet.run_for(fleet.rng.random())
    sent, started = outage(fleet, 20.0)
    return exact_open(fleet, sent, started, 10)


def idle_through_the_outage(store: Any, seed: int, name: str) -> list[str]:
    """10 containers; an outage opens the breaker; all but one sleep through it (1 to 15
    minutes); the one left probes it closed; the sleepers wake: each must ramp."""
    config = count_config(recovery_timeout=10, recovery_ramp_seconds=10)
    fleet = Fleet(store, config, seed=seed, name=name)
    fleet.add(1, period_s=1.0)  # the one that stays
    fleet.add(9, period_s=0.05)
    fleet.run_for(2)
    sent, started = outage(fleet)
    problems = exact_open(fleet, sent, started, 10)
    fleet.set_active(range(1, 10), False)
    fleet.run_for(60 + 840 * fleet.rng.random())
    fleet.failing = False
    # Failed probes grew the open window up to max_recovery_timeout (300 s).
    fleet.run_for(320, stop=lambda: bool(fleet.ledger.closes))
    if not fleet.ledger.closes:
        return [*problems, "never closed"]
    closed_at = fleet.ledger.closes[-1]
    record = store.load(name, fleet.clock())
    if record is None or record.state is not State.CLOSED or record.closed_at != closed_at:
        problems.append(f"the record does not say when it closed: {record!r}")
    fleet.record_admissions = True
    fleet.run_for(1.5 * fleet.rng.random())
    fleet.set_active(range(1, 10), True)
    fleet.run_for(2)
    woken = [
        admitted
        for container in fleet.containers[1:]
        for at, admitted in container.admitted_log
        if at <= closed_at + 3_500
    ]
    # Within 3.5 s of the close a 10 s ramp admits at most 41.5 %.
    if not woken or sum(woken) / len(woken) > 0.6:
        problems.append(f"{sum(woken)} of {len(woken)} calls admitted: no ramp")
    return problems


SCENARIOS: dict[str, Scenario] = {
    "one-container-1s-window": one_container_short_window,
    "100-reset-after-15-min-open": hundred_reset_after_long_open,
    "scale-in-5000-to-10": scale_in_from_5000,
    "10-after-the-rate-policy": ten_after_the_rate_policy,
    "tune-clear-from-rate": tune_clear_from_the_rate_policy,
    "slice-of-10^13": a_slice_past_any_fleet,
    "idle-through-the-outage": idle_through_the_outage,
}
