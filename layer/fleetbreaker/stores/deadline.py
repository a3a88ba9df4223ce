"""The store deadline: run one store call on a worker thread, wait for it at most so long.

A store call may hang on a socket, or trickle its answer, for longer than any client timeout
admits. The caller waits for it at most its deadline; a call still running past it keeps its
worker (never reused until it ends) and counts as stuck. Threads are bounded per store
(MAX_STUCK_WORKERS) and per process (MAX_PROCESS_WORKERS), however many callers arrive at
once, and an idle worker ends its thread after WORKER_IDLE_SECONDS.

:class:`~fleetbreaker.stores.fallback.FallbackStore` runs every shared-store operation
through :func:`run_within`; a missed deadline raises :class:`StoreDeadlineError`.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fleetbreaker.errors import StoreDeadlineError

T = TypeVar("T")

# Store calls one FallbackStore (one breaker) may have running at once, stuck ones included.
# A caller past it waits for one to end, within its own deadline; when this many are stuck past
# their deadlines it fails at once. Callers arriving together cannot exceed it either.
MAX_STUCK_WORKERS = 4

# Store calls running at once in the whole process, over every breaker: the worker threads
# are shared (one pool per process), so a thousand breakers built and dropped, or many hung
# stores, never hold more threads than this (Lambda allows 1,024 per container).
MAX_PROCESS_WORKERS = 64

# Idle workers kept for reuse; a worker finishing a call past this many ends its thread.
MAX_IDLE_WORKERS = 4

# A worker idle this long (seconds) ends its thread; the next store call starts another. A
# breaker in use calls its store about once per cache_ttl, so a worker stays; a process whose
# breakers are all dropped does not keep threads behind.
WORKER_IDLE_SECONDS = 30.0


# A thread-local trace context (the X-Ray SDK's) does not follow a store call onto its
# worker thread the way contextvars do. A listener that needs it there sets this, on the
# caller's thread, to a function the worker calls with the job and that runs it.
store_call_wrapper: contextvars.ContextVar[Callable[[Callable[[], Any]], Any] | None] = (
    contextvars.ContextVar("fleetbreaker_store_call_wrapper", default=None)
)


def _in_caller_context(job: Callable[[], T]) -> T:
    wrapper = store_call_wrapper.get()
    if wrapper is None:
        return job()
    result: T = wrapper(job)
    return result


class _Worker:
    """A daemon thread that runs one store call at a time, handed over through a queue."""

    def __init__(self, pool: _WorkerPool) -> None:
        self._pool = pool
        # A job and its result; None: end the thread (its pool was replaced).
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], _Result] | None] = (
            queue.SimpleQueue()
        )
        # Daemon: a call stuck on a socket with no timeout must not keep the process alive.
        self._thread = threading.Thread(target=self._loop, name="fleetbreaker-store", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], Any], result: _Result) -> None:
        self._jobs.put((job, result))

    def stop(self) -> None:
        """End the thread once it is idle (it takes no new job from its pool)."""
        self._jobs.put(None)

    def _loop(self) -> None:
        while True:
            try:
                handed = self._jobs.get(timeout=WORKER_IDLE_SECONDS)
            except queue.Empty:
                if self._pool.retire(self):
                    return
                continue  # taken for a job just now: it is on its way
            if handed is None:
                return
            job, result = handed
            try:
                result.value = job()
            except BaseException as exc:  # handed to the waiting caller, never lost
                result.error = exc
            result.finish()
            # Hold nothing of the caller's while idle: the job's closure reaches the store and
            # its breaker, which would then outlive every reference its owner dropped.
            job = result = handed = None  # type: ignore[assignment]
            if not self._pool.release(self):
                return


class _Result:
    __slots__ = ("done", "error", "on_done", "value")

    def __init__(self, on_done: Callable[[], None]) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.on_done: Callable[[], None] | None = on_done

    def finish(self) -> None:
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done()  # frees the call's slots before the caller can start another
        self.done.set()


class CallSlots:
    """One store's share of the pool: its calls running now, and how many are stuck."""

    def __init__(self) -> None:
        self.free = threading.BoundedSemaphore(MAX_STUCK_WORKERS)
        self.stuck = 0  # running past the deadline their caller gave up at
        self.lock = threading.Lock()


class _WorkerPool:
    """The process's store workers: a call waits at most its deadline, a stuck worker is not
    reused, and the threads are bounded per store (MAX_STUCK_WORKERS) and per process
    (MAX_PROCESS_WORKERS), however many callers arrive at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._running = threading.BoundedSemaphore(MAX_PROCESS_WORKERS)
        self._closed = False  # replaced by a new pool: keeps no idle worker

    def run(self, job: Callable[[], T], deadline_s: float, what: str, slots: CallSlots) -> T:
        if slots.stuck >= MAX_STUCK_WORKERS:
            raise StoreDeadlineError(
                f"{what}: {slots.stuck} earlier store calls are still running past their deadline"
            )
        give_up = time.monotonic() + deadline_s
        if not slots.free.acquire(timeout=deadline_s):
            raise StoreDeadlineError(
                f"{what}: {MAX_STUCK_WORKERS} store calls of this breaker still running after "
                f"its {deadline_s:g} s deadline"
            )
        if not self._running.acquire(timeout=max(0.0, give_up - time.monotonic())):
            slots.free.release()
            raise StoreDeadlineError(
                f"{what}: {MAX_PROCESS_WORKERS} store calls of this process still running "
                f"after its {deadline_s:g} s deadline"
            )

        def finished() -> None:
            with slots.lock:
                if late[0]:
                    slots.stuck -= 1
            self._running.release()
            slots.free.release()

        late = [False]
        result = _Result(finished)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
        context = contextvars.copy_context()  # tracing and logging context travel along
        worker.submit(lambda: context.run(_in_caller_context, job), result)
        if not result.done.wait(max(0.0, give_up - time.monotonic())):
            with slots.lock:
                late[0] = result.on_done is not None  # it may have finished just now
                if late[0]:
                    slots.stuck += 1
            if late[0]:
                raise StoreDeadlineError(f"{what} took longer than its {deadline_s:g} s deadline")
            result.done.wait()  # finishing now: its answer is a moment away
        if result.error is not None:
            raise result.error
        value: T = result.value
        return value

    def release(self, worker: _Worker) -> bool:
        """A worker finished its call: True when it stays for reuse, False to end its thread."""
        with self._lock:
            if self._closed or len(self._idle) >= MAX_IDLE_WORKERS:
                return False
            self._idle.append(worker)
            return True

    def stop_idle(self) -> None:
        """End every idle worker's thread, and keep none from now on (the pool is replaced:
        calls still running finish, and their workers end with them)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
        for worker in idle:
            worker.stop()

    def retire(self, worker: _Worker) -> bool:
        """An idle worker's thread may end: True unless it was just handed a job."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False


# One pool per process: every FallbackStore (every breaker) shares its threads.
_POOL = _WorkerPool()


def restart_workers() -> None:
    """A new, empty pool for the process (after a restored snapshot).

    The snapshot's workers may be gone (a fork keeps only the thread that forked: a call
    handed to an idle worker that no longer runs would wait out its deadline), or resumed in
    the middle of a call on a connection of another time. The old pool's idle workers end;
    a call still running finishes with the old pool, which frees its permits, and its
    worker ends then. New calls start new workers.
    """
    global _POOL
    old, _POOL = _POOL, _WorkerPool()
    old.stop_idle()


def run_within(job: Callable[[], T], deadline_s: float, what: str, slots: CallSlots) -> T:
    """``job()`` on a worker thread, waited for at most ``deadline_s`` seconds.

    ``what`` names the call in the StoreDeadlineError; ``slots`` is the calling store's share
    of the pool (one per store, so a hung store cannot take every thread).
    """
    return _POOL.run(job, deadline_s, what, slots)
