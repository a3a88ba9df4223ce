"""Live tuning and operator actions: what an operator stores with a breaker's record.

Both travel with the record as JSON text (``Record.tuned``, ``Record.last_action``) so every
store keeps them the same way and a state change carries them over. This module is the one
place that knows which settings are tunable and how the text is read and checked.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from fleetbreaker.config import BreakerConfig, check_mode
from fleetbreaker.errors import ConfigError

# The operator's action is record data (stores keep it): defined with the record, and
# importable from here as before.
from fleetbreaker.record import Action as Action

log = logging.getLogger("fleetbreaker")

# The settings an operator may change on a running fleet, with their type; the CLI's options
# are generated from it. Setting failure_rate_threshold switches a running fleet to the rate
# policy (and --clear back to the count policy it was deployed with). Setting mode switches a
# running fleet between shadow and enforce (and --clear back to the mode it was deployed with).
TUNABLE: dict[str, type[int] | type[float] | type[str]] = {
    "failure_threshold": int,
    "window_seconds": float,
    "recovery_timeout": float,
    "half_open_max_probes": int,
    "half_open_successes": int,
    "failure_rate_threshold": float,
    "minimum_calls": int,
    "slow_call_duration": float,
    "slow_call_rate_threshold": float,
    "min_containers": int,
    "mode": str,
}

# Bounded so a record stays small (DynamoDB items are at most 400 KB; Redis hashes stay cheap).
MAX_REASON_CHARS = 500


def local_user() -> str:
    """The name of the user running this process ("unknown" when the system has none)."""
    try:
        return getpass.getuser()
    except Exception:  # no login name, no USER/LOGNAME (some containers)
        return "unknown"


def check_reason(reason: str | None) -> str | None:
    """An operator's reason, or ConfigError when it is too long or not text."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise ConfigError(f"reason must be text, got {type(reason).__name__}")
    if len(reason) > MAX_REASON_CHARS:
        raise ConfigError(f"reason is {len(reason)} characters; the limit is {MAX_REASON_CHARS}")
    return reason


def decode_tuned(text: str) -> dict[str, Any]:
    """The stored settings as a dict ({} for none).

    Raises ConfigError when the text is not a JSON object.
    """
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except ValueError:
        raise ConfigError(f"tuned settings are not JSON: {text[:80]!r}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"tuned settings are not a JSON object: {text[:80]!r}")
    return raw


def merge_tuned(text: str, values: Mapping[str, int | float | str]) -> dict[str, Any]:
    """The stored settings ``text`` with ``values`` over them, as ``aws lambda
    update-function-configuration`` merges: a setting not named keeps its live value.

    Text that is not a JSON object (a hand-edited record) counts as no settings: containers
    ignore it already, and the merge replaces it.
    """
    try:
        stored = decode_tuned(text)
    except ConfigError:
        stored = {}
    return {**stored, **values}


def encode_tuned(values: Mapping[str, int | float | str]) -> str:
    """The text stored for ``values`` ("" when there is nothing to store)."""
    if not values:
        return ""
    return json.dumps(dict(sorted(values.items())), separators=(",", ":"))


def _typed(name: str, value: object) -> int | float | str:
    kind = TUNABLE.get(name)
    if kind is None:
        raise ConfigError(f"{name} is not tunable (tunable: {', '.join(TUNABLE)})")
    if kind is str:
        check_mode(name, value)
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{name} must be a whole number, got {value!r}")
        return int(value)
    try:
        number = float(value)
    except OverflowError:  # an integer past any double (10**400)
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be a finite number, got {str(value)[:40]}")
    return number


def apply_tuning(config: BreakerConfig, values: Mapping[str, object]) -> BreakerConfig:
    """``config`` with the tuned ``values``, checked by BreakerConfig's own rules.

    Raises ConfigError naming the setting when a value is unknown, of the wrong type, or
    breaks a rule (alone or together with the rest of ``config``).
    """
    typed: dict[str, Any] = {name: _typed(name, value) for name, value in values.items()}
    return dataclasses.replace(config, **typed)


def retuned(config: BreakerConfig, text: str, name: str) -> BreakerConfig:
    """``config`` with the settings a breaker's record carries as ``text``, applied one by one.

    A running breaker must never stop over them: text it cannot read, or a setting it cannot
    use (another version of the package may store settings this one does not know), is
    logged at WARNING and left out; the rest apply.
    """
    try:
        values = decode_tuned(text)
    except ConfigError as exc:
        log.warning("circuit %s: ignoring its tuned settings: %s", name, exc)
        values = {}
    for setting, value in sorted(values.items()):
        try:
            config = apply_tuning(config, {setting: value})
        except ConfigError as exc:
            log.warning("circuit %s: ignoring tuned %s: %s", name, setting, exc)
    return config


# What an operator's action is called in the record, by the state it forces: "reset" releases
# an override or closes the breaker, whatever state it was in, so it is not called "closed".
ACTION_NAMES = {"forced_open": "forced_open", "disabled": "disabled", "closed": "reset"}


def operator_action(target: str, reason: str | None, by: str | None, now_ms: int) -> Action:
    """The record of an operator forcing a breaker to ``target``: what (``ACTION_NAMES``), by
    whom (default: the local user), why (checked), and when."""
    return Action(
        ACTION_NAMES.get(target, target), by or local_user(), check_reason(reason), now_ms
    )
