"""The demo's chart (bench/demo/report.py), checked on the figure's objects (matplotlib Agg).

Each panel's legend names exactly the series drawn on it: no entry for a series the panel
does not draw (a shadow run turns nothing away), none missing for one it does (the enforcing
run's probes). Runs are built from recorded calls, as tests/demo/test_summary.py does: no
demo runs here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench.demo.container import Call
from bench.demo.report import PROBE_MIN_WIDTH, Run, figure
from bench.demo.summary import CHARGED, CIRCUIT_OPEN, DEFERRED, PROVIDER_FAILED, RunRecord
from bench.demo.summary import summarize as summarise
from tests.coverage_scope import untraced

OUTAGE = (1.0, 2.0)
DURATION = 3.0


def call(container: int, start: float, status: int, seen: str, probe: int = 0) -> Call:
    return Call(container, start, start + 0.01, status, seen, 1, (probe,) if probe else ())


def enforcing(status_when_open: int, drained: list[float]) -> Run:
    """Two containers: a trip in the outage, a failed probe, rejections, a probe that closes."""
    calls = [
        call(0, 0.2, CHARGED, "closed"),
        call(1, 0.3, CHARGED, "closed"),
        call(0, 1.1, PROVIDER_FAILED, "open"),
        call(1, 1.2, status_when_open, "open"),
        call(0, 1.5, PROVIDER_FAILED, "open", probe=2),
        call(1, 1.6, status_when_open, "half_open"),
        call(0, 2.1, CHARGED, "closed", probe=4),
        call(1, 2.2, CHARGED, "closed"),
    ]
    provider = [(0.2, True), (0.3, True), (1.1, False), (1.5, False), (2.1, True), (2.2, True)]
    provider += [(at, True) for at in drained]
    record = RunRecord(
        "shared",
        "shared breaker (DynamoDB)",
        "a table",
        True,
        2,
        OUTAGE,
        calls=calls,
        provider=provider,
        duration=DURATION,
        drained=drained,
    )
    return Run(record, summarise(record))


def shadow() -> Run:
    """The same outage behind a shadow breaker: every call reaches the provider, no probe."""
    calls = [
        call(0, 0.2, CHARGED, "closed"),
        call(1, 0.3, CHARGED, "closed"),
        call(0, 1.1, PROVIDER_FAILED, "open"),
        call(1, 1.2, PROVIDER_FAILED, "open"),
        call(0, 2.1, CHARGED, "closed"),
        call(1, 2.2, CHARGED, "closed"),
    ]
    provider = [(0.2, True), (0.3, True), (1.1, False), (1.2, False), (2.1, True), (2.2, True)]
    record = RunRecord(
        "shadow",
        "shadow breaker (DynamoDB)",
        "a table",
        True,
        2,
        OUTAGE,
        calls=calls,
        provider=provider,
        duration=DURATION,
    )
    return Run(record, summarise(record))


def polygon_area(vertices: Any) -> float:
    xs, ys = vertices[:, 0], vertices[:, 1]
    return float(abs(sum(xs[i] * ys[i - 1] - xs[i - 1] * ys[i] for i in range(len(xs)))) / 2)


def draws_something(artist: Any) -> bool:
    """Whether a labelled artist puts anything on the panel."""
    import numpy
    from matplotlib.collections import PolyCollection
    from matplotlib.container import BarContainer
    from matplotlib.lines import Line2D
    from matplotlib.patches import Polygon, Rectangle

    if isinstance(artist, BarContainer):
        return any(bar.get_height() > 0 for bar in artist.patches)
    if isinstance(artist, Line2D):
        heights = numpy.asarray(artist.get_ydata(), dtype=float)
        return bool(heights.size) and bool(numpy.any(heights != 0))
    if isinstance(artist, PolyCollection):
        return any(polygon_area(path.vertices) > 0 for path in artist.get_paths())
    if isinstance(artist, Rectangle):
        return artist.get_width() > 0 and artist.get_height() > 0
    if isinstance(artist, Polygon):
        return polygon_area(artist.get_xy()) > 0
    raise AssertionError(f"no rule for a labelled {type(artist).__name__}")


def labelled_artists(ax: Any) -> list[Any]:
    """What a legend may list: the panel's artists whose label does not start with "_"."""
    candidates = [*ax.containers, *ax.lines, *ax.collections, *ax.patches]
    return [a for a in candidates if not str(a.get_label()).startswith("_")]


def legend_entries(ax: Any) -> list[str]:
    legend = ax.get_legend()
    return [] if legend is None else [text.get_text() for text in legend.get_texts()]


@pytest.fixture
def drawn() -> Iterator[Any]:
    """Builds the figure of some runs, and closes every figure it built. Untraced by
    coverage: matplotlib and bench/ hold none of the measured code (this file's 8 figures
    took 0.9 s more CPU traced)."""
    import matplotlib.pyplot as plt

    built: list[Any] = []

    def build(runs: list[Run]) -> Any:
        fig = untraced(figure)(runs)
        built.append(fig)
        return fig

    yield build
    for fig in built:
        plt.close(fig)


RUN_SETS = {
    "shadow": lambda: [enforcing(CIRCUIT_OPEN, []), shadow()],
    "defer-and-drain": lambda: [enforcing(DEFERRED, [2.5, 2.6]), shadow()],
    "shadow-first": lambda: [shadow(), enforcing(CIRCUIT_OPEN, [])],
}


@pytest.mark.parametrize("runs", sorted(RUN_SETS))
def test_each_panels_legend_lists_exactly_the_series_drawn_on_it(drawn: Any, runs: str) -> None:
    # GIVEN the chart of an enforcing run beside a shadow run
    fig = drawn(RUN_SETS[runs]())
    # THEN on every panel the labelled artists all draw something, and the legend lists
    # exactly them
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    drains = any(run.record.drained for run in RUN_SETS[runs]())
    assert len(panels) == (8 if drains else 6)
    for ax in panels:
        artists = labelled_artists(ax)
        assert all(draws_something(a) for a in artists), [
            a.get_label() for a in artists if not draws_something(a)
        ]
        assert sorted(legend_entries(ax)) == sorted(str(a.get_label()) for a in artists)


def test_the_shadow_demos_panels_differ_where_its_runs_did(drawn: Any) -> None:
    # GIVEN the shadow demo's chart: the enforcing run's column, then the shadow run's
    fig = drawn(RUN_SETS["shadow"]())
    calls, turned, states = fig.axes[0:2], fig.axes[2:4], fig.axes[4:6]
    # THEN the enforcing run's legends show its probes, rejections and half-open state
    assert legend_entries(turned[0]) == ["503: circuit open"]
    assert sorted(legend_entries(states[0])) == sorted(
        ["closed", "half-open", "open", "a probe the API failed", "a probe that charged"]
    )
    # AND the shadow run's show none of them: it admitted every call, probing none
    assert legend_entries(turned[1]) == []
    assert sorted(legend_entries(states[1])) == ["closed", "open"]
    assert not any("probe" in entry for ax in (calls[1], states[1]) for entry in legend_entries(ax))


def test_the_outage_fills_the_time_axis_and_the_drain_has_its_own(drawn: Any) -> None:
    # GIVEN a run whose deferred payments were drained until 40 s, long after its 3 s of
    # traffic (issue 45: the drain took two thirds of the axis, the outage sat in a corner)
    fig = drawn([enforcing(DEFERRED, [4.0, 4.2, 39.5]), shadow()])
    calls, turned, states, drain = fig.axes[0:2], fig.axes[2:4], fig.axes[4:6], fig.axes[6:8]
    # THEN the outage's panels end with the traffic
    for ax in (*calls, *turned, *states):
        assert ax.get_xlim() == (0.0, DURATION)
    # AND the drain has a row of its own, on an axis that reaches its last charge
    assert drain[0].get_xlim()[1] >= 39.5
    assert legend_entries(drain[0]) == [
        "charged from the SQS queue (drain)",
        "the run's traffic stopped",
    ]
    bars = drain[0].containers[0]
    assert sum(bar.get_height() for bar in bars.patches) == 3  # one bar a second, 3 charged
    # AND a run that deferred nothing says so in its drain panel
    assert legend_entries(drain[1]) == []
    assert [t.get_text() for t in drain[1].texts] == ["no payment deferred"]


def test_a_run_whose_deferred_payments_were_not_drained_says_so(drawn: Any) -> None:
    # GIVEN a run that deferred 2 payments, none of them drained, beside one that drained
    fig = drawn([enforcing(DEFERRED, [2.5]), enforcing(DEFERRED, [])])
    # THEN its drain panel names what was left, not "nothing deferred"
    drain = fig.axes[7]
    assert [t.get_text() for t in drain.texts] == [
        "none of its 2 deferred payments charged from the queue"
    ]


def per_container_probes() -> Run:
    """Three per-container breakers that each probed within 20 ms of the others, twice."""
    calls = [call(n, 0.2 + n / 10, CHARGED, "closed") for n in range(3)]
    calls += [call(n, 1.1 + n / 100, PROVIDER_FAILED, "open") for n in range(3)]
    calls += [call(n, 1.5 + n / 100, PROVIDER_FAILED, "open", probe=2) for n in range(3)]
    calls += [call(n, 2.1 + n / 100, CHARGED, "closed", probe=4) for n in range(3)]
    record = RunRecord(
        "per-container",
        "per-container breakers",
        "MemoryStores",
        False,
        3,
        OUTAGE,
        calls=calls,
        provider=[(c.start, c.status == CHARGED) for c in calls],
        duration=DURATION,
    )
    return Run(record, summarise(record))


def probe_marks(ax: Any) -> set[tuple[float, float]]:
    return {
        (round(float(x), 3), float(y))
        for line in ax.lines
        if "probe" in str(line.get_label())
        for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)
    }


def test_each_probe_is_a_mark_of_its_own_on_its_containers_lane(drawn: Any) -> None:
    # GIVEN six probes, three at a time within 20 ms (issue 45: 16 probes made one mark)
    run = per_container_probes()
    fig = drawn([run])
    states = fig.axes[2]
    # THEN each probe is a mark of its own, on the lane of the container that sent it
    expected = {(round(c.start, 3), c.container + 0.5) for c in run.record.calls if c.probe}
    assert len(expected) == 6
    assert probe_marks(states) == expected


def test_a_per_container_breakers_half_open_shows_on_its_lane(drawn: Any) -> None:
    # GIVEN per-container breakers: none of their calls ended half-open (a probe ends the
    # state it opened), yet each was half-open while its probe ran
    run = per_container_probes()
    assert {c.seen for c in run.record.calls} == {"closed", "open"}
    fig = drawn([run])
    states = fig.axes[2]
    # THEN the lanes show half-open at each probe, on its container's lane
    half_open = [c for c in states.collections if c.get_label().lstrip("_") == "half-open"]
    starts = set()
    for collection in half_open:
        for path in collection.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            assert xs.max() - xs.min() >= PROBE_MIN_WIDTH
            starts.add((round(float(xs.min()), 3), int(ys.min())))
    assert starts == {(round(c.start, 3), c.container) for c in run.record.calls if c.probe}
