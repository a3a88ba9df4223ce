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
from bench.demo.report import Run, figure
from bench.demo.summary import CHARGED, CIRCUIT_OPEN, DEFERRED, PROVIDER_FAILED, RunRecord
from bench.demo.summary import summarize as summarise

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
    """Builds the figure of some runs, and closes every figure it built."""
    import matplotlib.pyplot as plt

    built: list[Any] = []

    def build(runs: list[Run]) -> Any:
        fig = figure(runs)
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
    assert len(panels) == 6
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
    assert "a probe" in legend_entries(calls[0])
    assert legend_entries(turned[0]) == ["503: circuit open"]
    assert legend_entries(states[0]) == ["closed", "half-open", "open"]
    # AND the shadow run's show none of them: it admitted every call, probing none
    assert "a probe" not in legend_entries(calls[1])
    assert legend_entries(turned[1]) == []
    assert legend_entries(states[1]) == ["closed", "open"]
