"""The ``fleetbreaker`` command: see and steer a fleet's breakers from a terminal.

Run as ``fleetbreaker`` (the console script) or ``python -m fleetbreaker``. Nothing imports
this module on the breaker's path: ``import fleetbreaker`` stays as light as it was.

Exit codes: 0 ok, 1 breaker (or its record) not found (open and disable of a name the store
holds no record of included, unless --create), or (create-table) a table that differs, 2 usage
or validation error (no AWS credentials, an unknown profile and a malformed endpoint included),
3 store unreachable, 130 interrupted (Ctrl-C), with one line saying what may be left half
done. Every error is one line on stderr, never a traceback, and
holds no password or token (:mod:`fleetbreaker.redaction`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from fleetbreaker.cli.aws import aws_config, open_store, stack_outputs, store_environ
from fleetbreaker.cli.commands import run
from fleetbreaker.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    NOTHING_CHANGED,
    POLICY,
    STORE_TIMEOUT_S,
    CliError,
    printable,
)
from fleetbreaker.cli.parser import TUNE_HELP, build_parser
from fleetbreaker.cli.view import (
    BreakerView,
    gather_all,
    gather_one,
    render_status,
    render_table,
    view_of,
)
from fleetbreaker.errors import ConfigError, StoreError

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "STORE_TIMEOUT_S",
    "TUNE_HELP",
    "POLICY",
    "BreakerView",
    "CliError",
    "aws_config",
    "build_parser",
    "gather_all",
    "gather_one",
    "main",
    "open_store",
    "printable",
    "render_status",
    "render_table",
    "run",
    "stack_outputs",
    "store_environ",
    "view_of",
]


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
        # Outside every step that writes (those say what they may have left half done).
        return _fail(EXIT_INTERRUPTED, NOTHING_CHANGED)
    except BrokenPipeError:
        # `fleetbreaker list | head`: the reader left; nothing more to say.
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:
        # Whatever else escaped the stores is still one line, not a traceback.
        return _fail(EXIT_UNREACHABLE, f"{type(exc).__name__}: {exc}".splitlines()[0])


def _fail(code: int, message: str) -> int:
    from fleetbreaker.redaction import redact

    # The last word on secrets: a message may quote a store URL or a token, from any library.
    kind = "" if code == EXIT_INTERRUPTED else "error: "
    print(f"fleetbreaker: {kind}{redact(message)}", file=sys.stderr)
    return code
