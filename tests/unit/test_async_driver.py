"""The asyncio driver on a MemoryStore: what an awaited call counts, the refusals, the
context managers, cancellation, and what `import fleetbreaker` loads.

The same behaviours on DynamoDB (moto) and Redis: tests/contract/test_async_on_stores.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import json
import subprocess
import sys
import threading
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, MemoryStore, State
from fleetbreaker.events import BreakerListener
from fleetbreaker.record import Decision
from tests.support import FakeClock, FlakyStore, RecordingListener, breaker_on


class AsyncDependency:
    """An awaited dependency whose behaviour a test sets; counts the awaits that reached it."""

    def __init__(self) -> None:
        self.calls = 0
        self.created = 0
        self.failing = False

    def __call__(self, *args: Any) -> Any:
        self.created += 1
        return self._run(*args)

    async def _run(self, *args: Any) -> str:
        await asyncio.sleep(0)
        self.calls += 1
        if self.failing:
            raise ConnectionError("dependency down (test)")
        return "ok"


def breaker(clock: FakeClock, **settings: Any) -> CircuitBreaker:
    settings.setdefault("failure_threshold", 3)
    settings.setdefault("recovery_jitter", 0.0)
    return breaker_on(MemoryStore(), clock, listeners=[], **settings)


# -- the decorator ---------------------------------------------------------------------------


def test_the_decorator_on_an_async_def_returns_a_coroutine_function(clock: FakeClock) -> None:
    # GIVEN an async def under @breaker
    cb = breaker(clock)

    @cb
    async def fetch() -> str:
        return "ok"

    # THEN it stays a coroutine function, and awaiting it gives the result
    assert inspect.iscoroutinefunction(fetch)
    assert asyncio.run(fetch()) == "ok"


def test_awaited_failures_open_the_breaker(clock: FakeClock) -> None:
    # GIVEN an async function under @breaker whose awaited call fails
    cb = breaker(clock)

    @cb
    async def fetch() -> str:
        await asyncio.sleep(0)
        raise ConnectionError("down")

    # WHEN it is awaited as often as the threshold
    async def main() -> None:
        for _ in range(3):
            with pytest.raises(ConnectionError):
                await fetch()

    asyncio.run(main())
    # THEN the breaker counted the awaited failures and opened
    assert cb.state is State.OPEN


def test_a_decorated_async_method_counts_its_awaits(clock: FakeClock) -> None:
    # GIVEN an async method under @breaker
    cb = breaker(clock)

    class Client:
        @cb
        async def get(self) -> str:
            raise ConnectionError("down")

    # WHEN it fails three times
    async def main() -> None:
        client = Client()
        for _ in range(3):
            with pytest.raises(ConnectionError):
                await client.get()

    asyncio.run(main())
    # THEN the breaker opened
    assert cb.state is State.OPEN


def test_a_rejected_call_never_creates_the_coroutine(clock: FakeClock) -> None:
    # GIVEN an open breaker around an async dependency
    cb, dep = breaker(clock), AsyncDependency()
    cb.force_open()
    guarded = cb(dep)

    # WHEN it is awaited
    async def main() -> None:
        with pytest.raises(CircuitOpenError):
            await guarded()

    asyncio.run(main())
    # THEN the dependency's coroutine was never created
    assert dep.created == 0


def test_an_async_fallback_is_awaited(clock: FakeClock) -> None:
    # GIVEN an open breaker whose decorator has an async fallback
    cb = breaker(clock)
    cb.force_open()

    async def cached(circuit: Any, order: str) -> str:
        return f"cached {order} ({circuit.state.value})"

    @cb(fallback=cached)
    async def charge(order: str) -> str:
        return f"charged {order}"

    # THEN a rejected call gets the awaited fallback's result
    assert asyncio.run(charge("o-1")) == "cached o-1 (forced_open)"


def test_a_sync_fallback_serves_an_async_call(clock: FakeClock) -> None:
    cb = breaker(clock)
    cb.force_open()

    @cb(fallback=lambda circuit, order: f"later {order}")
    async def charge(order: str) -> str:
        return f"charged {order}"

    assert asyncio.run(charge("o-2")) == "later o-2"


# -- call_async ----------------------------------------------------------------------------


def test_call_async_counts_what_the_await_did(clock: FakeClock) -> None:
    # GIVEN a failing async dependency
    cb, dep = breaker(clock), AsyncDependency()
    dep.failing = True

    # WHEN it is awaited through call_async three times
    async def main() -> None:
        for _ in range(3):
            with pytest.raises(ConnectionError):
                await cb.call_async(dep, "x")

    asyncio.run(main())
    # THEN it opened on the awaited failures
    assert (cb.state, dep.calls) == (State.OPEN, 3)


def test_call_async_refuses_a_function_whose_result_is_not_awaitable(clock: FakeClock) -> None:
    # GIVEN a sync function
    cb = breaker(clock, failure_threshold=1)

    # WHEN it is given to call_async
    async def main() -> None:
        with pytest.raises(TypeError, match=r"not an awaitable.*breaker\.call\(fn"):
            await cb.call_async(lambda: "sync")

    asyncio.run(main())
    # THEN it counted nothing
    assert cb.state is State.CLOSED


# -- refusals --------------------------------------------------------------------------------


def test_call_refuses_a_coroutine_function_by_name(clock: FakeClock) -> None:
    cb = breaker(clock)

    async def fetch() -> str:
        return "ok"

    with pytest.raises(TypeError, match=r"fetch.*call_async"):
        cb.call(fetch)


def test_a_sync_entry_that_gets_a_coroutine_refuses_it_and_counts_nothing(
    clock: FakeClock,
) -> None:
    # GIVEN a sync function that returns a coroutine (a lambda around an async def)
    cb = breaker(clock, failure_threshold=1)

    async def fetch() -> str:
        raise ConnectionError("down")

    # WHEN the sync entry point runs it
    with pytest.raises(TypeError, match="returned a coroutine"):
        cb.call(lambda: fetch())
    # THEN nothing was counted (the breaker would have opened on a failure)
    assert cb.state is State.CLOSED


@pytest.mark.parametrize("kind", [classmethod, staticmethod])
def test_the_decorator_above_classmethod_is_refused_at_decoration(
    clock: FakeClock, kind: Any
) -> None:
    cb = breaker(clock)
    with pytest.raises(TypeError, match=f"put @breaker below @{kind.__name__}"):

        class Client:
            @cb
            @kind
            def get(cls_or_nothing: Any = None) -> str:
                return "ok"


def test_the_decorator_below_classmethod_works(clock: FakeClock) -> None:
    cb = breaker(clock)

    class Client:
        @classmethod
        @cb
        async def get(cls) -> str:
            return cls.__name__

    assert asyncio.run(Client.get()) == "Client"


# -- the context managers ------------------------------------------------------------------


def test_with_counts_the_block(clock: FakeClock) -> None:
    # GIVEN a breaker, WHEN three blocks raise
    cb = breaker(clock)
    for _ in range(3):
        with pytest.raises(ConnectionError), cb:
            raise ConnectionError("down")
    # THEN it opened, and entering it now raises CircuitOpenError
    assert cb.state is State.OPEN
    with pytest.raises(CircuitOpenError), cb:
        pytest.fail("the block ran while open")


async def failing_block(cb: CircuitBreaker) -> None:
    async with cb:
        await asyncio.sleep(0)
        raise ConnectionError("down")


def test_async_with_counts_the_block(clock: FakeClock) -> None:
    cb = breaker(clock)

    async def main() -> None:
        for _ in range(3):
            with pytest.raises(ConnectionError):
                await failing_block(cb)
        with pytest.raises(CircuitOpenError):
            await cb.__aenter__()

    asyncio.run(main())
    assert cb.state is State.OPEN


def test_concurrent_tasks_keep_their_own_block_entries(clock: FakeClock) -> None:
    # GIVEN a task inside an `async with breaker:` block
    cb = breaker(clock)

    async def main() -> None:
        inside, leave = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with cb:
                inside.set()
                await leave.wait()

        holding = asyncio.create_task(holder())
        await inside.wait()

        # WHEN another task leaves a block it never entered
        async def stranger() -> None:
            await cb.__aexit__(None, None, None)

        # THEN it is told so, and the first task's entry is untouched: it leaves cleanly
        with pytest.raises(RuntimeError, match="did not enter"):
            await asyncio.create_task(stranger())
        leave.set()
        await holding

    asyncio.run(main())


def test_threads_keep_their_own_with_entries(clock: FakeClock) -> None:
    cb = breaker(clock)
    inside = threading.Barrier(2)
    errors: list[BaseException] = []

    def block(fail: bool) -> None:
        try:
            with cb:
                inside.wait(timeout=10)
                if fail:
                    raise ConnectionError("down")
        except ConnectionError:
            pass
        except BaseException as exc:  # a mixed-up entry raises RuntimeError
            errors.append(exc)

    threads = [threading.Thread(target=block, args=(fail,)) for fail in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert cb.snapshot().failures == 1


def test_exiting_a_block_never_entered_is_an_error(clock: FakeClock) -> None:
    cb = breaker(clock)
    with pytest.raises(RuntimeError, match="did not enter"):
        cb.__exit__(None, None, None)


# -- cancellation ---------------------------------------------------------------------------


def test_a_cancelled_call_is_not_a_failure(clock: FakeClock) -> None:
    # GIVEN a breaker that opens on one failure, and a call that never finishes
    cb = breaker(clock, failure_threshold=1)

    @cb
    async def hang() -> None:
        await asyncio.Event().wait()

    # WHEN it is cancelled (a timeout) three times
    async def main() -> None:
        for _ in range(3):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(hang(), 0.01)

    asyncio.run(main())
    # THEN nothing was counted
    assert cb.state is State.CLOSED
    assert cb.snapshot().failures == 0


def test_a_cancelled_probe_frees_its_slot_at_once(clock: FakeClock) -> None:
    # GIVEN an open breaker whose open window has ended (one probe slot)
    cb = breaker(clock, failure_threshold=1, recovery_timeout=10)
    cb.record(False)
    clock.advance(10)
    entered = asyncio.Event

    async def main() -> str:
        started = entered()

        @cb
        async def probe() -> str:
            started.set()
            await asyncio.Event().wait()
            return "never"

        # WHEN the probe is cancelled while it runs
        task = asyncio.create_task(probe())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # THEN the next call, at the same instant, wins the slot and closes the breaker
        return await cb.call_async(asyncio.sleep, 0, "recovered")

    assert asyncio.run(main()) == "recovered"
    assert cb.state is State.CLOSED


# -- what a slow call is ----------------------------------------------------------------------


def test_a_slow_call_is_timed_by_its_await(clock: FakeClock) -> None:
    # GIVEN the rate policy with 1 s slow calls
    cb = breaker(
        clock,
        failure_rate_threshold=0.5,
        slow_call_duration=1.0,
        slow_call_rate_threshold=0.5,
        minimum_calls=1,
    )

    @cb
    async def slow() -> str:
        await asyncio.sleep(0)
        clock.advance(2.0)  # the await took 2 s
        return "ok"

    # WHEN it is awaited
    assert asyncio.run(slow()) == "ok"
    # THEN it counted as a slow call: a call that succeeded opened the breaker
    assert cb.state is State.OPEN


# -- switched off, and the cost of importing ------------------------------------------------


def test_switched_off_an_async_call_runs_and_counts_nothing(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETBREAKER_DISABLED", "true")
    cb = breaker(clock, failure_threshold=1)
    dep = AsyncDependency()
    dep.failing = True

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(ConnectionError):
                await cb(dep)()
        async with cb:
            pass

    asyncio.run(main())
    assert (dep.calls, cb.state) == (2, State.DISABLED)


def test_importing_fleetbreaker_and_a_sync_call_load_no_asyncio() -> None:
    code = (
        "import sys, json\n"
        "from fleetbreaker import CircuitBreaker, MemoryStore\n"
        "b = CircuitBreaker('x', store=MemoryStore(), listeners=[])\n"
        "b(lambda: 1)(); b.call(len, 'a')\n"
        "with b: pass\n"
        "print(json.dumps('asyncio' in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) is False


def test_a_breaker_config_is_accepted_by_the_async_path(clock: FakeClock) -> None:
    # The async path reads the same config as the sync one: BreakerConfig's classification.
    cb = breaker_on(
        MemoryStore(),
        clock,
        BreakerConfig(failure_threshold=1, ignored_exceptions=(KeyError,)),
        listeners=[],
    )

    @cb
    async def lookup() -> None:
        raise KeyError("absent")

    async def main() -> None:
        with pytest.raises(KeyError):
            await lookup()

    asyncio.run(main())
    assert cb.state is State.CLOSED


def opened(clock: FakeClock) -> CircuitBreaker:
    """A breaker whose open window just ended: the next call probes (one slot)."""
    cb = breaker(clock, failure_threshold=1, recovery_timeout=10)
    cb.record(False)
    clock.advance(10)
    return cb


def test_an_async_with_block_probes_and_settles(clock: FakeClock) -> None:
    cb = opened(clock)

    async def main() -> None:
        async with cb:
            await asyncio.sleep(0)

    asyncio.run(main())
    assert cb.state is State.CLOSED


def test_a_cancelled_async_with_block_gives_its_probe_slot_back(clock: FakeClock) -> None:
    # GIVEN a probe running inside `async with`
    cb = opened(clock)

    async def main() -> None:
        started = asyncio.Event()

        async def block() -> None:
            async with cb:
                started.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(block())
        await started.wait()
        # WHEN it is cancelled
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    # THEN its slot is free
    assert cb.check().decision.value == "probe"


def test_a_failing_async_with_probe_reopens(clock: FakeClock) -> None:
    cb = opened(clock)

    async def main() -> None:
        with pytest.raises(ConnectionError):
            await failing_block(cb)

    asyncio.run(main())
    assert cb.state is State.OPEN


def test_an_awaited_call_sends_a_report_that_is_due_first(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with a tallied call whose report is due
    store = MemoryStore()
    rate = BreakerConfig(failure_rate_threshold=0.5, recovery_jitter=0.0)
    cb = breaker_on(store, clock, rate, listeners=[])
    cb.call(lambda: "ok")
    clock.advance(5)

    # WHEN awaited calls and a block follow
    async def main() -> None:
        await cb.call_async(asyncio.sleep, 0)
        clock.advance(5)
        async with cb:
            pass

    asyncio.run(main())
    cb.flush()
    # THEN each call was reported once
    assert breaker_on(store, clock, rate, listeners=[]).snapshot().calls == 3


def test_nested_blocks_end_in_the_order_they_began(clock: FakeClock) -> None:
    # GIVEN a block inside a block of the same breaker
    cb = breaker(clock)

    async def main() -> None:
        async with cb:
            with pytest.raises(ConnectionError):
                await failing_block(cb)  # the inner one fails
        # THEN the outer one ended cleanly: nothing is left entered
        with pytest.raises(RuntimeError, match="did not enter"):
            await cb.__aexit__(None, None, None)

    asyncio.run(main())
    # AND only the inner block's failure was counted
    assert cb.snapshot().failures == 1


# -- what the drivers' mutation run found unasserted (issue 43) ---------------------------------


def test_a_decision_listener_hears_every_awaited_call(clock: FakeClock) -> None:
    # GIVEN a listener of decisions (no silent fast path for it)
    heard = RecordingListener()
    cb = breaker_on(MemoryStore(), clock, listeners=[heard])

    # WHEN three calls are awaited, the last two on the fast path of a fresh cache
    async def main() -> None:
        for _ in range(3):
            await cb.call_async(AsyncDependency())

    asyncio.run(main())
    # THEN each was told to the listener
    assert heard.values("on_decision", "decision") == [Decision.ALLOW] * 3


def test_keyword_arguments_reach_the_awaited_function(clock: FakeClock) -> None:
    cb = breaker(clock)

    async def fetch(order: str, *, region: str) -> str:
        return f"{order} in {region}"

    answer = asyncio.run(cb.call_async(fetch, "o-1", region="eu"))
    assert answer == "o-1 in eu"


def test_keyword_arguments_reach_the_fallback_of_an_awaited_call(clock: FakeClock) -> None:
    # GIVEN an open breaker whose decorated async function has a fallback
    cb = breaker(clock)
    cb.force_open()

    async def later(circuit: Any, order: str, *, region: str) -> str:
        return f"later {order} in {region}"

    @cb(fallback=later)
    async def fetch(order: str, *, region: str) -> str:
        return "now"

    # WHEN it is awaited with keyword arguments, THEN the fallback got them
    assert asyncio.run(fetch("o-1", region="eu")) == "later o-1 in eu"


def test_a_function_that_is_not_async_is_refused_by_name_with_the_remedy(
    clock: FakeClock,
) -> None:
    cb = breaker(clock)

    def total() -> int:
        return 42

    with pytest.raises(TypeError) as refused:
        asyncio.run(cb.call_async(total))
    assert str(refused.value) == (
        f"{total.__qualname__} returned int, not an awaitable: call_async and @breaker on an "
        "async def count what an await did; use breaker.call(fn, ...) for a sync function"
    )


def test_a_callable_without_a_qualname_is_refused_by_its_repr(clock: FakeClock) -> None:
    # GIVEN a partial (no __qualname__) of a sync function
    cb = breaker(clock)
    total = functools.partial(max, 1, 2)
    # WHEN it is awaited through the breaker, THEN the error names it by its repr
    with pytest.raises(TypeError, match=r"^functools\.partial\(<built-in function max>, 1, 2\) "):
        asyncio.run(cb.call_async(total))


def test_an_awaited_result_the_config_calls_a_failure_counts_as_one(clock: FakeClock) -> None:
    # GIVEN a breaker that opens on one failure and calls an "error" result a failure
    cb = breaker(clock, failure_threshold=1, failure_result=lambda result: result == "error")

    async def lookup() -> str:
        return "error"

    # WHEN an awaited call returns "error"
    assert asyncio.run(cb.call_async(lookup)) == "error"
    # THEN it counted as a failure: the breaker opened
    assert cb.state is State.OPEN


def test_a_slow_call_on_the_fast_path_is_timed_from_its_start(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker timing 1 s slow calls, its cache fresh from a first call
    store = MemoryStore()
    timed = BreakerConfig(failure_rate_threshold=0.5, slow_call_duration=1.0)
    cb = breaker_on(store, clock, timed, listeners=[])

    async def fast() -> str:
        return "ok"

    async def slow() -> str:
        clock.advance(2.0)
        return "ok"

    async def main() -> None:
        await cb.call_async(fast)
        # WHEN a call on the fast path takes 2 s
        await cb.call_async(slow)

    asyncio.run(main())
    cb.flush()
    # THEN it counted as one slow call of two
    snapshot = breaker_on(store, clock, timed, listeners=[]).snapshot()
    assert (snapshot.calls, snapshot.slow_calls) == (2, 1)


def test_an_awaited_call_at_the_end_of_the_caches_freshness_asks_the_store(
    clock: FakeClock,
) -> None:
    # GIVEN a breaker whose first awaited call read the record
    store = FlakyStore()
    cb = breaker_on(store, clock, listeners=[])
    dep = AsyncDependency()

    async def main() -> None:
        await cb.call_async(dep)
        asked = store.calls
        # WHEN the next is awaited exactly cache_ttl later (the small fleet's freshness)
        clock.advance(cb.config.cache_ttl)
        await cb.call_async(dep)
        # THEN it asked the store: the cached record is stale from that instant
        assert store.calls > asked

    asyncio.run(main())


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The event loop's default executor, counting what is sent to its threads."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_a_rejection_from_a_fresh_cache_is_decided_on_the_event_loop(clock: FakeClock) -> None:
    # GIVEN an open breaker whose fresh cache holds the open record
    cb = breaker(clock, failure_threshold=1)
    cb.record(False)
    assert cb.state is State.OPEN
    executor = CountingExecutor()

    # WHEN an awaited call is made within cache_ttl
    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(executor)
        with pytest.raises(CircuitOpenError):
            await cb.call_async(AsyncDependency())

    asyncio.run(main())
    # THEN it was rejected without a worker thread: no store request was needed
    assert executor.submitted == 0


def test_an_awaited_block_sends_a_report_that_is_due_before_it_runs(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with a tallied call whose report is due
    store = MemoryStore()
    rate = BreakerConfig(failure_rate_threshold=0.5, recovery_jitter=0.0)
    cb = breaker_on(store, clock, rate, listeners=[])
    cb.call(lambda: "ok")
    clock.advance(5)

    # WHEN a block is entered with async with
    async def main() -> None:
        async with cb:
            # THEN the due report went before it ran
            assert breaker_on(store, clock, rate, listeners=[]).snapshot().calls == 1

    asyncio.run(main())


def test_an_awaited_call_sends_a_report_that_is_due_before_it_runs(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with a tallied call whose report is due
    store = MemoryStore()
    rate = BreakerConfig(failure_rate_threshold=0.5, recovery_jitter=0.0)
    cb = breaker_on(store, clock, rate, listeners=[])
    cb.call(lambda: "ok")
    clock.advance(5)
    reported: list[int] = []

    async def fetch() -> str:
        reported.append(breaker_on(store, clock, rate, listeners=[]).snapshot().calls)
        return "ok"

    # WHEN a call is awaited
    asyncio.run(cb.call_async(fetch))
    # THEN the due report went before it ran
    assert reported == [1]


# -- a trace context held per thread, carried to the worker --------------------------------


class Carrier(BreakerListener):
    """A tracer whose context is held per thread: each handoff carries a numbered marker
    from the awaiting task's thread to the worker that sends the store request."""

    def __init__(self) -> None:
        self.captured_on: list[int] = []
        self.started: list[tuple[str, int | None, int]] = []
        self._here = threading.local()

    def thread_handoff(self) -> Any:
        self.captured_on.append(threading.get_ident())
        marker = len(self.captured_on)

        def run(job: Any) -> Any:
            self._here.marker = marker
            try:
                return job()
            finally:
                self._here.marker = None

        return run

    def on_store_call_start(self, name: str, operation: str) -> None:
        marker = getattr(self._here, "marker", None)
        self.started.append((operation, marker, threading.get_ident()))


def test_each_store_request_of_an_awaited_call_runs_in_a_handoff_taken_on_the_callers_thread(
    clock: FakeClock,
) -> None:
    # GIVEN a breaker with a listener that carries a thread-bound context
    carrier = Carrier()
    cb = breaker_on(MemoryStore(), clock, listeners=[carrier])
    dep = AsyncDependency()
    dep.failing = True

    # WHEN an awaited call fails: a store read to admit it, a write to count it
    async def main() -> int:
        with pytest.raises(ConnectionError):
            await cb.call_async(dep)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    # THEN each was taken on the loop's thread and ran, inside its own, on a worker
    assert carrier.captured_on == [loop_thread, loop_thread]
    assert [(op, marker) for op, marker, _ in carrier.started] == [
        ("load", 1),
        ("record_failure", 2),
    ]
    assert all(thread != loop_thread for _, _, thread in carrier.started)


def test_a_handoff_that_raises_is_logged_and_the_awaited_call_goes_on(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a breaker with a listener whose handoff raises, and one that records
    class Broken(BreakerListener):
        def thread_handoff(self) -> Any:
            raise RuntimeError("tracer broke (test)")

    heard = RecordingListener()
    cb = breaker_on(MemoryStore(), clock, listeners=[Broken(), heard])
    # WHEN an awaited call needs the store
    result = asyncio.run(cb.call_async(AsyncDependency()))
    # THEN it ran, its store read was made, and the failure was logged naming the hook
    assert result == "ok"
    assert [h.hook for h in heard.of("on_store_call_start")] == ["on_store_call_start"]
    assert "thread_handoff" in caplog.text
