"""What the command shows of a breaker: its view, gathered from the store, rendered."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from fleetbreaker import tuning
from fleetbreaker.config import env_field, env_variable
from fleetbreaker.errors import ConfigError, CorruptRecordError
from fleetbreaker.policy import Policy
from fleetbreaker.record import Record, State
from fleetbreaker.snapshot import Snapshot, snapshot_of

if TYPE_CHECKING:
    from fleetbreaker.stores.base import AdminStore
from fleetbreaker.cli.common import (
    DEFAULTS,
    EXIT_USAGE,
    CliError,
    iso,
    printable,
)

# A record stores the window its figures were counted over (window_ms, stamped by every
# write of a breaker of this version); one written before that does not, and its figures are
# counted over --window, default the functions' BREAKER_WINDOW_SECONDS, else 60.
WINDOW_ENV = env_variable("window_seconds")

# States whose record keeps the failures that tripped the breaker.
TRIPPED = frozenset({State.OPEN, State.HALF_OPEN})

# How the text output shows an open breaker whose window is over (BreakerView.probe_due).
PROBE_DUE = "half-open: next call probes"

_COLOURS = {
    State.CLOSED.value: "32",  # green
    State.OPEN.value: "31",  # red
    State.FORCED_OPEN.value: "1;31",  # bold red
    State.HALF_OPEN.value: "33",  # yellow
    PROBE_DUE: "33",
    State.DISABLED.value: "35",  # magenta
    "corrupt": "1;35",
}


class BreakerView:
    """A breaker's :class:`~fleetbreaker.snapshot.Snapshot` plus what only an operator sees.

    The figures (state, generation, failures, calls, slow calls, containers, open until,
    retry after, last change) are the snapshot's; the view adds the live-tuned settings, the
    last operator action, and why a record could not be read (state "corrupt", no snapshot).
    ``as_json`` gives the stable ``--json`` keys.
    """

    # The window's figures: the snapshot's, or unknown (None) without one (corrupt) or
    # without a record, except the count policy's failures (0: nothing counted).
    failures: int | None
    calls: int | None
    slow_calls: int | None
    containers: int | None

    def __init__(
        self,
        name: str,
        snapshot: Snapshot | None,
        *,
        tuned: dict[str, Any] | None = None,
        last_action: dict[str, Any] | None = None,
        error: str | None = None,
        probe_due: bool = False,
        window_seconds: float | None = None,
    ) -> None:
        self.name = name
        self.snapshot = snapshot
        # The window the figures were counted over (None: no figures, the record is corrupt).
        self.window_seconds = window_seconds
        # Open, its window over: the record still says open (nobody has claimed the probe
        # yet), but the next call is the probe. Shown so, not as "open, retry after 0.0s".
        self.probe_due = probe_due
        self.tuned = tuned
        self.last_action = last_action
        self.error = error
        self.state = "corrupt" if snapshot is None else snapshot.state.value
        self.generation = None if snapshot is None else snapshot.generation
        until = None if snapshot is None else snapshot.open_until
        self.open_until = None if until is None else iso(until)
        opened = snapshot is not None and snapshot.state is State.OPEN
        self.retry_after = snapshot.retry_after if snapshot is not None and opened else None
        updated = None if snapshot is None else snapshot.updated_at
        self.last_change = None if updated is None else iso(updated)
        # "enforce" or "shadow" when tuned live; None: each container runs its deployed
        # BREAKER_MODE (default enforce), which the record does not hold.
        mode = (tuned or {}).get("mode")
        self.mode = mode if isinstance(mode, str) else None
        for figure in ("failures", "calls", "slow_calls", "containers"):
            known = snapshot is not None and (
                snapshot.updated_at is not None or figure == "failures"
            )
            setattr(self, figure, getattr(snapshot, figure) if known else None)

    @property
    def shown_state(self) -> str:
        """The state as the text output shows it."""
        return PROBE_DUE if self.probe_due else self.state

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "generation": self.generation,
            "failures": self.failures,
            "calls": self.calls,
            "slow_calls": self.slow_calls,
            "containers": self.containers,
            "window_seconds": self.window_seconds,
            "open_until": self.open_until,
            "retry_after": self.retry_after,
            "tuned": self.tuned if self.tuned is not None else {},
            "last_action": self.last_action,
            "last_change": self.last_change,
            "error": self.error,
            "mode": self.mode,
        }


def view_of(
    name: str,
    record: Record | None,
    now_ms: int,
    error: str | None = None,
    window_seconds: float = DEFAULTS.window_seconds,
) -> BreakerView:
    """The view of one breaker from its record (None: no record, i.e. closed).

    The figures are :func:`fleetbreaker.snapshot.snapshot_of`'s, with a Policy from
    BreakerConfig's defaults, the window the record stores (``window_seconds`` for a record
    that stores none: no record, or one written before records stored it) and the record's
    tuned settings.
    """
    if error is not None:
        return BreakerView(name, None, error=error)
    if record is not None and record.window_ms > 0:
        window_seconds = record.window_ms / 1000
    config = dataclasses.replace(DEFAULTS, window_seconds=window_seconds)
    tuned: dict[str, Any] = {}
    if record is not None:
        try:
            tuned = tuning.decode_tuned(record.tuned)
            config = tuning.apply_tuning(config, tuned)
        except ConfigError as exc:
            tuned, error = {}, str(exc)
    snapshot = snapshot_of(name, record, Policy.from_config(config), now_ms)
    action = tuning.Action.decode(record.last_action) if record is not None else None
    last_action = None
    if action is not None:
        last_action = {
            "action": action.action,
            "by": action.by,
            "reason": action.reason,
            "at": iso(action.at),
        }
    due = (
        snapshot.state is State.OPEN
        and snapshot.open_until is not None
        and snapshot.open_until <= now_ms
    )
    view = BreakerView(
        name,
        snapshot,
        tuned=tuned,
        last_action=last_action,
        error=error,
        probe_due=due,
        window_seconds=config.window_seconds,
    )
    if record is not None and record.state in TRIPPED and view.failures is not None:
        # The window of an open (or recovering) breaker is empty: its record keeps the
        # failures that tripped it (rules.trip), which is what an operator asks for.
        view.failures = max(view.failures, record.failures)
    return view


def gather_one(
    store: AdminStore, name: str, now_ms: int, window_seconds: float = DEFAULTS.window_seconds
) -> BreakerView | None:
    """One breaker's view, or None when the store holds no record of it."""
    try:
        record = store.load(name, now_ms)
    except CorruptRecordError as exc:
        return view_of(name, None, now_ms, str(exc))
    return None if record is None else _safe_view(name, record, now_ms, None, window_seconds)


def _safe_view(
    name: str, record: Record | None, now_ms: int, error: str | None, window_seconds: float
) -> BreakerView:
    """view_of, or a "corrupt" view saying why a record could not be shown (never a crash)."""
    try:
        return view_of(name, record, now_ms, error, window_seconds)
    except Exception as exc:
        return BreakerView(name, None, error=f"cannot show it: {type(exc).__name__}: {exc}")


def gather_all(
    store: AdminStore, now_ms: int, window_seconds: float = DEFAULTS.window_seconds
) -> list[BreakerView]:
    """Every breaker in the store, sorted by name; one bad record never ends the walk."""
    views = [
        _safe_view(e.name, e.record, now_ms, e.error, window_seconds)
        for e in store.list_records(now_ms)
    ]
    return sorted(views, key=lambda view: view.name)


def window_of(args: argparse.Namespace, environ: Any = None) -> float:
    """The window for records that store none: --window, else BREAKER_WINDOW_SECONDS, else 60."""
    if getattr(args, "window", None) is not None:
        return float(args.window)
    try:
        seconds = env_field("window_seconds", environ)
    except ConfigError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    return DEFAULTS.window_seconds if seconds is None else float(seconds)


# --------------------------------------------------------------------------- output


def _colour(state: str, text: str, enabled: bool) -> str:
    code = _COLOURS.get(state)
    return f"\x1b[{code}m{text}\x1b[0m" if enabled and code else text


def colour_enabled(stream: TextIO) -> bool:
    # https://no-color.org: any non-empty NO_COLOR turns colour off.
    return stream.isatty() and not os.environ.get("NO_COLOR")


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render_table(views: Sequence[BreakerView], colour: bool) -> str:
    """Aligned columns; the state is padded before it is coloured so colour keeps alignment."""
    header = ("NAME", "STATE", "FAILURES", "CALLS", "OPEN UNTIL", "LAST CHANGE")
    rows = [
        (
            printable(v.name),
            v.shown_state,
            _dash(v.failures),
            _dash(v.calls),
            _dash(v.open_until),
            _dash(v.last_change),
        )
        for v in views
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for index, row in enumerate([header, *rows]):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        if index > 0:
            cells[1] = _colour(row[1], cells[1], colour)
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def render_status(view: BreakerView, colour: bool) -> str:
    action = view.last_action
    if action is None:
        action_text = "-"
    else:
        reason = f": {action['reason']}" if action.get("reason") else ""
        action_text = f"{action['action']} by {action['by']} at {action['at']}{reason}"
    tuned = ", ".join(f"{k}={v}" for k, v in sorted((view.tuned or {}).items())) or "-"
    fields = [
        ("name", printable(view.name)),
        ("state", _colour(view.shown_state, view.shown_state, colour)),
        ("generation", _dash(view.generation)),
        ("failures", _dash(view.failures)),
        ("calls", _dash(view.calls)),
        ("slow calls", _dash(view.slow_calls)),
        ("containers", _dash(view.containers)),
        ("window", _seconds(view.window_seconds)),
        ("open until", _dash(view.open_until)),
        ("retry after", "now" if view.probe_due else _seconds(view.retry_after)),
        ("last change", _dash(view.last_change)),
        ("mode", view.mode or f"as deployed ({env_variable('mode')})"),
        ("tuned", printable(tuned)),
        ("last action", printable(action_text)),
    ]
    if view.error:
        fields.append(("error", printable(view.error)))
    width = max(len(label) for label, _ in fields)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in fields)


def write_json(out: TextIO, output: str, payload: dict[str, Any] | list[dict[str, Any]]) -> None:
    """``payload`` as ``--output`` asks: ``json``, one document (indented); ``jsonl``, one
    object per line (a list's items each on its own line, so `list` streams and jq reads
    it)."""
    if output == "json":
        out.write(json.dumps(payload, sort_keys=True, indent=2) + "\n")
        return
    for item in payload if isinstance(payload, list) else [payload]:
        out.write(json.dumps(item, sort_keys=True) + "\n")


def output_of(args: argparse.Namespace, warn: TextIO) -> str:
    """``--output``, or ``jsonl`` for the deprecated ``--json`` (the lines it always printed,
    with a note on ``warn``); ``text`` by default."""
    chosen = getattr(args, "output", None)
    if getattr(args, "json", False):
        if chosen not in (None, "jsonl"):
            raise CliError(
                EXIT_USAGE, f"--json prints what --output jsonl prints: not with --output {chosen}"
            )
        warn.write(
            "fleetbreaker: --json is deprecated: use --output jsonl (the same JSON lines) or "
            "--output json (one document)\n"
        )
        return "jsonl"
    return str(chosen or "text")
