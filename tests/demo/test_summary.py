"""The demo's figures from recorded calls: half-open windows, when a fleet closed again, and
payments per second over the seconds every run covers."""

from __future__ import annotations

import pytest

from bench.demo.container import Call
from bench.demo.report import Run, table
from bench.demo.summary import Rates, RunRecord, closed_since, rates, summarize

OUTAGE = (1.0, 3.0)


def call(container: int, start: float, status: int, windows: tuple[int, ...] = ()) -> Call:
    return Call(container, start, start + 0.01, status, "closed", 0, windows)


def record(shared: bool, calls: list[Call]) -> RunRecord:
    return RunRecord("run", "a run", "a store", shared, 2, OUTAGE, calls=calls)


def test_a_shared_window_is_one_generation_of_the_fleet_record() -> None:
    # GIVEN two containers that each won a lease in half-open generation 4, and one in 6
    calls = [call(0, 1.5, 502, (4,)), call(1, 1.6, 502, (4,)), call(0, 3.5, 200, (6,))]

    # WHEN the calls come from a shared breaker, THEN generation 4 was one window of two probes
    shared = summarize(record(True, calls))
    assert shared.probes_per_window == (2, 1)
    # AND from per-container breakers, each container's generation 4 was a window of its own
    assert summarize(record(False, calls)).probes_per_window == (1, 1, 1)
    # AND probes that met the failing provider and the recovered one are counted apart
    assert (shared.failed_probes, shared.probes_at_recovery) == (2, 1)


def test_a_container_is_closed_from_its_first_charge_after_its_last_refusal() -> None:
    # GIVEN a container charged once after the recovery, then turned one away, then charged
    calls = [call(0, 3.1, 202), call(0, 3.2, 200), call(0, 3.3, 503), call(0, 3.4, 200)]

    # THEN it counts as closed from the last charge on; without that charge, not at all
    assert closed_since(calls, after=3.0) == calls[3].end
    assert closed_since(calls[:3], after=3.0) is None


def test_a_payment_failing_on_noise_after_the_recovery_leaves_the_container_closed() -> None:
    # GIVEN a container charging after the recovery, then admitting a payment that the
    # provider failed (background noise): the breaker let it through
    calls = [call(0, 3.1, 202), call(0, 3.2, 200), call(0, 3.3, 502), call(0, 3.4, 200)]

    # THEN it has been closed since its first charge
    assert closed_since(calls, after=3.0) == calls[1].end


def opened(container: int, start: float, gen: int, at: float) -> Call:
    return Call(container, start, start + 0.01, 202, "open", 0, (), gen, at)


def test_a_trip_before_the_outage_is_spurious_once_per_generation() -> None:
    # GIVEN two containers that saw generation 2 open at 0.5 s, and generation 4 opened at
    # 1.2 s, after the outage began (1.0 s)
    calls = [opened(0, 0.6, 2, 0.5), opened(1, 0.7, 2, 0.5), opened(0, 1.3, 4, 1.2)]

    # THEN a shared breaker tripped spuriously once; per-container breakers once each
    assert summarize(record(True, calls)).spurious_trips == 1
    assert summarize(record(False, calls)).spurious_trips == 2


def test_noise_failures_are_not_counted_as_the_outages() -> None:
    # GIVEN the provider failing one request before the outage and two in it
    rec = record(True, [])
    rec.provider = [(0.5, False), (0.9, True), (1.2, False), (2.5, False), (3.5, True)]

    # THEN two failing calls are the outage's, one is noise
    summary = summarize(rec)
    assert (summary.failing_calls, summary.noise_failures) == (2, 1)


def test_the_fleet_rejects_once_its_last_container_turned_a_payment_away() -> None:
    # GIVEN container 0 turning payments away 0.2 s into the outage, container 1 0.5 s in
    calls = [call(0, 1.2, 202), call(1, 1.1, 502), call(1, 1.5, 503)]

    # THEN the whole fleet rejected 0.5 s after the outage began; with container 1 still
    # admitting, it did not
    assert summarize(record(True, calls)).seconds_to_reject == 0.5
    assert summarize(record(True, calls[:2])).seconds_to_reject is None


def test_the_fleet_is_closed_when_its_last_container_is() -> None:
    # GIVEN container 0 charging from 3.2 s and container 1 from 3.6 s (recovery at 3.0 s)
    calls = [call(0, 3.2, 200), call(1, 3.2, 202), call(1, 3.6, 200), call(1, 3.8, 200)]

    # THEN the fleet closed 0.61 s after the recovery, and not at all without container 1
    summary = summarize(record(True, calls))
    assert summary.recovery_to_closed is not None
    assert round(summary.recovery_to_closed, 2) == 0.61
    assert summarize(record(True, calls[:2])).recovery_to_closed is None


def run_of(calls: list[Call], duration: float, title: str) -> Run:
    rec = RunRecord("run", title, "a store", True, 2, OUTAGE, calls=calls, duration=duration)
    return Run(rec, summarize(rec))


def paced(statuses: list[int], seconds: float) -> list[Call]:
    """One call per status, evenly over ``seconds``, alternating between two containers."""
    step = seconds / len(statuses)
    return [call(n % 2, n * step, status) for n, status in enumerate(statuses)]


def test_rates_count_the_calls_started_in_the_span_per_second() -> None:
    # GIVEN 4 s of calls: 6 charged, 2 failed, 4 turned away (503 and 202), 2 more after 4 s
    calls = paced([200] * 6 + [502] * 2 + [503] * 2 + [202] * 2, 4.0)
    calls += [call(0, 4.5, 200), call(1, 4.6, 200)]
    rec = record(True, calls)

    # THEN over the first 4 s: per second, 3 calls, 1.5 charged, 0.5 failed, 1 turned away
    assert rates(rec, 4.0) == Rates(4.0, calls=3.0, charged=1.5, failed=0.5, turned_away=1.0)


def test_runs_of_different_lengths_are_compared_over_the_same_seconds() -> None:
    # GIVEN two runs at the same pace for their first 4 s; one lasted 4 s, the other went on
    # charging for 4 s more (its fleet closed later, issue 45: 891 against 1,044 calls)
    first = paced([200] * 6 + [502] * 2 + [503] * 4, 4.0)
    longer = first + [call(n % 2, 4.0 + n / 4, 200) for n in range(16)]
    runs = [run_of(first, 4.0, "short run"), run_of(longer, 8.0, "long run")]

    # WHEN the table compares them
    rows = {line.split("|")[1].strip(): line.split("|")[2:4] for line in table(runs).splitlines()}

    # THEN the calls made are shown with each run's length, and the payments per second over
    # the same first 4 s read alike: the long run's extra charges do not flatter it
    made = rows["calls made (a run lasts until its fleet closed, then --linger)"]
    assert [cell.strip() for cell in made] == ["12 in 4.0 s", "28 in 8.0 s"]
    per_second = rows[
        "payments per second over the first 4.0 s (every run): charged / failed / turned away"
    ]
    assert [cell.strip() for cell in per_second] == ["1.5 / 0.5 / 1.0"] * 2
    assert not any("payments charged / failed / turned away" in key for key in rows)


def test_a_span_of_no_seconds_has_no_rates() -> None:
    with pytest.raises(ValueError, match="holds no calls"):
        rates(record(True, []), 0.0)
