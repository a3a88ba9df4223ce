"""The rate policy's store operation, `report`, on every store: the same tests, the same answers.

Times are explicit epoch milliseconds; nothing here sleeps.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fleetbreaker.policy import Policy
from fleetbreaker.record import ProbeReport, Record, Report, State
from fleetbreaker.rules import sliding_window
from fleetbreaker.snapshot import snapshot_of
from tests.support import make_policy

T0 = 1_700_000_000_000
RATE = make_policy(
    failure_rate_threshold=0.5,
    minimum_calls=10,
    window_seconds=10,
    recovery_timeout=5,
    record_ttl_seconds=3_600,
    max_recovery_timeout=60,
)
QUORUM = make_policy(
    failure_rate_threshold=0.5,
    minimum_calls=10,
    min_containers=3,
    window_seconds=10,
    recovery_timeout=5,
    record_ttl_seconds=3_600,
    max_recovery_timeout=60,
)


def send(store: Any, name: str, report: Report, now: int = T0, policy: Policy = RATE) -> Any:
    return store.report(name, policy, now, report, store.load(name, now))


def test_a_first_report_creates_the_window(store: Any, name: str) -> None:
    outcome = send(store, name, Report("a", calls=5, failures=1, slow=2))

    record = store.load(name, T0)
    assert outcome.changed
    assert outcome.record == record
    counts = sliding_window(RATE).counts(record, T0)
    assert (counts.calls, counts.failures, counts.slow, counts.reports) == (5, 1, 2, 1)


def test_reports_in_one_bucket_add_up(store: Any, name: str) -> None:
    for container in "abc":
        send(store, name, Report(container, calls=3, failures=1))

    counts = sliding_window(RATE).counts(store.load(name, T0), T0)
    assert (counts.calls, counts.failures, counts.reports) == (9, 3, 3)


def test_a_later_bucket_keeps_the_earlier_ones_in_the_window(store: Any, name: str) -> None:
    send(store, name, Report("a", calls=3))
    send(store, name, Report("a", calls=4), now=T0 + RATE.bucket_ms)

    assert (
        sliding_window(RATE)
        .counts(store.load(name, T0 + RATE.bucket_ms), T0 + RATE.bucket_ms)
        .calls
        == 7
    )


def test_a_slot_reused_a_window_later_starts_from_zero(store: Any, name: str) -> None:
    send(store, name, Report("a", calls=6, failures=4))
    later = T0 + RATE.window_ms

    send(store, name, Report("a", calls=2), now=later)

    record = store.load(name, later)
    assert record.state is State.CLOSED
    assert sliding_window(RATE).counts(record, later).calls == 2


def test_reaching_the_rate_trips_once_and_clears_the_window(store: Any, name: str) -> None:
    first = send(store, name, Report("a", calls=6, failures=1))
    second = send(store, name, Report("b", calls=4, failures=4))

    assert first.transition is None
    assert second.transition == (State.CLOSED, State.OPEN)
    opened = store.load(name, T0)
    assert (opened.state, opened.gen, opened.open_until) == (State.OPEN, 1, T0 + RATE.base_open_ms)
    assert opened.buckets == {}


# (failures, calls, threshold): in doubles, threshold * calls lands just above failures.
EXACT_THRESHOLDS = [(55, 100, 0.55), (7, 25, 0.28), (7, 50, 0.14), (7, 100, 0.07)]


def test_a_sharp_outage_trips_on_the_newest_buckets_before_the_window(
    store: Any, name: str
) -> None:
    # GIVEN eight healthy buckets of 100 calls each (800 calls, no failure)
    for bucket in range(8):
        send(store, name, Report("a", calls=100), now=T0 + bucket * RATE.bucket_ms)
    # WHEN the next two buckets take 60 calls, all failing: 10 % of the window, but 100 % of
    # its newest two buckets
    now = T0 + 8 * RATE.bucket_ms
    first = send(store, name, Report("b", calls=30, failures=30), now=now)
    second = send(store, name, Report("b", calls=30, failures=30), now=now + RATE.bucket_ms)
    # THEN the first leaves it closed (30 failing calls against the previous bucket's 100
    # healthy ones) and the second trips it (state.RECENT_BUCKETS)
    assert first.transition is None
    assert second.transition == (State.CLOSED, State.OPEN)


def test_the_newest_buckets_need_minimum_calls_of_their_own(store: Any, name: str) -> None:
    # GIVEN a healthy window, WHEN the newest buckets hold 9 calls, all failing (under the
    # policy's minimum of 10)
    for bucket in range(8):
        send(store, name, Report("a", calls=100), now=T0 + bucket * RATE.bucket_ms)
    now = T0 + 9 * RATE.bucket_ms
    outcome = send(store, name, Report("b", calls=9, failures=9), now=now)
    # THEN it stays closed: neither window is judged below its minimum or under its rate
    assert outcome.transition is None
    assert store.load(name, now).state is State.CLOSED


@pytest.mark.parametrize(("failures", "calls", "threshold"), EXACT_THRESHOLDS)
def test_a_failure_rate_exactly_at_the_threshold_trips(
    store: Any, name: str, failures: int, calls: int, threshold: float
) -> None:
    # GIVEN a rate threshold whose double is a hair above the decimal it was written as
    policy = make_policy(
        failure_rate_threshold=threshold, minimum_calls=20, record_ttl_seconds=3_600
    )

    # WHEN the window reaches exactly that fraction of failures
    outcome = send(store, name, Report("a", calls=calls, failures=failures), policy=policy)

    # THEN it trips; one failure fewer does not
    assert outcome.transition == (State.CLOSED, State.OPEN)
    below = send(
        store, name + "-below", Report("a", calls=calls, failures=failures - 1), policy=policy
    )
    assert below.transition is None


@pytest.mark.parametrize(("slow", "calls", "threshold"), EXACT_THRESHOLDS)
def test_a_slow_call_rate_exactly_at_the_threshold_trips(
    store: Any, name: str, slow: int, calls: int, threshold: float
) -> None:
    policy = make_policy(
        slow_call_duration=1.0,
        slow_call_rate_threshold=threshold,
        minimum_calls=20,
        failure_threshold=1_000,
        record_ttl_seconds=3_600,
    )

    outcome = send(store, name, Report("a", calls=calls, slow=slow), policy=policy)

    assert outcome.transition == (State.CLOSED, State.OPEN)
    below = send(store, name + "-below", Report("a", calls=calls, slow=slow - 1), policy=policy)
    assert below.transition is None


def test_an_exact_threshold_holds_for_counts_past_a_doubles_precision(
    store: Any, name: str
) -> None:
    # GIVEN 0.55 and a window whose calls times 20 passes 2^53 (Lua computes in doubles)
    policy = make_policy(failure_rate_threshold=0.55, minimum_calls=20, record_ttl_seconds=3_600)
    calls = 10**13 + 20
    failures = calls * 11 // 20

    # WHEN one failure short of 55 %, then exactly 55 %
    short = send(store, name, Report("a", calls=calls, failures=failures - 1), policy=policy)
    exact = send(store, name + "-exact", Report("a", calls=calls, failures=failures), policy=policy)

    # THEN only the exact one trips
    assert short.transition is None
    assert exact.transition == (State.CLOSED, State.OPEN)


def recover(store: Any, name: str, now: int) -> int:
    """Trip, probe and close the breaker from closed gen 0: the closed generation after."""
    send(store, name, Report("tripper", calls=10, failures=10), now=now)
    later = now + RATE.base_open_ms
    claim = store.claim_probe(name, RATE, later, "n1", store.load(name, later))
    settled = store.settle_probe(
        name, RATE, later, ProbeReport(claim.token, True), store.load(name, later)
    )
    assert settled.transition == (State.HALF_OPEN, State.CLOSED)
    return int(settled.record.gen)


def test_counts_of_an_older_generation_are_dropped(store: Any, name: str) -> None:
    # GIVEN a breaker that tripped and recovered since a container took 15 failures
    gen = recover(store, name, T0)
    later = T0 + RATE.base_open_ms

    # WHEN that container reports them under the generation it took them in
    stale = send(store, name, Report("paused", calls=15, failures=15, gen=0), now=later)

    # THEN they do not enter the new window; counts of the current generation do
    assert not stale.changed
    assert sliding_window(RATE).counts(store.load(name, later), later).calls == 0
    fresh = send(store, name, Report("paused", calls=4, failures=1, gen=gen), now=later)
    assert fresh.changed
    assert sliding_window(RATE).counts(store.load(name, later), later).calls == 4


def test_counts_of_another_generation_do_not_create_a_record(store: Any, name: str) -> None:
    # An absent record is generation 0: counts of generation 5 were taken before it expired.
    outcome = send(store, name, Report("a", calls=10, failures=10, gen=5))

    assert not outcome.changed
    assert store.load(name, T0) is None


def test_failing_containers_read_at_least_one_under_min_containers_1(store: Any, name: str) -> None:
    # GIVEN min_containers=1: the record keeps no container ids
    for container in "abc":
        send(store, name, Report(container, calls=4, failures=1))

    # WHEN the fleet's view is taken
    snapshot = snapshot_of(name, store.load(name, T0), RATE, T0)

    # THEN the failing containers read 1 ("capped as stored"), not 0
    assert (snapshot.failures, snapshot.containers) == (3, 1)


def test_a_report_while_open_is_dropped(store: Any, name: str) -> None:
    send(store, name, Report("a", calls=10, failures=10))
    opened = store.load(name, T0)

    outcome = send(store, name, Report("a", calls=10, failures=10), now=T0 + 1)

    assert not outcome.changed
    assert store.load(name, T0 + 1) == opened


def test_a_stale_observed_record_does_not_lose_counts(store: Any, name: str) -> None:
    send(store, name, Report("a", calls=2))

    store.report(name, RATE, T0, Report("b", calls=3), None)  # b never loaded

    assert sliding_window(RATE).counts(store.load(name, T0), T0).calls == 5


# The quorum tests run on every backend but "degraded": a container on local state is its
# own quorum (state.alone; tests/unit/test_rate_breaker.py covers it).
def test_quorum_counts_distinct_containers_and_trips_at_the_third(
    shared_store: Any, name: str
) -> None:
    store = shared_store
    for i in range(4):
        send(store, name, Report("sick", calls=10, failures=10), now=T0 + i, policy=QUORUM)
    send(store, name, Report("b", calls=1, failures=1), now=T0 + 5, policy=QUORUM)
    assert store.load(name, T0 + 5).state is State.CLOSED

    third = send(store, name, Report("c", calls=1, failures=1), now=T0 + 6, policy=QUORUM)

    assert third.transition == (State.CLOSED, State.OPEN)


def test_quorum_map_keeps_the_newest_min_containers(shared_store: Any, name: str) -> None:
    store = shared_store
    # GIVEN a 1.5 s window: "a" has left it when "c" reports, "b" has not
    policy = make_policy(
        min_containers=2, failure_threshold=100, window_seconds=1.5, record_ttl_seconds=3_600
    )
    for i, container in enumerate("abc"):
        send(store, name, Report(container, calls=1, failures=1), now=T0 + i * 1_000, policy=policy)

    record = store.load(name, T0 + 2_000)
    assert dict(record.failing) == {"b": T0 + 1_000, "c": T0 + 2_000}


def test_a_report_replaces_a_record_past_its_ttl(store: Any, name: str) -> None:
    send(store, name, Report("a", calls=9, failures=9))
    later = T0 + RATE.ttl_s * 1000

    send(store, name, Report("a", calls=1), now=later)

    assert sliding_window(RATE).counts(store.load(name, later), later).calls == 1


def test_racing_reports_all_count_and_trip_exactly_once(atomic_store: Any, name: str) -> None:
    store = atomic_store
    results: list[Any] = []
    lock = threading.Lock()
    policy = make_policy(
        failure_rate_threshold=0.5,
        minimum_calls=40,
        min_containers=2,
        record_ttl_seconds=3_600,
        recovery_timeout=5,
        max_recovery_timeout=60,
    )

    def container(number: int) -> None:
        for _ in range(4):
            outcome = store.report(
                name, policy, T0, Report(f"c{number}", calls=2, failures=1), store.load(name, T0)
            )
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=container, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    trips = [o for o in results if o.transition == (State.CLOSED, State.OPEN)]
    assert len(trips) == 1
    assert store.load(name, T0).gen == 1


def test_racing_reports_below_the_rate_lose_no_count(atomic_store: Any, name: str) -> None:
    store = atomic_store

    def container(number: int) -> None:
        for _ in range(5):
            store.report(name, RATE, T0, Report(f"c{number}", calls=3), store.load(name, T0))

    threads = [threading.Thread(target=container, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    counts = sliding_window(RATE).counts(store.load(name, T0), T0)
    assert (counts.calls, counts.reports) == (120, 40)


def test_reports_racing_on_the_quorum_map_lose_no_count(atomic_store: Any, name: str) -> None:
    # GIVEN 12 containers that all fail at once under a quorum of 10: every report rewrites
    # the quorum map, and only one rewrite of a given map can win
    store = atomic_store
    policy = make_policy(
        failure_rate_threshold=1.0,
        minimum_calls=10,
        min_containers=10,
        record_ttl_seconds=3_600,
    )
    start = threading.Barrier(12)
    outcomes: list[Any] = []
    lock = threading.Lock()

    def container(number: int) -> None:
        start.wait()
        for _ in range(5):
            outcome = store.report(
                name, policy, T0, Report(f"c{number}", calls=2, failures=1), store.load(name, T0)
            )
            with lock:
                outcomes.append(outcome)

    # WHEN they report together, five times each
    threads = [threading.Thread(target=container, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # THEN every report's counts are in the window
    counts = sliding_window(policy).counts(store.load(name, T0), T0)
    assert (counts.calls, counts.failures, counts.reports) == (120, 60, 60)
    assert all(outcome.changed for outcome in outcomes)


def test_count_policy_operations_clear_a_rate_window(shared_store: Any, name: str) -> None:
    store = shared_store  # operator overrides are never answered by a degraded store
    send(store, name, Report("a", calls=4, failures=1))
    from fleetbreaker.record import State as S

    store.force_state(name, RATE, T0 + 1, S.FORCED_OPEN)
    store.force_state(name, RATE, T0 + 2, S.CLOSED)

    record: Record = store.load(name, T0 + 2)
    assert record.buckets == {}
    assert dict(record.failing) == {}
