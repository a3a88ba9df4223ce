"""What counts as a failure of the dependency: a call's exception or result, judged once.

Every path a call's outcome can take (the count and the rate policy, a probe, a shadow
probe) asks the same :class:`OutcomeJudge`, so the rules are the same everywhere. A
predicate of the user's (``is_failure``, ``failure_result``) that raises is the user's bug,
not the dependency's verdict and not the caller's concern: it is logged once per breaker at
WARNING, the outcome counts as a failure (a breaker that cannot judge must not keep
trusting the dependency), and the caller still gets the call's own exception or result.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("fleetbreaker")


class JudgeSettings(Protocol):
    """The classification settings of a :class:`~fleetbreaker.config.BreakerConfig`."""

    @property
    def ignored_exceptions(self) -> tuple[type[BaseException], ...]: ...
    @property
    def failure_exceptions(self) -> tuple[type[BaseException], ...]: ...
    @property
    def is_failure(self) -> Callable[[BaseException], bool] | None: ...
    @property
    def failure_result(self) -> Callable[[Any], bool] | None: ...


def predicate_name(predicate: Callable[..., Any]) -> str:
    """A predicate as a log line names it: its qualified name, else its repr."""
    name = getattr(predicate, "__qualname__", None)
    module = getattr(predicate, "__module__", None)
    if isinstance(name, str):
        return f"{module}.{name}" if isinstance(module, str) else name
    return repr(predicate)


class OutcomeJudge:
    """One breaker's failure classification (its deployed config's: it is not tunable)."""

    def __init__(self, config: JudgeSettings, name: str) -> None:
        self.name = name
        self._ignored = config.ignored_exceptions
        self._failures = config.failure_exceptions
        self._is_failure = config.is_failure
        # None on the hot path: a healthy call's result is not looked at.
        self.failure_result = config.failure_result
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def exception_fails(self, exc: BaseException) -> bool:
        """Whether a raised exception counts as a failure of the dependency."""
        if isinstance(exc, self._ignored):
            return False
        predicate = self._is_failure
        if predicate is None:
            return isinstance(exc, self._failures)
        try:
            return bool(predicate(exc))
        except Exception as error:
            self._predicate_failed("is_failure", predicate, error)
            return True

    def result_fails(self, result: object) -> bool:
        """Whether a returned value counts as a failure of the dependency."""
        predicate = self.failure_result
        if predicate is None:
            return False
        try:
            return bool(predicate(result))
        except Exception as error:
            self._predicate_failed("failure_result", predicate, error)
            return True

    def _predicate_failed(
        self, field: str, predicate: Callable[..., Any], error: Exception
    ) -> None:
        # Once per breaker and predicate: a predicate that raises on every failing call of
        # an outage would otherwise write a traceback per call.
        with self._lock:
            if field in self._warned:
                return
            self._warned.add(field)
        log.warning(
            "circuit %s: %s predicate %s raised %s: %s; its calls count as failures",
            self.name,
            field,
            predicate_name(predicate),
            type(error).__name__,
            error,
            extra={
                "breaker": self.name,
                "breaker_event": "predicate_error",
                "predicate": field,
                "error_type": type(error).__name__,
            },
        )
