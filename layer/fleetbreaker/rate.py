"""The rate policy (and slow calls, and the quorum): calls tallied, then reported in batches.

A success must not cost a store write, so under the rate policy each container adds its calls,
failures and slow calls up here and sends them in one write per report interval (the write
also refreshes its cached copy of the fleet's record). Three things bend that schedule:

- a failure (or slow call) that, added to the fleet's window as this container last saw it,
  would open the breaker is reported at once, so tripping stays about as fast as under the
  count policy;
- a call still running past ``slow_call_duration`` is reported slow while it runs (a Lambda
  timeout may kill the container before the call ends, and with it the count);
- one record takes every container's writes, and one DynamoDB item takes about 1,000 writes/s.
  Each record carries its own write rate (reports per bucket), and every container stretches
  its interval so the fleet's periodic reports stay near ``TARGET_REPORTS_PER_S``, while
  out-of-turn reports are thinned to about ``URGENT_REPORTS_PER_S`` in all.
"""

from __future__ import annotations

import functools
import math
import random
from typing import TYPE_CHECKING

from fleetbreaker.calls import NO_ANSWERS, Answer
from fleetbreaker.policy import alone
from fleetbreaker.record import State
from fleetbreaker.results import RecordResult
from fleetbreaker.rules import report_fits, sliding_window
from fleetbreaker.tally import CallTally
from fleetbreaker.view import MAX_REFRESH_STRETCH, TARGET_REFRESHES_PER_S, refresh_ms
from fleetbreaker.watcher import SLOW_WATCH_MAX_PERIOD_S, SlowCallWatcher

if TYPE_CHECKING:
    import weakref
    from collections.abc import Callable

    from fleetbreaker.calls import Answers, Replied, Request
    from fleetbreaker.config import BreakerConfig
    from fleetbreaker.counting import CountingContext
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Record
    from fleetbreaker.window import WindowCounts

# Periodic reports the fleet aims to send to one breaker's record per second, and the extra
# out-of-turn reports it may add: together well under one DynamoDB item's 1,000 writes/s.
TARGET_REPORTS_PER_S = 250.0
URGENT_REPORTS_PER_S = 200.0
# The longest report interval, in windows. Past one window a report carries calls older than
# the window, and the window holds about half the fleet's reports; the rates it shows are
# the same, and 5,000 containers then send 250 reports/s, not 500 (a margin under one item's
# 1,000 writes/s for lost fences, newcomers and out-of-turn reports).
MAX_INTERVAL_WINDOWS = 2


def fleet_size(counts: WindowCounts, policy: Policy, own_calls: int, own_ms: int) -> float | None:
    """The containers calling a breaker: the fleet's call rate over this container's own.

    Every call is reported once, so the window's calls over its length are the fleet's call
    rate, whatever the intervals; Lambda spreads requests evenly over a function's
    containers. None when there is nothing to go on.
    """
    if counts.calls <= 0 or own_calls <= 0 or own_ms <= 0:
        return None
    return (counts.calls / policy.window_ms) / (own_calls / own_ms)


def write_rate(counts: WindowCounts, policy: Policy) -> float:
    """Reports per second the record takes (its load as a hot key).

    The largest of the window's average, the newest buckets' rate and the current bucket's
    (over at least a tenth of a bucket): the average lags a fleet that just grew (a thousand
    containers starting in the same second) by up to a window, and the newcomers of such a
    fleet must see it within a fraction of a second.
    """
    average = counts.reports * 1000 / policy.window_ms
    if counts.recent_ms <= 0:
        return average
    recent = counts.recent_reports * 1000 / counts.recent_ms
    current = counts.current_reports * 1000 / max(counts.current_ms, policy.bucket_ms / 10, 1)
    return max(average, recent, current)


def recent_worse(recent: tuple[int, int, int], older: tuple[int, int, int], policy: Policy) -> bool:
    """Whether a container's recent calls fail (or run slow) more often than its older ones.

    Then a report sends the recent calls alone and holds the older ones back: a stretched
    interval's older calls, landing in the newest bucket, would tell the short window
    (``window.RECENT_BUCKETS``) what the dependency did up to two windows ago.

    The comparison is with the container's own older calls, not with the policy's rate. At
    5 calls a second a container's recent calls are 5 to 10: judged against a 50 % threshold,
    a fifth to a third of the containers in a 60 % outage drew a lucky sample, sent their
    whole interval (mostly healthy calls from before the outage) and held the short window
    under the threshold for 12 to 16 s at 2,000 containers. Against older calls from before
    the outage, one failure is enough, so nearly every report of a partial outage's first
    interval carries its recent calls alone. Holding back costs nothing when the two
    halves fail alike (the older calls go with a later report, or a trip drops them), and it
    never moves a failure ahead of a success made at the same time, so it does not inflate
    the rate the store sees.
    """
    calls, failures, slow = recent
    old_calls, old_failures, old_slow = older
    if calls <= 0 or old_calls <= 0:
        return False  # nothing to hold back, or nothing recent to send
    if policy.failure_ratio is not None and failures * old_calls > old_failures * calls:
        return True
    return policy.slow_ms is not None and slow * old_calls > old_slow * calls


def next_interval_ms(current_ms: int, base_ms: int, counts: WindowCounts, policy: Policy) -> int:
    """The next report interval, from the one in force and the record's write rate.

    Scaling the interval in force by sqrt(W / TARGET) settles the fleet at W = TARGET for any
    fleet size; scaling the base interval by W / TARGET settles at sqrt(C * TARGET / base)
    instead (1,414 writes/s for 5,000 containers at a 1 s base) and oscillates. The square
    root damps the correction: the window's rate lags a change by up to a window. The
    interval stays between ``base_ms`` and ``max_interval_ms``.
    """
    rate = write_rate(counts, policy)
    if rate <= 0:
        return base_ms
    wanted = round(current_ms * math.sqrt(rate / TARGET_REPORTS_PER_S))
    return max(base_ms, min(wanted, max_interval_ms(policy)))


def max_interval_ms(policy: Policy) -> int:
    """The longest report interval (MAX_INTERVAL_WINDOWS windows)."""
    return MAX_INTERVAL_WINDOWS * policy.window_ms


def fleet_interval_ms(
    counts: WindowCounts, policy: Policy, own_calls: int, own_ms: int
) -> int | None:
    """The report interval the fleet already uses, estimated by a container that just joined.

    A bucket's calls per report is what one container gathers in one interval; divided by
    this container's own call rate (``own_calls`` in ``own_ms``) it gives that interval for
    a fleet of containers that each take about the same traffic. None when there is nothing
    to go on. A newcomer adopts it once, after its first report, instead of reporting at the
    base interval until the fleet's write rate teaches it (which, with a hundred containers
    joining a second, kept the record over 1,000 writes/s for a while).
    """
    if counts.reports <= 0 or counts.calls <= 0 or own_calls <= 0 or own_ms <= 0:
        return None
    if write_rate(counts, policy) < TARGET_REPORTS_PER_S / 2:
        # Not a hot record: report_interval stays the longest a container holds its counts.
        return None
    calls_per_report = counts.calls / counts.reports
    return round(calls_per_report / (own_calls / own_ms))


def urgent_allowed(
    counts: WindowCounts, policy: Policy, interval_ms: int, cache_ms: int, rng: random.Random
) -> bool:
    """Thin out-of-turn reports so the whole fleet sends about URGENT_REPORTS_PER_S.

    The fleet has about W * I containers; each considers an urgent report at most once per
    ``cache_ttl``, so each goes ahead with probability URGENT * cache_ttl / containers.
    """
    containers = write_rate(counts, policy) * interval_ms / 1000
    if containers <= 1:
        return True
    chance = URGENT_REPORTS_PER_S * max(cache_ms, 1) / 1000 / containers
    return chance >= 1 or rng.random() < chance


def wants_urgent_report(
    record: Record | None, tally: CallTally, policy: Policy, container: str, now_ms: int
) -> bool:
    """Whether this container's pending counts should reach the store before they are due:
    when they would open the breaker as this container last saw it.

    A container whose own recent calls merely fail at the policy's rate does not report out
    of turn, however stretched its interval. Such reports are a sample chosen by its
    failures: in a 48 % outage, the 200 a second the fleet was allowed carried 60 % failures
    and tipped the short window over a 50 % threshold within 4 s (2,000 containers, 5 calls
    a second each). A large fleet does not need them to trip fast: its periodic reports
    (about TARGET_REPORTS_PER_S) each carry their sender's recent calls alone once those
    fail more often than its older ones (:func:`recent_worse`), which fills the newest
    buckets with what the dependency does now, failures and successes alike.
    """
    counts = sliding_window(policy).counts(record, now_ms)
    noted = record is not None and container in record.failing
    return sliding_window(policy).trips(tally.projected(counts, noted))


class RateStrategy:
    """The rate policy's side of a breaker (a :class:`~fleetbreaker.counting.Counting`).

    It keeps the tally, the report interval (stretched with the record's write rate, adopted
    from the fleet by a newcomer), the slow-call watcher's entry, and the write that sends
    the tally (:meth:`report`), whose answer goes up to the core with its result and
    refreshes the breaker's cache like any store answer. ``heard`` is a weak reference to the
    core's one place for answers: the watcher's sweeps, which no call of the core starts,
    hand theirs there (weak: the process's watcher must not keep a breaker alive).
    """

    kind = "rate"

    def __init__(
        self,
        context: CountingContext,
        config: BreakerConfig,
        policy: Policy,
        cache_ms: int,
        heard: weakref.WeakMethod[Callable[[Answers], None]],
    ) -> None:
        self._ctx = context
        self._heard = heard
        # It tallies every call, times slow ones, reports on schedule. (An attribute of the
        # instance: read on every call, where a class attribute costs a lookup a few times
        # as long.)
        self.failures_only = False
        self._cache_ms = cache_ms
        self._base_interval_ms = max(1, round(config.effective_report_interval * 1000))
        self.policy = policy
        self._watcher: SlowCallWatcher | None = None
        self._watching = False
        self._start(context.clock())
        self.adopt(config, policy)

    def _start(self, now_ms: int) -> None:
        """A newcomer's schedule and an empty tally (at construction, and after a restore)."""
        self._interval_ms = self._base_interval_ms
        self._has_reported = False  # a newcomer adopts the fleet's interval once
        # Whether the record showed no reports when this container first read it: it may be
        # one of a crowd that started together (see _join_fleet). None: not read yet.
        self._started_cold: bool | None = None
        # Containers on this breaker, as the last closed record with reports showed (kept
        # while open: the fleet's refreshes must stay spread while it waits out an outage).
        self._fleet = 0.0
        self._reported = False  # whether a report of this container has reached the store
        self._started_ms = now_ms
        self.tally = CallTally(self.policy, self._base_interval_ms)
        self.tally.start(now_ms)

    def adopt(self, config: BreakerConfig, policy: Policy) -> None:
        """Follow tuned numbers (the slow-call duration, the thresholds)."""
        self.policy = policy
        self.tally.slow_ms = policy.slow_ms
        if config.slow_call_duration is not None:
            # A quarter of the duration: a hung call is reported within 1.25 times it.
            period = min(max(0.005, config.slow_call_duration / 4), SLOW_WATCH_MAX_PERIOD_S)
            if self._watcher is None:
                self._watcher = SlowCallWatcher(self.report_hung_calls, self._heard, period)
            self._watcher.period_s = period

    def restart(self, now_ms: int) -> None:
        # Counts and schedules were the snapshot's: its reports went before it was taken.
        self._start(now_ms)

    def flush(self, now_ms: int) -> Answers:
        """Send every pending call, in as many reports as it takes: a report may carry the
        recent calls alone (:func:`recent_worse`), and the older ones must go too (a
        snapshot would otherwise take them to every restored environment, and
        ``restart`` drops them there). Every report's answer, for the core."""
        answers: Answers = NO_ANSWERS
        seen: Record | None = None
        pending = self.tally.pending_calls()
        while pending:
            record, got = self.report(now_ms, urgent=True, observed=seen)
            answers += got
            if got and not got[-1].outcome.local:
                # The next report is fenced on this one's answer (not cached yet: the core
                # takes them all when the flush returns).
                seen = record
            left = self.tally.pending_calls()
            if left >= pending:
                # Nothing went: carried back after a lost race, again. The next flush or
                # report tries again; looping here would not.
                break
            pending = left
        return answers

    def claim_weight(self, now_ms: int) -> int:
        return 1

    @property
    def interval_ms(self) -> int:
        """The report interval in force (the base one, or stretched for a busy record)."""
        return self._interval_ms

    # -- the record ------------------------------------------------------------------------

    def refresh(self, now_ms: int) -> Replied[Record | None]:
        """The report's answer is the fleet's record: it replaces the refresh read, unless
        the interval is stretched (the record then takes too many writes)."""
        if not self.tally.stretched:
            return self.report(now_ms, load_if_empty=True)
        return self._ctx.read(now_ms, self.fresh_ms)

    def observe(self, record: Record | None) -> None:
        """Tell the tally the generation the store holds (its older counts are stale)."""
        self.tally.observe(record.gen if record is not None else 0)

    def fresh_ms(self, record: Record | None, now_ms: int) -> int:
        """How long a store answer stays fresh: cache_ttl, longer for a large fleet."""
        tally = self.tally
        counts = sliding_window(self.policy).counts(record, now_ms)
        own_calls = tally.taken + tally.pending_calls()
        fleet = fleet_size(counts, self.policy, own_calls, now_ms - self._started_ms)
        if not self._reported and self._started_cold and self._has_reported:
            # One of a crowd, waiting for its first report: the crowd's calls are not in the
            # window yet, so nothing shows its size. Refresh as a fleet large enough for the
            # longest wait (jittered), until its own report shows more.
            fleet = TARGET_REFRESHES_PER_S * MAX_REFRESH_STRETCH * self._cache_ms / 1000
        if fleet is not None:
            self._fleet = fleet
        return refresh_ms(self._fleet, self._cache_ms, self._ctx.rng)

    # -- calls -----------------------------------------------------------------------------

    def report_hung_calls(self) -> Replied[int]:
        """Report the calls running past ``slow_call_duration`` as slow calls now: how many,
        and the report's answers (for the core)."""
        now = self._ctx.clock()
        hung = self.tally.sweep(now)
        if hung:
            # Out of turn: the Lambda timeout may kill this container before the call ends.
            return hung, self.report(now, urgent=True)[1]
        return hung, NO_ANSWERS

    def count(
        self, success: bool, now_ms: int, read: Callable[[int], Record | None]
    ) -> Replied[RecordResult]:
        """Tally the outcome of a call that ran elsewhere (``record()``; the core sent the
        report due before it, as before a call). ``read`` is not needed: the result says the
        state this container last saw."""
        answers: Answers = NO_ANSWERS
        tally = self.tally
        if success:
            next(tally.good)
        else:
            urgent = self._bad(tally, None, True, now_ms)
            if urgent is not None:
                answers += urgent()[1]
        seen = self._ctx.view.last_seen
        for answer in answers:  # not cached yet: the core takes them when this returns
            if not answer.outcome.local:
                seen = answer.outcome.record
        state = seen.state if seen is not None else State.CLOSED
        return RecordResult(True, state, "call tallied"), answers

    # The rate policy's hot path, kept flat on purpose (it is measured against Powertools in
    # bench/): a good call costs one atomic counter step, plus a dict entry and a second
    # clock read when slow-call detection times it. What needs the store comes back as a
    # request, which the driver sends (inline, or from a worker thread under asyncio).

    def due(self, now_ms: int) -> Request | None:
        """The report, when one is due before this call (else the tally's span rotates)."""
        tally = self.tally
        if now_ms < tally.due_ms:
            return None
        if now_ms >= tally.report_due_ms:
            return functools.partial(self.report, now_ms)
        tally.rotate(now_ms)
        return None

    def start(self, now_ms: int) -> int | None:
        """A call starts: timed (its ticket) when slow calls are detected, else None."""
        tally = self.tally
        if tally.slow_ms is None:
            return None
        number = next(tally.numbers)
        tally.running[number] = now_ms
        if not self._watching:
            self._start_watcher()
        return number

    def end(self, ticket: int | None, failed: bool) -> Request | None:
        """A call ended: tally it; an urgent report, when it makes one, is a request."""
        tally = self.tally
        if ticket is None:
            if not failed:
                next(tally.good)
                return None
            return self._bad(tally, None, True, self._ctx.clock())
        end = self._ctx.clock()
        started = tally.running.pop(ticket, None)
        if started is None:  # the watcher reported it slow while it ran
            if tally.late(failed):
                return functools.partial(self._maybe_report_urgently, tally, end)
            return None
        slow_ms = tally.slow_ms  # None: slow calls were tuned off while it ran
        if not failed and (slow_ms is None or end - started < slow_ms):
            next(tally.good)
            return None
        return self._bad(tally, started, failed, end)

    def abandon(self, ticket: int | None) -> None:
        """An interrupted call (cancelled, SystemExit): no verdict on the dependency."""
        if ticket is not None:
            self.tally.running.pop(ticket, None)

    def _bad(
        self, tally: CallTally, started: int | None, failed: bool, now_ms: int
    ) -> Request | None:
        if tally.bad(started, now_ms, failed):
            return functools.partial(self._maybe_report_urgently, tally, now_ms)
        return None

    def _start_watcher(self) -> None:
        if self._watcher is not None:
            self._watcher.ensure_running()
        self._watching = True

    def _maybe_report_urgently(self, tally: CallTally, now_ms: int) -> Replied[None]:
        ctx = self._ctx
        record = ctx.view.last_seen
        degraded = ctx.store.degraded
        if degraded:
            # On local state: the local breaker's record, and its own quorum (alone()).
            record = ctx.store.local.load(ctx.name, now_ms)
        policy = alone(self.policy) if degraded else self.policy
        if now_ms < tally.urgent_after_ms or not wants_urgent_report(
            record, tally, policy, ctx.container_key, now_ms
        ):
            return None, NO_ANSWERS
        # One out-of-turn decision per cache_ttl per container, thinned across a large fleet.
        tally.urgent_after_ms = now_ms + self._cache_ms
        counts = sliding_window(self.policy).counts(record, now_ms)
        if urgent_allowed(counts, self.policy, self._interval_ms, self._cache_ms, ctx.rng):
            return None, self.report(now_ms, urgent=True)[1]
        return None, NO_ANSWERS

    # -- the report ------------------------------------------------------------------------

    def report(
        self,
        now_ms: int,
        load_if_empty: bool = False,
        urgent: bool = False,
        observed: Record | None = None,
    ) -> Replied[Record | None]:
        """Report the tally in one write: the record it answered (or the one this container
        last saw, when nothing was written), and the answers, which refresh the cache once
        the core takes them. ``observed``: the record to fence on, when the caller holds one
        newer than the cache (a flush's previous report)."""
        ctx = self._ctx
        tally = self.tally
        tally.rotate(now_ms)
        read = not self._has_reported and not urgent
        seen = None
        answers: Answers = NO_ANSWERS
        if read:
            loaded, answers = ctx.load(now_ms)
            seen = _newest(loaded, answers, ctx.view.last_seen)
            if not answers[0].outcome.local:
                self.observe(loaded)  # its generation, before the tally is judged or taken
            if self._join_fleet(tally, loaded, now_ms):
                # The first report waits for the fleet's interval: no write now. (It has
                # just read the record: that read is this refresh.)
                return seen, answers
        policy = self.policy
        key = ctx.container_key
        if recent_worse(tally.recent(), tally.older(), policy):
            # Its recent calls fail more often than its older ones: those alone, so the newest
            # buckets show what the dependency does now (the rules' short window); the older
            # counts follow later.
            batch = tally.take_recent(key, now_ms, self._interval_ms)
        else:
            batch = tally.take(key, now_ms, self._interval_ms)
        if not read:
            seen = observed if observed is not None else ctx.view.last_seen
        if not batch:
            if load_if_empty and not read:
                return ctx.read(now_ms, self.fresh_ms)
            return seen, answers
        outcome = ctx.store.report(ctx.name, policy, now_ms, batch, seen)
        answers += (Answer(outcome, now_ms),)
        self._reported = True
        after = outcome.record
        if (
            not outcome.changed
            and after is not None
            and after.state is State.CLOSED
            and report_fits(after, batch)
        ):
            # Closed, this generation, yet not counted: it lost every race. Not lost.
            tally.carry(batch)
        tally.observe(after.gen if after is not None else 0)
        # Stretch the interval while the record takes more writes than one item should.
        counts = sliding_window(policy).counts(after, now_ms)
        interval = next_interval_ms(self._interval_ms, self._base_interval_ms, counts, policy)
        if not self._has_reported:
            # A newcomer joins at the interval the fleet already uses.
            self._has_reported = True
            joined = fleet_interval_ms(counts, policy, batch.calls, now_ms - self._started_ms)
            if joined is not None:
                interval = max(interval, min(joined, max_interval_ms(policy)))
        elif not urgent and now_ms - self._started_ms >= policy.window_ms:
            # Settled: the fleet's fair share. The write-rate control above keeps whatever
            # interval a container happened to hold when the record got busy (the first to
            # report stay at the base interval and take half the target, the rest stretch
            # to twice their share), and a report of a long interval hides an outage from
            # the short window for longer.
            interval = self._fair_interval_ms(interval, counts, now_ms)
        if interval != self._interval_ms:
            self._interval_ms = interval
            tally.reschedule(key, now_ms, interval)
        if counts.calls:
            ctx.emit(
                "on_window", ctx.name, counts.calls, counts.failure_rate, counts.slow_call_rate
            )
        return after, answers

    def _fair_interval_ms(self, interval_ms: int, counts: WindowCounts, now_ms: int) -> int:
        """The interval that gives this container its share of TARGET_REPORTS_PER_S: the
        fleet's size (:func:`fleet_size`, from the window this report's answer shows) over
        the target, between the base and the longest interval. ``interval_ms`` when the
        window shows nothing to go on."""
        tally = self.tally
        policy = self.policy
        own = tally.taken + tally.pending_calls()
        fleet = fleet_size(counts, policy, own, now_ms - self._started_ms)
        if fleet is None:
            return interval_ms
        fair = round(fleet * 1000 / TARGET_REPORTS_PER_S)
        return max(self._base_interval_ms, min(fair, max_interval_ms(policy)))

    def _join_fleet(self, tally: CallTally, record: Record | None, now_ms: int) -> bool:
        """A newcomer whose first report is due: join the interval a hot fleet already uses.

        It reads the record first (one read in its life, and this refresh): the record tells
        how many calls the fleet's reports carry, and its own calls so far how fast it
        gathers them: together, the interval the others report at. Its newest buckets tell
        how fast reports arrive, which is all a fleet that started at once has to go on.
        Joining before the first write, not after it, keeps a thousand containers starting
        in the same second from adding a thousand writes a second.
        True when it joined (the counts then wait, spread by the interval's jitter). The
        record is the one just read; the core caches it when the report returns, fresh for
        as long as the interval joined here says (:meth:`fresh_ms`).
        """
        ctx = self._ctx
        policy = self.policy
        counts = sliding_window(policy).counts(record, now_ms)
        if self._started_cold is None:
            self._started_cold = counts.reports == 0
        rate = write_rate(counts, policy)
        pending = tally.pending_calls()
        if rate < TARGET_REPORTS_PER_S / 2 or not pending:
            # A quiet record; or its first read, before any call of its own shows how fast
            # it gathers calls (nothing to report either).
            return False
        longest = max_interval_ms(policy)
        if self._started_cold:
            # The record was quiet when it started and is hot now: it started with a crowd
            # (Lambda adds up to 1,000 containers a second) whose size no record shows yet.
            # The longest interval is safe, the first report anywhere in it so the crowd's
            # first reports spread evenly; the report control shortens it if the crowd
            # turns out small.
            self._has_reported = True
            self._interval_ms = longest
            base = self._base_interval_ms
            tally.defer(now_ms, longest, base + round(ctx.rng.random() * (longest - base)))
            return True
        joined = fleet_interval_ms(counts, policy, pending, now_ms - self._started_ms)
        by_rate = round(self._interval_ms * rate / TARGET_REPORTS_PER_S)
        interval = min(max(joined or 0, by_rate), longest)
        if interval <= self._interval_ms:
            return False
        self._has_reported = True  # joined: the first report's answer need not do it again
        self._interval_ms = interval
        # The first report anywhere in twice the interval. Newcomers come in crowds (Lambda
        # adds up to 1,000 containers to a function every 10 s, doubling a fleet of 1,000),
        # and each one's estimate is the fleet as it was before its crowd. Due one interval
        # on (+-25 %), 1,000 newcomers joining 1,000 containers at 2.6 s sent their first
        # reports within 1.3 s: 1,125 write units in one second, lost fences included.
        base = self._base_interval_ms
        spread = min(2 * interval, longest) - base
        tally.defer(now_ms, interval, base + round(ctx.rng.random() * spread))
        return True


def _newest(loaded: Record | None, answers: Answers, seen: Record | None) -> Record | None:
    """The record a report is fenced on after the read that preceded it: the read (not
    cached yet: the core takes its answer when the report returns), unless the view holds a
    later generation, or the read was the local twin's (never the fleet's record)."""
    if answers[0].outcome.local:
        return seen
    if seen is not None and loaded is not None and loaded.gen < seen.gen:
        return seen
    return loaded
