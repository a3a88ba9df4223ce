"""The pure transition rules: the spec every store is tested against.

Everything here is a function of its arguments: no I/O, no clock, no randomness. The stores
apply these rules atomically (MemoryStore literally calls them under a lock; DynamoDBStore and
RedisStore express the same rules as conditional writes and Lua scripts), and the contract
test suite checks that every store agrees with them.

The rules build on three modules below them, whose names are imported from where they are
defined: :mod:`fleetbreaker.record` (the record, the values the rules pass around, and the
schema stores keep it by), :mod:`fleetbreaker.policy` (the config as numbers) and
:mod:`fleetbreaker.window` (the rate policy's sliding window and quorum).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetbreaker.frozen import frozen, replace
from fleetbreaker.policy import Policy, check_weight, open_duration_ms, ttl_seconds
from fleetbreaker.record import (
    MAX_CENSUS_COUNT,
    MAX_TOKEN_CHARS,
    WINDOW_BUCKETS,
    CensusBucket,
    Decision,
    Lease,
    Outcome,
    ProbeReport,
    Record,
    Report,
    State,
    TransitionReason,
)

if TYPE_CHECKING:
    from fleetbreaker.window import SlidingWindow, WindowCounts

# How far apart the fleet's clocks may be (ms). Lambda keeps its clocks synced, so the
# package runs no clock service; the stores' conditions compare times on the caller's clock
# and every guarantee is stated within this tolerance (docs/architecture.md, "Clocks"). Past
# it one rule still holds: a probe lease granted later than the caller's clock plus this
# tolerance was set by a clock too far ahead to trust and is treated as free, so a prober
# whose clock runs far ahead blocks the others no longer than its ``probe_lease_seconds``
# plus this tolerance.
CLOCK_TOLERANCE_MS = 1_000


@frozen
class Verdict:
    """What the rules say about admitting a call, given a record and the time.

    ``decision`` PROBE means: try to claim a probe lease (``apply_claim``).
    """

    decision: Decision
    state: State
    retry_after_ms: int = 0

    def __init__(self, decision: Decision, state: State, retry_after_ms: int = 0) -> None:
        # Written out: every admission but a healthy call's is one, and frozen's shared
        # __init__ costs twice this. The fields in order, with their defaults
        # (tests/unit/test_frozen.py).
        self.__dict__.update(decision=decision, state=state, retry_after_ms=retry_after_ms)


_ALLOW_CLOSED = Verdict(Decision.ALLOW, State.CLOSED)
_ALLOW_DISABLED = Verdict(Decision.ALLOW, State.DISABLED)


# -- probe leases --------------------------------------------------------------------------


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


def holds_lease(record: Record | None, token: str, now_ms: int) -> bool:
    """Whether ``token`` names a live lease of this half-open record."""
    slot = lease_slot(token)
    if record is None or record.state is not State.HALF_OPEN or slot is None:
        return False
    lease = record.leases.get(slot)
    return lease is not None and lease.token == token and lease.until > now_ms


# -- admission and the count policy --------------------------------------------------------


def _stamp(record: Record, policy: Policy, now_ms: int) -> Record:
    """The record as a breaker's write leaves it: when, until when, and over what window."""
    expires_at = now_ms // 1000 + ttl_seconds(policy, record.state)
    return replace(record, updated_at=now_ms, expires_at=expires_at, window_ms=policy.window_ms)


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
        return Verdict(Decision.PROBE, state)
    # half_open: a probe slot may be free, or the caller waits for the first lease to end.
    if free_slot(record, policy, now_ms) is not None:
        return Verdict(Decision.PROBE, state)
    soonest = min(lease.until for lease in record.leases.values())
    return Verdict(Decision.REJECT, state, max(1, soonest - now_ms))


def apply_failure(record: Record | None, policy: Policy, now_ms: int, weight: int = 1) -> Outcome:
    """Count ``weight`` failures of a call admitted while closed (a large count-policy fleet
    writes each with probability 1 / weight); trip on reaching the threshold."""
    check_weight(weight)
    current = record if record is not None else Record()
    if current.state is not State.CLOSED:
        return Outcome(record)
    if current.window_start and now_ms - current.window_start < policy.window_ms:
        counted = replace(current, failures=current.failures + weight)
    else:
        counted = replace(current, failures=weight, window_start=now_ms)
    if counted.failures < policy.failure_threshold:
        return Outcome(_stamp(counted, policy, now_ms), changed=True)
    opened = trip(current, policy, now_ms, counted.failures)
    return Outcome(opened, changed=True, transition=(State.CLOSED, State.OPEN))


def trip(record: Record, policy: Policy, now_ms: int, failures: int = 0) -> Record:
    """The open record that replaces a closed one whose failures reached the threshold.

    It keeps ``failures``, the failures that tripped it (the count, or the window's under the
    rate policy), only for operators to see: no rule reads an open record's failures, and the
    record that closes it starts from none.
    """
    opened = Record(
        state=State.OPEN,
        gen=record.gen + 1,
        failures=failures,
        opened_at=now_ms,
        open_until=now_ms + open_duration_ms(policy, 0, 1.0),
        census=record.census,
    )
    return _stamp(opened, policy, now_ms)


def reopen(record: Record, policy: Policy, now_ms: int, jitter: float) -> Record:
    """The open record that replaces a half-open one whose probe failed: a longer open window."""
    reopens = record.reopens + 1
    reopened = Record(
        state=State.OPEN,
        gen=record.gen + 1,
        # The failures of the trip that began the outage, still for operators to see.
        failures=record.failures,
        opened_at=now_ms,
        open_until=now_ms + open_duration_ms(policy, reopens, jitter),
        reopens=reopens,
        census=record.census,
    )
    return _stamp(reopened, policy, now_ms)


# -- half-open: probes ---------------------------------------------------------------------


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
    if report.released:
        rest = {k: v for k, v in record.leases.items() if k != slot}
        return Outcome(_stamp(replace(record, leases=rest), policy, now_ms), changed=True)
    if report.success:
        successes = record.successes + 1
        if successes < policy.successes_needed:
            rest = {k: v for k, v in record.leases.items() if k != slot}
            kept = replace(record, successes=successes, leases=rest)
            return Outcome(_stamp(kept, policy, now_ms), changed=True)
        # A recovery: closed_at starts the recovery ramp, and every write of this
        # generation keeps it (admission.RecoveryRamp).
        closed = Record(
            state=State.CLOSED,
            gen=record.gen + 1,
            opened_at=record.opened_at or now_ms,
            closed_at=now_ms,
            census=record.census,
        )
        return Outcome(
            _stamp(closed, policy, now_ms),
            changed=True,
            transition=(State.HALF_OPEN, State.CLOSED),
        )
    return Outcome(
        reopen(record, policy, now_ms, report.jitter),
        changed=True,
        transition=(State.HALF_OPEN, State.OPEN),
    )


# -- operator overrides --------------------------------------------------------------------

FORCEABLE = frozenset({State.CLOSED, State.FORCED_OPEN, State.DISABLED})
# States a close recovers from (the calls were being turned away).
RECOVERABLE = frozenset({State.OPEN, State.HALF_OPEN, State.FORCED_OPEN})


def apply_force(record: Record | None, policy: Policy, now_ms: int, target: State) -> Outcome:
    """An operator override (forced_open, disabled) or its release (closed)."""
    if target not in FORCEABLE:
        raise ValueError(f"cannot force a breaker to {target.value!r}")
    before = record.state if record is not None else State.CLOSED
    gen = record.gen + 1 if record is not None else 1
    opened_at = closed_at = 0
    if record is not None and target is State.CLOSED and before in RECOVERABLE:
        # A reset that ends an outage (open, probing, forced open) is a recovery: the ramp
        # may start. A reset of a closed or disabled breaker is not.
        opened_at = record.opened_at or record.updated_at or now_ms
        closed_at = now_ms
    forced = Record(
        state=target,
        gen=gen,
        opened_at=opened_at,
        closed_at=closed_at,
        census=record.census if record is not None else {},
    )
    # An operator's tool may not know the fleet's window: the record keeps the one it had.
    kept_window = record.window_ms if record is not None else 0
    stamped = replace(_stamp(forced, policy, now_ms), window_ms=kept_window)
    return Outcome(stamped, changed=True, transition=(before, target))


# -- rate policy, slow calls and quorum: the window's answers, as rules --------------------


def sliding_window(policy: Policy) -> SlidingWindow:
    """The policy's sliding window (:class:`fleetbreaker.window.SlidingWindow`): the rate
    policy's, slow calls' and the quorum's answers (counts, trips, the failing containers)."""
    # fleetbreaker.window loads with the rate policy's first use, never with a count policy's.
    from fleetbreaker.window import SlidingWindow

    return SlidingWindow(policy)


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
    window = sliding_window(policy)
    counted = window.add(current, now_ms, report)
    counts = window.counts(counted, now_ms)
    if window.trip_reason(counts) is not None:
        return Outcome(
            trip(current, policy, now_ms, counts.failures),
            changed=True,
            transition=(State.CLOSED, State.OPEN),
        )
    return Outcome(_stamp(counted, policy, now_ms), changed=True)


# -- the census (both policies): the fleet's size, never judged ---------------------------


def census_slot(policy: Policy, now_ms: int) -> tuple[int, int]:
    """(idx, slot) of the census ring's slice ``now_ms`` falls in (slices of bucket_ms)."""
    idx = now_ms // policy.bucket_ms
    return idx, idx % WINDOW_BUCKETS


def apply_census(record: Record | None, policy: Policy, now_ms: int) -> Outcome:
    """Count one census write, in any state: never a transition, never a judged count.

    An absent record becomes a fresh closed one that carries it. The census is the fleet's
    size, not its health: the rules that open a breaker never read it, so a census write can
    neither trip a breaker nor hide a close (``closed_at`` stays).
    """
    current = record if record is not None else Record()
    idx, slot = census_slot(policy, now_ms)
    held = current.census.get(slot)
    count = held.count + 1 if held is not None and held.idx == idx else 1
    # Saturates: one digit past the record's bound would make the record unreadable.
    count = min(count, MAX_CENSUS_COUNT)
    counted = replace(current, census={**current.census, slot: CensusBucket(idx, count)})
    return Outcome(_stamp(counted, policy, now_ms), changed=True)


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
        if policy.slow_ms is None or counts is None or sliding_window(policy).failing(counts):
            return failure
        return TransitionReason.SLOW_CALL_RATE
    return TransitionReason.OPERATOR
