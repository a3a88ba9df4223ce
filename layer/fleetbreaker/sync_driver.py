"""The sync driver: runs a call through the core on the caller's thread.

Each store request the core returns is handed back to it inline (``core.send``), which sends
it on the caller's thread and takes what the store answered. The fast path: while
the cached record says closed, fresh and past the recovery ramp
(:attr:`fleetbreaker.view.RecordCache.healthy`), a call is admitted by one clock read and one
comparison (and told to the listeners that watch decisions), and counted by the strategy in
force.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CoroutineType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from fleetbreaker.calls import Call, CallPath
    from fleetbreaker.view import RecordCache

R = TypeVar("R")


class SyncDriver:
    """One breaker's sync calls (``call``, the decorator on a plain function, ``with``)."""

    def __init__(self, core: CallPath, cache: RecordCache, *, watched: bool) -> None:
        self.core = core
        self._clock = core.clock
        self._cache = cache
        # Listeners that watch decisions hear every call, the fast path's too.
        self._watched = watched

    def run(
        self,
        fn: Callable[..., R],
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
            admission = core.admit(now)
            planned = core.plan(admission, now)
            if planned is None:
                core.reject(admission, fallback)
                assert fallback is not None  # reject() raised without one
                answer: R = fallback(admission, *args, **kwargs)
                return answer
            call = planned
        if call.before is not None:
            core.send(call.before)
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            request = core.raised(call, exc)
            if request is not None:
                core.send(request)
            raise
        except BaseException:
            # SystemExit, KeyboardInterrupt: no verdict on the dependency.
            request = core.interrupted(call)
            if request is not None:
                core.send(request)
            raise
        if type(result) is CoroutineType:
            self._refuse(call, result)
        request = core.returned(call, result)
        if request is not None:
            core.send(request)
        return result

    def enter(self) -> Call:
        """``with breaker:``: admit the block (raising CircuitOpenError when rejected)."""
        core = self.core
        now = self._clock()
        admission = core.admit(now)
        call = core.plan(admission, now)
        if call is None:
            core.refuse(admission)
        if call.before is not None:
            core.send(call.before)
        return call

    def exit(self, call: Call, exc: BaseException | None) -> None:
        """The block ended (``exc``: what it raised, or None)."""
        core = self.core
        if exc is None:
            request = core.returned(call, None)
        elif isinstance(exc, Exception):
            request = core.raised(call, exc)
        else:
            request = core.interrupted(call)
        if request is not None:
            core.send(request)

    def _refuse(self, call: Call, coroutine: Any) -> None:
        # A function that returned a coroutine has not run yet: counting it would count its
        # creation. Close it (no "never awaited" warning) and refuse by name.
        coroutine.close()
        core = self.core
        request = core.interrupted(call)
        if request is not None:
            core.send(request)
        raise TypeError(
            f"{coroutine.__qualname__} returned a coroutine: a sync breaker entry point "
            "cannot count what it does; use `await breaker.call_async(fn, ...)`, or put "
            "@breaker on the `async def`"
        )
