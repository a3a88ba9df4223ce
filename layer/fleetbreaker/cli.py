"""The ``fleetbreaker`` command: see and steer a fleet's breakers from a terminal.

Run as ``fleetbreaker`` (the console script) or ``python -m fleetbreaker``. Nothing imports
this module on the breaker's path: ``import fleetbreaker`` stays as light as it was.

Exit codes: 0 ok, 1 breaker (or its record) not found, or (create-table) a table that differs,
2 usage or validation error, 3 store unreachable. Every error is one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, cast

from fleetbreaker import tuning
from fleetbreaker.breaker import system_clock
from fleetbreaker.config import MODES, BreakerConfig, env_field, env_variable
from fleetbreaker.errors import ConfigError, CorruptRecordError, StoreError
from fleetbreaker.naming import validate_name
from fleetbreaker.state import Policy, Record, State, snapshot_of
from fleetbreaker.stores import (
    IAM_CACHE_ENV,
    IAM_USER_ENV,
    TABLE_ENV,
    URL_ENV,
    StoreNotNamedError,
    StoreSettings,
)

if TYPE_CHECKING:
    from fleetbreaker.stores.base import AdminStore

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

# The CLI reads no store variable itself: it maps its options into an environment for the
# functions' store factory (store_environ), which reads them.
REDIS_URL_ENV = URL_ENV
# The outputs of template.yaml the CLI reads with --stack.
TABLE_OUTPUT = "CircuitBreakersTableName"
CACHE_OUTPUT = "BreakerCacheEndpoint"
# The cache's IAM-authenticated user and the cache's name, which its auth tokens are signed for.
CACHE_USER_OUTPUT = "BreakerCacheUserId"
CACHE_NAME_OUTPUT = "BreakerCacheName"

# A CLI may wait longer than a breaker on the hot path, but not forever: an operator during an
# incident must learn quickly that the store is out of reach (exit 3).
STORE_TIMEOUT_S = 3.0
IDENTITY_TIMEOUT_S = 2.0

# Settings CLI callers cannot know (each container has its own config): the CLI checks tuned
# values against BreakerConfig's defaults plus the values themselves.
_DEFAULTS = BreakerConfig()
_POLICY = Policy.from_config(_DEFAULTS)
# The record does not store its window's length (each container has it in its config): the
# figures are counted over --window, default the functions' BREAKER_WINDOW_SECONDS, else 60.
WINDOW_ENV = env_variable("window_seconds")

_COLOURS = {
    State.CLOSED.value: "32",  # green
    State.OPEN.value: "31",  # red
    State.FORCED_OPEN.value: "1;31",  # bold red
    State.HALF_OPEN.value: "33",  # yellow
    State.DISABLED.value: "35",  # magenta
    "corrupt": "1;35",
}


class CliError(Exception):
    """A failure reported as one line and an exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- the view


def _iso(epoch_ms: int) -> str | None:
    if epoch_ms <= 0:
        return None
    try:
        moment = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        # A hand-edited record (an action "at" 1e17 ms): show the number, never fail on it.
        return f"{epoch_ms} ms (not a date)"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def printable(text: str) -> str:
    """``text`` with control characters (ESC, BEL, ...) escaped: a name or reason read from
    the store must not drive the operator's terminal."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
        for c in text
    )


@dataclass(frozen=True)
class BreakerView:
    """What the CLI shows about one breaker; ``as_json`` gives the stable ``--json`` keys.

    ``failures``, ``calls``, ``slow_calls`` and ``containers`` are the record's window as
    :func:`fleetbreaker.state.snapshot_of` counts it (the count policy counts no calls: 0).
    """

    name: str
    state: str
    generation: int | None = None
    failures: int | None = None
    calls: int | None = None
    slow_calls: int | None = None
    containers: int | None = None
    open_until: str | None = None
    retry_after: float | None = None
    tuned: dict[str, Any] | None = None
    last_action: dict[str, Any] | None = None
    last_change: str | None = None
    error: str | None = None
    # "enforce" or "shadow" when tuned live; None: each container runs its deployed
    # BREAKER_MODE (default enforce), which the record does not hold.
    mode: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "generation": self.generation,
            "failures": self.failures,
            "calls": self.calls,
            "slow_calls": self.slow_calls,
            "containers": self.containers,
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
    window_seconds: float = _DEFAULTS.window_seconds,
) -> BreakerView:
    """The view of one breaker from its record (None: no record, i.e. closed).

    The figures come from :func:`fleetbreaker.state.snapshot_of`, with a Policy from
    BreakerConfig's defaults, ``window_seconds`` and the record's tuned settings.
    """
    if error is not None:
        return BreakerView(name, "corrupt", error=error)
    if record is None:
        return BreakerView(name, State.CLOSED.value, 0, 0, tuned={})
    config = dataclasses.replace(_DEFAULTS, window_seconds=window_seconds)
    try:
        tuned = tuning.decode_tuned(record.tuned)
        config = tuning.apply_tuning(config, tuned)
    except ConfigError as exc:
        tuned, error = {}, str(exc)
    snapshot = snapshot_of(name, record, Policy.from_config(config), now_ms)
    action = tuning.Action.decode(record.last_action)
    last_action = None
    if action is not None:
        last_action = {
            "action": action.action,
            "by": action.by,
            "reason": action.reason,
            "at": _iso(action.at),
        }
    is_open = record.state is State.OPEN
    return BreakerView(
        name=name,
        state=record.state.value,
        generation=record.gen,
        failures=snapshot.failures,
        calls=snapshot.calls,
        slow_calls=snapshot.slow_calls,
        containers=snapshot.containers,
        open_until=_iso(record.open_until) if is_open else None,
        retry_after=max(0, record.open_until - now_ms) / 1000 if is_open else None,
        tuned=tuned,
        last_action=last_action,
        last_change=_iso(record.updated_at),
        error=error,
        mode=tuned.get("mode") if isinstance(tuned.get("mode"), str) else None,
    )


def gather_one(
    store: AdminStore, name: str, now_ms: int, window_seconds: float = _DEFAULTS.window_seconds
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
        return BreakerView(name, "corrupt", error=f"cannot show it: {type(exc).__name__}: {exc}")


def gather_all(
    store: AdminStore, now_ms: int, window_seconds: float = _DEFAULTS.window_seconds
) -> list[BreakerView]:
    """Every breaker in the store, sorted by name; one bad record never ends the walk."""
    views = [
        _safe_view(e.name, e.record, now_ms, e.error, window_seconds)
        for e in store.list_records(now_ms)
    ]
    return sorted(views, key=lambda view: view.name)


def window_of(args: argparse.Namespace, environ: Any = None) -> float:
    """Seconds of window the figures cover: --window, else BREAKER_WINDOW_SECONDS, else 60."""
    if getattr(args, "window", None) is not None:
        return float(args.window)
    try:
        seconds = env_field("window_seconds", environ)
    except ConfigError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    return _DEFAULTS.window_seconds if seconds is None else float(seconds)


# --------------------------------------------------------------------------- output


def _colour(state: str, text: str, enabled: bool) -> str:
    code = _COLOURS.get(state)
    return f"\x1b[{code}m{text}\x1b[0m" if enabled and code else text


def _colour_enabled(stream: TextIO) -> bool:
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
            v.state,
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
        ("state", _colour(view.state, view.state, colour)),
        ("generation", _dash(view.generation)),
        ("failures", _dash(view.failures)),
        ("calls", _dash(view.calls)),
        ("slow calls", _dash(view.slow_calls)),
        ("containers", _dash(view.containers)),
        ("open until", _dash(view.open_until)),
        ("retry after", _seconds(view.retry_after)),
        ("last change", _dash(view.last_change)),
        ("mode", view.mode or f"as deployed ({env_variable('mode')})"),
        ("tuned", printable(tuned)),
        ("last action", printable(action_text)),
    ]
    if view.error:
        fields.append(("error", printable(view.error)))
    width = max(len(label) for label, _ in fields)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in fields)


def _emit_json(out: TextIO, views: Sequence[BreakerView]) -> None:
    # JSON Lines: one object per breaker, so `list` and `watch` stream and jq reads both.
    for view in views:
        out.write(json.dumps(view.as_json(), sort_keys=True) + "\n")


# --------------------------------------------------------------------------- arguments


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the usage line would make two) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        hint = self._nearest_choice(message)
        raise CliError(EXIT_USAGE, f"{message}{hint} (see {self.prog} --help)")

    def _nearest_choice(self, message: str) -> str:
        """ "; did you mean 'status'?" for a mistyped command (or other choice), else ""."""
        import difflib
        import re

        typed = re.search(r"invalid choice: '([^']*)'", message)
        if typed is None:
            return ""
        choices = [
            str(choice) for action in self._actions if action.choices for choice in action.choices
        ]
        nearest = difflib.get_close_matches(typed.group(1), choices, n=1)
        return f"; did you mean {nearest[0]!r}?" if nearest else ""


def _option_name(setting: str) -> str:
    return "--" + setting.replace("_", "-")


def _number(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    def parse(raw: str) -> int | float:
        try:
            return kind(raw)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {what}, got {raw!r}") from None

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _positive_seconds(raw: str) -> float:
    value = _number(float)(raw)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {raw!r}")
    return value


def _positive_count(raw: str) -> int:
    value = int(_number(int)(raw))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {raw!r}")
    return value


# Every operator action may say why; none must (an incident is no time to be stopped by a
# missing flag). Who and when are always stored; status shows "-" for no reason.
REASON_HELP = "why, stored with the action and shown by status (optional)"
# The help of each tune option: what the setting does on the running fleet.
TUNE_HELP = {
    "failure_threshold": "failures, counted fleet-wide within the window, that open the breaker",
    "window_seconds": "seconds the failures (or the rate policy's calls) are counted over",
    "recovery_timeout": "seconds the breaker stays open before its first probe",
    "half_open_max_probes": "probes admitted at once while half-open, fleet-wide",
    "half_open_successes": "successful probes that close the breaker",
    "failure_rate_threshold": "switch to the rate policy: open at this failure fraction "
    "(0 < x <= 1) of the window's calls; --clear returns to the deployed policy",
    "minimum_calls": "calls the window must hold before a rate can open the breaker",
    "slow_call_duration": "seconds after which a call counts as slow, even while still running",
    "slow_call_rate_threshold": "open at this fraction (0 < x <= 1) of slow calls in the window",
    "min_containers": "open only when the failures came from this many containers (quorum)",
    "mode": "enforce, or shadow: never reject, count what would have been rejected "
    "(WouldReject); --clear returns to the deployed mode",
}


def build_parser() -> argparse.ArgumentParser:
    # The global options are accepted before or after the command: defaults are SUPPRESSed on
    # the command's copy so it does not overwrite a value given before it.
    def add_globals(parser: argparse.ArgumentParser, suppress: bool) -> None:
        def default(value: Any) -> Any:
            return argparse.SUPPRESS if suppress else value

        parser.add_argument(
            "--table", default=default(None), help=f"DynamoDB table (default: ${TABLE_ENV})"
        )
        parser.add_argument(
            "--redis-url",
            default=default(None),
            help=f"Redis URL, redis:// or rediss:// (default: ${REDIS_URL_ENV})",
        )
        parser.add_argument(
            "--endpoint-url", default=default(None), help="DynamoDB endpoint (local DynamoDB)"
        )
        parser.add_argument("--region", default=default(None), help="AWS region")
        parser.add_argument(
            "--stack",
            default=default(None),
            help="CloudFormation stack whose outputs name the table and the cache",
        )
        parser.add_argument(
            "--window",
            type=_positive_seconds,
            default=default(None),
            metavar="SECONDS",
            help=f"window the figures cover (default: ${WINDOW_ENV}, else 60)",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            default=default(False),
            help="print JSON, one object per breaker and line",
        )

    parser = _Parser(
        prog="fleetbreaker",
        description="See and steer fleet-wide circuit breakers.",
        epilog="Exit codes: 0 ok, 1 not found (create-table: the table differs), 2 usage or "
        "validation error, 3 store unreachable.",
    )
    add_globals(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        add_globals(sub, suppress=True)
        return sub

    command("list", "every breaker in the store, with its state")
    command("status", "everything known about one breaker").add_argument("name")
    for name, help_text in (
        ("open", "force a breaker open: reject every call until reset"),
        ("disable", "disable a breaker: allow every call and record nothing until reset"),
        ("reset", "release an override, or close the breaker and forget its failures"),
    ):
        sub = command(name, help_text)
        sub.add_argument("name")
        sub.add_argument("--reason", help=REASON_HELP)
    tune = command(
        "tune",
        "set a breaker's live settings (they replace earlier ones); every container applies "
        "them within its cache_ttl",
    )
    tune.add_argument("name")
    for setting, kind in tuning.TUNABLE.items():
        if kind is str:  # mode: enforce or shadow
            tune.add_argument(
                _option_name(setting), dest=setting, choices=MODES, help=TUNE_HELP[setting]
            )
        elif kind is int or kind is float:
            tune.add_argument(
                _option_name(setting),
                dest=setting,
                type=_number(kind),
                metavar=kind.__name__.upper(),
                help=TUNE_HELP[setting],
            )
    tune.add_argument("--clear", action="store_true", help="remove every live setting")
    tune.add_argument("--reason", help=REASON_HELP)
    create = command(
        "create-table",
        "create a breaker table as template.yaml declares it: key name, on-demand, TTL on "
        "expires_at, encrypted (exit 0 if it exists with that shape, 1 with the differences)",
    )
    create.add_argument("table_name", metavar="NAME", help="the table's name")
    create.add_argument(
        "--stream",
        action="store_true",
        help="with a stream of new and old images (the stack's BreakerEventsFunction reads it)",
    )
    watch = command("watch", "show a breaker's status every second until Ctrl-C")
    watch.add_argument("name")
    watch.add_argument("--interval", type=_positive_seconds, default=1.0, help=argparse.SUPPRESS)
    watch.add_argument("--count", type=_positive_count, default=None, help=argparse.SUPPRESS)
    return parser


# --------------------------------------------------------------------------- stores


def _aws_error(exc: Exception, what: str) -> CliError:
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return CliError(EXIT_UNREACHABLE, f"{what}: {error.get('Code')}: {error.get('Message')}")
    if isinstance(exc, BotoCoreError):
        return CliError(EXIT_UNREACHABLE, f"{what}: {exc}")
    return CliError(EXIT_UNREACHABLE, f"{what}: {type(exc).__name__}: {exc}")


def _aws_config() -> Any:
    from botocore.config import Config

    return Config(
        connect_timeout=STORE_TIMEOUT_S,
        read_timeout=STORE_TIMEOUT_S,
        retries={"mode": "standard", "total_max_attempts": 2},
    )


def stack_outputs(stack: str, region: str | None) -> dict[str, str]:
    """The outputs of a CloudFormation stack (DescribeStacks)."""
    import boto3
    from botocore.exceptions import ClientError

    try:
        client = boto3.session.Session(region_name=region).client(
            "cloudformation", config=_aws_config()
        )
        stacks = client.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ValidationError":
            raise CliError(EXIT_USAGE, f"stack {stack!r} not found") from None
        raise _aws_error(exc, f"cannot describe stack {stack!r}") from None
    except Exception as exc:
        from botocore.exceptions import NoRegionError

        if isinstance(exc, NoRegionError):
            raise CliError(
                EXIT_USAGE, "no AWS region: pass --region or set AWS_REGION (or AWS_DEFAULT_REGION)"
            ) from None
        raise _aws_error(exc, f"cannot describe stack {stack!r}") from None
    outputs = stacks[0].get("Outputs", []) if stacks else []
    return {o["OutputKey"]: o["OutputValue"] for o in outputs if "OutputKey" in o}


def store_environ(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment the store factory reads for these options.

    The process's environment, with the store the options name in place of its own:
    --redis-url, --table, else the stack's outputs (cache before table, as the functions
    choose). Without any of them the environment names the store (Redis first, as the
    breaker does).
    """
    env = dict(os.environ if environ is None else environ)
    if args.redis_url is not None or args.table is not None:
        env[URL_ENV] = args.redis_url or ""
        env[TABLE_ENV] = args.table or ""
    elif args.stack is not None:
        outputs = stack_outputs(args.stack, args.region)
        if outputs.get(CACHE_OUTPUT):
            env[URL_ENV] = f"rediss://{outputs[CACHE_OUTPUT]}"
            # The stack's cache admits its IAM user only: sign in as it, with the operator's
            # credentials (which need elasticache:Connect on the cache and the user).
            if outputs.get(CACHE_USER_OUTPUT) and outputs.get(CACHE_NAME_OUTPUT):
                env[IAM_USER_ENV] = outputs[CACHE_USER_OUTPUT]
                env[IAM_CACHE_ENV] = outputs[CACHE_NAME_OUTPUT]
        elif outputs.get(TABLE_OUTPUT):
            env[URL_ENV] = ""
            env[TABLE_ENV] = outputs[TABLE_OUTPUT]
        else:
            raise CliError(
                EXIT_USAGE, f"stack {args.stack!r} has neither {TABLE_OUTPUT} nor {CACHE_OUTPUT}"
            )
    if args.region is not None:
        # The region IAM auth tokens are signed for.
        env["AWS_REGION"] = args.region
    return env


def open_store(args: argparse.Namespace) -> tuple[AdminStore, str]:
    """The store the options name, and a description of it for messages.

    The functions' factory (:class:`~fleetbreaker.stores.StoreSettings`) on
    :func:`store_environ`, with the CLI's longer timeouts and region.
    """
    try:
        settings = StoreSettings.from_env(store_environ(args))
    except StoreNotNamedError:
        raise CliError(
            EXIT_USAGE,
            f"no store: pass --table, --redis-url or --stack, or set {TABLE_ENV} or {URL_ENV}",
        ) from None
    except ConfigError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    client = None
    if settings.redis_url is None:
        client = _dynamodb_client(args)
    store = settings.open(
        boto3_client=client,
        redis_options={
            "socket_timeout": STORE_TIMEOUT_S,
            "socket_connect_timeout": STORE_TIMEOUT_S,
        },
    )
    return cast("AdminStore", store), settings.description


def _dynamodb_client(args: argparse.Namespace) -> Any:
    """The CLI's DynamoDB client; a set-up mistake is a usage error (exit 2) with a hint."""
    import boto3
    from botocore.exceptions import NoRegionError

    endpoint = args.endpoint_url
    if endpoint is not None:
        from urllib.parse import urlsplit

        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CliError(
                EXIT_USAGE,
                f"--endpoint-url {printable(endpoint)!r} is not an http(s) URL: include the "
                "scheme, e.g. http://localhost:8000",
            )
    no_region = CliError(
        EXIT_USAGE, "no AWS region: pass --region or set AWS_REGION (or AWS_DEFAULT_REGION)"
    )
    session = boto3.session.Session(region_name=args.region or None)
    if not session.region_name:  # unset, or set empty
        raise no_region
    try:
        return session.client("dynamodb", endpoint_url=endpoint, config=_aws_config())
    except NoRegionError:
        raise no_region from None
    except ValueError as exc:  # botocore's "Invalid endpoint" and the like
        raise CliError(EXIT_USAGE, f"cannot set up the DynamoDB client: {exc}") from None


def caller_identity(args: argparse.Namespace) -> str:
    """Who is acting: the STS caller ARN on AWS, else the local user.

    Best effort and bounded: an operator must never be stopped by STS. A local DynamoDB
    (--endpoint-url) has no AWS identity, unless an STS endpoint is configured too.
    """
    sts_configured = os.environ.get("AWS_ENDPOINT_URL_STS") or os.environ.get("AWS_ENDPOINT_URL")
    if args.endpoint_url is not None and not sts_configured:
        return tuning.local_user()
    try:
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=IDENTITY_TIMEOUT_S,
            read_timeout=IDENTITY_TIMEOUT_S,
            retries={"mode": "standard", "total_max_attempts": 1},
        )
        client = boto3.session.Session(region_name=args.region).client("sts", config=config)
        arn = client.get_caller_identity()["Arn"]
    except Exception:
        return tuning.local_user()
    return arn if isinstance(arn, str) and arn else tuning.local_user()


# --------------------------------------------------------------------------- commands


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
        store.force_state(name, _POLICY, action.at, target, action=action)
        _print(args, out, [_require(store, name, where, clock(), window)])
        return EXIT_OK
    if args.command == "tune":
        action = tuning.Action("tune", caller_identity(args), reason, clock())
        store.tune(name, _POLICY, action.at, tuning.encode_tuned(values), action)
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
    import boto3

    session = boto3.session.Session(region_name=args.region)
    if not session.region_name:  # a table lives in one region: never guess it
        raise CliError(EXIT_USAGE, "no AWS region: pass --region or set AWS_REGION")
    try:
        client = session.client("dynamodb", endpoint_url=args.endpoint_url, config=_aws_config())
        created, differences = dynamodb_table.ensure_table(client, table, stream=args.stream)
    except StoreError:
        raise
    except Exception as exc:
        raise _aws_error(exc, f"cannot create table {table!r}") from None
    if args.json:
        result = {"table": table, "created": created, "differences": differences}
        out.write(json.dumps(result, sort_keys=True) + "\n")
    elif not differences:
        done = f"created table {table!r}" if created else f"table {table!r} exists with that shape"
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
            # as a JSON line too: a reader of the stream gets nothing else).
            if args.json:
                problem = {"name": name, "error": f"store error: {exc}", "at": _iso(now)}
                out.write(json.dumps(problem, sort_keys=True) + "\n")
            else:
                out.write(f"{_iso(now)}  store error: {printable(str(exc))}\n")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fleetbreaker`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return run(args, sys.stdout)
    except CliError as exc:
        return _fail(exc.code, str(exc))
    except ConfigError as exc:
        return _fail(EXIT_USAGE, str(exc))
    except StoreError as exc:
        return _fail(EXIT_UNREACHABLE, str(exc).splitlines()[0] if str(exc) else "store error")
    except KeyboardInterrupt:
        # Ctrl-C is how `watch` ends; elsewhere it still ends quietly.
        return EXIT_OK
    except BrokenPipeError:
        # `fleetbreaker list | head`: the reader left; nothing more to say.
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:
        # Whatever else escaped the stores is still one line, not a traceback.
        return _fail(EXIT_UNREACHABLE, f"{type(exc).__name__}: {exc}".splitlines()[0])


def _fail(code: int, message: str) -> int:
    print(f"fleetbreaker: error: {message}", file=sys.stderr)
    return code
