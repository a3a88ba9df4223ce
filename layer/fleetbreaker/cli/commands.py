"""The commands: list, status, open, disable, reset, tune, watch, create-table and doctor."""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TextIO

from fleetbreaker import tuning
from fleetbreaker.clock import system_clock
from fleetbreaker.errors import ConfigError, CorruptRecordError, StoreError
from fleetbreaker.naming import validate_name
from fleetbreaker.record import State
from fleetbreaker.redaction import redact

if TYPE_CHECKING:
    from fleetbreaker.stores.base import AdminStore
from fleetbreaker.cli.aws import aws_error, caller_identity, dynamodb_client, open_store
from fleetbreaker.cli.common import (
    DEFAULTS,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    POLICY,
    CliError,
    if_interrupted,
    iso,
    printable,
)
from fleetbreaker.cli.doctor import doctor
from fleetbreaker.cli.parser import option_name
from fleetbreaker.cli.view import (
    BreakerView,
    colour_enabled,
    gather_all,
    gather_one,
    output_of,
    render_status,
    render_table,
    view_of,
    window_of,
    write_json,
)

# A merging tune that keeps losing the race to other tunes gives up after this many tries.
TUNE_ATTEMPTS = 4


def _checked_name(name: str) -> str:
    try:
        return validate_name(name)
    except ConfigError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None


def _require(
    store: AdminStore,
    name: str,
    where: str,
    now_ms: int,
    window_seconds: float = DEFAULTS.window_seconds,
) -> BreakerView:
    view = gather_one(store, name, now_ms, window_seconds)
    if view is None:
        hint = _nearest(store, name, now_ms)
        raise CliError(EXIT_NOT_FOUND, f"breaker {name!r} not found in {where}{hint}")
    return view


# How many known names a name that is not found suggests.
SUGGESTIONS = 3


def _nearest(store: AdminStore, name: str, now_ms: int) -> str:
    """ "; did you mean 'inventory-api'?" with the names the store lists nearest to ``name``
    (difflib's ratio, nearest first), or "" when none is near."""
    import difflib

    try:
        known = [listing.name for listing in store.list_records(now_ms)]
    except StoreError:
        return ""  # a caller allowed GetItem but not Scan: no suggestion, still not found
    nearest = difflib.get_close_matches(name, known, n=SUGGESTIONS, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(n) for n in nearest)}?" if nearest else ""


def _require_known(store: AdminStore, name: str, where: str, now_ms: int, command: str) -> None:
    """Refuse to force a breaker the store has never seen (``open inventroy-api``): the
    override would sit on a name no traffic uses while the real breaker stays as it was.

    Suggests the nearest names the store lists. A healthy breaker may have no record yet (a
    count-policy breaker writes nothing until it fails; an idle one's record expires), so
    ``--create`` forces it anyway. The check and the write are two requests: a record that
    appears between them is simply overridden, as with ``--create``.
    """
    try:
        if store.load(name, now_ms) is not None:
            return
    except CorruptRecordError:
        return  # a record is there (unreadable): the override replaces it, as before
    hint = _nearest(store, name, now_ms)
    raise CliError(
        EXIT_NOT_FOUND,
        f"breaker {name!r} not found in {where}, nothing changed{hint} (a breaker that has "
        f"never failed has no record: if {name!r} is right, run `fleetbreaker {command} "
        f"{name} --create`)",
    )


def _tuning_from(args: argparse.Namespace) -> dict[str, int | float | str]:
    values = {s: getattr(args, s) for s in tuning.TUNABLE if getattr(args, s) is not None}
    options = ", ".join(option_name(s) for s in tuning.TUNABLE)
    if args.clear and values:
        raise CliError(EXIT_USAGE, "tune takes settings or --clear, not both")
    if args.clear and args.replace:
        raise CliError(EXIT_USAGE, "tune takes --replace (with settings) or --clear, not both")
    if not args.clear and not values:
        raise CliError(EXIT_USAGE, f"tune needs at least one of {options}, or --clear")
    try:
        tuning.apply_tuning(DEFAULTS, values)
    except ConfigError as exc:
        raise CliError(EXIT_USAGE, f"refused: {exc}") from None
    return values


def _print(args: argparse.Namespace, out: TextIO, views: Sequence[BreakerView]) -> None:
    given = getattr(args, "window", None)
    for view in views:
        # A record that stores its window is counted over it: another window would read its
        # buckets wrongly. The operator learns that the option was not used.
        if given is not None and view.window_seconds not in (None, given):
            sys.stderr.write(
                f"fleetbreaker: note: --window {given:g} not used for {printable(view.name)}: "
                f"its record is counted over its own {view.window_seconds:g} s window\n"
            )
    if args.output != "text":
        objects = [view.as_json() for view in views]
        write_json(out, args.output, objects if args.command == "list" else objects[0])
    elif args.command == "list":
        if views:
            out.write(render_table(views, colour_enabled(out)) + "\n")
    else:
        out.write(render_status(views[0], colour_enabled(out)) + "\n")


_FORCE_TARGETS = {"open": State.FORCED_OPEN, "disable": State.DISABLED, "reset": State.CLOSED}
# What each forcing command does to a breaker, as its interrupt line says it.
_FORCED = {"open": "forced open", "disable": "disabled", "reset": "reset"}


def run(
    args: argparse.Namespace,
    out: TextIO,
    clock: Callable[[], int] = system_clock,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run one parsed command; raises CliError, StoreError or ConfigError on failure."""
    args.output = output_of(args, sys.stderr)
    if args.command == "create-table":
        return create_table(args, out)
    if args.command == "doctor":
        return doctor(args, out, clock)
    name = _checked_name(args.name) if hasattr(args, "name") else ""
    values = _tuning_from(args) if args.command == "tune" else {}
    reason = tuning.check_reason(getattr(args, "reason", None))
    window = window_of(args)
    store, where = open_store(args)
    now = clock()
    if args.command == "list":
        views = gather_all(store, now, window)
        if not views and args.output == "text":  # JSON: [] or, as lines, no line
            out.write(f"no breakers in {where}\n")
        _print(args, out, views)
        return EXIT_OK
    if args.command == "status":
        _print(args, out, [_require(store, name, where, now, window)])
        return EXIT_OK
    if args.command in _FORCE_TARGETS:
        target = _FORCE_TARGETS[args.command]
        if target is State.CLOSED:
            # Resetting a name with no record would only create one: most likely a typo.
            _require(store, name, where, now)
        elif not args.create:
            _require_known(store, name, where, now, args.command)
        again = f"{args.command} {name}{' --create' if getattr(args, 'create', False) else ''}"
        action = tuning.operator_action(target.value, reason, caller_identity(args), clock())
        done = _FORCED[args.command]
        # The write may have reached the store before Ctrl-C: it may or may not be applied.
        with if_interrupted(
            f"while breaker {name!r} was being {done}: it may or may not be; run "
            f"`fleetbreaker {again}` again to be sure"
        ):
            store.force_state(name, POLICY, action.at, target, action=action)
        with if_interrupted(
            f"after breaker {name!r} was {done} (that is done): "
            f"`fleetbreaker status {name}` shows it"
        ):
            _print(args, out, [_require(store, name, where, clock(), window)])
        return EXIT_OK
    if args.command == "tune":
        action = tuning.Action("tune", caller_identity(args), reason, clock())
        with if_interrupted(
            f"while breaker {name!r}'s live settings were being stored: they may or may not "
            "be; run the same tune again to be sure (it merges them again)"
        ):
            if args.clear or args.replace:
                store.tune(name, POLICY, action.at, tuning.encode_tuned(values), action)
            else:
                tune_merged(store, name, values, action)
        with if_interrupted(
            f"after breaker {name!r}'s live settings were stored (that is done): "
            f"`fleetbreaker status {name}` shows them"
        ):
            _print(args, out, [_require(store, name, where, clock(), window)])
        return EXIT_OK
    if args.command == "watch":
        return _watch(args, out, store, name, where, clock, sleep)
    raise CliError(EXIT_USAGE, f"unknown command {args.command!r}")  # pragma: no cover


def create_table(args: argparse.Namespace, out: TextIO) -> int:
    """``create-table NAME``: create it, or compare the existing table with the shape."""
    from fleetbreaker.stores import dynamodb_table

    table = args.table_name
    if not dynamodb_table.TABLE_NAME.fullmatch(table):
        raise CliError(
            EXIT_USAGE, f"table name must be 3 to 255 of A-Z a-z 0-9 _ . -, got {table!r}"
        )
    # The endpoint and the region are checked as for every other command (exit 2); a table
    # lives in one region: it is never guessed.
    client = dynamodb_client(args)
    try:
        with if_interrupted(
            f"while table {table!r} was being created: it may exist without its TTL; run "
            f"`fleetbreaker create-table {table}` again (same options) to finish"
        ):
            created, finished, differences = dynamodb_table.ensure_table(
                client, table, stream=args.stream
            )
    except (StoreError, CliError):
        raise
    except Exception as exc:
        raise aws_error(exc, f"cannot create table {table!r}") from None
    if args.output != "text":
        result = {
            "table": table,
            "created": created,
            "finished": finished,
            "differences": differences,
        }
        write_json(out, args.output, result)
    elif not differences:
        if created:
            done = f"created table {table!r}"
        elif finished:
            done = f"finished table {table!r} (turned its TTL on)"
        else:
            done = f"table {table!r} exists with that shape"
        out.write(f"{done}: {dynamodb_table.describe_shape(stream=args.stream)}\n")
    if differences:
        raise CliError(
            EXIT_NOT_FOUND,
            f"table {table!r} exists but is not a breaker table as template.yaml declares it: "
            + "; ".join(differences),
        )
    return EXIT_OK


def _watch(
    args: argparse.Namespace,
    out: TextIO,
    store: AdminStore,
    name: str,
    where: str,
    clock: Callable[[], int],
    sleep: Callable[[float], None],
) -> int:
    _require(store, name, where, clock())
    # A stream of frames: with JSON, one object per frame and line whatever --output says.
    as_json = args.output != "text"
    # On a terminal each frame is drawn over the last, in place; piped, frames are appended.
    on_screen = out.isatty() and not as_json
    shown = 0
    while args.count is None or shown < args.count:
        if shown:
            sleep(args.interval)
        now = clock()
        frame = _Frame(out)
        try:
            window = window_of(args)
            view = gather_one(store, name, now, window) or view_of(name, None, now)
        except StoreError as exc:
            # A blip mid-incident must not end the watch: say so and try again (with --json
            # as a JSON line too: a reader of the stream gets nothing else). The message may
            # quote the store's URL: never with its password.
            error = redact(str(exc))
            if as_json:
                problem = {"name": name, "error": f"store error: {error}", "at": iso(now)}
                frame.write(json.dumps(problem, sort_keys=True) + "\n")
            else:
                frame.write(f"{iso(now)}  store error: {printable(error)}\n")
        else:
            # Each frame says when it was read: piped into a log, frames are told apart.
            if as_json:
                frame.write(json.dumps({**view.as_json(), "at": iso(now)}, sort_keys=True) + "\n")
            else:
                frame.write(f"at {iso(now)}\n")
                _print(args, frame, [view])
                if not on_screen:
                    frame.write("\n")
        out.write(redraw(frame.getvalue(), first=shown == 0) if on_screen else frame.getvalue())
        out.flush()
        shown += 1
    return EXIT_OK


# ANSI/VT100 controls for watch's in-place redraw: clear the screen once, then for each frame
# move the cursor home, rewrite each line erasing what the last frame left to its right, and
# erase everything below the frame. Clearing the whole screen every second would push each
# frame into the terminal's scrollback, which then holds every frame.
CLEAR_SCREEN = "\x1b[H\x1b[2J"
CURSOR_HOME = "\x1b[H"
ERASE_TO_LINE_END = "\x1b[K"
ERASE_BELOW = "\x1b[J"


def redraw(text: str, first: bool) -> str:
    """``text`` drawn over the frame before it (``first``: on a cleared screen)."""
    lines = "".join(f"{line}{ERASE_TO_LINE_END}\n" for line in text.splitlines())
    return f"{CLEAR_SCREEN if first else CURSOR_HOME}{lines}{ERASE_BELOW}"


class _Frame(io.StringIO):
    """One frame of watch, built whole before it is drawn; coloured as its screen would be."""

    def __init__(self, screen: TextIO) -> None:
        super().__init__()
        self._screen = screen

    def isatty(self) -> bool:
        return self._screen.isatty()


def tune_merged(
    store: AdminStore,
    name: str,
    values: dict[str, int | float | str],
    action: tuning.Action,
) -> None:
    """Merge ``values`` into breaker ``name``'s live settings, as one fenced write: the store
    writes only if the settings are still those the merge started from (``expected``), so a
    tune racing this one is never overwritten: the merge starts again from its result.
    """
    try:
        record = store.load(name, action.at)
        stored = record.tuned if record is not None else ""
    except CorruptRecordError:
        stored = ""  # the write replaces a record no one can read, settings and all
    for _ in range(TUNE_ATTEMPTS):
        settings = tuning.merge_tuned(stored, values)
        try:
            tuning.apply_tuning(DEFAULTS, settings)
        except ConfigError as exc:
            raise CliError(
                EXIT_USAGE,
                f"refused: {exc} (with the live settings {printable(stored)}; --replace drops "
                "them)",
            ) from None
        text = tuning.encode_tuned(settings)
        after = store.tune(name, POLICY, action.at, text, action, expected=stored)
        if after is not None and after.tuned == text:
            return
        stored = after.tuned if after is not None else ""
    raise StoreError(f"could not tune breaker {name!r}: its live settings keep changing")
