"""Breaker gate: lets any Step Functions workflow put a step behind a fleetbreaker breaker.

A workflow cannot hold a breaker across states, so the gate splits a call in two: a ``check``
Task before the protected step and a ``record`` Task after it. Both talk to the same breakers
(shared through DynamoDB) as every Lambda function that uses the layer directly.

Requests and answers
--------------------
``{"action": "check", "breaker": "payment-api", "max_wait_seconds": 60, "probe_seconds": 40}``
    → ``{"breaker", "state", "decision", "retry_after", "wait_seconds", "token", "degraded",
    "mode", "would"}``.
    ``decision`` is ``allow``, ``probe`` or ``reject``. A probe comes with a ``token`` that the
    record step must pass back. ``wait_seconds`` is ``retry_after`` as the whole number of
    seconds a Wait state's ``SecondsPath`` accepts: rounded up, at least 1 when rejected, 0
    otherwise, and capped at the request's ``max_wait_seconds`` (optional) and at
    ``GATE_MAX_WAIT_SECONDS``, whichever is lower. ``probe_seconds`` (optional) is how long
    the protected step may take, from this check to its record: should the check win the
    probe, its lease lasts that long (capped by ``BREAKER_PROBE_LEASE_SECONDS``), and a check
    turned away while the probe runs is told to wait until the probe's deadline rather than
    to the end of a whole lease. ``mode`` is ``enforce`` or ``shadow``.
    In shadow mode (``BREAKER_MODE=shadow``, or tuned live) the gate answers as if closed
    (``allow``, ``closed``, no wait, no token) whatever the breaker says, and ``would`` is
    ``{"decision", "state", "retry_after", "wait_seconds"}``, what it would have answered
    in enforce mode (``null`` in enforce mode: the key is always there, so a Task's
    ResultSelector can pass it on). Its record step then counts the outcome as an enforcing
    gate's would (and settles a due probe once the step has run), so the fleet's breaker
    trips and recovers as usual.

``{"action": "record", "breaker": "payment-api", "outcome": "success" | "failure", "token": ...}``
    → ``{"breaker", "outcome", "applied", "stale_token", "state", "detail"}``. With the probe's
    token the probe is settled; a token whose lease has ended (another probe settled, or the
    lease ran out) changes nothing and the answer says so (``applied: false``,
    ``stale_token: true``). Without a token (``null`` after an ``allow``) a failure is counted
    and a success writes nothing.

``{"action": "status", "breaker": "payment-api"}``
    → ``{"breaker", "state", "generation", "calls", "failures", "slow_calls", "containers",
    "failure_rate", "slow_call_rate", "retry_after", "open_until", "updated_at", "mode",
    "census_writes"}``: the fleet's view of the breaker (its sliding window under the rate
    policy; under the count policy ``calls`` and the rates are null), for a Choice state
    that branches on more than the state. It admits nothing and records nothing.

A request the gate cannot serve raises :class:`InvalidGateRequest` (a workflow catches it by
that name); a broken environment raises :class:`GateConfigError`. Store trouble never raises:
the breakers degrade to per-container state as they do everywhere (``degraded: true``).

Environment
-----------
``CIRCUIT_BREAKER_TABLE`` (required unless Redis is used), ``CIRCUIT_BREAKER_REDIS_URL``
(optional, ``redis://`` or ``rediss://``: keeps the breakers in Redis, as the payment function
does with the same variable) with ``CIRCUIT_BREAKER_REDIS_IAM_USER`` and
``CIRCUIT_BREAKER_REDIS_IAM_CACHE`` (the cache's IAM login), all read by
:class:`fleetbreaker.stores.StoreSettings`; ``BREAKER_FAILURE_THRESHOLD`` (5),
``BREAKER_WINDOW_SECONDS`` (60), ``BREAKER_RECOVERY_TIMEOUT`` (30),
``BREAKER_HALF_OPEN_MAX_PROBES`` (1), ``BREAKER_PROBE_LEASE_SECONDS`` (10; must outlast the
protected step, retries included), ``BREAKER_CACHE_TTL`` (1; 0 disables), the rate policy's
``BREAKER_FAILURE_RATE_THRESHOLD``, ``BREAKER_MINIMUM_CALLS``, ``BREAKER_SLOW_CALL_DURATION``,
``BREAKER_SLOW_CALL_RATE_THRESHOLD``, ``BREAKER_MIN_CONTAINERS`` and
``BREAKER_REPORT_INTERVAL`` (unset: the count policy), ``BREAKER_MODE`` (``enforce`` or
``shadow``),
``GATE_MAX_WAIT_SECONDS`` (300), ``GATE_ALLOWED_BREAKERS`` (optional, comma-separated: the
only names this gate serves, so a typo in a workflow fails instead of creating a new breaker).
Every breaker of one gate uses the same config.

One :class:`BreakerGate`, and one breaker per name, per container: built on the first
invocation and reused while the container is warm. Tests build their own with
:func:`create_gate` (injected clock, local endpoint) and assign it to :data:`gate`.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from breaker_events import transition_listeners
from fleetbreaker import BreakerConfig, CircuitBreaker, InvalidTokenError
from fleetbreaker.config import env_number
from fleetbreaker.errors import ConfigError
from fleetbreaker.naming import validate_name
from fleetbreaker.observability import default_listeners, log_metrics
from fleetbreaker.record import Decision, State
from fleetbreaker.stores import StoreSettings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aws_lambda_powertools.utilities.typing import LambdaContext

    from fleetbreaker.events import BreakerListener
    from fleetbreaker.stores.base import Store

logger = Logger(service="breaker-gate")
# No Powertools Tracer: with active tracing the breakers' own TracingListener annotates the
# Lambda trace and adds a subsegment per store round trip, and the X-Ray SDK is imported only
# when the invocation is traced (Tracer would import it on every cold start).

ACTIONS = ("check", "record", "status")
OUTCOMES = ("success", "failure")
FIELDS = {
    "check": {"action", "breaker", "max_wait_seconds", "probe_seconds"},
    "record": {"action", "breaker", "outcome", "token"},
    "status": {"action", "breaker"},
}
# A Wait state takes at most a year; an hour is already far beyond any sane open window.
MAX_WAIT_LIMIT = 3600
# No step outlives a standard workflow's longest execution, a year (the lease caps it anyway).
MAX_PROBE_SECONDS = 366 * 86_400
# Error messages quote what they refuse, bounded: Step Functions keeps at most 32 KB of an
# error's cause, and a log line of megabytes helps nobody.
MAX_LISTED_FIELDS = 10
MAX_SHOWN_CHARACTERS = 64


class InvalidGateRequest(ValueError):
    """The request is not one the gate serves; the message says which field is wrong."""


class GateConfigError(ValueError):
    """An environment variable of the gate function is missing or invalid."""


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class GateSettings:
    """Everything the gate reads from its environment (see the module docstring)."""

    # The store variables, read by the package's one reader (CIRCUIT_BREAKER_*).
    store: StoreSettings
    breaker_config: BreakerConfig
    max_wait_seconds: int = 300
    allowed_breakers: frozenset[str] | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GateSettings:
        try:
            store = StoreSettings.from_env(env)
        except ConfigError as exc:
            raise GateConfigError(str(exc)) from None
        try:
            config = BreakerConfig.from_env(env)
        except ConfigError as exc:
            raise GateConfigError(f"breaker settings: {exc}") from exc
        try:
            max_wait = env_number(env, "GATE_MAX_WAIT_SECONDS", 300, int)
        except ConfigError as exc:
            raise GateConfigError(str(exc)) from None
        if max_wait > MAX_WAIT_LIMIT:
            raise GateConfigError(
                f"GATE_MAX_WAIT_SECONDS must be at most {MAX_WAIT_LIMIT}, got {max_wait}"
            )
        names = env.get("GATE_ALLOWED_BREAKERS", "")
        allowed = frozenset(n.strip() for n in names.split(",") if n.strip()) or None
        return cls(store, config, max_wait, allowed)


# --------------------------------------------------------------------------- requests


def _shown(value: object) -> str:
    """``repr(value)`` cut to a bounded length, saying how long it was."""
    text = repr(value)
    if len(text) <= MAX_SHOWN_CHARACTERS:
        return text
    return f"{text[:MAX_SHOWN_CHARACTERS]}... ({len(text)} characters)"


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _field(event: Mapping[str, Any], name: str) -> Any:
    if name not in event:
        raise InvalidGateRequest(f"{name}: required")
    return event[name]


def _parse(event: object) -> tuple[str, str]:
    """The action and breaker name of a request, after checking its shape."""
    if not isinstance(event, Mapping):
        raise InvalidGateRequest(f"the request must be a JSON object, got {_kind(event)}")
    action = _field(event, "action")
    if not isinstance(action, str) or action not in ACTIONS:
        raise InvalidGateRequest(
            f"action: must be one of {', '.join(ACTIONS)}, got {_shown(action)}"
        )
    unknown = sorted(str(name) for name in set(event) - FIELDS[action])
    if unknown:
        allowed = ", ".join(sorted(FIELDS[action]))
        listed = ", ".join(_shown(name) for name in unknown[:MAX_LISTED_FIELDS])
        if len(unknown) > MAX_LISTED_FIELDS:
            listed += f" and {len(unknown) - MAX_LISTED_FIELDS} more"
        raise InvalidGateRequest(f"unknown field(s) for {action}: {listed} (allowed: {allowed})")
    name = _field(event, "breaker")
    try:
        validate_name(name)
    except ConfigError as exc:
        raise InvalidGateRequest(f"breaker: {exc}") from None
    return action, name


def _probe_seconds(event: Mapping[str, Any]) -> float | None:
    """The check's ``probe_seconds``: the protected step's deadline, or None (the lease)."""
    if "probe_seconds" not in event:
        return None
    value = event["probe_seconds"]
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value <= MAX_PROBE_SECONDS
    ):
        raise InvalidGateRequest(
            "probe_seconds: must be a positive number of seconds (how long the protected "
            f"step may take), at most {MAX_PROBE_SECONDS}, got {_shown(value)}"
        )
    return float(value)


# --------------------------------------------------------------------------- the gate


class BreakerGate:
    """Answers check and record requests, keeping one breaker per name for the container."""

    def __init__(
        self,
        settings: GateSettings,
        store: Store,
        *,
        clock: Callable[[], int] | None = None,
        listeners: Sequence[BreakerListener] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.listeners = listeners
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    def breaker(self, name: str) -> CircuitBreaker:
        """The container's breaker for ``name`` (created on first use)."""
        allowed = self.settings.allowed_breakers
        if allowed is not None and name not in allowed:
            raise InvalidGateRequest(
                f"breaker: {name!r} is not served by this gate "
                f"(GATE_ALLOWED_BREAKERS: {', '.join(sorted(allowed))})"
            )
        breaker = self._breakers.get(name)
        if breaker is None:
            with self._lock:
                breaker = self._breakers.get(name)
                if breaker is None:
                    breaker = CircuitBreaker(
                        name,
                        store=self.store,
                        config=self.settings.breaker_config,
                        listeners=self.listeners,
                        clock=self.clock,
                    )
                    self._breakers[name] = breaker
        return breaker

    def handle(self, event: object) -> dict[str, Any]:
        """Serve one request; raises :class:`InvalidGateRequest` for a malformed one."""
        action, name = _parse(event)
        assert isinstance(event, Mapping)  # _parse checked it
        if action == "check":
            return self.check(name, self._max_wait(event), _probe_seconds(event))
        if action == "status":
            return self.status(name)
        return self.record(name, event)

    def status(self, name: str) -> dict[str, Any]:
        """The fleet's view of the breaker (``CircuitBreaker.snapshot``): decides nothing."""
        view = self.breaker(name).snapshot().as_dict()
        del view["name"]
        return {"breaker": name, **view}

    def check(
        self, name: str, max_wait_seconds: int, probe_seconds: float | None = None
    ) -> dict[str, Any]:
        breaker = self.breaker(name)
        admission = breaker.check(probe_seconds=probe_seconds)
        wait = 0
        if not admission.allowed:
            wait = min(max_wait_seconds, max(1, math.ceil(admission.retry_after_s)))
        answer = {
            "breaker": name,
            "state": admission.state.value,
            "decision": admission.decision.value,
            "retry_after": round(admission.retry_after_s, 3),
            "wait_seconds": wait,
            "token": admission.token,
            "degraded": admission.degraded,
            "mode": breaker.mode,
            "would": None,
        }
        if breaker.mode == "shadow":
            # As if closed, whatever the breaker says; what enforce would have said beside it.
            would = admission.shadow or admission.decision
            retry_after = 0.0
            if would is Decision.REJECT:
                retry_after = breaker.snapshot().retry_after
            answer["state"] = State.CLOSED.value
            answer["would"] = {
                "decision": would.value,
                "state": admission.state.value,
                "retry_after": round(retry_after, 3),
                "wait_seconds": (
                    min(max_wait_seconds, max(1, math.ceil(retry_after)))
                    if would is Decision.REJECT
                    else 0
                ),
            }
        return answer

    def record(self, name: str, event: Mapping[str, Any]) -> dict[str, Any]:
        outcome = _field(event, "outcome")
        if outcome not in OUTCOMES:
            raise InvalidGateRequest(
                f"outcome: must be one of {', '.join(OUTCOMES)}, got {_shown(outcome)}"
            )
        token = event.get("token")
        if token is not None and not isinstance(token, str):
            raise InvalidGateRequest(
                f"token: must be the check's token (a string) or null, got {type(token).__name__}"
            )
        try:
            result = self.breaker(name).record(outcome == "success", token)
        except InvalidTokenError:
            raise InvalidGateRequest(
                f"token: {_shown(token)} is not a probe token issued by a check"
            ) from None
        return {
            "breaker": name,
            "outcome": outcome,
            "applied": result.applied,
            "stale_token": token is not None and not result.applied,
            "state": result.state.value,
            "detail": result.detail,
        }

    def _max_wait(self, event: Mapping[str, Any]) -> int:
        cap = self.settings.max_wait_seconds
        if "max_wait_seconds" not in event:
            return cap
        value = event["max_wait_seconds"]
        # JSON has one number type: 60.0 is as whole as 60.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 1 <= value <= MAX_WAIT_LIMIT
        ):
            raise InvalidGateRequest(
                f"max_wait_seconds: must be a whole number from 1 to {MAX_WAIT_LIMIT}, "
                f"got {_shown(value)}"
            )
        # The workflow's own bound, never above the gate's.
        return min(value, cap)


def create_gate(
    env: Mapping[str, str] | None = None,
    *,
    clock: Callable[[], int] | None = None,
    endpoint_url: str | None = None,
    store: Store | None = None,
) -> BreakerGate:
    """Build a gate from environment variables, its breakers logging through the function's
    Powertools logger, counting EMF metrics and annotating X-Ray traces.

    Parameters
    ----------
    env:
        The variables to read (default ``os.environ``).
    clock:
        Epoch-millisecond clock for every breaker of the gate (tests move time by hand).
    endpoint_url:
        A local DynamoDB endpoint. Without it boto3 resolves the endpoint itself, which
        honours ``AWS_ENDPOINT_URL_DYNAMODB``.
    store:
        A ready store, instead of a ``RedisStore`` on ``CIRCUIT_BREAKER_REDIS_URL`` or else a
        ``DynamoDBStore`` on ``CIRCUIT_BREAKER_TABLE``.
    """
    environ = os.environ if env is None else env
    settings = GateSettings.from_env(environ)
    if store is None:
        store = settings.store.open(endpoint_url=endpoint_url)
    # With Redis (no stream on the table) the gate tells the fleet of its own transitions, as
    # the payment function and the consumer do: BREAKER_MAPPINGS names what to pause.
    extra = transition_listeners(environ, endpoint_url=endpoint_url)
    return BreakerGate(
        settings, store, clock=clock, listeners=default_listeners(logger, extra=extra)
    )


# The container's gate: built by the first invocation, so a configuration error is reported
# as that invocation's error (with its message) rather than as an opaque init failure.
gate: BreakerGate | None = None
_gate_lock = threading.Lock()


def current_gate() -> BreakerGate:
    global gate
    with _gate_lock:
        if gate is None:
            gate = create_gate()
        return gate


@log_metrics  # one EMF document per breaker per invocation, also when the handler raises
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        answer = current_gate().handle(event)
    except InvalidGateRequest as exc:
        logger.warning("invalid gate request", extra={"error": str(exc)})
        raise
    logger.debug("gate answer", extra={"answer": answer})
    return answer
