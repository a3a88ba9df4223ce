"""Breaker states, the shared record, and the pure transition rules.

Everything here is a function of its arguments: no I/O, no clock, no randomness. The stores
apply these rules atomically (MemoryStore literally calls them under a lock; DynamoDBStore and
RedisStore express the same rules as conditional writes and Lua scripts), and the contract
test suite checks that every store agrees with them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Protocol

# Probe slots a record can hold: BreakerConfig caps half_open_max_probes here, and the stores
# (DynamoDB attributes, the Redis scripts) read this many.
MAX_PROBE_SLOTS = 16


class State(str, Enum):
    """The state of a breaker, shared by the whole fleet."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
    FORCED_OPEN = "forced_open"
    DISABLED = "disabled"

    def __str__(self) -> str:
        return self.value


class Decision(str, Enum):
    """What a breaker decided for one call."""

    ALLOW = "allow"
    PROBE = "probe"
    REJECT = "reject"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Lease:
    """A probe slot held by one caller until ``until`` (epoch ms)."""

    token: str
    until: int


@dataclass(frozen=True)
class Record:
    """One breaker's shared state, as every store keeps it.

    Times are epoch milliseconds except ``expires_at``, which is epoch seconds because
    DynamoDB's TTL wants seconds. ``gen`` grows by one on every state change, so a write
    fenced on the generation it observed cannot land on a later state.

    ``tuned`` (live settings, a JSON object) and ``last_action`` (the last operator action, a
    JSON object) are kept as the store holds them, as text: state changes carry them over
    untouched, and :mod:`fleetbreaker.tuning` reads them ("" means none).
    """

    state: State = State.CLOSED
    gen: int = 0
    failures: int = 0
    window_start: int = 0
    opened_at: int = 0
    open_until: int = 0
    reopens: int = 0
    successes: int = 0
    leases: Mapping[int, Lease] = field(default_factory=dict)
    updated_at: int = 0
    expires_at: int = 0
    tuned: str = ""
    last_action: str = ""

    def is_expired(self, now_ms: int) -> bool:
        """Past its TTL: DynamoDB may still return it, but it counts as absent."""
        return self.expires_at * 1000 <= now_ms


# The record's integer fields, as every store keeps them (the TTL field is ``expires_at``).
RECORD_NUMBERS = (
    "gen",
    "failures",
    "window_start",
    "opened_at",
    "open_until",
    "reopens",
    "successes",
    "updated_at",
    "expires_at",
)

# Text fields a state change never touches: stores carry them over from the record they replace.
RECORD_TEXTS = ("tuned", "last_action")


class PolicySource(Protocol):
    """The config fields a Policy is made of (BreakerConfig has them).

    A protocol rather than an import, so the rules never import the config module (which
    imports the errors, which name the states: no cycle).
    """

    @property
    def failure_threshold(self) -> int: ...
    @property
    def window_seconds(self) -> float: ...
    @property
    def recovery_timeout(self) -> float: ...
    @property
    def recovery_backoff(self) -> float: ...
    @property
    def max_recovery_timeout(self) -> float: ...
    @property
    def half_open_max_probes(self) -> int: ...
    @property
    def half_open_successes(self) -> int: ...
    @property
    def probe_lease_seconds(self) -> float: ...
    @property
    def record_ttl_seconds(self) -> int: ...


@dataclass(frozen=True)
class Policy:
    """The numbers the store operations need, in store units (ms, s).

    Derived once from a BreakerConfig, so stores never see callables or exception types.
    """

    failure_threshold: int
    window_ms: int
    base_open_ms: int
    backoff: float
    max_open_ms: int
    max_probes: int
    successes_needed: int
    lease_ms: int
    ttl_s: int

    @classmethod
    def from_config(cls, config: PolicySource) -> Policy:
        return cls(
            failure_threshold=config.failure_threshold,
            window_ms=max(1, round(config.window_seconds * 1000)),
            base_open_ms=max(1, round(config.recovery_timeout * 1000)),
            backoff=float(config.recovery_backoff),
            max_open_ms=max(1, round(config.max_recovery_timeout * 1000)),
            max_probes=config.half_open_max_probes,
            successes_needed=config.half_open_successes,
            lease_ms=max(1, round(config.probe_lease_seconds * 1000)),
            ttl_s=config.record_ttl_seconds,
        )


@dataclass(frozen=True)
class Outcome:
    """What a store operation did and the record it left behind.

    ``record`` is the store's view after the operation (None: no record, i.e. closed);
    ``changed`` says whether this operation wrote; ``transition`` the state change it made;
    ``token`` the lease token of a granted probe claim.
    """

    record: Record | None
    changed: bool = False
    transition: tuple[State, State] | None = None
    token: str | None = None


@dataclass(frozen=True)
class ProbeReport:
    """A probe's result, as its caller reports it to ``settle_probe``.

    ``jitter`` is a factor in (0, 1] drawn by the caller: it shortens a grown open window if
    the probe failed (see :func:`open_duration_ms`).
    """

    token: str
    success: bool
    jitter: float = 1.0


@dataclass(frozen=True)
class Verdict:
    """What the rules say about admitting a call, given a record and the time."""

    decision: Decision
    state: State
    retry_after_ms: int = 0
    try_probe: bool = False


_ALLOW_CLOSED = Verdict(Decision.ALLOW, State.CLOSED)
_ALLOW_DISABLED = Verdict(Decision.ALLOW, State.DISABLED)


def open_duration_ms(policy: Policy, reopens: int, jitter: float) -> int:
    """How long the breaker stays open after ``reopens`` failed recoveries.

    The first opening lasts exactly ``recovery_timeout``; each failed recovery multiplies
    it by ``recovery_backoff`` up to the cap, and ``jitter`` (a factor in (0, 1], drawn by
    the caller) spreads the reopen times of many breakers apart.
    """
    if reopens <= 0:
        return policy.base_open_ms
    grown = min(float(policy.max_open_ms), policy.base_open_ms * policy.backoff ** min(reopens, 64))
    return max(1, math.floor(grown * jitter))


def lease_slot(token: str) -> int | None:
    """The slot a lease token names (tokens look like ``"<slot>-<nonce>"``)."""
    head, sep, nonce = token.partition("-")
    # isascii(): str.isdigit() also accepts "²" and other digits int() rejects or misreads.
    if not sep or not nonce or not head.isascii() or not head.isdigit() or len(head) > 2:
        return None
    return int(head)


def make_token(slot: int, nonce: str) -> str:
    return f"{slot}-{nonce}"


def free_slot(record: Record, policy: Policy, now_ms: int) -> int | None:
    """The lowest probe slot that is unheld or whose lease has run out."""
    for slot in range(policy.max_probes):
        lease = record.leases.get(slot)
        if lease is None or lease.until <= now_ms:
            return slot
    return None


# Operator overrides are held until released, so their records must outlive any idle TTL.
OVERRIDE_TTL_S = 10 * 366 * 86_400


def ttl_seconds(policy: Policy, state: State) -> int:
    """How long a record written in ``state`` may sit idle before it is garbage."""
    if state in (State.FORCED_OPEN, State.DISABLED):
        return max(policy.ttl_s, OVERRIDE_TTL_S)
    return policy.ttl_s


def _stamp(record: Record, policy: Policy, now_ms: int) -> Record:
    expires_at = now_ms // 1000 + ttl_seconds(policy, record.state)
    return replace(record, updated_at=now_ms, expires_at=expires_at)


def verdict(record: Record | None, policy: Policy, now_ms: int) -> Verdict:
    """Admit, reject, or try for a probe lease: the read-only half of the rules."""
    if record is None or record.state is State.CLOSED:
        return _ALLOW_CLOSED  # the hot path: no allocation
    state = record.state
    if state is State.DISABLED:
        return _ALLOW_DISABLED
    if state is State.FORCED_OPEN:
        return Verdict(Decision.REJECT, state, policy.base_open_ms)
    if state is State.OPEN:
        if now_ms < record.open_until:
            return Verdict(Decision.REJECT, state, record.open_until - now_ms)
        return Verdict(Decision.PROBE, state, try_probe=True)
    # half_open: a probe slot may be free, or the caller waits for the first lease to end.
    if free_slot(record, policy, now_ms) is not None:
        return Verdict(Decision.PROBE, state, try_probe=True)
    soonest = min(lease.until for lease in record.leases.values())
    return Verdict(Decision.REJECT, state, max(1, soonest - now_ms))


def apply_failure(record: Record | None, policy: Policy, now_ms: int) -> Outcome:
    """Count one failure of a call admitted while closed; trip on reaching the threshold."""
    current = record if record is not None else Record()
    if current.state is not State.CLOSED:
        return Outcome(record)
    if current.window_start and now_ms - current.window_start < policy.window_ms:
        counted = replace(current, failures=current.failures + 1)
    else:
        counted = replace(current, failures=1, window_start=now_ms)
    if counted.failures < policy.failure_threshold:
        return Outcome(_stamp(counted, policy, now_ms), changed=True)
    opened = trip(current, policy, now_ms)
    return Outcome(opened, changed=True, transition=(State.CLOSED, State.OPEN))


def trip(record: Record, policy: Policy, now_ms: int) -> Record:
    """The open record that replaces a closed one whose failures reached the threshold."""
    opened = Record(
        state=State.OPEN,
        gen=record.gen + 1,
        opened_at=now_ms,
        open_until=now_ms + open_duration_ms(policy, 0, 1.0),
    )
    return _stamp(opened, policy, now_ms)


def apply_claim(record: Record | None, policy: Policy, now_ms: int, nonce: str) -> Outcome:
    """Try to take a probe lease: the open→half_open move, or a free half-open slot."""
    if record is None:
        return Outcome(None)
    until = now_ms + policy.lease_ms
    if record.state is State.OPEN and now_ms >= record.open_until:
        token = make_token(0, nonce)
        opened = replace(
            record,
            state=State.HALF_OPEN,
            gen=record.gen + 1,
            successes=0,
            leases={0: Lease(token, until)},
        )
        return Outcome(
            _stamp(opened, policy, now_ms),
            changed=True,
            transition=(State.OPEN, State.HALF_OPEN),
            token=token,
        )
    if record.state is State.HALF_OPEN:
        slot = free_slot(record, policy, now_ms)
        if slot is None:
            return Outcome(record)
        token = make_token(slot, nonce)
        leased = replace(record, leases={**record.leases, slot: Lease(token, until)})
        return Outcome(_stamp(leased, policy, now_ms), changed=True, token=token)
    return Outcome(record)


def holds_lease(record: Record | None, token: str, now_ms: int) -> bool:
    """Whether ``token`` names a live lease of this half-open record."""
    slot = lease_slot(token)
    if record is None or record.state is not State.HALF_OPEN or slot is None:
        return False
    lease = record.leases.get(slot)
    return lease is not None and lease.token == token and lease.until > now_ms


def apply_settle(
    record: Record | None,
    policy: Policy,
    now_ms: int,
    report: ProbeReport,
) -> Outcome:
    """Report a probe's result. Only a live lease counts: a late prober changes nothing."""
    token = report.token
    if record is None or not holds_lease(record, token, now_ms):
        return Outcome(record)
    slot = lease_slot(token)
    if report.success:
        successes = record.successes + 1
        if successes < policy.successes_needed:
            rest = {k: v for k, v in record.leases.items() if k != slot}
            kept = replace(record, successes=successes, leases=rest)
            return Outcome(_stamp(kept, policy, now_ms), changed=True)
        closed = Record(state=State.CLOSED, gen=record.gen + 1)
        return Outcome(
            _stamp(closed, policy, now_ms),
            changed=True,
            transition=(State.HALF_OPEN, State.CLOSED),
        )
    reopens = record.reopens + 1
    reopened = Record(
        state=State.OPEN,
        gen=record.gen + 1,
        opened_at=now_ms,
        open_until=now_ms + open_duration_ms(policy, reopens, report.jitter),
        reopens=reopens,
    )
    return Outcome(
        _stamp(reopened, policy, now_ms),
        changed=True,
        transition=(State.HALF_OPEN, State.OPEN),
    )


FORCEABLE = frozenset({State.CLOSED, State.FORCED_OPEN, State.DISABLED})


def apply_force(record: Record | None, policy: Policy, now_ms: int, target: State) -> Outcome:
    """An operator override (forced_open, disabled) or its release (closed)."""
    if target not in FORCEABLE:
        raise ValueError(f"cannot force a breaker to {target.value!r}")
    before = record.state if record is not None else State.CLOSED
    gen = record.gen + 1 if record is not None else 1
    forced = _stamp(Record(state=target, gen=gen), policy, now_ms)
    return Outcome(forced, changed=True, transition=(before, target))
