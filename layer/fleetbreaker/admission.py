"""Admission: one pipeline of small, named stages that turns the record into a call's answer.

A call's admission reads the container's view of the record (:mod:`fleetbreaker.view`),
asks the rules for a verdict (:func:`fleetbreaker.rules.verdict`), and passes it through
these stages, in this order, each a no-op unless it applies:

1. :class:`ClaimBarrier` (a probe verdict): a store that decides on its own clock refused a
   claim of this generation until a time; until then, reject without asking again.
2. :class:`ClaimThinning` (a probe verdict): a large count-policy fleet claims with
   probability 1 / weight, so thousands of containers do not all write in the second an
   open window ends.
3. :class:`RecoveryRamp` (a closed verdict): after a recovery each container admits a share
   of its calls growing from 10 % to all of them over ``recovery_ramp_seconds``.
4. :class:`Shadow` (shadow mode, any verdict but allow): the call runs anyway, marked with
   what an enforcing breaker would have done; its probe is settled after it (never a lease
   held for the call's duration).
5. :class:`ProbeClaim` (a probe verdict): one conditional write claims a lease; losing it is
   a rejection. A lost claim that finds the breaker closed (another container's probe
   closed it meanwhile) has its verdict passed through the same stages again, by the same
   call (:meth:`AdmissionPipeline.admit`): the recovery ramp is applied in one place.

The result is an :class:`~fleetbreaker.results.Admission`, returned with what the store
answered on the way (a probe claim's answer) for the core to take: the pipeline is handed
the record the core read, and calls nothing back. A healthy call (closed record, no ramp)
takes the first branch of :meth:`AdmissionPipeline.admit` and allocates nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from fleetbreaker.calls import NO_ANSWERS
from fleetbreaker.frozen import replace
from fleetbreaker.probes import probe_answer
from fleetbreaker.record import Decision, State
from fleetbreaker.results import Admission, RecordResult
from fleetbreaker.rules import Verdict
from fleetbreaker.rules import verdict as verdict_of

if TYPE_CHECKING:
    import random

    from fleetbreaker.calls import Answers, Replied
    from fleetbreaker.events import Hooks
    from fleetbreaker.policy import Policy
    from fleetbreaker.probes import ProbeLeases
    from fleetbreaker.record import Outcome, Record
    from fleetbreaker.results import StoreErrorStats


# Enum members read through their class cost a descriptor call on Python 3.11 (about ten
# times a module global's read, several per decision): the hot path reads these.
_ALLOW, _PROBE, _REJECT = Decision.ALLOW, Decision.PROBE, Decision.REJECT
_CLOSED, _DISABLED = State.CLOSED, State.DISABLED
_ALLOW_CLOSED = Verdict(_ALLOW, _CLOSED)

# Turned away by thinning, or after losing every race for a probe slot: wait this long (ms)
# for the next lease to end.
LOST_CLAIM_RETRY_MS = 100
# The recovery ramp: the share admitted at the close (the probes that closed the breaker
# showed the dependency answers again, so a trickle is safe and lets the fleet see that it
# holds), and the longest retry_after of a call it turns away (ms): come back soon.
RAMP_MIN_SHARE = 0.1
RAMP_RETRY_AFTER_MS = 1000


class Weighing(Protocol):
    """The counting strategy, as thinning asks it for a probe claim's weight."""

    def claim_weight(self, now_ms: int) -> int:
        """1, or the weight that thins a large fleet's probe claims."""
        ...


class ShadowStage(Protocol):
    """Shadow mode's stage, as the pipeline asks it (:class:`Shadow`)."""

    def admit(self, verdict: Verdict) -> Admission:
        """Allow a call an enforcing breaker would have rejected or probed."""
        ...


class Mode(Protocol):
    """The breaker's mode as the stages read it (:class:`fleetbreaker.core.Mode`)."""

    @property
    def policy(self) -> Policy: ...

    @property
    def counting(self) -> Weighing: ...

    @property
    def shadow(self) -> ShadowStage | None: ...


if TYPE_CHECKING:
    # Every stage: (verdict, record, now_ms, mode, lease_ms) -> the next verdict, or the
    # answer. lease_ms is the call's deadline for a probe lease, when its caller knows one.
    Stage = Callable[[Verdict, Record | None, int, Mode, int | None], Verdict | Admission]


class ClaimBarrier:
    """Keeps a store's refusal of a probe claim until the time it said.

    A store that decides on its own clock (Redis' TIME) refuses a claim that ours thinks is
    due; it says how long its refusal holds, for this generation of the record. Asking again
    on every call meanwhile would cost a store request per call (51 where there was one).
    """

    def __init__(self) -> None:
        self._barred: tuple[int, int] | None = None  # (generation, until ms on our clock)

    def bar(self, gen: int, until_ms: int) -> None:
        self._barred = (gen, until_ms)

    def __call__(
        self, verdict: Verdict, record: Record | None, now_ms: int, mode: Mode, lease_ms: int | None
    ) -> Verdict:
        barred = self._barred
        if (
            verdict.decision is not _PROBE
            or barred is None
            or record is None
            or record.gen != barred[0]
            or now_ms >= barred[1]
        ):
            return verdict
        return Verdict(_REJECT, verdict.state, barred[1] - now_ms)


class ClaimThinning:
    """A large count-policy fleet claims a probe with probability 1 / weight, as it writes
    failures (:func:`fleetbreaker.census.failure_weight`); one that does not is turned away
    as a lost race is. The weight is the counting strategy's (1: no thinning)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def __call__(
        self, verdict: Verdict, record: Record | None, now_ms: int, mode: Mode, lease_ms: int | None
    ) -> Verdict:
        if verdict.decision is not _PROBE:
            return verdict
        weight = mode.counting.claim_weight(now_ms)
        if weight <= 1 or self._rng.random() * weight < 1:
            return verdict
        return Verdict(_REJECT, verdict.state, LOST_CLAIM_RETRY_MS)


def ramp_share(elapsed_ms: int, ramp_ms: int) -> float:
    """The share of calls admitted ``elapsed_ms`` after a recovery: linear, from
    RAMP_MIN_SHARE to 1 over ``ramp_ms``."""
    if ramp_ms <= 0 or elapsed_ms >= ramp_ms:
        return 1.0
    return RAMP_MIN_SHARE + (1.0 - RAMP_MIN_SHARE) * max(0, elapsed_ms) / ramp_ms


class RecoveryRamp:
    """After a recovery, each container admits a growing share of its calls.

    A closed breaker admits everything at once: a dependency that just survived one probe
    would get the fleet's full load in the next millisecond. Each container decides alone,
    from the record it already has (its ``closed_at``, which every write of the generation
    keeps), with a random draw: no store request, and across N containers the dependency
    sees about ``share * load``. A call turned away is rejected like an open circuit's, with
    a short ``retry_after``. A reset of a closed or disabled breaker is no recovery (nothing
    was turned away) and does not ramp.
    """

    def __init__(self, ramp_seconds: float, rng: random.Random) -> None:
        self.ramp_ms = round(ramp_seconds * 1000)
        self._rng = rng
        # A close stamped ahead of our clock: (generation, its closed_at, when we first saw
        # it on our clock). See start_of.
        self._future_close: tuple[int, int, int] | None = None

    def start_of(self, record: Record, now_ms: int) -> int:
        """When the ramp of ``record``'s close started, on this container's clock.

        A close stamped ahead of our clock (its writer's clock runs fast) is clamped to the
        moment this container first saw it, as a lease from the future is not trusted: taken
        as written, a close 30 s ahead throttled the fleet for 40 s instead of the ramp's 10 s;
        clamped to each call's now, it would never start.
        """
        closed_at = record.closed_at
        if closed_at <= now_ms:
            return closed_at
        seen = self._future_close
        if seen is not None and seen[0] == record.gen and seen[1] == closed_at:
            return seen[2]
        self._future_close = (record.gen, closed_at, now_ms)
        return now_ms

    def __call__(
        self, verdict: Verdict, record: Record | None, now_ms: int, mode: Mode, lease_ms: int | None
    ) -> Verdict:
        if (
            verdict.decision is not _ALLOW
            or verdict.state is not _CLOSED
            or record is None
            or not record.closed_at
        ):
            return verdict
        elapsed = now_ms - self.start_of(record, now_ms)
        ramp_ms = self.ramp_ms
        if elapsed >= ramp_ms or self._rng.random() < ramp_share(elapsed, ramp_ms):
            return verdict
        return Verdict(_REJECT, _CLOSED, max(1, min(RAMP_RETRY_AFTER_MS, ramp_ms - elapsed)))


class Shadow:
    """Shadow mode as a stage: a breaker that counts, trips and recovers with the fleet but
    never rejects (resilience4j's METRICS_ONLY, shared by a fleet).

    It turns a verdict that would reject or probe into an allow marked with what an enforcing
    breaker would have done. A would-be rejected call counts nowhere (an enforcing fleet
    would not have made it). A would-be probe settles a probe only once it has finished,
    through ``claim`` and ``settle`` (:class:`~fleetbreaker.probes.ProbeLeases`'): its lease
    lives for the two round trips in between, never for the call, so an enforcing container
    is never kept from probing by a shadow call.
    """

    def __init__(
        self,
        name: str,
        *,
        stats: StoreErrorStats,
        hooks: Hooks,
        claim: Callable[[Policy, int, Record | None], Outcome],
        settle: Callable[[Policy, str, bool, int, Record | None], Replied[RecordResult]],
        lease_ms: int,
        degraded: Callable[[], bool],
    ) -> None:
        self.name = name
        self._stats = stats
        self._emit = hooks.emit
        self._claim = claim
        self._settle = settle
        # At most two store deadlines, should this container die between claim and settle.
        self._lease_ms = lease_ms
        self._degraded = degraded

    def admit(self, verdict: Verdict) -> Admission:
        """Allow the call, saying what an enforcing breaker would have decided."""
        would = verdict.decision
        admission = Admission(self.name, _ALLOW, verdict.state, 0.0, None, self._degraded(), would)
        self._emit("on_decision", self.name, _ALLOW, verdict.state)
        if would is _REJECT:
            self._would_reject(verdict)
        return admission

    def _would_reject(self, verdict: Verdict) -> None:
        self._stats.would_rejects += 1
        self._emit("on_would_reject", self.name, verdict.state, verdict.retry_after_ms / 1000)

    def probe(
        self, policy: Policy, success: bool, now_ms: int, observed: Record | None
    ) -> Replied[RecordResult]:
        """Settle a probe with the outcome of a call that already ran: the result, with the
        claim's and the settle's answers.

        Losing the claim means an enforcing breaker would have rejected the call: it counts
        as a would-be rejection.
        """
        short = replace(policy, lease_ms=min(policy.lease_ms, self._lease_ms))
        claim = self._claim(short, now_ms, observed)
        claimed = (probe_answer(claim, now_ms),)
        if claim.token is None:
            record = claim.record
            state = record.state if record is not None else _CLOSED
            decided = verdict_of(record, policy, now_ms)
            if decided.decision is not _ALLOW:
                self._would_reject(decided)
            return RecordResult(False, state, "shadow: probe slot taken; not counted"), claimed
        result, settled = self._settle(policy, claim.token, success, now_ms, claim.record)
        return result, claimed + settled

    def outcome(
        self, policy: Policy, record: Record | None, success: bool, now_ms: int
    ) -> Replied[RecordResult | None]:
        """An outcome recorded without a token: None when it counts as usual.

        While the breaker would reject, the outcome counts nowhere; when a probe is due, it
        settles one (see :meth:`probe`).
        """
        decided = verdict_of(record, policy, now_ms)
        if decided.decision is _PROBE:
            return self.probe(policy, success, now_ms, record)
        if decided.decision is _REJECT:
            state = record.state if record is not None else _CLOSED
            return RecordResult(False, state, f"shadow: breaker is {state.value}; not counted"), (
                NO_ANSWERS
            )
        return None, NO_ANSWERS


def shadowed(
    verdict: Verdict, record: Record | None, now_ms: int, mode: Mode, lease_ms: int | None
) -> Verdict | Admission:
    """The shadow stage: in shadow mode a verdict that would reject or probe is an allow,
    marked with what an enforcing breaker would have done (:class:`Shadow`)."""
    shadow = mode.shadow
    if shadow is None or verdict.decision is _ALLOW:
        return verdict
    return shadow.admit(verdict)


class ProbeClaim:
    """The pipeline's last stage for a probe verdict: one conditional write for a lease.

    A granted claim is a probe admission with its token. A refused one is a rejection: for
    as long as the store said (and the barrier keeps that answer), or LOST_CLAIM_RETRY_MS
    when every slot went to others. A claim that finds the breaker closed (someone else's
    probe closed it meanwhile) returns that allow verdict with the record it found: the
    pipeline passes it through its stages again (the recovery ramp among them), so the ramp
    is applied in one place.

    Returns (the answer, the record the claim found, the claim's store answer for the
    core).
    """

    def __init__(
        self,
        probes: ProbeLeases,
        barrier: ClaimBarrier,
        degraded: Callable[[], bool],
    ) -> None:
        self._probes = probes
        self._barrier = barrier
        self._degraded = degraded

    def __call__(
        self, verdict: Verdict, record: Record | None, now_ms: int, mode: Mode, lease_ms: int | None
    ) -> tuple[Verdict | Admission, Record | None, Answers]:
        if verdict.decision is not _PROBE:
            return verdict, record, NO_ANSWERS
        policy = mode.policy
        if lease_ms is not None and lease_ms < policy.lease_ms:
            policy = replace(policy, lease_ms=lease_ms)
        outcome = self._probes.claim(policy, now_ms, record)
        answers = (probe_answer(outcome, now_ms),)
        found = outcome.record
        if outcome.token is not None:
            granted = Admission(
                self._probes.name,
                _PROBE,
                State.HALF_OPEN,
                0.0,
                outcome.token,
                self._degraded(),
            )
            return granted, found, answers
        verdict = verdict_of(found, policy, now_ms)
        if verdict.decision is not _PROBE:
            # Closed meanwhile (the stages judge it), or open again.
            return verdict, found, answers
        wait = outcome.retry_after_ms
        if wait and found is not None:
            self._barrier.bar(found.gen, now_ms + wait)
            return Verdict(_REJECT, verdict.state, wait), found, answers
        # Lost every race for a slot: wait for the next lease to end.
        return Verdict(_REJECT, verdict.state, LOST_CLAIM_RETRY_MS), found, answers


class AdmissionPipeline:
    """One breaker's admission: the record, the rules' verdict, the stages, an Admission.

    Every stage has one signature, ``stage(verdict, record, now_ms, mode, lease_ms)``, and
    returns a verdict (for the next stage) or an Admission (the answer). The policy, the
    counting strategy and shadow mode come from the :class:`~fleetbreaker.core.Mode` the
    caller gives: the pipeline holds nothing that live tuning changes.
    """

    def __init__(
        self,
        name: str,
        probes: ProbeLeases,
        hooks: Hooks,
        *,
        degraded: Callable[[], bool],
        ramp_seconds: float,
        rng: random.Random,
    ) -> None:
        self.name = name
        self._hooks = hooks
        self._degraded = degraded
        self.barrier = ClaimBarrier()
        self.thinning = ClaimThinning(rng)
        self.ramp = RecoveryRamp(ramp_seconds, rng) if ramp_seconds else None
        self.claim = ProbeClaim(probes, self.barrier, degraded)
        # Each stage with the verdict decisions it acts on: a verdict of another decision
        # passes it unchanged, so it is not called (most admissions that are not a healthy
        # call's are rejections, which only shadow mode turns into anything else).
        stages: list[tuple[tuple[Decision, ...], Stage]] = [
            ((_PROBE,), self.barrier),
            ((_PROBE,), self.thinning),
        ]
        if self.ramp is not None:
            stages.append(((_ALLOW,), self.ramp))
        stages.append(((_REJECT, _PROBE), shadowed))
        self._stages = tuple(stages)
        # The hot path's answers, built once: a healthy call allocates nothing (the breaker
        # tells a healthy call by its admission's identity).
        self._allow = {state: Admission(name, _ALLOW, state) for state in (_CLOSED, _DISABLED)}
        self.allow_closed = self._allow[_CLOSED]

    def admit(
        self,
        now_ms: int,
        record: Record | None,
        mode: Mode,
        lease_ms: int | None = None,
        *,
        cached_only: bool = False,
        announce: bool = True,
    ) -> Replied[Admission | None]:
        """Decide one call at ``now_ms`` on ``record`` (the core read it): allow, probe (with
        a token) or reject; with what the store answered on the way (a probe claim's
        answer), for the core to take.

        ``mode`` is the breaker's, read after the record: a refresh may bring live tuning,
        and the call is decided by the mode it brought. ``lease_ms``: should the call win a
        probe, its lease is this long at most (a caller that knows its call's deadline: the
        others then wait for that, not a whole lease). ``cached_only``: the record is the
        cached one; say None when deciding takes a store request (a probe to claim): an event
        loop's first look. ``announce=False`` leaves the decision hooks to the caller
        (:meth:`announce`): an event loop decides on a worker thread, and the hooks (a
        tracer's annotation of the current segment) belong on the loop's thread.
        """
        if record is None or record.state is _CLOSED:
            if self.ramp is None:
                allowed = self.allow_closed if not self._degraded() else None
                return self._decided(allowed, announce), NO_ANSWERS
            verdict = _ALLOW_CLOSED
        else:
            verdict = verdict_of(record, mode.policy, now_ms)
        staged = self._staged(verdict, record, now_ms, mode, lease_ms)
        if isinstance(staged, Admission):
            return staged, NO_ANSWERS  # shadow mode's: it told the decision hooks itself
        verdict = staged
        answers = NO_ANSWERS
        if verdict.decision is _PROBE:
            if cached_only:
                return None, NO_ANSWERS
            claimed, found, answers = self.claim(verdict, record, now_ms, mode, lease_ms)
            if isinstance(claimed, Admission):
                return self._decided(claimed, announce), answers
            if claimed.decision is _ALLOW:
                # Closed meanwhile by another container's probe: the same stages judge the
                # record the claim found (the recovery ramp, in its one place).
                restaged = self._staged(claimed, found, now_ms, mode, lease_ms)
                if isinstance(restaged, Admission):
                    return restaged, answers
                claimed = restaged
            verdict = claimed
        return self._decided(self._admission(verdict), announce), answers

    def _staged(
        self, verdict: Verdict, record: Record | None, now_ms: int, mode: Mode, lease_ms: int | None
    ) -> Verdict | Admission:
        """The verdict through every stage, in order: the next verdict, or an answer."""
        for acts_on, stage in self._stages:
            if verdict.decision in acts_on:
                answer = stage(verdict, record, now_ms, mode, lease_ms)
                if isinstance(answer, Admission):
                    return answer
                verdict = answer
        return verdict

    def _admission(self, verdict: Verdict) -> Admission | None:
        """The Admission for a verdict (None: the hot path's allow, picked in _decided)."""
        degraded = self._degraded()
        if verdict.decision is _ALLOW and not degraded:
            return self._allow[verdict.state]
        return Admission(
            self.name,
            verdict.decision,
            verdict.state,
            verdict.retry_after_ms / 1000,
            None,
            degraded,
        )

    def _decided(self, admission: Admission | None, announce: bool = True) -> Admission:
        if admission is None:  # allowed while degraded: say so
            admission = Admission(self.name, _ALLOW, _CLOSED, 0.0, None, True)
        if announce and self._hooks.decision:  # (no frame when nobody watches decisions)
            self.announce(admission)
        return admission

    def announce(self, admission: Admission) -> None:
        """Tell the decision hooks of a call's admission."""
        hooks = self._hooks
        for hook in hooks.decision:  # inline: every admitted call passes here
            try:
                hook(self.name, admission.decision, admission.state)
            except Exception:
                hooks.failed(hook, "on_decision")
