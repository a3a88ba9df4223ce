"""Exceptions raised by fleetbreaker."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetbreaker.record import State


class FleetBreakerError(Exception):
    """Base class of every fleetbreaker exception."""


class ConfigError(FleetBreakerError, ValueError):
    """A breaker, config or store was constructed with an invalid value.

    Attributes
    ----------
    fields:
        The :class:`~fleetbreaker.config.BreakerConfig` fields whose values the refusal is
        about, the refused one first (empty when it is not about config fields):
        ``BreakerConfig.from_env`` names the variables that set them.
    """

    def __init__(self, message: str, *, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


class CircuitOpenError(FleetBreakerError):
    """The breaker rejected the call without running it.

    Attributes
    ----------
    name:
        The breaker's name.
    state:
        The state that caused the rejection (open, half_open or forced_open).
    retry_after:
        Seconds after which a new attempt may be admitted (a hint, never negative).
    """

    def __init__(self, name: str, state: State, retry_after: float) -> None:
        self.name = name
        self.state = state
        self.retry_after = max(0.0, retry_after)
        super().__init__(f"circuit {name!r} is {state.value}; retry after {self.retry_after:.3f}s")


class StoreError(FleetBreakerError):
    """The shared store could not answer (unreachable, slow, throttling or misconfigured)."""


class StoreDeadlineError(StoreError):
    """A store operation took longer than ``store_deadline_seconds``."""


class StoreMisconfiguredError(StoreError):
    """The store refused a request for a reason of configuration, not weather.

    A missing table, a table keyed otherwise, access denied, credentials or a login refused:
    retrying will not help, someone must change a setting. The breaker still degrades to local
    state (the protected call is never failed by it), but logs it at ERROR and counts it apart.

    Attributes
    ----------
    problem:
        What is wrong, one of :data:`MISCONFIGURATIONS` (a metric dimension's value).
    variable:
        What named the store or its credentials, for the fix: an environment variable
        (``CIRCUIT_BREAKER_TABLE``...) or the argument it was passed as; None when unknown.
    """

    def __init__(self, message: str, *, problem: str, variable: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem
        self.variable = variable


# StoreMisconfiguredError.problem: what a store refused, and why it is configuration.
TABLE_NOT_FOUND = "table_not_found"
WRONG_KEY_SCHEMA = "wrong_key_schema"
ACCESS_DENIED = "access_denied"
AUTHENTICATION_REFUSED = "authentication_refused"
MISCONFIGURATIONS = (TABLE_NOT_FOUND, WRONG_KEY_SCHEMA, ACCESS_DENIED, AUTHENTICATION_REFUSED)


class TableNotFoundError(StoreMisconfiguredError):
    """The DynamoDB table named by the store does not exist."""

    def __init__(self, message: str, *, variable: str | None = None) -> None:
        super().__init__(message, problem=TABLE_NOT_FOUND, variable=variable)


class CorruptRecordError(StoreError):
    """A stored breaker record has missing or wrongly typed attributes."""


class InvalidTokenError(FleetBreakerError, ValueError):
    """A probe token passed to ``record`` is not one this package issued."""
