"""The asyncio driver: awaits a call through the core; the store is asked off the event loop.

The same core as the sync driver (:mod:`fleetbreaker.core`), so the same rules and costs.
What differs is who performs the core's answers:

- admission is decided from the cached record on the event loop when it can be
  (:meth:`~fleetbreaker.core.CallCore.admit_cached`); when it needs the store (a stale
  cache, a probe to claim) it is decided on a worker thread (``asyncio.to_thread``), so a
  store that takes 300 ms stalls the call that needs it, never the loop;
- the call is awaited, so it is judged and timed (slow calls) by what its await did;
- every store request the accounting returns is handed back to the core on a worker thread
  (``core.send``) and awaited: the request is sent there, and the core takes what the store
  answered there too (the cache's writes are locked, and a tune that swaps the strategy may
  send the old one's pending report: neither may block the event loop);
- ``asyncio.CancelledError`` is no verdict on the dependency: the call counts nowhere, and a
  cancelled probe gives its lease back at once (one store write, shielded from a second
  cancellation, bounded by the store's deadline) before the cancellation goes on.

The worker threads are asyncio's default executor's; each store request keeps its own
deadline there (:class:`~fleetbreaker.stores.fallback.FallbackStore`). This module is loaded
with the first async entry point a breaker builds: ``import fleetbreaker`` imports no asyncio.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from fleetbreaker.calls import Call, CallPath, Request
    from fleetbreaker.results import Admission
    from fleetbreaker.view import RecordCache

R = TypeVar("R")


class AsyncDriver:
    """One breaker's awaited calls (``call_async``, the decorator on ``async def``,
    ``async with``)."""

    def __init__(
        self,
        core: CallPath,
        cache: RecordCache,
        *,
        watched: bool,
        handoff: Callable[[Callable[[], Any]], Callable[[], Any]] | None = None,
    ) -> None:
        self.core = core
        self._clock = core.clock
        self._cache = cache
        self._watched = watched
        # Wraps work sent to a worker thread so it runs in the caller's thread-bound trace
        # context (listeners' thread_handoff); None: no listener carries one.
        self._handoff = handoff

    async def run(
        self,
        fn: Callable[..., Awaitable[R]],
        fallback: Callable[..., Any] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        core = self.core
        now = self._clock()
        start, until = self._cache.healthy
        if start <= now < until:
            if self._watched:  # listeners that watch decisions hear this one too
                core.announce(core.allow_closed)
            call = core.closed(now)
        else:
            admission = await self._admit(now)
            planned = core.plan(admission, now)
            if planned is None:
                core.reject(admission, fallback)
                assert fallback is not None  # reject() raised without one
                answer = fallback(admission, *args, **kwargs)
                if inspect.isawaitable(answer):
                    answer = await answer
                result: R = answer
                return result
            call = planned
        if call.before is not None:
            await self._sent(call.before)
        try:
            awaitable = fn(*args, **kwargs)
            if not inspect.isawaitable(awaitable):
                raise _not_awaitable(fn, awaitable)
            result = await awaitable
        except _NotAwaitable as refused:
            await self._abandon(call)
            raise TypeError(str(refused)) from None
        except Exception as exc:
            request = core.raised(call, exc)
            if request is not None:
                await self._sent(request)
            raise
        except BaseException:
            # Cancelled (or SystemExit, KeyboardInterrupt): no verdict on the dependency.
            await self._abandon(call)
            raise
        request = core.returned(call, result)
        if request is not None:
            await self._sent(request)
        return result

    async def enter(self) -> Call:
        """``async with breaker:``: admit the block (raising CircuitOpenError when rejected)."""
        core = self.core
        now = self._clock()
        admission = await self._admit(now)
        call = core.plan(admission, now)
        if call is None:
            core.refuse(admission)
        if call.before is not None:
            await self._sent(call.before)
        return call

    async def exit(self, call: Call, exc: BaseException | None) -> None:
        """The block ended (``exc``: what it raised, or None)."""
        core = self.core
        if exc is None:
            request = core.returned(call, None)
        elif isinstance(exc, Exception):
            request = core.raised(call, exc)
        else:
            await self._abandon(call)
            return
        if request is not None:
            await self._sent(request)

    async def _admit(self, now_ms: int) -> Admission:
        core = self.core
        admission = core.admit_cached(now_ms)
        if admission is None:
            # A store request: decided on a worker thread, at that thread's time; the
            # decision hooks run here, on the caller's thread (a tracer's current segment).
            admission = await self._off_loop(core.admit_quietly)
            core.announce(admission)
        return admission

    async def _abandon(self, call: Call) -> None:
        core = self.core
        request = core.interrupted(call)
        if request is not None:
            # A cancelled probe's lease goes back before the cancellation goes on, so the
            # next caller can probe at once; shielded, so a second cancellation cannot stop
            # the write half-way (the thread finishes it anyway).
            await asyncio.shield(self._sent(request))

    def _sent(self, request: Request) -> Awaitable[Any]:
        """``request`` handed back to the core on a worker thread (``core.send``: the request
        sent, and what the store answered taken, off the event loop)."""
        return self._off_loop(functools.partial(self.core.send, request))

    def _off_loop(self, job: Callable[[], R]) -> Awaitable[R]:
        """``job`` on a worker thread (contextvars copied), in the caller's trace context."""
        handoff = self._handoff
        if handoff is not None:
            # Here, on the awaiting task's thread: what is current now is the caller's.
            job = handoff(job)
        return asyncio.to_thread(job)


class _NotAwaitable(Exception):
    pass


def _not_awaitable(fn: Callable[..., Any], value: Any) -> _NotAwaitable:
    name = getattr(fn, "__qualname__", repr(fn))
    return _NotAwaitable(
        f"{name} returned {type(value).__name__}, not an awaitable: call_async and "
        "@breaker on an async def count what an await did; use breaker.call(fn, ...) for a "
        "sync function"
    )
