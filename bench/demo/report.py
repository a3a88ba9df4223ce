"""The demo's output: the comparison table, a PNG chart of both runs, a markdown summary."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.demo.scenario import COUNT_WINDOW
from bench.demo.summary import CHARGED as CHARGED_STATUS
from bench.demo.summary import STATES, by_container, common_seconds, intervals, rates

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from bench.demo.scenario import Options
    from bench.demo.summary import RunRecord, RunSummary

CHART = "fleet-demo.png"
MARKDOWN = "fleet-demo.md"
BIN = 0.5  # seconds per bar in the chart

COLOURS = {
    "charged": "#2e7d32",
    "failed": "#c62828",
    "rejected": "#78909c",
    "deferred": "#1565c0",
    "closed": "#a5d6a7",
    "half_open": "#ffb74d",
    "open": "#ef9a9a",
    "outage": "#ffebee",
    "drain": "#6a1b9a",
}


@dataclass(frozen=True)
class Run:
    """One run's record and figures, as the report shows them."""

    record: RunRecord
    summary: RunSummary


# --------------------------------------------------------------------------- the table


def _windows(counts: tuple[int, ...]) -> str:
    if not counts:
        return "none"
    low, high = min(counts), max(counts)
    each = f"{low}" if low == high else f"{low} to {high}"
    return f"{len(counts)} × {each}"


def _seconds(value: float | None, never: str = "not closed") -> str:
    return never if value is None else f"{value:.1f} s"


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def mark(held: bool | None) -> str:
    """✓ a guarantee held, ✗ it did not, · a finding that is stated, not checked."""
    return "·" if held is None else "✓" if held else "✗"


@dataclass(frozen=True)
class Row:
    """One row of the comparison: what each run measured, and how the table prints it."""

    figure: str  # the table's first column
    key: str  # the row's name in the demo's JSON (``fleet-demo.json``)
    values: tuple[object, ...]  # per run, machine-readable: numbers, lists, None, dicts
    cells: tuple[str, ...]  # per run, as printed


def _row(figure: str, key: str, runs: list[Run], value: Callable[[Run], object]) -> Row:
    values = tuple(value(run) for run in runs)
    return Row(figure, key, values, tuple(_cell(key, v) for v in values))


def _cell(key: str, value: object) -> str:
    """A value as the table prints it."""
    if key == "probes_per_window":
        assert isinstance(value, list)
        return _windows(tuple(value))
    if key == "seconds_to_reject":
        return _seconds(_number(value), "never")
    if key == "recovery_to_closed":
        return _seconds(_number(value))
    if key == "store_requests" and value is None:
        return "0 (in-process)"
    if key == "calls":
        assert isinstance(value, dict)
        return f"{value['calls']} in {value['seconds']:.1f} s"
    if key == "rates":
        assert isinstance(value, dict)
        return f"{value['charged']:.1f} / {value['failed']:.1f} / {value['turned_away']:.1f}"
    return str(value)


def _number(value: object) -> float | None:
    assert value is None or isinstance(value, (int, float))
    return value


def rows(runs: list[Run]) -> list[Row]:
    """The comparison's rows, in the table's order. A per-container run's store requests are
    None: its breakers keep their state in process and make no store request."""
    found = [
        _row(
            "spurious trips before the outage (opened on noise)",
            "spurious_trips",
            runs,
            lambda run: run.summary.spurious_trips,
        ),
        _row(
            "failing calls sent to the API during the outage",
            "failing_calls",
            runs,
            lambda run: run.summary.failing_calls,
        ),
        _row(
            "… of them failed probes", "failed_probes", runs, lambda run: run.summary.failed_probes
        ),
        _row(
            "seconds from outage start to every container turning payments away",
            "seconds_to_reject",
            runs,
            lambda run: run.summary.seconds_to_reject,
        ),
        _row(
            "probes at recovery",
            "probes_at_recovery",
            runs,
            lambda run: run.summary.probes_at_recovery,
        ),
        _row(
            "half-open windows × probes admitted in each",
            "probes_per_window",
            runs,
            lambda run: list(run.summary.probes_per_window),
        ),
        _row(
            "seconds from provider recovery to the fleet closing",
            "recovery_to_closed",
            runs,
            lambda run: run.summary.recovery_to_closed,
        ),
        _row(
            "store requests made",
            "store_requests",
            runs,
            lambda run: run.summary.store_requests if run.record.shared else None,
        ),
        _row(
            "calls made (a run lasts until its fleet closed, then --linger)",
            "calls",
            runs,
            lambda run: {"calls": run.summary.calls, "seconds": run.record.duration},
        ),
    ]
    common = common_seconds(run.record for run in runs)
    if common > 0:
        # The runs differ in length and in calls made: compare them over the same seconds.
        found.append(
            _row(
                f"payments per second over the first {common:.1f} s (every run): "
                "charged / failed / turned away",
                "rates",
                runs,
                lambda run: asdict(rates(run.record, common)),
            )
        )
    return found


def table(runs: list[Run]) -> str:
    """The comparison as a markdown table, padded so that it also reads as plain text."""
    lines: list[tuple[str, ...]] = [
        ("", *(run.record.title for run in runs)),
        *((row.figure, *row.cells) for row in rows(runs)),
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "| " + " | ".join([first, *rest]) + " |"

    rule = (
        "|"
        + "|".join(["-" * (widths[0] + 2)] + ["-" * (width + 1) + ":" for width in widths[1:]])
        + "|"
    )
    return "\n".join([line(lines[0]), rule, *(line(cells) for cells in lines[1:])])


def rate_bound(options: Options) -> int:
    """The most failing calls the shared rate breaker may let through an outage.

    The window's healthy calls must be outweighed first: the failure rate reaches the
    threshold once that fraction of the window has passed in the outage (plus one of its ten
    buckets, which expire whole), or once ``minimum_calls`` calls were made. Then each
    container reports within ``report_interval`` (the cache TTL, at most 2 s) and learns of
    the trip within ``cache_ttl``, and has at most one call in flight.
    """
    fleet_rate = options.containers * options.rate
    window = options.window
    to_trip = max(float(options.minimum_calls), fleet_rate * window * (options.failure_rate + 0.1))
    report_interval = min(options.cache_ttl, 2.0)
    return math.ceil(
        to_trip + fleet_rate * (report_interval + options.cache_ttl) + options.containers
    )


def guarantees(options: Options, runs: list[Run]) -> list[tuple[bool | None, str]]:
    """The fleet-wide guarantees, checked on the first run (the shared breaker under the
    chosen policy): (held, sentence) each; held is None for a finding that is stated but is
    no guarantee (the count breaker tripping on noise, which is the point of --noise)."""
    shared = runs[0]
    failing = shared.summary.failing_calls
    windows = shared.summary.probes_per_window
    if options.policy == "rate":
        bound = rate_bound(options)
        limit = (
            f"the rate bound (window {options.window:g} s × "
            f"{options.containers * options.rate:g} calls/s × (rate {options.failure_rate:g} "
            f"+ a bucket), then reporting and cache delays, + containers) = {bound}"
        )
    else:
        bound = options.threshold + options.containers
        limit = f"threshold + containers = {options.threshold} + {options.containers} = {bound}"
    checks: list[tuple[bool | None, str]] = []
    trips = shared.summary.spurious_trips
    if options.noise:
        noise = (
            f"under {options.noise:.1%} background errors ({shared.summary.noise_failures} "
            f"failed calls outside the outage)"
        )
        if options.policy == "rate" and options.noise <= options.failure_rate / 4:
            checks.append(
                (
                    trips == 0,
                    f"the shared rate breaker tripped {_times(trips)} before the outage {noise}: "
                    f"noise far below the {options.failure_rate:g} threshold must not open it",
                )
            )
        else:
            checks.append(
                (
                    None,
                    f"the shared {shared.record.policy} breaker tripped {_times(trips)} before "
                    f"the outage {noise}: "
                    + (
                        "expected of a count, which adds up noise however much traffic "
                        "it is diluted in"
                        if shared.record.policy == "count"
                        else "noise this close to the threshold may open a rate breaker"
                    ),
                )
            )
        for other in runs[1:]:
            checks.append(
                (
                    None,
                    f"the {other.record.title} opened on noise "
                    f"{_times(other.summary.spurious_trips)} before the outage and sent "
                    f"{other.summary.failing_calls} failing calls in it",
                )
            )
    checks += [
        (
            failing <= bound,
            f"the shared breaker sent {failing} failing calls during the outage, at most {limit}",
        ),
        (
            bool(windows) and all(count == options.probes for count in windows),
            f"it admitted exactly the probe budget ({options.probes}) in each of its "
            f"{len(windows)} half-open windows: {', '.join(map(str, windows)) or 'none'}",
        ),
    ]
    drain = shared.record.drain
    if drain is not None:
        checks.append(
            (
                drain.twice == 0 and drain.charged == drain.queued and not drain.left,
                f"{drain.line()}: the consumer drained the queue after recovery, once each",
            )
        )
    closed = (
        f"every container closed again after the recovery: "
        f"{_seconds(shared.summary.recovery_to_closed)}"
    )
    if options.noise and options.policy == "count":
        # Noise after the recovery trips a count breaker again: closing is not guaranteed.
        checks.append((None, closed))
    else:
        checks.append((shared.summary.recovery_to_closed is not None, closed))
    checks += [
        (
            None,
            f"the {run.record.title} let every call through: {run.summary.rejected} turned "
            f"away, {run.summary.failing_calls} failing calls reached the payment API, and it "
            f"would have rejected {run.summary.would_rejects} calls "
            f"(the enforcing breaker turned away {shared.summary.turned_away})",
        )
        for run in runs[1:]
        if run.record.label == "shadow"
    ]
    checks += [
        (False, lost_the_store(options, run))
        for run in runs
        if run.record.shared and run.summary.degradations
    ]
    return checks


def lost_the_store(options: Options, run: Run) -> str:
    """Why a shared run's containers went on local state, as the failed check says it: an
    error the store raised that is no timeout is a fault, which no machine's load explains;
    missed deadlines and timeouts are the machine being too busy."""
    lost = (
        f"{sum(1 for r in run.record.reports if r.degradations)} containers lost the store "
        f"and ran on local state ({run.summary.degradations} times, "
        f"{run.summary.store_errors} store errors) in the {run.record.title} run, with a "
        f"{options.deadline:g} s store deadline"
    )
    if run.summary.store_faults:
        return (
            f"{lost}: the store raised {_errors(run.summary.store_faults)}: a fault, not the "
            "machine's load; see containers.log"
        )
    timeouts = run.summary.store_timeouts
    timed_out = f" (the store timed out: {_errors(timeouts)})" if timeouts else ""
    return f"{lost}: the machine is too busy{timed_out}"


def _errors(counts: dict[str, int]) -> str:
    """``TypeError (once), OSError (2 times)``: the most frequent first."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name} ({_times(count)})" for name, count in ranked)


# --------------------------------------------------------------------------- the chart


def chart(runs: list[Run], path: Path) -> Path:
    """The chart (PNG): per run, calls reaching the API and turned away, a lane per container
    with its probes, and the SQS drain in defer mode (:func:`figure`)."""
    import matplotlib.pyplot as plt

    fig = figure(runs)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure(runs: list[Run]) -> Figure:
    """The chart: a column per run, and a legend per panel naming what that panel draws.

    The top three rows cover the run's traffic (the outage, the trip, the recovery); the
    deferred payments' drain, which runs on for tens of seconds after the traffic stopped,
    has a row and a time axis of its own, so it does not squeeze the outage into a corner.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    until = math.ceil(max(run.record.duration for run in runs))
    drains = any(run.record.drained for run in runs)
    heights = [3, 2, 3] + ([2] if drains else [])
    fig, axes = plt.subplots(
        len(heights),
        len(runs),
        figsize=(8.5 * len(runs) + 1.5, sum(heights) + 0.5),
        sharey="row",
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for column, run in enumerate(runs):
        top = axes[0][column]
        axes[1][column].sharex(top)
        axes[2][column].sharex(top)
        _plot_run(run, top, axes[1][column], axes[2][column], until)
    if drains:
        drained_until = math.ceil(
            max(max([run.record.duration, *run.record.drained]) for run in runs)
        )
        for column, run in enumerate(runs):
            _plot_drain(run, axes[3][column], drained_until)
        axes[3][0].set_ylabel("payments charged from\nthe SQS queue per second")
    axes[0][0].set_ylabel("calls reaching the\npayment API per second")
    axes[1][0].set_ylabel("calls turned away\nper second")
    axes[2][0].set_ylabel("each container's view\nof the breaker (a lane each)")
    for row in axes:
        for ax in row:
            # Each panel's own legend, from what it drew: runs differ (a shadow run turns
            # nothing away, per-container breakers have no drain), so one panel's legend
            # cannot stand for another's. The bars first, as they are stacked.
            handles, labels = ax.get_legend_handles_labels()
            if not handles:
                continue
            order = sorted(range(len(handles)), key=lambda i: _is_line(handles[i]))
            ax.legend(
                [handles[i] for i in order],
                [labels[i] for i in order],
                loc="upper left",
                bbox_to_anchor=(1.01, 1.0),
                fontsize=7,
                frameon=False,
            )
    fig.tight_layout()
    return fig


def _is_line(handle: object) -> bool:
    from matplotlib.container import BarContainer
    from matplotlib.patches import Polygon

    return not isinstance(handle, (BarContainer, Polygon))


def _plot_run(run: Run, calls: Axes, turned: Axes, states: Axes, until: float) -> None:
    """One run's column. A series is drawn, and so labelled, only when it holds something."""
    record, summary = run.record, run.summary
    bins = intervals(record, BIN, until)
    starts = [row.start for row in bins]
    charged = [row.api_charged / BIN for row in bins]
    failed = [row.api_failed / BIN for row in bins]
    if any(charged):
        calls.bar(starts, charged, BIN, align="edge", color=COLOURS["charged"], label="charged")
    if any(failed):
        calls.bar(
            starts,
            failed,
            BIN,
            bottom=charged,
            align="edge",
            color=COLOURS["failed"],
            label="failed: the API is down, or noise"
            if summary.noise_failures
            else "failed: the API is down",
        )
    # Turned away: the breaker answered without calling the provider (503, or 202 deferred).
    rejected = [(row.turned_away - row.deferred) / BIN for row in bins]
    deferred = [row.deferred / BIN for row in bins]
    if any(rejected):
        turned.bar(
            starts,
            rejected,
            BIN,
            align="edge",
            color=COLOURS["rejected"],
            label="503: circuit open",
        )
    if any(deferred):
        turned.bar(
            starts,
            deferred,
            BIN,
            bottom=rejected,
            align="edge",
            color=COLOURS["deferred"],
            label="202: deferred to SQS",
        )
    if not any(rejected) and not any(deferred):
        turned.text(
            0.5,
            0.5,
            "no call turned away",
            transform=turned.transAxes,
            ha="center",
            va="center",
            color="#546e7a",
        )
    _plot_lanes(record, states, until)
    states.set_xlabel("seconds since the run began")
    closed = summary.recovery_to_closed
    for ax in (calls, turned, states):
        # Labelled once, in the run's top panel ("_" hides a label from a legend).
        hide = "" if ax is calls else "_"
        ax.axvspan(
            *record.outage, color=COLOURS["outage"], zorder=0, label=f"{hide}the API is down"
        )
        if closed is not None:
            ax.axvline(
                record.outage[1] + closed,
                color="#1b5e20",
                linestyle="--",
                lw=1,
                label=f"{hide}every container closed",
            )
        ax.grid(axis="y", alpha=0.3)
        ax.set_xlim(0, until)
    plural = "" if summary.probes_at_recovery == 1 else "s"
    calls.set_title(
        f"{record.title}\n"
        + (
            f"opened on noise {_times(summary.spurious_trips)}, {summary.failing_calls} "
            "failing calls in the outage, "
            if summary.noise_failures
            else f"{summary.failing_calls} failing calls reached the API, "
        )
        + f"{summary.probes_at_recovery} probe{plural} at recovery",
        fontsize=11,
    )


# A probe is in flight for milliseconds: drawn at least this wide (seconds), so that a
# per-container breaker's half-open state shows on its lane.
PROBE_MIN_WIDTH = 0.1
LANE_HEIGHT = 0.8  # of a lane's height of 1: the gaps keep the lanes apart
DRAIN_BIN = 1.0  # seconds per bar of the drain


def lanes(record: RunRecord, until: float) -> dict[str, dict[int, list[tuple[float, float]]]]:
    """Each container's view of the breaker, as (start, width) spans by state and container.

    A container sees the state its last call ended with until its next call ends (closed
    before its first). A probe is half-open while it is in flight: the span of the call that
    held the lease, at least PROBE_MIN_WIDTH wide. A per-container breaker is half-open only
    then; the calls of a shared breaker's other containers see it half-open too.
    """
    spans: dict[str, dict[int, list[tuple[float, float]]]] = {state: {} for state in STATES}
    for number, calls in by_container(record.calls).items():
        edges = [0.0, *(min(call.end, until) for call in calls), until]
        seen = ["closed", *(call.seen for call in calls)]
        runs: list[tuple[str, float, float]] = []
        for state, start, end in zip(seen, edges, edges[1:], strict=False):
            if runs and runs[-1][0] == state:
                runs[-1] = (state, runs[-1][1], end)
            elif end > start:
                runs.append((state, start, end))
        for state, start, end in runs:
            spans[state].setdefault(number, []).append((start, end - start))
        for call in calls:
            if call.probe and call.start < until:
                width = max(call.end - call.start, PROBE_MIN_WIDTH)
                spans["half_open"].setdefault(number, []).append((call.start, width))
    return spans


def _plot_lanes(record: RunRecord, ax: Axes, until: float) -> None:
    """A lane per container, coloured by the state it saw; each probe marked on its lane."""
    spans = lanes(record, until)
    # Half-open last: a probe's span is drawn over the state its lane shows around it.
    for state in ("closed", "open", "half_open"):
        label = state.replace("_", "-")
        for number in sorted(spans[state]):
            ax.broken_barh(
                spans[state][number],
                (number + (1 - LANE_HEIGHT) / 2, LANE_HEIGHT),
                color=COLOURS[state],
                label=label,
                zorder=1 + (state == "half_open"),
            )
            label = "_" + label  # one legend entry per state
    probes = [call for call in record.calls if call.probe and call.start < until]
    charged = [call for call in probes if call.status == CHARGED_STATUS]
    failed = [call for call in probes if call.status != CHARGED_STATUS]
    for group, marker, colour, label in (
        (failed, "v", "black", "a probe the API failed"),
        (charged, "^", COLOURS["charged"], "a probe that charged"),
    ):
        if group:
            ax.plot(
                [call.start for call in group],
                [call.container + 0.5 for call in group],
                marker,
                color=colour,
                markersize=4,
                linestyle="none",
                label=label,
                zorder=3,
            )
    ax.set_ylim(0, record.containers)
    ax.set_yticks([])


def _plot_drain(run: Run, ax: Axes, until: float) -> None:
    """The deferred payments the consumer charged after the recovery, on their own time axis."""
    record = run.record
    if record.drained:
        starts = [i * DRAIN_BIN for i in range(max(1, math.ceil(until / DRAIN_BIN)))]
        charged = [
            sum(start <= at < start + DRAIN_BIN for at in record.drained) / DRAIN_BIN
            for start in starts
        ]
        ax.bar(
            starts,
            charged,
            DRAIN_BIN,
            align="edge",
            color=COLOURS["drain"],
            label="charged from the SQS queue (drain)",
        )
        ax.axvline(
            record.duration,
            color="#546e7a",
            linestyle=":",
            lw=1,
            label="the run's traffic stopped",
        )
    else:
        deferred = run.summary.deferred
        ax.text(
            0.5,
            0.5,
            f"none of its {deferred} deferred payments charged from the queue"
            if deferred
            else "no payment deferred",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="#546e7a",
        )
    ax.axvspan(*record.outage, color=COLOURS["outage"], zorder=0, label="_the API is down")
    ax.grid(axis="y", alpha=0.3)
    ax.set_xlim(0, until)
    ax.set_xlabel("seconds since the run began (the drain's own axis)")


# --------------------------------------------------------------------------- markdown


COUNT_TEXT = (
    "The shared breaker trips the whole fleet after about `threshold` failures and admits "
    "exactly the probe budget per half-open window; per-container breakers each learn of "
    "the outage on their own (`threshold` failures each) and each probe the recovering "
    "provider. The seconds to close depend on the jittered open windows after a failed "
    "probe and on `cache_ttl`, so they vary from run to run."
)


def markdown(options: Options, runs: list[Run], chart_name: str) -> str:
    shared = next(run for run in runs if run.record.shared)
    noise = f" under {options.noise:.1%} background errors" if options.noise else ""
    lines = [
        f"# fleetbreaker demo: one payment-API outage{noise}, two fleets",
        "",
        f"{options.describe()}. Both runs invoke the payment function's real handler "
        "(`functions/payment/app.py`, built by `create_handler`) with HTTP API events; the "
        f"shared breaker keeps its state in {shared.record.store}, the per-container breakers "
        f"in a MemoryStore each. While open, payments are "
        f"{'deferred to SQS (202)' if options.fallback == 'defer' else 'rejected (503)'}.",
        "",
        table(runs),
        "",
        *(
            [
                "Deferred payments found in each run's SQS queue: "
                + ", ".join(
                    f"{run.record.queued} of {run.summary.deferred} ({run.record.title})"
                    for run in runs
                )
                + ".",
                "",
                *(
                    f"- {run.record.title}: {run.record.drain.line()}"
                    for run in runs
                    if run.record.drain is not None
                ),
                "",
            ]
            if options.fallback == "defer"
            else []
        ),
        "The fleet-wide guarantees, on the first run (✓ checked, · stated, not a guarantee):",
        "",
        *(f"- {mark(held)} {sentence}" for held, sentence in guarantees(options, runs)),
        "",
        "![calls reaching the API and turned away per second, each container's view of the "
        f"breaker with its probes marked, and the SQS drain in defer mode]({chart_name})",
        "",
        *(_rate_text(options) if options.policy == "rate" else []),
        *([COUNT_TEXT, ""] if options.policy == "count" else []),
        "The function's own logs are in `containers.log`.",
        "",
    ]
    return "\n".join(lines)


def _rate_text(options: Options) -> list[str]:
    return [
        "Both runs share their breaker's state; they differ in the policy. The count breaker "
        f"opens on {options.threshold} failures in its {COUNT_WINDOW:g} s window "
        "whatever the traffic, so the fleet's background errors add up and open it while the "
        "provider is healthy. The rate breaker opens when at least "
        f"{options.failure_rate:.0%} of at least {options.minimum_calls} calls in the window "
        "failed: noise is diluted in the fleet's traffic and never gets there, the outage "
        "does within about that fraction of a window. Failing calls during the outage count "
        "only the outage's: the noise's are counted apart.",
        "",
    ]


def write(options: Options, runs: list[Run], output: Path) -> tuple[Path, Path]:
    """The chart and the markdown summary, in ``output``; returns their paths."""
    output.mkdir(parents=True, exist_ok=True)
    png = chart(runs, output / CHART)
    md = output / MARKDOWN
    md.write_text(markdown(options, runs, png.name))
    return png, md
