"""Breaker states, the shared record, and the pure transition rules.

Everything here is a function of its arguments: no I/O, no clock, no randomness. The stores
apply these rules atomically (MemoryStore literally calls them under a lock; DynamoDBStore and
RedisStore express the same rules as conditional writes and Lua scripts), and the contract
test suite checks that every store agrees with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import field
from enum import Enum
from functools import cached_property, lru_cache
from typing import Any, Protocol

from fleetbreaker.frozen import frozen, replace

# Probe slots a record can hold: BreakerConfig caps half_open_max_probes here, and the stores
# (DynamoDB attributes, the Redis scripts) read this many.
MAX_PROBE_SLOTS = 16

# How far apart the fleet's clocks may be (ms). Lambda keeps its clocks synced, so the
# package runs no clock service; the stores' conditions compare times on the caller's clock
# and every guarantee is stated within this tolerance (docs/architecture.md, "Clocks"). Past
# it one rule still holds: a probe lease granted later than the caller's clock plus this
# tolerance was set by a clock too far ahead to trust and is treated as free, so a prober
# whose clock runs far ahead blocks the others no longer than its ``probe_lease_seconds``
# plus this tolerance.
CLOCK_TOLERANCE_MS = 1_000


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


@frozen
class Lease:
    """A probe slot held by one caller until ``until`` (epoch ms).

    ``since`` is when it was granted, on the claimer's clock (None: not recorded).
    """

    token: str
    until: int
    since: int | None = None


@frozen
class Bucket:
    """One slice of the rate policy's sliding window: the calls reported in it.

    ``idx`` is the slice's absolute number (epoch ms // bucket length), so a slot of the ring
    whose ``idx`` is old holds counts that have left the window.
    """

    idx: int
    calls: int = 0
    failures: int = 0
    slow: int = 0
    reports: int = 0


# How stores name a bucket's numbers: w<slot>_<code> (DynamoDB attributes, Redis fields).
BUCKET_CODES = {"i": "idx", "c": "calls", "f": "failures", "s": "slow", "r": "reports"}
# How stores name the quorum maps (a DynamoDB map attribute; Redis fields "<code>:<id>").
QUORUM_CODES = {"fq": "failing", "sq": "slowing"}


def bucket_field(slot: int, code: str) -> str:
    return f"w{slot}_{code}"


def parse_window(
    number: Callable[[str], int | None], quorum: Mapping[str, Mapping[str, int]]
) -> dict[str, Any]:
    """The window fields of a Record from a store's raw values (shared by every store).

    ``number(field)`` gives a stored integer or None. A bucket with any part missing or
    negative is dropped: it reads as empty, never as a crash or a trip.
    """
    buckets: dict[int, Bucket] = {}
    for slot in range(WINDOW_BUCKETS):
        parts = {name: number(bucket_field(slot, code)) for code, name in BUCKET_CODES.items()}
        if all(
            value is not None and (name == "idx" or value >= 0) for name, value in parts.items()
        ):
            buckets[slot] = Bucket(**parts)  # type: ignore[arg-type]
    return {"buckets": buckets, **{QUORUM_CODES[code]: dict(m) for code, m in quorum.items()}}


@frozen
class Report:
    """What one container reports in one write: its calls since its last report.

    ``container`` is the id the quorum counts. A call still running past
    ``slow_call_duration`` is reported as a call and a slow call; when it ends it adds only
    its failure, if any. ``gen`` is the generation the calls were admitted under: a store
    counts them only into that generation's window (None: into whichever is current), so
    failures held from before a trip never land in the window after the recovery.
    """

    container: str
    calls: int = 0
    failures: int = 0
    slow: int = 0
    gen: int | None = None

    def __bool__(self) -> bool:
        return bool(self.calls or self.failures or self.slow)


@frozen
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
    # Rate policy, slow calls and quorum (empty under the plain count policy): the sliding
    # window's ring of buckets by slot, and the containers whose failures / slow calls fall in
    # the window (id -> epoch ms of the latest), at most ``min_containers`` of each.
    buckets: Mapping[int, Bucket] = field(default_factory=dict)
    failing: Mapping[str, int] = field(default_factory=dict)
    slowing: Mapping[str, int] = field(default_factory=dict)
    # Bumped by every rewrite of the quorum maps: DynamoDB fences such a rewrite on it.
    rev: int = 0

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

# The integers a store trusts in a record: at most this many digits, with an optional minus.
# Redis' Lua computes in doubles and prints integers past 14 digits in exponent form, so every
# store applies the same bound; a value past it (or fractional) makes the record corrupt.
# Counters never get near it (10^14 transitions), and a hand-edited one then reads as closed
# and is replaced by the next write, like any other corrupt record.
MAX_RECORD_DIGITS = 14

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
    @property
    def failure_rate_threshold(self) -> float | None: ...
    @property
    def minimum_calls(self) -> int: ...
    @property
    def slow_call_duration(self) -> float | None: ...
    @property
    def slow_call_rate_threshold(self) -> float: ...
    @property
    def min_containers(self) -> int: ...
    @property
    def reporting(self) -> bool: ...


# A rate threshold is compared as a fraction whose denominator is at most this: exact for any
# threshold written with up to six decimals, and small enough that the Redis scripts (doubles,
# exact to 2^53) compare it exactly too (see reaches()).
MAX_RATIO_DENOMINATOR = 1_000_000


def exact_ratio(rate: float) -> tuple[int, int]:
    """A rate threshold as the fraction its decimal text says: 0.55 is 11/20, not the double
    0.55000000000000004441 (so 55 of 100 reaches it). Past six decimals, the nearest fraction
    with a denominator up to MAX_RATIO_DENOMINATOR."""
    from fractions import Fraction  # a policy is built once per breaker: keep it off import

    exact = Fraction(repr(float(rate))).limit_denominator(MAX_RATIO_DENOMINATOR)
    return exact.numerator, exact.denominator


def reaches(part: int, whole: int, ratio: tuple[int, int]) -> bool:
    """Whether ``part / whole`` reaches the threshold ``ratio``, in integers (no rounding)."""
    numerator, denominator = ratio
    return part * denominator >= whole * numerator


# The rate policy's sliding window is a ring of this many buckets (each window_ms / 10 long):
# the window slides in tenths, and the record stays a few hundred bytes at any fleet size.
WINDOW_BUCKETS = 10


@frozen
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
    # Rate policy, slow calls, quorum: see BreakerConfig. ``reporting`` says whether
    # containers report batches through ``apply_report`` instead of ``apply_failure``.
    failure_rate: float | None = None
    minimum_calls: int = 20
    slow_ms: int | None = None
    slow_rate: float = 1.0
    min_containers: int = 1
    reporting: bool = False

    @cached_property
    def failure_ratio(self) -> tuple[int, int] | None:
        """``failure_rate`` as an exact fraction (numerator, denominator); see exact_ratio."""
        return None if self.failure_rate is None else exact_ratio(self.failure_rate)

    @cached_property
    def slow_ratio(self) -> tuple[int, int]:
        """``slow_rate`` as an exact fraction (numerator, denominator); see exact_ratio."""
        return exact_ratio(self.slow_rate)

    @property
    def bucket_ms(self) -> int:
        """Length of one of the window's WINDOW_BUCKETS slices."""
        return max(1, -(-self.window_ms // WINDOW_BUCKETS))

    @classmethod
    def from_config(cls, config: PolicySource) -> Policy:
        slow = config.slow_call_duration
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
            failure_rate=config.failure_rate_threshold,
            minimum_calls=config.minimum_calls,
            slow_ms=None if slow is None else max(1, round(slow * 1000)),
            slow_rate=config.slow_call_rate_threshold,
            min_containers=config.min_containers,
            reporting=config.reporting,
        )


@lru_cache(maxsize=32)
def alone(policy: Policy) -> Policy:
    """The policy a container applies on its own (store unreachable): the quorum counts as met
    by the container itself, so its local breaker can open on its own failures. A quorum of
    distinct containers is a fleet-wide rule; alone, a container only sees its own calls."""
    return policy if policy.min_containers <= 1 else replace(policy, min_containers=1)


@frozen
class Outcome:
    """What a store operation did and the record it left behind.

    ``record`` is the store's view after the operation (None: no record, i.e. closed);
    ``changed`` says whether this operation wrote; ``transition`` the state change it made;
    ``token`` the lease token of a granted probe claim. ``retry_after_ms``: a store that
    decides on its own clock (Redis' TIME) and refused a claim says how long, on that clock,
    until one can succeed; the caller then stops asking until then, whatever its own clock says.
    """

    record: Record | None
    changed: bool = False
    transition: tuple[State, State] | None = None
    token: str | None = None
    retry_after_ms: int | None = None


@frozen
class ProbeReport:
    """A probe's result, as its caller reports it to ``settle_probe``.

    ``jitter`` is a factor in (0, 1] drawn by the caller: it shortens a grown open window if
    the probe failed (see :func:`open_duration_ms`).
    """

    token: str
    success: bool
    jitter: float = 1.0


@frozen
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


MAX_TOKEN_CHARS = 64


def lease_slot(token: str) -> int | None:
    """The slot a lease token names (tokens look like ``"<slot>-<nonce>"``)."""
    if not token.isascii() or len(token) > MAX_TOKEN_CHARS:
        # Tokens this package issues are short ASCII; anything else (a lone surrogate, a
        # megabyte) is refused before it can reach a store that would fail to encode it.
        return None
    head, sep, nonce = token.partition("-")
    # isascii(): str.isdigit() also accepts "²" and other digits int() rejects or misreads.
    if not sep or not nonce or not head.isascii() or not head.isdigit() or len(head) > 2:
        return None
    return int(head)


def make_token(slot: int, nonce: str) -> str:
    return f"{slot}-{nonce}"


def lease_ended(lease: Lease, now_ms: int) -> bool:
    """Whether a lease no longer holds its slot on the caller's clock.

    A lease runs out at its expiry. One granted later than ``now_ms + CLOCK_TOLERANCE_MS``
    was written by a clock too far ahead to trust, whatever lease length its claimer used:
    its slot is free.
    """
    since = lease.since
    return lease.until <= now_ms or (since is not None and since > now_ms + CLOCK_TOLERANCE_MS)


def free_slot(record: Record, policy: Policy, now_ms: int) -> int | None:
    """The lowest probe slot that is unheld or whose lease has ended (see lease_ended)."""
    for slot in range(policy.max_probes):
        lease = record.leases.get(slot)
        if lease is None or lease_ended(lease, now_ms):
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
            leases={0: Lease(token, until, now_ms)},
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
        leased = replace(record, leases={**record.leases, slot: Lease(token, until, now_ms)})
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
        # opened_at carried over: a closed record that has one closed a real outage (the
        # recovery ramp starts only then; see ramp.closed_at).
        closed = Record(
            state=State.CLOSED, gen=record.gen + 1, opened_at=record.opened_at or now_ms
        )
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
# States a close recovers from (the calls were being turned away).
RECOVERABLE = frozenset({State.OPEN, State.HALF_OPEN, State.FORCED_OPEN})


def apply_force(record: Record | None, policy: Policy, now_ms: int, target: State) -> Outcome:
    """An operator override (forced_open, disabled) or its release (closed)."""
    if target not in FORCEABLE:
        raise ValueError(f"cannot force a breaker to {target.value!r}")
    before = record.state if record is not None else State.CLOSED
    gen = record.gen + 1 if record is not None else 1
    opened_at = 0
    if record is not None and target is State.CLOSED and before in RECOVERABLE:
        # A reset that ends an outage (open, probing, forced open) is a recovery: the ramp
        # may start. A reset of a closed or disabled breaker is not.
        opened_at = record.opened_at or record.updated_at or now_ms
    forced = _stamp(Record(state=target, gen=gen, opened_at=opened_at), policy, now_ms)
    return Outcome(forced, changed=True, transition=(before, target))


# -- rate policy, slow calls and quorum ---------------------------------------------------


# The short window judged beside the whole one: the newest RECENT_BUCKETS buckets (the current
# one included, so between one and two tenths of the window). A sharp outage fills it with
# failures within a bucket or two, while the whole window still holds up to a window of healthy
# calls; it has its own ``minimum_calls``, so a quiet breaker is judged on the whole window.
RECENT_BUCKETS = 2


@frozen
class WindowCounts:
    """The fleet's calls in the sliding window, summed over its live buckets.

    ``recent_*`` are the same sums over the newest RECENT_BUCKETS buckets, which cover the
    last ``recent_ms`` (the current bucket's elapsed part included); ``current_reports`` the
    reports in the current bucket, ``current_ms`` into it.
    """

    calls: int = 0
    failures: int = 0
    slow: int = 0
    reports: int = 0
    failing_containers: int = 0
    slow_containers: int = 0
    recent_calls: int = 0
    recent_failures: int = 0
    recent_slow: int = 0
    recent_reports: int = 0
    recent_ms: int = 0
    current_reports: int = 0
    current_ms: int = 0

    @property
    def failure_rate(self) -> float:
        return self.failures / self.calls if self.calls else 0.0

    @property
    def slow_call_rate(self) -> float:
        return self.slow / self.calls if self.calls else 0.0


def bucket_index(policy: Policy, now_ms: int) -> int:
    return now_ms // policy.bucket_ms


def live_containers(seen: Mapping[str, int], policy: Policy, now_ms: int) -> int:
    """Containers whose latest bad call is inside the window (as many as the record keeps)."""
    return sum(1 for at in seen.values() if now_ms - at < policy.window_ms)


def window_counts(record: Record | None, policy: Policy, now_ms: int) -> WindowCounts:
    """Sum the buckets still inside the sliding window ending at ``now_ms``."""
    if record is None or record.state is not State.CLOSED:
        return WindowCounts()
    current = bucket_index(policy, now_ms)
    calls = failures = slow = reports = 0
    r_calls = r_failures = r_slow = r_reports = 0
    now_reports = 0
    for bucket in record.buckets.values():
        if current - WINDOW_BUCKETS < bucket.idx <= current:
            calls += bucket.calls
            failures += bucket.failures
            slow += bucket.slow
            reports += bucket.reports
            if bucket.idx > current - RECENT_BUCKETS:
                r_calls += bucket.calls
                r_failures += bucket.failures
                r_slow += bucket.slow
                r_reports += bucket.reports
            if bucket.idx == current:
                now_reports = bucket.reports
    return WindowCounts(
        calls,
        failures,
        slow,
        reports,
        live_containers(record.failing, policy, now_ms),
        live_containers(record.slowing, policy, now_ms),
        r_calls,
        r_failures,
        r_slow,
        r_reports,
        now_ms - (current - RECENT_BUCKETS + 1) * policy.bucket_ms,
        now_reports,
        now_ms - current * policy.bucket_ms,
    )


class TransitionReason(str, Enum):
    """Why the breaker changed state (what a tracer or a log shows next to a transition)."""

    FAILURE_THRESHOLD = "failure_threshold"  # count policy: failures reached the threshold
    FAILURE_RATE = "failure_rate"  # rate policy: failures / calls reached the threshold
    SLOW_CALL_RATE = "slow_call_rate"  # slow calls / calls reached the threshold
    OPEN_WINDOW_ELAPSED = "open_window_elapsed"  # open -> half_open: the first probe claimed
    PROBE_SUCCEEDED = "probe_succeeded"  # half_open -> closed
    PROBE_FAILED = "probe_failed"  # half_open -> open, with a longer open window
    OPERATOR = "operator"  # forced open, disabled or reset

    def __str__(self) -> str:
        return self.value


def transition_reason(
    before: State, after: State, policy: Policy, counts: WindowCounts | None = None
) -> TransitionReason:
    """Why a store operation moved a breaker from ``before`` to ``after``.

    ``counts``: for a trip by a report (rate policy, slow calls, quorum), the window as the
    tripping write saw it, which tells a failure trip from a slow-call trip.
    """
    if before is State.OPEN and after is State.HALF_OPEN:
        return TransitionReason.OPEN_WINDOW_ELAPSED
    if before is State.HALF_OPEN:
        if after is State.CLOSED:
            return TransitionReason.PROBE_SUCCEEDED
        if after is State.OPEN:
            return TransitionReason.PROBE_FAILED
    if before is State.CLOSED and after is State.OPEN:
        failure = (
            TransitionReason.FAILURE_THRESHOLD
            if policy.failure_rate is None
            else TransitionReason.FAILURE_RATE
        )
        if policy.slow_ms is None or counts is None or _failing(counts, policy):
            return failure
        return TransitionReason.SLOW_CALL_RATE
    return TransitionReason.OPERATOR


def _failing(counts: WindowCounts, policy: Policy) -> bool:
    if policy.failure_rate is None:
        return counts.failures >= policy.failure_threshold
    ratio = policy.failure_ratio
    assert ratio is not None
    minimum = policy.minimum_calls
    return judged(counts.failures, counts.calls, minimum, ratio) or judged(
        counts.recent_failures, counts.recent_calls, minimum, ratio
    )


def judged(part: int, calls: int, minimum: int, ratio: tuple[int, int]) -> bool:
    """Whether ``part`` of ``calls`` reaches ``ratio`` with at least ``minimum`` calls seen."""
    return calls >= minimum and reaches(part, calls, ratio)


def should_trip(counts: WindowCounts, policy: Policy) -> bool:
    """Whether the window's counts open the breaker under the policy (with its quorum).

    A rate is judged twice, each time with ``minimum_calls``: over the whole window (a slow
    burn) and over its newest RECENT_BUCKETS buckets (a sharp outage, which the whole
    window's healthy calls would otherwise dilute for up to half a window).
    """
    quorum = policy.min_containers
    ratio = policy.failure_ratio
    minimum = policy.minimum_calls
    if ratio is None:
        failing = counts.failures >= policy.failure_threshold
    else:
        failing = judged(counts.failures, counts.calls, minimum, ratio) or judged(
            counts.recent_failures, counts.recent_calls, minimum, ratio
        )
    if failing and (quorum <= 1 or counts.failing_containers >= quorum):
        return True
    if policy.slow_ms is None:
        return False
    slow_ratio = policy.slow_ratio
    slow = (counts.slow > 0 and judged(counts.slow, counts.calls, minimum, slow_ratio)) or (
        counts.recent_slow > 0
        and judged(counts.recent_slow, counts.recent_calls, minimum, slow_ratio)
    )
    return slow and (quorum <= 1 or counts.slow_containers >= quorum)


def note_container(
    seen: Mapping[str, int], container: str, policy: Policy, now_ms: int
) -> Mapping[str, int]:
    """``seen`` with ``container`` stamped ``now_ms``, keeping the newest ``min_containers``.

    Keeping the K most recent distinct containers is enough to count, up to K, how many
    distinct containers fall in the window: if K or more do, the K newest all do.
    """
    if policy.min_containers <= 1:
        return seen
    updated = {**seen, container: now_ms}
    if len(updated) > policy.min_containers:
        newest = sorted(updated.items(), key=lambda item: (item[1], item[0]), reverse=True)
        updated = dict(newest[: policy.min_containers])
    return updated


def quorum_unchanged(seen: Mapping[str, int], container: str, policy: Policy, now_ms: int) -> bool:
    """Whether noting ``container`` can be skipped: the map is exact to within one bucket.

    True when the quorum is off; when this container was noted within the last bucket; or
    when the map already holds ``min_containers`` containers all noted within the last
    bucket (the quorum is met, and stays met for most of a window, whoever else fails).
    Stores skip rewriting the map then, so in a fleet-wide outage thousands of failing
    containers do not all rewrite it.
    """
    if policy.min_containers <= 1:
        return True
    fresh = now_ms - policy.bucket_ms
    at = seen.get(container)
    if at is not None and at > fresh:
        return True
    return len(seen) >= policy.min_containers and all(t > fresh for t in seen.values())


def add_report(record: Record, policy: Policy, now_ms: int, report: Report) -> Record:
    """``record`` (closed) with ``report`` added to the current bucket; not yet stamped."""
    current = bucket_index(policy, now_ms)
    slot = current % WINDOW_BUCKETS
    bucket = record.buckets.get(slot)
    if bucket is None or bucket.idx != current:
        bucket = Bucket(current)
    bucket = Bucket(
        current,
        bucket.calls + report.calls,
        bucket.failures + report.failures,
        bucket.slow + report.slow,
        bucket.reports + 1,
    )
    failing, slowing = record.failing, record.slowing
    if report.failures and not quorum_unchanged(failing, report.container, policy, now_ms):
        failing = note_container(failing, report.container, policy, now_ms)
    if report.slow and not quorum_unchanged(slowing, report.container, policy, now_ms):
        slowing = note_container(slowing, report.container, policy, now_ms)
    return replace(
        record, buckets={**record.buckets, slot: bucket}, failing=failing, slowing=slowing
    )


def report_fits(record: Record, report: Report) -> bool:
    """Whether ``report``'s counts belong to ``record``'s generation (an absent record: 0)."""
    return report.gen is None or report.gen == record.gen


def apply_report(record: Record | None, policy: Policy, now_ms: int, report: Report) -> Outcome:
    """Add one container's batch to the fleet's window; trip (once) when the policy says so.

    Only a closed breaker counts: while open or half-open the window is empty (probes decide
    recovery) and a disabled breaker records nothing. Counts of an older generation are
    dropped (see Report.gen).
    """
    current = record if record is not None else Record()
    if current.state is not State.CLOSED or not report or not report_fits(current, report):
        return Outcome(record)
    counted = add_report(current, policy, now_ms, report)
    if should_trip(window_counts(counted, policy, now_ms), policy):
        return Outcome(
            trip(current, policy, now_ms), changed=True, transition=(State.CLOSED, State.OPEN)
        )
    return Outcome(_stamp(counted, policy, now_ms), changed=True)


@frozen
class Snapshot:
    """The fleet's view of one breaker at one moment (see ``CircuitBreaker.snapshot``).

    ``calls``, ``failures`` and ``slow_calls`` are the sliding window's, fleet-wide (under the
    plain count policy: ``failures`` in the current window and no calls). ``containers``
    counts the distinct containers whose failures or slow calls fall in the window, up to
    ``min_containers`` (the record keeps no more), and at least 1 when the window holds any.
    Rates are None while no call is counted.
    ``retry_after`` is the seconds until a rejected call may be admitted (0 when admitting);
    ``open_until`` the epoch ms the open window ends (None unless open).
    """

    name: str
    state: State
    generation: int
    calls: int
    failures: int
    slow_calls: int
    containers: int
    failure_rate: float | None
    slow_call_rate: float | None
    retry_after: float
    open_until: int | None
    updated_at: int | None
    # "enforce" or "shadow": what this container does with a call the state would reject.
    mode: str = "enforce"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 UTC strings (or None), rates as fractions."""
        return {
            "name": self.name,
            "state": self.state.value,
            "generation": self.generation,
            "calls": self.calls,
            "failures": self.failures,
            "slow_calls": self.slow_calls,
            "containers": self.containers,
            "failure_rate": self.failure_rate,
            "slow_call_rate": self.slow_call_rate,
            "retry_after": round(self.retry_after, 3),
            "open_until": iso_utc(self.open_until),
            "updated_at": iso_utc(self.updated_at),
            "mode": self.mode,
        }


def iso_utc(epoch_ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds (``...Z``), or None."""
    if epoch_ms is None:
        return None
    import datetime

    try:
        moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):  # past year 9999: a hand-edited record
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def snapshot_of(
    name: str, record: Record | None, policy: Policy, now_ms: int, mode: str = "enforce"
) -> Snapshot:
    """What a record says about a breaker at ``now_ms`` (pure: the CLI and gate reuse it)."""
    counts = window_counts(record, policy, now_ms)
    failures, calls = counts.failures, counts.calls
    # The plain count policy keeps its own window: failures since window_start.
    if (
        record is not None
        and record.state is State.CLOSED
        and not record.buckets
        and record.window_start
        and now_ms - record.window_start < policy.window_ms
    ):
        failures = record.failures
    decided = verdict(record, policy, now_ms)
    state = record.state if record is not None else State.CLOSED
    return Snapshot(
        name=name,
        state=state,
        generation=record.gen if record is not None else 0,
        calls=calls,
        failures=failures,
        slow_calls=counts.slow,
        # The record keeps up to min_containers ids (none under min_containers=1): "capped as
        # stored", and at least one container when the window holds failures or slow calls.
        containers=max(
            counts.failing_containers, counts.slow_containers, 1 if failures or counts.slow else 0
        ),
        failure_rate=counts.failures / calls if calls else None,
        slow_call_rate=counts.slow / calls if calls else None,
        retry_after=decided.retry_after_ms / 1000 if decided.decision is Decision.REJECT else 0.0,
        open_until=record.open_until if record is not None and state is State.OPEN else None,
        updated_at=record.updated_at if record is not None else None,
        mode=mode,
    )
