"""`make demo` in its short mode: the fleet-wide guarantees, the report, the live display.

The demo runs in real time against real local servers (moto, an HTTP payment API) with real
container processes invoking the payment handler, so the figures are measured, not scripted.
What is asserted is what the breaker guarantees whatever the timing: the bounds on failing
calls and the probe budget. Timing-dependent figures (seconds to close) are only checked for
being there.
"""

from __future__ import annotations

import re

import pytest

from tests.demo.conftest import ShortDemo

pytestmark = [pytest.mark.slow, pytest.mark.realtime]  # the demo runs on the wall clock

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_shared_breaker_sends_at_most_threshold_plus_containers_failing_calls(
    short_demo: ShortDemo,
) -> None:
    # GIVEN the short demo's shared run (DynamoDB on moto)
    options, summary = short_demo.options, short_demo.shared.summary

    # THEN the fleet tripped after about `threshold` failures: at most one more per container
    # (a call already admitted when the breaker opened), plus the failed probe
    assert summary.failing_calls <= options.threshold + options.containers
    assert summary.trip_failures <= options.threshold + options.containers - 1
    assert summary.failing_calls == summary.trip_failures + summary.failed_probes
    assert summary.trip_failures >= options.threshold


def test_per_container_breakers_each_pay_the_threshold(short_demo: ShortDemo) -> None:
    # GIVEN the short demo's per-container run: same thresholds, a MemoryStore per container
    options, summary = short_demo.options, short_demo.per_container.summary

    # THEN every container learned of the outage on its own: threshold failures each
    assert summary.trip_failures == options.threshold * options.containers
    # AND each of them probed the failing provider, then the recovered one
    assert summary.failed_probes % options.containers == 0
    assert summary.probes_at_recovery == options.containers


def test_each_half_open_window_admits_exactly_the_probe_budget(short_demo: ShortDemo) -> None:
    options = short_demo.options
    shared = short_demo.shared.summary
    per_container = short_demo.per_container.summary

    # THEN the shared breaker admitted exactly the budget in every window
    assert shared.probes_per_window == (options.probes,) * shared.windows
    assert shared.probes_at_recovery == options.probes
    # AND each failed probe opened one more window, and the recovery's probe closed the last:
    # the outage (see SHORT) is too short for a second probe to meet it. Whether the first
    # probe meets it depends on the machine's pace (a busy machine trips the breaker late, and
    # a probe's claim waits on moto), so the relation is asserted, not the count.
    assert shared.windows == shared.failed_probes + 1
    assert shared.failed_probes <= options.probes
    # AND each per-container breaker did too, in windows of its own: one more per failed probe
    assert set(per_container.probes_per_window) == {options.probes}
    assert per_container.windows == per_container.failed_probes + options.containers


def test_every_container_closes_after_the_recovery(short_demo: ShortDemo) -> None:
    # GIVEN both runs, THEN every container admitted payments again before the run ended
    for run in short_demo.result.runs:
        seconds = run.summary.recovery_to_closed
        assert seconds is not None, f"{run.record.title}: the fleet never closed"
        assert 0 < seconds < short_demo.options.max_after
        # Closed again means payments are charged again: the last calls of the run were
        assert {
            call.status for call in run.record.calls if call.start > run.record.duration - 0.5
        } == {200}


def test_the_shared_store_stayed_reachable(short_demo: ShortDemo) -> None:
    # A store that timed out would have put containers on local state and voided the bounds
    shared = short_demo.shared.summary
    assert shared.store_errors == 0
    assert shared.degradations == 0
    assert shared.store_requests > 0
    assert short_demo.per_container.summary.store_requests == 0


def test_payments_turned_away_were_deferred(short_demo: ShortDemo) -> None:
    # GIVEN the default fallback (defer to SQS), THEN no payment got a bare 503, and every
    # 202 is a payment in the run's queue
    for run in short_demo.result.runs:
        assert run.summary.deferred > 0
        assert run.summary.rejected == 0
        assert run.record.queued == run.summary.deferred
        assert run.summary.calls == (
            run.summary.charged + run.summary.provider_failed + run.summary.deferred
        )


def test_chart_is_a_valid_png(short_demo: ShortDemo) -> None:
    # GIVEN the chart the demo wrote, THEN it is a PNG that decodes to a full-size image
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import image

    chart = short_demo.result.chart
    assert chart.read_bytes().startswith(PNG_SIGNATURE)
    pixels = image.imread(chart)
    height, width = pixels.shape[:2]
    assert width > 1000
    assert height > 600


def test_markdown_summary_holds_the_table_and_links_the_chart(short_demo: ShortDemo) -> None:
    # GIVEN the markdown summary, THEN it has the table, links the chart, and no check failed
    text = short_demo.result.markdown.read_text()
    assert "| failing calls sent to the API during the outage" in text
    assert f"]({short_demo.result.chart.name})" in text
    assert "✗" not in text


def test_progress_is_printed_second_by_second(short_demo: ShortDemo) -> None:
    # GIVEN what the demo printed to a pipe (not a terminal)
    lines = short_demo.output.splitlines()
    # THEN each run has one line per second, in order, with none missing
    for run in short_demo.result.runs:
        header = lines.index(
            next(line for line in lines if line.startswith(f"== {run.record.title}"))
        )
        seconds = []
        for line in lines[header + 2 :]:
            if line.startswith("=="):
                break
            if match := re.match(r"\s+(\d+)s  ", line):
                seconds.append(int(match.group(1)))
        assert seconds == list(range(1, round(run.record.duration) + 1))
    # AND the paths of the report come last, the results with the load and the exit code
    assert lines[-3:-1] == [
        f"chart:   {short_demo.result.chart}",
        f"summary: {short_demo.result.markdown}",
    ]
    assert re.fullmatch(
        rf"results: {re.escape(str(short_demo.result.results))} \(load average [\d.]+ at the "
        r"start, [\d.]+ at the end; exit 0\)",
        lines[-1],
    )
