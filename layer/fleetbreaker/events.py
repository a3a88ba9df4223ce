"""Hooks the breaker calls as things happen: logging here, metrics and tracing elsewhere."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fleetbreaker.errors import StoreMisconfiguredError
from fleetbreaker.frozen import frozen

if TYPE_CHECKING:
    from fleetbreaker.record import Decision, State, TransitionReason

logger = logging.getLogger("fleetbreaker")

T = TypeVar("T")

# A shadow breaker logs the calls it would have rejected at most once per this many ms.
WOULD_REJECT_LOG_INTERVAL_MS = 1_000

# How a store round trip ended (``on_store_result``).
STORE_ANSWERED = "answered"
STORE_ERROR = "store_error"
STORE_DEADLINE = "deadline"
# Cut short by a BaseException that is not an error of the store (KeyboardInterrupt,
# SystemExit): no answer, no degradation; what the listeners opened is still closed.
STORE_INTERRUPTED = "interrupted"


@frozen
class StateChange:
    """One state change this container's write made: the new ``generation`` and why."""

    before: State
    after: State
    generation: int
    reason: TransitionReason


# Transitions into these states log at WARNING; the others (half_open, closed) at INFO.
_WARNING_STATES = frozenset({"open", "forced_open", "disabled"})

# The misconfigurations LoggingListener has logged in this process (one Lambda container):
# each kind is logged once at ERROR, however many breakers, calls and operations meet it.
reported_misconfigurations: set[tuple[str, str, str | None]] = set()
_reported_lock = threading.Lock()


def first_report(error: StoreMisconfiguredError) -> bool:
    """Whether ``error`` is the first of its kind this process: its class, its problem and the
    setting to blame. Never its text: an access-denied message names the action refused
    (GetItem, UpdateItem), so a key of text would log once per operation."""
    key = (type(error).__name__, error.problem, error.variable)
    with _reported_lock:
        if key in reported_misconfigurations:
            return False
        reported_misconfigurations.add(key)
        return True


class BreakerListener:
    """Receives breaker events. Subclass and override what you need; every hook is a no-op.

    Hooks run inline on the calling thread, so they must be quick and must not raise (an
    exception from a hook is logged and swallowed).
    """

    def on_decision(self, name: str, decision: Decision, state: State) -> None:
        """A call was admitted (allow, probe) or rejected."""

    def on_state_change(self, name: str, change: StateChange) -> None:
        """This container's write moved the shared breaker from one state to another
        (``change.before`` to ``change.after``), with the new generation and the reason."""

    def on_rejected(self, name: str, state: State, retry_after: float) -> None:
        """A call was rejected without running."""

    def on_would_reject(self, name: str, state: State, retry_after: float) -> None:
        """Shadow mode: a call an enforcing breaker would have rejected ran anyway.

        Follows the call's :meth:`on_decision` (``allow``) on the calling thread.
        """

    def on_fallback(self, name: str, state: State) -> None:
        """A rejected call was answered by the fallback."""

    def on_failure_recorded(self, name: str, state: State) -> None:
        """A failed call was counted."""

    def on_probe(self, name: str, success: bool, applied: bool) -> None:
        """A probe finished; ``applied`` is False when its lease had already ended."""

    def on_window(self, name: str, calls: int, failure_rate: float, slow_call_rate: float) -> None:
        """A report's answer showed the fleet's sliding window (rate policy, slow calls).

        ``failure_rate`` and ``slow_call_rate`` are fractions of ``calls``, fleet-wide.
        """

    def on_store_call_start(self, name: str, operation: str) -> None:
        """A store round trip is about to start; :meth:`on_store_call` follows on this thread,
        whatever ends the round trip (an answer, an error, a KeyboardInterrupt).

        It exists so a tracer can open a span that encloses the round trip (and the AWS SDK's
        own spans inside it).
        """

    def on_store_result(
        self, name: str, operation: str, store: str, outcome: str, error: BaseException | None
    ) -> None:
        """How a store round trip ended, just before its :meth:`on_store_call`.

        ``store`` is the store's kind (``dynamodb``, ``redis``, ``memory``...), ``outcome``
        one of ``answered``, ``store_error``, ``deadline`` (its total deadline passed) and
        ``interrupted`` (a BaseException such as KeyboardInterrupt cut it short: ``error``
        is that exception, and it is re-raised once the listeners have been told).
        """

    def on_store_call(self, name: str, operation: str, elapsed_ms: float, ok: bool) -> None:
        """One store round trip finished (or failed) after ``elapsed_ms``."""

    def on_store_error(self, name: str, operation: str, error: BaseException) -> None:
        """The store failed; the breaker is about to run on local state."""

    def on_store_misconfigured(
        self, name: str, operation: str, error: StoreMisconfiguredError
    ) -> None:
        """The store failed for a reason of configuration (no such table, access denied,
        login refused): a setting must change. Called on every such failure, after
        :meth:`on_store_error` (which a breaker calls for the first of them only)."""

    def on_degraded(self, name: str, reason: str) -> None:
        """The breaker switched to its local, per-container state."""

    def on_recovered(self, name: str) -> None:
        """The store answered again; the fleet's state is back in charge."""

    def on_corrupt_record(self, name: str, detail: str) -> None:
        """The store held a record this package cannot read; it was treated as closed."""

    def thread_handoff(self) -> Callable[[Callable[[], Any]], Any] | None:
        """Called on an awaiting task's thread just before the asyncio driver sends work
        (a store request) to a worker thread: a function that runs that work there inside
        this listener's trace context, or None (the default) when it has nothing to carry.

        contextvars (OpenTelemetry's context) travel to the worker by themselves; a context
        held per thread or per asyncio task (the X-Ray SDK's) does not. Not an event: it
        returns a value, and it runs only for the asyncio driver.
        """
        return None


class LoggerLike(Protocol):
    """What :class:`LoggingListener` needs: a stdlib ``logging.Logger`` or a Powertools Logger."""

    def info(self, msg: object, *args: object, extra: Mapping[str, object] | None = ...) -> None:
        """Log at INFO."""

    def warning(self, msg: object, *args: object, extra: Mapping[str, object] | None = ...) -> None:
        """Log at WARNING."""

    def error(self, msg: object, *args: object, extra: Mapping[str, object] | None = ...) -> None:
        """Log at ERROR."""


class LoggingListener(BreakerListener):
    """Logs transitions, degradations and store trouble; nothing per healthy call.

    Levels: a transition to open, forced_open or disabled, a store error, degraded mode and a
    shadow breaker's would_reject line are WARNING (they show at the Lambda Python runtime's
    default level); a transition to half_open or closed and the store's return are INFO; an
    unreadable record is ERROR, and so is a misconfigured store (no such table, access denied,
    login refused), logged once per process, naming the variable that set the store, in
    place of its store error's WARNING.

    Every record carries structured fields through ``extra``: ``breaker``, ``breaker_event``
    (``transition``, ``store_error``, ``store_misconfigured``, ``degraded``, ``recovered``,
    ``corrupt_record``, ``would_reject``) and the event's own fields (``from_state``/
    ``to_state``, ``operation``, ``error``, ``error_type``, ``problem``/``variable``,
    ``reason``, ``detail``, ``state``/``count``). A shadow breaker's
    ``would_reject`` line comes at most once per second per breaker and counts the calls since
    the last one. A Powertools ``Logger`` renders them as top-level JSON keys next to
    its own (service, cold start, request id); so does any JSON formatter that renders extras.

    Parameters
    ----------
    log:
        A ``logging.Logger`` or an ``aws_lambda_powertools.Logger``; defaults to the stdlib
        logger ``"fleetbreaker"``.
    clock:
        Millisecond clock pacing the ``would_reject`` lines (default: a monotonic clock).

    Example
    -------
    >>> from aws_lambda_powertools import Logger
    >>> breaker = CircuitBreaker(
    ...     "payment-api", store=MemoryStore(), listeners=[LoggingListener(Logger())]
    ... )
    """

    def __init__(
        self, log: LoggerLike | None = None, *, clock: Callable[[], int] | None = None
    ) -> None:
        self.log: LoggerLike = log if log is not None else logger
        # Epoch ms (injectable: tests move time by hand); paces the would_reject lines.
        self._clock: Callable[[], int] = clock or _monotonic_ms
        self._would_reject: dict[str, tuple[int, int]] = {}  # name -> (next log at, pending)
        self._would_reject_lock = threading.Lock()

    def on_would_reject(self, name: str, state: State, retry_after: float) -> None:
        now = self._clock()
        with self._would_reject_lock:
            due, pending = self._would_reject.get(name, (now, 0))
            pending += 1
            if now < due:
                self._would_reject[name] = (due, pending)
                return
            self._would_reject[name] = (now + WOULD_REJECT_LOG_INTERVAL_MS, 0)
        # WARNING: it shows at the Lambda Python runtime's default level, as a trip does.
        self.log.warning(
            "circuit %s (shadow): would have rejected %d call(s); breaker is %s",
            name,
            pending,
            state.value,
            extra={
                "breaker": name,
                "breaker_event": "would_reject",
                "state": state.value,
                "count": pending,
            },
        )

    def on_state_change(self, name: str, change: StateChange) -> None:
        # Lambda's Python runtime leaves the root logger at WARNING unless the function sets
        # a log level: a breaker that starts turning calls away, or stops protecting them,
        # must show there. Recovery (half_open, closed) is routine news.
        before, after = change.before, change.after
        log = self.log.warning if after.value in _WARNING_STATES else self.log.info
        log(
            "circuit %s: %s -> %s",
            name,
            before.value,
            after.value,
            extra={
                "breaker": name,
                "breaker_event": "transition",
                "from_state": before.value,
                "to_state": after.value,
                "reason": change.reason.value,
                "generation": change.generation,
            },
        )

    def on_store_error(self, name: str, operation: str, error: BaseException) -> None:
        if isinstance(error, StoreMisconfiguredError):
            return  # on_store_misconfigured logs it, at ERROR
        # A client's message may quote its URL or token (a custom client's, a library's).
        from fleetbreaker.redaction import redact

        text = redact(str(error))
        self.log.warning(
            "circuit %s: store %s failed: %s",
            name,
            operation,
            text,
            extra={
                "breaker": name,
                "breaker_event": "store_error",
                "operation": operation,
                "error": text,
                "error_type": type(error).__name__,
            },
        )

    def on_store_misconfigured(
        self, name: str, operation: str, error: StoreMisconfiguredError
    ) -> None:
        # Once per container (process): the same setting is wrong for every breaker and every
        # call, and a line per call would bury it. The metric counts each one.
        if not first_report(error):
            return
        from fleetbreaker.redaction import redact

        text = redact(str(error))
        self.log.error(
            "circuit %s: store %s refused: %s; a setting must change: until it does, breakers "
            "on this store run on local state, per container",
            name,
            operation,
            text,
            extra={
                "breaker": name,
                "breaker_event": "store_misconfigured",
                "operation": operation,
                "problem": error.problem,
                "variable": error.variable,
                "error": text,
                "error_type": type(error).__name__,
            },
        )

    def on_degraded(self, name: str, reason: str) -> None:
        self._event(self.log.warning, name, "degraded", "running on local state (%s)", reason)

    def on_recovered(self, name: str) -> None:
        self._event(self.log.info, name, "recovered", "store reachable again")

    def on_corrupt_record(self, name: str, detail: str) -> None:
        message = "unreadable record treated as closed: %s"
        self._event(self.log.error, name, "corrupt_record", message, detail)

    @staticmethod
    def _event(
        write: Callable[..., None], name: str, event: str, message: str, detail: str | None = None
    ) -> None:
        """One log line about breaker ``name``, with its detail (as ``reason`` for a
        degradation, ``detail`` otherwise) in the message and in ``extra``."""
        extra: dict[str, object] = {"breaker": name, "breaker_event": event}
        args: tuple[str, ...] = ()
        if detail is not None:
            extra["reason" if event == "degraded" else "detail"] = detail
            args = (detail,)
        write(f"circuit %s: {message}", name, *args, extra=extra)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# Every hook, with BreakerListener's no-op: a listener overrides a hook when its class's
# attribute is another. Worked out once here, not by every breaker's construction.
_HOOKS: tuple[tuple[str, object], ...] = tuple(
    (hook, getattr(BreakerListener, hook))
    for hook in vars(BreakerListener)
    if hook.startswith("on_")
)
_HOOK_NAMES = tuple(hook for hook, _ in _HOOKS)


class Hooks:
    """A breaker's listeners, sorted by hook.

    Each hook calls only the listeners that override it, so a hook nobody implements costs
    nothing; a listener's exception is logged, never raised into the call. ``decision`` is
    the hot path's own tuple (every admitted call): the breaker loops over it inline.
    """

    def __init__(self, listeners: Iterable[BreakerListener], name: str) -> None:
        self.name = name
        listeners = list(listeners)
        by_hook: dict[str, tuple[Callable[..., None], ...]] = dict.fromkeys(_HOOK_NAMES, ())
        for listener in listeners:
            kind = type(listener)
            for hook, default in _HOOKS:
                if getattr(kind, hook, None) is not default:
                    by_hook[hook] += (getattr(listener, hook),)
        self.by_hook = by_hook
        self.decision = self.by_hook["on_decision"]
        self.handoffs: tuple[Callable[[], Callable[[Callable[[], Any]], Any] | None], ...] = tuple(
            listener.thread_handoff
            for listener in listeners
            if type(listener).thread_handoff is not BreakerListener.thread_handoff
        )

    def watching(self, *hooks: str) -> bool:
        """Whether any listener has one of ``hooks``."""
        by_hook = self.by_hook
        return any(by_hook[hook] for hook in hooks)

    def handed_off(self, job: Callable[[], T]) -> Callable[[], T]:
        """``job``, to run on a worker thread inside the trace contexts of this thread
        (:meth:`BreakerListener.thread_handoff`); a listener that fails is logged and
        carries nothing."""
        for capture in self.handoffs:
            try:
                wrapper = capture()
            except Exception:
                self.failed(capture, "thread_handoff")
                continue
            if wrapper is not None:
                job = functools.partial(wrapper, job)
        return job

    def emit(self, hook: str, *args: Any) -> None:
        for method in self.by_hook[hook]:
            try:
                method(*args)
            except Exception:
                self.failed(method, hook)

    def failed(self, method: Callable[..., object], hook: str) -> None:
        logger.exception("circuit %s: listener %r failed in %s", self.name, method, hook)
