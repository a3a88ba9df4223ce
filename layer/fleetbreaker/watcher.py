"""The process's slow-call watcher: one thread that reports calls hung past their duration.

A call still running past ``slow_call_duration`` is reported slow while it runs: the Lambda
timeout may kill the container before the call ends, and the count with it. A sweep's report
answers like any store request: its answers go to the breaker's core (the cache, the
strategy, live tuning), through a weak reference, as values the sweep returned.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetbreaker.calls import Answers

# The watcher's longest sleep (s), whatever slow_call_duration says: it waits one period
# before it reads a new one, so a long tuned duration must not keep it asleep after an
# operator tunes it back.
SLOW_WATCH_MAX_PERIOD_S = 1.0


class SlowCallWatcher:
    """A breaker's entry with the process's slow-call watcher, which reports calls hung past
    ``slow_call_duration``.

    One daemon thread per process sweeps every watching breaker, each every quarter of its
    duration (a timer per call would cost far more on the hot path), so a hung call is
    reported within 1.25 × the duration; the thread ends when no breaker is left. One thread
    whatever the number of breakers: a thousand breakers built and dropped do not leave a
    thousand threads behind. A sweep that reports waits for its store (at most its deadline),
    and the other breakers' sweeps wait with it.

    ``sweep`` (a strategy's) returns (how many it reported, the answers); ``heard`` is a weak
    reference to the core's one place for answers, which takes them.
    """

    def __init__(
        self,
        sweep: Callable[[], tuple[Any, Answers]],
        heard: weakref.WeakMethod[Callable[[Answers], None]],
        period_s: float,
    ) -> None:
        # Weak references: the watcher must not keep a discarded breaker alive.
        self._sweep = weakref.WeakMethod(sweep)
        self._heard = heard
        self.period_s = period_s
        self.due = 0.0  # monotonic seconds of the next sweep
        self._started = False

    def ensure_running(self) -> None:
        if not self._started:
            self._started = True
            _WATCH.add(self)

    def sweep(self) -> bool:
        """Sweep once; False when the breaker is gone."""
        sweep = self._sweep()
        if sweep is None:
            return False
        try:
            _, answers = sweep()
            heard = self._heard()
            if heard is not None and answers:
                heard(answers)
        except Exception:  # never let the watcher die: log and keep watching
            logging.getLogger("fleetbreaker").exception("slow-call watcher failed")
        return True


class _ProcessWatch:
    """The process's one slow-call watcher thread and the breakers it sweeps."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchers: set[SlowCallWatcher] = set()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, watcher: SlowCallWatcher) -> None:
        with self._lock:
            watcher.due = time.monotonic() + watcher.period_s
            self._watchers.add(watcher)
            # Not alive in a forked child, or ended when its last breaker went: start one.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="fleetbreaker-slow-calls", daemon=True
                )
                self._thread.start()
        self._wake.set()  # a shorter period than the current sleep

    def discard(self, watcher: SlowCallWatcher) -> None:
        with self._lock:
            self._watchers.discard(watcher)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._watchers:
                    self._thread = None
                    return
                watchers = list(self._watchers)
            now = time.monotonic()
            for watcher in watchers:
                if watcher.due <= now:
                    if not watcher.sweep():  # the breaker is gone
                        self.discard(watcher)
                        continue
                    watcher.due = time.monotonic() + watcher.period_s
            soonest = min((w.due for w in watchers), default=now) - time.monotonic()
            self._wake.wait(min(max(soonest, 0.001), SLOW_WATCH_MAX_PERIOD_S))
            self._wake.clear()

    def threads(self) -> int:
        """Live watcher threads (0 or 1)."""
        thread = self._thread
        return int(thread is not None and thread.is_alive())

    def restart(self) -> None:
        """After a restored snapshot: every breaker's next sweep one period from now, and
        the thread started again if none runs.

        A fork keeps only the thread that forked (the watcher's is gone, though its breakers
        are still listed, so nothing would start it again); Lambda SnapStart resumes it,
        with sweeps due by a monotonic clock of another time. The lock and the wake-up are
        new: a thread that is gone may have held them.
        """
        self._lock = threading.Lock()
        self._wake = threading.Event()
        with self._lock:
            now = time.monotonic()
            for watcher in self._watchers:
                watcher.due = now + watcher.period_s
            thread = self._thread
            if self._watchers and (thread is None or not thread.is_alive()):
                self._thread = threading.Thread(
                    target=self._run, name="fleetbreaker-slow-calls", daemon=True
                )
                self._thread.start()


_WATCH = _ProcessWatch()


def restart_watch() -> None:
    """Restart the process's slow-call watcher (after a restored snapshot)."""
    _WATCH.restart()
