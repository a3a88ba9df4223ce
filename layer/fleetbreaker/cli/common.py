"""What every part of the command shares: exit codes, the one-line error, the CLI's defaults."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fleetbreaker.config import BreakerConfig
from fleetbreaker.policy import Policy
from fleetbreaker.snapshot import iso_utc

if TYPE_CHECKING:
    pass

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
# Ctrl-C (SIGINT): 128 + 2, what a shell reports for a command the signal ended. Never 0: a
# script must not take an interrupted step as done.
EXIT_INTERRUPTED = 130
# What an interrupt outside any step that writes leaves behind.
NOTHING_CHANGED = "interrupted; nothing was changed"

# A CLI may wait longer than a breaker on the hot path, but not forever: an operator during an
# incident must learn quickly that the store is out of reach (exit 3).
STORE_TIMEOUT_S = 3.0
IDENTITY_TIMEOUT_S = 2.0

# Settings CLI callers cannot know (each container has its own config): the CLI checks tuned
# values against BreakerConfig's defaults plus the values themselves.
DEFAULTS = BreakerConfig()
POLICY = Policy.from_config(DEFAULTS)


class CliError(Exception):
    """A failure reported as one line and an exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@contextlib.contextmanager
def if_interrupted(what: str) -> Iterator[None]:
    """While the block runs, Ctrl-C ends the command with exit 130 and one line:
    ``interrupted {what}``, saying what may be left half done and how to finish it."""
    try:
        yield
    except KeyboardInterrupt:
        raise CliError(EXIT_INTERRUPTED, f"interrupted {what}") from None


def iso(epoch_ms: int) -> str | None:
    """``snapshot.iso_utc``, with no date for 0 and the number for a date it cannot show."""
    if epoch_ms <= 0:
        return None
    # A hand-edited record (an action "at" 1e17 ms): show the number, never fail on it.
    return iso_utc(epoch_ms) or f"{epoch_ms} ms (not a date)"


def printable(text: str) -> str:
    """``text`` with control characters (ESC, BEL, ...) escaped: a name or reason read from
    the store must not drive the operator's terminal."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
        for c in text
    )
