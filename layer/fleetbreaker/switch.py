"""The test switch: ``FLEETBREAKER_DISABLED=true`` turns every breaker of the process off.

Unit tests of a function that builds breakers should not need a table, a cache or AWS
credentials: with the switch on, every breaker lets every call through, makes no store
request, and says so once in the log. Production code never sets it. This module is the one
reader of the variable.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from fleetbreaker.environment import DISABLED_ENV
from fleetbreaker.errors import ConfigError

__all__ = ["DISABLED_ENV", "announce", "switched_off"]
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})

log = logging.getLogger("fleetbreaker")
_announced = threading.Event()


def switched_off(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``FLEETBREAKER_DISABLED`` turns breakers off (true/1/yes/on, any case).

    Unset, empty, false/0/no/off: on as usual. Anything else is a ConfigError naming the
    variable: a typo must not leave a production fleet without its breakers, nor a test
    suite with them.
    """
    env = os.environ if environ is None else environ
    raw = env.get(DISABLED_ENV, "").strip().lower()
    if raw in _FALSE:
        return False
    if raw in _TRUE:
        return True
    raise ConfigError(
        f"{DISABLED_ENV} must be true or false (1/0, yes/no, on/off), got {env[DISABLED_ENV]!r}"
    )


def announce(name: str) -> None:
    """Log, once per process, that breakers are switched off (the first one built says so)."""
    if _announced.is_set():
        return
    _announced.set()
    log.warning(
        "fleetbreaker: %s is set: every breaker (first: %s) lets every call through and "
        "makes no store request",
        DISABLED_ENV,
        name,
        extra={"breaker": name, "breaker_event": "switched_off"},
    )
