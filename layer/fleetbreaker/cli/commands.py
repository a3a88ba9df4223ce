"""The commands: list, status, open, disable, reset, tune, watch and create-table."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TextIO

from fleetbreaker import tuning
from fleetbreaker.breaker import system_clock
from fleetbreaker.errors import ConfigError, StoreError
from fleetbreaker.naming import validate_name
from fleetbreaker.redaction import redact
from fleetbreaker.state import State

if TYPE_CHECKING:
    from fleetbreaker.stores.base import AdminStore
from fleetbreaker.cli.aws import _aws_error, caller_identity, dynamodb_client, open_store
from fleetbreaker.cli.common import (
    _DEFAULTS,
    _POLICY,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    _iso,
    if_interrupted,
    printable,
)
from fleetbreaker.cli.parser import _option_name
from fleetbreaker.cli.view import (
    BreakerView,
    _colour_enabled,
    _emit_json,
    gather_all,
    gather_one,
    render_status,
    render_table,
    view_of,
    window_of,
)


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
    window_seconds: float = _DEFAULTS.window_seconds,
) -> BreakerView:
    view = gather_one(store, name, now_ms, window_seconds)
    if view is None:
        raise CliError(EXIT_NOT_FOUND, f"breaker {name!r} not found in {where}")
    return view


def _tuning_from(args: argparse.Namespace) -> dict[str, int | float | str]:
    values = {s: getattr(args, s) for s in tuning.TUNABLE if getattr(args, s) is not None}
    options = ", ".join(_option_name(s) for s in tuning.TUNABLE)
    if args.clear and values:
        raise CliError(EXIT_USAGE, "tune takes settings or --clear, not both")
    if not args.clear and not values:
        raise CliError(EXIT_USAGE, f"tune needs at least one of {options}, or --clear")
    try:
        tuning.apply_tuning(_DEFAULTS, values)
    except ConfigError as exc:
        raise CliError(EXIT_USAGE, f"refused: {exc}") from None
    return values


def _print(args: argparse.Namespace, out: TextIO, views: Sequence[BreakerView]) -> None:
    if args.json:
        _emit_json(out, views)
    elif args.command == "list":
        if views:
            out.write(render_table(views, _colour_enabled(out)) + "\n")
    else:
        out.write(render_status(views[0], _colour_enabled(out)) + "\n")


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
    if args.command == "create-table":
        return create_table(args, out)
    name = _checked_name(args.name) if hasattr(args, "name") else ""
    values = _tuning_from(args) if args.command == "tune" else {}
    reason = tuning.check_reason(getattr(args, "reason", None))
    window = window_of(args)
    store, where = open_store(args)
    now = clock()
    if args.command == "list":
        views = gather_all(store, now, window)
        if not views and not args.json:  # JSON Lines: no breaker, no line
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
        action = tuning.Action(target.value, caller_identity(args), reason, clock())
        done = _FORCED[args.command]
        # The write may have reached the store before Ctrl-C: it may or may not be applied.
        with if_interrupted(
            f"while breaker {name!r} was being {done}: it may or may not be; run "
            f"`fleetbreaker {args.command} {name}` again to be sure"
        ):
            store.force_state(name, _POLICY, action.at, target, action=action)
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
            "be; run the same tune again to be sure (it replaces them)"
        ):
            store.tune(name, _POLICY, action.at, tuning.encode_tuned(values), action)
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
        raise _aws_error(exc, f"cannot create table {table!r}") from None
    if args.json:
        result = {
            "table": table,
            "created": created,
            "finished": finished,
            "differences": differences,
        }
        out.write(json.dumps(result, sort_keys=True) + "\n")
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
    clear = out.isatty() and not args.json
    shown = 0
    while args.count is None or shown < args.count:
        if shown:
            sleep(args.interval)
        now = clock()
        try:
            window = window_of(args)
            view = gather_one(store, name, now, window) or view_of(name, None, now)
        except StoreError as exc:
            # A blip mid-incident must not end the watch: say so and try again (with --json
            # as a JSON line too: a reader of the stream gets nothing else). The message may
            # quote the store's URL: never with its password.
            error = redact(str(exc))
            if args.json:
                problem = {"name": name, "error": f"store error: {error}", "at": _iso(now)}
                out.write(json.dumps(problem, sort_keys=True) + "\n")
            else:
                out.write(f"{_iso(now)}  store error: {printable(error)}\n")
        else:
            # Each frame says when it was read: piped into a log, frames are told apart.
            if args.json:
                out.write(json.dumps({**view.as_json(), "at": _iso(now)}, sort_keys=True) + "\n")
            else:
                if clear:
                    out.write("\x1b[H\x1b[2J")
                out.write(f"at {_iso(now)}\n")
                _print(args, out, [view])
                if not clear:
                    out.write("\n")
        out.flush()
        shown += 1
    return EXIT_OK
