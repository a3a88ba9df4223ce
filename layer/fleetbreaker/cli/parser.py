"""The command line's arguments: commands, global options, and their checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from fleetbreaker import tuning
from fleetbreaker.config import MODES
from fleetbreaker.stores import (
    TABLE_ENV,
)

if TYPE_CHECKING:
    pass
from fleetbreaker.cli.common import (
    EXIT_USAGE,
    CliError,
)
from fleetbreaker.cli.view import WINDOW_ENV
from fleetbreaker.stores import URL_ENV


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


def option_name(setting: str) -> str:
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


# What --output prints: text for people, one JSON document, or JSON Lines.
OUTPUTS = ("text", "json", "jsonl")

# Every operator action may say why; none must (an incident is no time to be stopped by a
# missing flag). Who and when are always stored; status shows "-" for no reason.
REASON_HELP = "why, stored with the action and shown by status (optional)"
# open and disable refuse a name the store has never seen (a typo would override a breaker no
# traffic uses), unless told it is new.
CREATE_HELP = (
    "act on a breaker the store holds no record of (one that has never failed, or whose record "
    "expired); without it such a name is refused, with the nearest names the store knows"
)
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


# Each command's page: a description (written as it is shown: RawDescriptionHelpFormatter
# keeps its lines) and an example. The global options are listed once, on the top-level page;
# each command's page points there.
NAME_HELP = "the breaker's name, as the functions give it: CircuitBreaker(NAME, ...)"
GLOBALS_NOTE = (
    "The store and output options (--table, --redis-url, --stack, --endpoint-url, --region,\n"
    "--profile, --window, --output) go before or after the command: `fleetbreaker --help`\n"
    "lists them."
)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "list": (
        "every breaker in the store, with its state",
        "List every breaker the store holds: its state, the failures in its window (for an\n"
        "open breaker, the failures that tripped it), calls, and when it changed.",
        "fleetbreaker --table CircuitBreakers list",
    ),
    "status": (
        "everything known about one breaker",
        "Show everything known about one breaker: its state, figures, open window, live\n"
        "settings and the last operator action. Exit 1 if the store holds no record of it.",
        "fleetbreaker --table CircuitBreakers status payment-api",
    ),
    "open": (
        "force a breaker open: reject every call until reset",
        "Force a breaker open: every container rejects every call (within its cache_ttl)\n"
        "until `fleetbreaker reset NAME`. A name the store holds no record of is refused\n"
        "(exit 1, with the nearest names it knows) unless --create is given.",
        'fleetbreaker --table CircuitBreakers open payment-api --reason "PSP incident INC-123"',
    ),
    "disable": (
        "disable a breaker: allow every call and record nothing until reset",
        "Disable a breaker: every container allows every call and records nothing (within its\n"
        "cache_ttl) until `fleetbreaker reset NAME`. A name the store holds no record of is\n"
        "refused (exit 1, with the nearest names it knows) unless --create is given.",
        'fleetbreaker --table CircuitBreakers disable payment-api --reason "load test"',
    ),
    "reset": (
        "release an override, or close the breaker and forget its failures",
        "Release an override, or close an open breaker and forget its failures and back-off.\n"
        "Live settings stay (tune --clear removes them). A name the store holds no record of\n"
        "exits 1 and changes nothing.",
        'fleetbreaker --table CircuitBreakers reset payment-api --reason "PSP recovered"',
    ),
    "tune": (
        "change a breaker's live settings (merged into the earlier ones); every container "
        "applies them within its cache_ttl",
        "Change a breaker's live settings, without a redeploy: merged into the settings it\n"
        "has (--replace: instead of them; --clear: remove them all). Every container applies\n"
        "them within its cache_ttl. Values are checked by BreakerConfig's rules (exit 2).",
        "fleetbreaker --table CircuitBreakers tune payment-api --failure-threshold 10 "
        "--reason flapping",
    ),
    "create-table": (
        "create a breaker table as template.yaml declares it: key name, on-demand, TTL on "
        "expires_at, encrypted (exit 0 if it exists with that shape, 1 with the differences; "
        "run again, it finishes a table an interrupted run left without its TTL)",
        "Create a breaker table as template.yaml declares it: key name (S), on-demand, TTL on\n"
        "expires_at, encrypted at rest. Exit 0 if it exists with that shape, 1 naming the\n"
        "differences; run again, it finishes a table an interrupted run left without its TTL.",
        "fleetbreaker create-table CircuitBreakers --region eu-west-1",
    ),
    "doctor": (
        "check the store: reachable with these credentials, the table's shape (or the cache's "
        "TLS, login and scripts), a read and a fenced write (exit 1 naming what to change, 3 "
        "when the store gives no answer)",
        "Check the store: reachable with these credentials, the table's shape (or the cache's\n"
        "TLS, login and scripts), a read and a fenced write. One line per check; exit 1\n"
        "naming the option or variable to change, 3 when the store gives no answer.",
        "fleetbreaker --table CircuitBreakers --region eu-west-1 doctor --name payment-api",
    ),
    "watch": (
        "show a breaker's status every second until Ctrl-C",
        "Show a breaker's status every second until Ctrl-C: redrawn in place on a terminal,\n"
        "appended (each frame headed by the time it was read) when piped.",
        "fleetbreaker --table CircuitBreakers watch payment-api",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    # The global options are listed once, on the top-level page, and accepted before or after
    # the command: each command's copy is hidden from its page, and its defaults SUPPRESSed so
    # it does not overwrite a value given before the command.
    def add_globals(parser: Any, suppress: bool) -> None:
        def default(value: Any) -> Any:
            return argparse.SUPPRESS if suppress else value

        def shown(text: str) -> str:
            return argparse.SUPPRESS if suppress else text

        parser.add_argument(
            "--table", default=default(None), help=shown(f"DynamoDB table (default: ${TABLE_ENV})")
        )
        parser.add_argument(
            "--redis-url",
            default=default(None),
            help=shown(f"Redis URL, redis:// or rediss:// (default: ${URL_ENV})"),
        )
        parser.add_argument(
            "--endpoint-url",
            default=default(None),
            help=shown("DynamoDB endpoint (local DynamoDB: moto, dynalite)"),
        )
        parser.add_argument(
            "--region",
            default=default(None),
            help=shown("AWS region (default: $AWS_REGION, else $AWS_DEFAULT_REGION)"),
        )
        parser.add_argument(
            "--profile",
            default=default(None),
            help=shown(
                "AWS named profile for the credentials and the region (default: $AWS_PROFILE)"
            ),
        )
        parser.add_argument(
            "--stack",
            default=default(None),
            help=shown("CloudFormation stack whose outputs name the table and the cache"),
        )
        parser.add_argument(
            "--window",
            type=_positive_seconds,
            default=default(None),
            metavar="SECONDS",
            help=shown(
                "window the figures cover for a record that stores none (one written by an"
                f" older fleetbreaker; default: ${WINDOW_ENV}, else 60)"
            ),
        )
        parser.add_argument(
            "--output",
            choices=OUTPUTS,
            default=default(None),
            help=shown(
                "text (default); json: one document (list: an array); jsonl: one object per "
                "breaker (or check) and line"
            ),
        )
        parser.add_argument(
            "--json",
            action="store_true",
            default=default(False),
            help=shown("deprecated: the JSON lines of --output jsonl"),
        )

    parser = _Parser(
        prog="fleetbreaker",
        description="See and steer fleet-wide circuit breakers.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n"
        "  fleetbreaker --table CircuitBreakers list\n"
        "  fleetbreaker --stack fleetbreaker status payment-api\n"
        "  fleetbreaker COMMAND --help     what one command does, its arguments, an example\n"
        "\n"
        "Exit codes: 0 ok, 1 not found (create-table: the table differs; doctor: a check\n"
        "failed), 2 usage or validation error, 3 store unreachable, 130 interrupted (Ctrl-C).",
    )
    add_globals(
        parser.add_argument_group("store and output options (before or after the command)"),
        suppress=False,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def command(name: str) -> argparse.ArgumentParser:
        summary, description, example = COMMANDS[name]
        sub = commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=f"Example:\n  {example}\n\n{GLOBALS_NOTE}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_globals(sub, suppress=True)
        return sub

    command("list")
    command("status").add_argument("name", help=NAME_HELP)
    for name in ("open", "disable", "reset"):
        sub = command(name)
        sub.add_argument("name", help=NAME_HELP)
        sub.add_argument("--reason", help=REASON_HELP)
        if name != "reset":
            sub.add_argument("--create", action="store_true", help=CREATE_HELP)
    tune = command("tune")
    tune.add_argument("name", help=NAME_HELP)
    for setting, kind in tuning.TUNABLE.items():
        if kind is str:  # mode: enforce or shadow
            tune.add_argument(
                option_name(setting), dest=setting, choices=MODES, help=TUNE_HELP[setting]
            )
        elif kind is int or kind is float:
            tune.add_argument(
                option_name(setting),
                dest=setting,
                type=_number(kind),
                metavar=kind.__name__.upper(),
                help=TUNE_HELP[setting],
            )
    tune.add_argument(
        "--replace",
        action="store_true",
        help="replace the live settings with these: the ones not given fall back to each "
        "container's own",
    )
    tune.add_argument("--clear", action="store_true", help="remove every live setting")
    tune.add_argument("--reason", help=REASON_HELP)
    create = command("create-table")
    create.add_argument("table_name", metavar="NAME", help="the table's name")
    create.add_argument(
        "--stream",
        action="store_true",
        help="with a stream of new and old images (the stack's BreakerEventsFunction reads it)",
    )
    doctor = command("doctor")
    doctor.add_argument(
        "--name", help="a breaker whose record the read check reads (default: none of them)"
    )
    watch = command("watch")
    watch.add_argument("name", help=NAME_HELP)
    watch.add_argument("--interval", type=_positive_seconds, default=1.0, help=argparse.SUPPRESS)
    watch.add_argument("--count", type=_positive_count, default=None, help=argparse.SUPPRESS)
    return parser
