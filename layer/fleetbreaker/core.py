"""The call path's core: what one call needs next, for either driver.

tenacity's shape: the core decides and accounts, and returns what the call needs next; a
driver performs it. The sync driver (:mod:`fleetbreaker.sync_driver`) performs it inline,
the asyncio driver (:mod:`fleetbreaker.async_driver`) awaits the call and sends each store
request from a worker thread, so the event loop never waits on the store. Everything a call
is judged by lives here, once:

1. admission: :meth:`CallCore.admit` (may make a store request: a refresh, a probe claim)
   or :meth:`CallCore.admit_cached` (never does; None when a request is needed);
2. the plan: :meth:`CallCore.plan` turns an admission into a :class:`Call` to run (counted
   by the strategy, a probe to settle, a shadow probe, or counted nowhere) or None, a
   rejection (:meth:`CallCore.reject` tells the listeners and raises CircuitOpenError when
   there is no fallback);
3. the judgement: :meth:`CallCore.returned`, :meth:`CallCore.raised` and
   :meth:`CallCore.interrupted` count how the call ended and return the store request that
   counting needs (a failure's write, a report, a probe's settle), or None.

The core also holds the breaker's :class:`~fleetbreaker.mode.Mode`, takes every store
answer as a value in one place (:meth:`CallCore.answered`: the cache, the strategy, live
tuning) and follows live tuning by swapping the mode whole.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from fleetbreaker.calls import COUNTED, PROBING, SHADOW_PROBING, UNCOUNTED, Call
from fleetbreaker.errors import CircuitOpenError
from fleetbreaker.frozen import frozen
from fleetbreaker.policy import Policy
from fleetbreaker.record import Decision, State

if TYPE_CHECKING:
    from fleetbreaker.calls import Request
    from fleetbreaker.classify import OutcomeJudge
    from fleetbreaker.config import BreakerConfig
    from fleetbreaker.counting import Counting
    from fleetbreaker.events import Hooks
    from fleetbreaker.probes import ProbeLeases
    from fleetbreaker.record import Outcome, Record
    from fleetbreaker.results import Admission, RecordResult
    from fleetbreaker.rules import Verdict
    from fleetbreaker.view import RecordView

_ALLOW, _PROBE, _REJECT = Decision.ALLOW, Decision.PROBE, Decision.REJECT
_DISABLED = State.DISABLED

_UNCOUNTED = Call(UNCOUNTED)


class Shadow(Protocol):
    """Shadow mode's stage (:class:`fleetbreaker.admission.Shadow`), as a mode holds it."""

    def admit(self, verdict: Verdict) -> Admission:
        """Allow a call an enforcing breaker would have rejected or probed."""
        ...

    def probe(
        self, policy: Policy, success: bool, now_ms: int, observed: Record | None
    ) -> RecordResult:
        """Settle a probe with the outcome of a call that already ran."""
        ...

    def outcome(
        self, policy: Policy, record: Record | None, success: bool, now_ms: int
    ) -> RecordResult | None:
        """An outcome recorded without a token (None: it counts as usual)."""
        ...


@frozen
class Mode:
    """One breaker's settings in force, whole: the config they came from, the policy (the
    rules' numbers), the counting strategy (count or rate) and the shadow stage (None when
    enforcing).

    A breaker holds one Mode by one reference; live tuning and a restored snapshot build a
    new one (:func:`build_mode`) and swap it in with one assignment, so a call reads one
    consistent mode, never a policy of one tuning with the strategy of another.
    """

    config: BreakerConfig
    policy: Policy
    counting: Counting
    shadow: Shadow | None
    # The call of a closed, healthy breaker that needs no ticket: one object for all.
    closed_call: Call

    @property
    def name(self) -> str:
        """``"shadow"`` or ``"enforce"``."""
        return "shadow" if self.shadow is not None else "enforce"


def build_mode(
    config: BreakerConfig,
    policy: Policy,
    *,
    make_counting: Callable[[BreakerConfig, Policy], Counting],
    make_shadow: Callable[[BreakerConfig], Shadow],
    previous: Mode | None = None,
) -> Mode:
    """The one factory of a breaker's Mode: what ``config`` asks for, taking over what
    ``previous`` holds that must survive a swap.

    A counting strategy of the kind in force is handed over (its tally of calls not
    reported yet, its report schedule) and follows the new numbers; one of the other kind
    is built afresh (neither reads what the other left in the record:
    :mod:`fleetbreaker.counting`). The shadow stage is kept while shadow mode stays on.
    """
    kind = "rate" if config.reporting else "count"
    counting: Counting
    if previous is not None and previous.counting.kind == kind:
        counting = previous.counting
        counting.adopt(config, policy)
    else:
        counting = make_counting(config, policy)
    shadow: Shadow | None = None
    if config.shadow:
        kept = previous.shadow if previous is not None else None
        shadow = kept if kept is not None else make_shadow(config)
    return Mode(config, policy, counting, shadow, Call(COUNTED, counting))


class Tuning(Protocol):
    """Live tuning as the core follows it (:class:`fleetbreaker.live.LiveTuning`)."""

    config: BreakerConfig
    text: str

    def follow(self, text: str) -> BreakerConfig | None:
        """The settings ``text`` gives, or None when it is the text already followed."""
        ...


class Pipeline(Protocol):
    """The admission pipeline (:class:`fleetbreaker.admission.AdmissionPipeline`)."""

    allow_closed: Admission

    def admit(
        self,
        now_ms: int,
        modes: Callable[[], Mode],
        lease_ms: int | None = None,
        *,
        cached_only: bool = False,
        announce: bool = True,
    ) -> Admission | None:
        """Decide one call (None: ``cached_only`` and the store is needed)."""
        ...

    def announce(self, admission: Admission) -> None:
        """Tell the decision hooks of an admission decided with ``announce=False``."""
        ...


class CallCore:
    """One breaker's decisions and accounting, shared by both drivers (see the module doc)."""

    def __init__(
        self,
        name: str,
        *,
        view: RecordView,
        pipeline: Pipeline,
        probes: ProbeLeases,
        hooks: Hooks,
        judge: OutcomeJudge,
        tuning: Tuning,
        make_counting: Callable[[BreakerConfig, Policy], Counting],
        make_shadow: Callable[[BreakerConfig], Shadow],
        clock: Callable[[], int],
    ) -> None:
        self.name = name
        self.view = view
        self.pipeline = pipeline
        self.hooks = hooks
        self.judge = judge
        self.clock = clock
        self._probes = probes
        self._tuning = tuning
        self._make_counting = make_counting
        self._make_shadow = make_shadow
        self.allow_closed = pipeline.allow_closed
        self.mode: Mode = self._build(tuning.config, None)
        self._current = self._mode_now  # bound once: admission reads the mode through it

    def _build(self, config: BreakerConfig, previous: Mode | None) -> Mode:
        return build_mode(
            config,
            Policy.from_config(config),
            make_counting=self._make_counting,
            make_shadow=self._make_shadow,
            previous=previous,
        )

    # -- the mode and the store's answers --------------------------------------------------

    def answered(self, answer: Outcome, now_ms: int) -> None:
        """The one place every store answer goes, handed here by whoever asked (a strategy's
        request, a probe's claim or settle, a view's read, an operator's write): a shared
        answer into the cache (fresh for as long as the strategy says; the current item a
        lost conditional write returned too), to the strategy, and to live tuning, which
        travels with the record. The local twin's answer (``answer.local``) is this
        container's alone, never cached as the fleet's record."""
        if answer.local:
            return
        record = answer.record
        counting = self.mode.counting
        self.view.cache.put(record, now_ms, counting.fresh_ms(record, now_ms))
        counting.observe(record)
        seen = self.view.last_seen
        text = seen.tuned if seen is not None else ""
        if text != self._tuning.text:
            config = self._tuning.follow(text)
            if config is not None:
                self.adopt(config)

    def adopt(self, config: BreakerConfig) -> None:
        """Swap in the mode ``config`` asks for: one reference, whole.

        A strategy of the same kind is handed over with its tally; one that is replaced
        sends what it holds first (the rate policy's calls not reported yet), so a tune
        from rate to count and back loses no call."""
        previous = self.mode
        if previous.counting.kind != ("rate" if config.reporting else "count"):
            previous.counting.flush(self.clock())
        self.mode = self._build(config, previous)

    def restart(self, now_ms: int) -> None:
        """Start over as a new container (a restored snapshot): a new mode, swapped in whole,
        with a fresh counting strategy (no tally, every schedule drawn afresh) for the same
        settings. Nothing is handed over: the snapshot's counts were flushed before it."""
        mode = self._build(self.mode.config, None)
        mode.counting.restart(now_ms)  # its schedules start at the restore's time
        self.mode = mode

    def _mode_now(self) -> Mode:
        return self.mode

    def observe(self, record: Record | None) -> None:
        """A record a probe's claim or settle returned (the local twin's too)."""
        self.mode.counting.observe(record)

    def refresh(self, now_ms: int) -> Record | None:
        """The view's refresh: the counting strategy in force decides what it is."""
        return self.mode.counting.refresh(now_ms)

    # -- admission -------------------------------------------------------------------------

    def admit(self, now_ms: int | None = None, lease_ms: int | None = None) -> Admission:
        """Decide one call (may make a store request: a refresh, a probe claim)."""
        at = self.clock() if now_ms is None else now_ms
        admission = self.pipeline.admit(at, self._current, lease_ms)
        assert admission is not None  # only a cached_only admission can be undecided
        return admission

    def admit_quietly(self) -> Admission:
        """Decide one call now, leaving the decision hooks to :meth:`announce` (an event
        loop's admission, decided on a worker thread)."""
        admission = self.pipeline.admit(self.clock(), self._current, announce=False)
        assert admission is not None
        return admission

    def announce(self, admission: Admission) -> None:
        """Tell the decision hooks (on the caller's thread) of a quiet admission.

        Shadow mode's admissions told them already, where they were made."""
        if admission.shadow is None:
            self.pipeline.announce(admission)

    def admit_cached(self, now_ms: int) -> Admission | None:
        """Decide one call from the cached record, or None when that needs the store."""
        return self.pipeline.admit(now_ms, self._current, cached_only=True)

    def closed(self, now_ms: int) -> Call:
        """The call of a closed, healthy breaker (the drivers' fast path)."""
        mode = self.mode
        counting = mode.counting
        before = counting.due(now_ms)
        ticket = counting.start(now_ms)
        if ticket is None and before is None:
            return mode.closed_call
        return Call(COUNTED, counting, ticket, None, before)

    def plan(self, admission: Admission, now_ms: int) -> Call | None:
        """The call an admission lets run, or None when it is rejected."""
        if admission is self.allow_closed:
            return self.closed(now_ms)
        decision = admission.decision
        if decision is _REJECT:
            return None
        if admission.shadow is not None:
            if admission.shadow is _PROBE and self.mode.shadow is not None:
                return Call(SHADOW_PROBING)
            return _UNCOUNTED
        if decision is _PROBE:
            return Call(PROBING, token=admission.token)
        if admission.state is _DISABLED:  # allow everything, record nothing
            return _UNCOUNTED
        return self.closed(now_ms)

    def reject(self, admission: Admission, fallback: Callable[..., Any] | None) -> None:
        """Tell the listeners of a rejection; without a fallback, raise CircuitOpenError."""
        if fallback is None:
            self.refuse(admission)
        emit = self.hooks.emit
        emit("on_rejected", self.name, admission.state, admission.retry_after_s)
        emit("on_fallback", self.name, admission.state)

    def refuse(self, admission: Admission) -> NoReturn:
        """Tell the listeners of a rejection and raise CircuitOpenError (a block entered
        with ``with breaker:`` has no result a fallback could stand in for)."""
        self.hooks.emit("on_rejected", self.name, admission.state, admission.retry_after_s)
        raise CircuitOpenError(self.name, admission.state, admission.retry_after_s)

    # -- how the call ended ----------------------------------------------------------------

    def returned(self, call: Call, result: Any) -> Request | None:
        """The call returned ``result``: count it (a result the config calls a failure
        fails); the store request that needs, or None."""
        judge = self.judge
        failed = judge.failure_result is not None and judge.result_fails(result)
        if call.kind is COUNTED:
            return call.counting.end(call.ticket, failed)  # type: ignore[union-attr]
        return self._finish(call, failed)

    def raised(self, call: Call, exc: Exception) -> Request | None:
        """The call raised ``exc``: count it as the config classifies it."""
        failed = self.judge.exception_fails(exc)
        if call.kind is COUNTED:
            return call.counting.end(call.ticket, failed)  # type: ignore[union-attr]
        return self._finish(call, failed)

    def interrupted(self, call: Call) -> Request | None:
        """Cancelled, or cut short by SystemExit or KeyboardInterrupt: no verdict on the
        dependency. A probe's lease is released at once (its slot free for another)."""
        if call.kind is COUNTED:
            call.counting.abandon(call.ticket)  # type: ignore[union-attr]
        elif call.kind is PROBING:
            assert call.token is not None
            return functools.partial(self.release, call.token)
        return None

    def _finish(self, call: Call, failed: bool) -> Request | None:
        if call.kind is PROBING:
            assert call.token is not None
            return functools.partial(self.settle, call.token, not failed)
        if call.kind is SHADOW_PROBING:
            return functools.partial(self._shadow_probe, not failed)
        return None

    # -- probes ----------------------------------------------------------------------------

    def settle(self, token: str, success: bool, now_ms: int | None = None) -> RecordResult:
        """Settle a probe with its outcome (a token whose lease has ended changes nothing)."""
        at = self.clock() if now_ms is None else now_ms
        return self._probes.settle(self.mode.policy, token, success, at, self.view.last_seen)

    def release(self, token: str) -> RecordResult:
        """Give a probe's lease back without a verdict (its call was cancelled)."""
        policy = self.mode.policy
        return self._probes.release(policy, token, self.clock(), self.view.last_seen)

    def _shadow_probe(self, success: bool) -> RecordResult | None:
        shadow = self.mode.shadow
        if shadow is None:  # tuned to enforce while the call ran: nothing to settle
            return None
        return shadow.probe(self.mode.policy, success, self.clock(), self.view.last_seen)

    # -- outcomes recorded by hand (check / record) ----------------------------------------

    def record(self, success: bool, now_ms: int) -> RecordResult:
        """Count the outcome of a call admitted while closed that ran elsewhere."""
        mode = self.mode
        shadow = mode.shadow
        if shadow is not None:
            record = self.view.read(now_ms)
            shadowed = shadow.outcome(mode.policy, record, success, now_ms)
            if shadowed is not None:
                return shadowed
        return mode.counting.count(success, now_ms)
