"""The call path's core: what one call needs next, for either driver.

tenacity's shape: the core decides and accounts, and returns what the call needs next; a
driver performs it. The sync driver (:mod:`fleetbreaker.sync_driver`) performs it inline,
the asyncio driver (:mod:`fleetbreaker.async_driver`) awaits the call and sends each store
request from a worker thread, so the event loop never waits on the store. Everything a call
is judged by lives here, once:

1. admission: :meth:`CallCore.admit` (may make a store request: a refresh, a probe claim)
   or :meth:`CallCore.admit_cached` (never does; None when a request is needed), on the
   record the core reads (:meth:`CallCore.read`: the cache, or the strategy's refresh);
2. the plan: :meth:`CallCore.plan` turns an admission into a :class:`Call` to run (counted
   by the strategy, a probe to settle, a shadow probe, or counted nowhere) or None, a
   rejection (:meth:`CallCore.reject` tells the listeners and raises CircuitOpenError when
   there is no fallback);
3. the judgement: :meth:`CallCore.returned`, :meth:`CallCore.raised` and
   :meth:`CallCore.interrupted` count how the call ended and return the store request that
   counting needs (a failure's write, a report, a probe's settle), or None;
   the driver hands it back (:meth:`CallCore.send`), which sends it and takes what it
   answered.

The core also holds the breaker's :class:`~fleetbreaker.mode.Mode` and follows live tuning
by swapping it whole. Every store answer comes back up to it as a value: a part below the
core (the view, the pipeline, the probes, the strategy and its context, the shared reads)
returns its result with the :class:`~fleetbreaker.calls.Answer` s it got, and holds no way
back into the core or the breaker. The core takes them in one place
(:meth:`CallCore.answered`: the cache, the strategy, live tuning), on the thread that made
the request: the caller's, or under asyncio the worker thread's (the cache's writes are
locked; a tune that swaps the strategy may send the old one's pending report, which must
not block the event loop). The slow-call watcher, whose sweeps no call starts, hands its
answers to :meth:`CallCore.hear` through a weak reference.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from fleetbreaker.calls import COUNTED, PROBING, SHADOW_PROBING, UNCOUNTED, Call
from fleetbreaker.errors import CircuitOpenError
from fleetbreaker.frozen import frozen
from fleetbreaker.policy import Policy
from fleetbreaker.record import Decision, State

if TYPE_CHECKING:
    from fleetbreaker.calls import Answers, Replied, Request
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

if TYPE_CHECKING:
    # The core's one place for answers, as a strategy holds it: weakly (its slow-call
    # watcher's sweeps hand their answers there).
    Heard = weakref.WeakMethod[Callable[[Answers], None]]


class Shadow(Protocol):
    """Shadow mode's stage (:class:`fleetbreaker.admission.Shadow`), as a mode holds it."""

    def admit(self, verdict: Verdict) -> Admission:
        """Allow a call an enforcing breaker would have rejected or probed."""
        ...

    def probe(
        self, policy: Policy, success: bool, now_ms: int, observed: Record | None
    ) -> Replied[RecordResult]:
        """Settle a probe with the outcome of a call that already ran (with the answers)."""
        ...

    def outcome(
        self, policy: Policy, record: Record | None, success: bool, now_ms: int
    ) -> Replied[RecordResult | None]:
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

    def policy_for(self, config: BreakerConfig) -> Policy:
        """The policy of ``config`` (built once for the config followed now)."""
        ...


class Pipeline(Protocol):
    """The admission pipeline (:class:`fleetbreaker.admission.AdmissionPipeline`)."""

    allow_closed: Admission

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
        """Decide one call on ``record`` (None: ``cached_only`` and the store is needed),
        with the answers of the store requests it made (a probe claim)."""
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
        make_counting: Callable[[BreakerConfig, Policy, Heard], Counting],
        make_shadow: Callable[[BreakerConfig], Shadow],
        clock: Callable[[], int],
    ) -> None:
        self.name = name
        self.view = view
        # Every store answer goes into it (answered): one attribute read, not a chain.
        self._cache = view.cache
        self.pipeline = pipeline
        self.hooks = hooks
        self.judge = judge
        # Whether a returned value is ever judged (a failure_result predicate): the judge is
        # the deployed config's, not tunable, and every call that returns asks.
        self._judges_results = judge.failure_result is not None
        self.clock = clock
        self._probes = probes
        self._tuning = tuning
        self._make_counting = make_counting
        self._make_shadow = make_shadow
        # A weak reference: the slow-call watcher (a process-wide thread) hands its sweeps'
        # answers here, and must not keep a discarded breaker alive.
        self._heard: Heard = weakref.WeakMethod(self.hear)
        self.allow_closed = pipeline.allow_closed
        self.mode: Mode = self._build(tuning.config, None)

    def _build(self, config: BreakerConfig, previous: Mode | None) -> Mode:
        return build_mode(
            config,
            self._tuning.policy_for(config),
            make_counting=self._counting_for,
            make_shadow=self._make_shadow,
            previous=previous,
        )

    def _counting_for(self, config: BreakerConfig, policy: Policy) -> Counting:
        return self._make_counting(config, policy, self._heard)

    # -- the mode and the store's answers --------------------------------------------------

    def send(self, request: Request) -> Any:
        """Send a store request (a driver's, or the core's own): take the answers it brings
        back (:meth:`hear`) and return its result."""
        result, answers = request()
        if answers:
            self.hear(answers)
        return result

    def hear(self, answers: Answers) -> None:
        """Take answers that came back up as values, in the order they came: each into
        :meth:`answered`; a probe's record is heard by the strategy even from the local twin
        (every generation a probe saw)."""
        for answer in answers:
            outcome = answer.outcome
            self.answered(outcome, answer.at_ms, answer.fresh_ms)
            if answer.from_probe:
                self.mode.counting.observe(outcome.record)

    def answered(self, answer: Outcome, now_ms: int, fresh_ms: int | None = None) -> None:
        """The one place every store answer goes, returned up to the core by whoever asked
        (a strategy's request, a probe's claim or settle, a read, an operator's write): a
        shared answer into the cache (fresh for ``fresh_ms`` when the asker knows, else as
        long as the strategy says; the current item a lost conditional write returned too),
        to the strategy, and to live tuning, which travels with the record. The local twin's
        answer (``answer.local``) is this container's alone, never cached as the fleet's
        record."""
        if answer.local:
            return
        record = answer.record
        counting = self.mode.counting
        fresh = counting.fresh_ms(record, now_ms) if fresh_ms is None else fresh_ms
        # The newest record the cache holds now (the view's last_seen): this one, or a newer
        # generation it kept.
        seen = self._cache.put(record, now_ms, fresh)
        counting.observe(record)
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
            # Its answers are taken first, as the old strategy's (nothing is lost).
            self.hear(previous.counting.flush(self.clock()))
        self.mode = self._build(config, previous)

    def restart(self, now_ms: int) -> None:
        """Start over as a new container (a restored snapshot): a new mode, swapped in whole,
        with a fresh counting strategy (no tally, every schedule drawn afresh) for the same
        settings. Nothing is handed over: the snapshot's counts were flushed before it."""
        mode = self._build(self.mode.config, None)
        mode.counting.restart(now_ms)  # its schedules start at the restore's time
        self.mode = mode

    def flush(self, now_ms: int) -> None:
        """Send what the strategy in force holds pending, and take its answers."""
        self.hear(self.mode.counting.flush(now_ms))

    def report_hung_calls(self) -> int:
        """Report the strategy's calls running past ``slow_call_duration`` (rate policy with
        slow calls), taking the answers; how many."""
        sweep = getattr(self.mode.counting, "report_hung_calls", None)
        if sweep is None:
            return 0
        hung: int = self.send(sweep)
        return hung

    # -- the record ------------------------------------------------------------------------

    def read(self, now_ms: int) -> Record | None:
        """The record at ``now_ms``: cached while fresh, else refreshed by one thread of the
        container (the strategy in force decides what the refresh is), whose answers are
        taken before the refresh is let go, so the threads that waited for it find them
        cached (:class:`~fleetbreaker.view.RecordView`)."""
        view = self.view
        hit, record = view.cached(now_ms)
        if hit:
            return record
        if view.paused(now_ms):
            return view.local(now_ms)
        if not view.begin_refresh():
            # Another thread kept the refresh too long: a read of this thread's own.
            record, answers = view.fetch(now_ms)
        else:
            try:
                hit, record = view.cached(now_ms)
                if hit:
                    return record
                record, answers = self.mode.counting.refresh(now_ms)
                if answers:
                    self.hear(answers)
                return record
            finally:
                view.end_refresh()
        if answers:
            self.hear(answers)
        return record

    # -- admission -------------------------------------------------------------------------

    def admit(self, now_ms: int | None = None, lease_ms: int | None = None) -> Admission:
        """Decide one call (may make a store request: a refresh, a probe claim)."""
        at = self.clock() if now_ms is None else now_ms
        record = self.read(at)
        # The mode is read after the record: a refresh may bring live tuning.
        admission, answers = self.pipeline.admit(at, record, self.mode, lease_ms)
        if answers:
            self.hear(answers)
        assert admission is not None  # only a cached_only admission can be undecided
        return admission

    def admit_quietly(self) -> Admission:
        """Decide one call now, leaving the decision hooks to :meth:`announce` (an event
        loop's admission, decided on a worker thread)."""
        at = self.clock()
        record = self.read(at)
        admission, answers = self.pipeline.admit(at, record, self.mode, announce=False)
        if answers:
            self.hear(answers)
        assert admission is not None
        return admission

    def announce(self, admission: Admission) -> None:
        """Tell the decision hooks (on the caller's thread) of a quiet admission.

        Shadow mode's admissions told them already, where they were made."""
        if admission.shadow is None:
            self.pipeline.announce(admission)

    def admit_cached(self, now_ms: int) -> Admission | None:
        """Decide one call from the cached record, or None when that needs the store."""
        hit, record = self.view.cached(now_ms)
        if not hit:
            return None
        # Never a store request (a probe to claim says None): no answers to take.
        admission, _ = self.pipeline.admit(now_ms, record, self.mode, cached_only=True)
        return admission

    def closed(self, now_ms: int) -> Call:
        """The call of a closed, healthy breaker (the drivers' fast path)."""
        mode = self.mode
        counting = mode.counting
        if counting.failures_only:  # no ticket, nothing due: start() and due() say None
            return mode.closed_call
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
        failed = self._judges_results and self.judge.result_fails(result)
        if call.kind is COUNTED:
            counting = call.counting
            if failed or not counting.failures_only:  # type: ignore[union-attr]
                return counting.end(call.ticket, failed)  # type: ignore[union-attr]
            return None  # a success, and the strategy counts failures only: nothing
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
            return functools.partial(self._release, call.token)
        return None

    def _finish(self, call: Call, failed: bool) -> Request | None:
        if call.kind is PROBING:
            assert call.token is not None
            return functools.partial(self._settle, call.token, not failed)
        if call.kind is SHADOW_PROBING:
            return functools.partial(self._shadow_probe, not failed)
        return None

    # -- probes ----------------------------------------------------------------------------

    def settle(self, token: str, success: bool, now_ms: int | None = None) -> RecordResult:
        """Settle a probe with its outcome (a token whose lease has ended changes nothing)."""
        result: RecordResult = self.send(functools.partial(self._settle, token, success, now_ms))
        return result

    def release(self, token: str) -> RecordResult:
        """Give a probe's lease back without a verdict (its call was cancelled)."""
        result: RecordResult = self.send(functools.partial(self._release, token))
        return result

    # The requests a probe's ending needs (sent through send(), which takes their answers):
    # the policy, the time and the fence are read when they are sent.

    def _settle(
        self, token: str, success: bool, now_ms: int | None = None
    ) -> Replied[RecordResult]:
        at = self.clock() if now_ms is None else now_ms
        return self._probes.settle(self.mode.policy, token, success, at, self.view.last_seen)

    def _release(self, token: str) -> Replied[RecordResult]:
        policy = self.mode.policy
        return self._probes.release(policy, token, self.clock(), self.view.last_seen)

    def _shadow_probe(self, success: bool) -> Replied[RecordResult | None]:
        shadow = self.mode.shadow
        if shadow is None:  # tuned to enforce while the call ran: nothing to settle
            return None, ()
        return shadow.probe(self.mode.policy, success, self.clock(), self.view.last_seen)

    # -- outcomes recorded by hand (check / record) ----------------------------------------

    def record(self, success: bool, now_ms: int) -> RecordResult:
        """Count the outcome of a call admitted while closed that ran elsewhere."""
        mode = self.mode
        shadow = mode.shadow
        if shadow is not None:
            record = self.read(now_ms)
            shadowed, answers = shadow.outcome(mode.policy, record, success, now_ms)
            if answers:
                self.hear(answers)
            if shadowed is not None:
                return shadowed
        counting = mode.counting
        due = counting.due(now_ms)
        if due is not None:  # a report due before it, as before a call
            self.send(due)
        counted, answers = counting.count(success, now_ms, self.read)
        if answers:
            self.hear(answers)
        return counted
