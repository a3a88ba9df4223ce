"""Async callers on every kind of store: MemoryStore, DynamoDB (moto) and Redis.

What an awaited call counts, the context managers, cancellation, the half-open race of 100
tasks, slow calls timed by their await, and a slow store stalling no other task.
The store-independent refusals are in tests/unit/test_async_driver.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, State
from tests.contract.conftest import make_store
from tests.support import FakeClock, breaker_on

# moto's in-process backend does not serialise concurrent writes (conftest.ATOMIC_BACKENDS):
# the race of 100 tasks runs against moto's server instead.
ASYNC_BACKENDS = ["memory", "moto", "redis"]
RACE_BACKENDS = ["memory", "moto_server", "redis"]

CONFIG = BreakerConfig(
    failure_threshold=3,
    recovery_timeout=10,
    recovery_jitter=0.0,
    store_deadline_seconds=30,  # a loaded machine's emulator; the deadline has its own tests
)


@pytest.fixture(params=ASYNC_BACKENDS)
def async_store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


@pytest.fixture(params=RACE_BACKENDS)
def race_store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


def on(store: Any, clock: FakeClock, name: str, **settings: Any) -> CircuitBreaker:
    return breaker_on(store, clock, CONFIG, name=name, listeners=[], **settings)


async def failing() -> None:
    await asyncio.sleep(0)
    raise ConnectionError("down (test)")


def test_awaited_failures_open_the_breaker(async_store: Any, clock: FakeClock, name: str) -> None:
    # GIVEN an async def under @breaker on the store
    cb = on(async_store, clock, name)
    guarded = cb(failing)

    # WHEN its awaited call fails three times
    async def main() -> None:
        for _ in range(3):
            with pytest.raises(ConnectionError):
                await guarded()
        # THEN the next is rejected without creating its coroutine
        with pytest.raises(CircuitOpenError):
            await guarded()

    asyncio.run(main())
    assert cb.state is State.OPEN


def test_async_with_and_call_async_count_on_the_store(
    async_store: Any, clock: FakeClock, name: str
) -> None:
    # GIVEN a breaker on the store
    cb = on(async_store, clock, name)

    # WHEN two blocks and one call_async fail
    async def main() -> None:
        for _ in range(2):
            with pytest.raises(ConnectionError):
                async with cb:
                    await failing()
        with pytest.raises(ConnectionError):
            await cb.call_async(failing)

    asyncio.run(main())
    # THEN the fleet's record opened on the three
    assert cb.state is State.OPEN


def test_an_async_fallback_answers_a_rejection(
    async_store: Any, clock: FakeClock, name: str
) -> None:
    cb = on(async_store, clock, name)
    cb.force_open()

    async def later(circuit: Any) -> str:
        return f"later ({circuit.state.value})"

    assert asyncio.run(cb(fallback=later)(failing)()) == "later (forced_open)"


def test_cancelled_calls_count_nothing(async_store: Any, clock: FakeClock, name: str) -> None:
    cb = on(async_store, clock, name, failure_threshold=1)

    @cb
    async def hang() -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        for _ in range(3):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(hang(), 0.05)

    asyncio.run(main())
    assert cb.state is State.CLOSED


def test_a_cancelled_probe_frees_its_slot_at_once(
    async_store: Any, clock: FakeClock, name: str
) -> None:
    # GIVEN an open breaker whose window has ended
    cb = on(async_store, clock, name, failure_threshold=1)
    cb.record(False)
    clock.advance(10)

    async def main() -> str:
        started = asyncio.Event()

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
        # THEN another call wins the slot at once, and its success closes the breaker
        return await cb.call_async(asyncio.sleep, 0, "recovered")

    assert asyncio.run(main()) == "recovered"
    assert cb.state is State.CLOSED


def test_a_hundred_tasks_while_half_open_send_exactly_the_probe_budget(
    race_store: Any, clock: FakeClock, name: str
) -> None:
    # GIVEN an open breaker with two probe slots whose open window has ended
    cb = on(race_store, clock, name, failure_threshold=1, half_open_max_probes=2)
    cb.record(False)
    clock.advance(10)
    reached = 0

    async def main() -> list[Any]:
        release = asyncio.Event()

        @cb
        async def dependency() -> str:
            nonlocal reached
            reached += 1
            await release.wait()  # the probes are in flight while the others arrive
            return "ok"

        tasks = [asyncio.create_task(dependency()) for _ in range(100)]
        while sum(task.done() for task in tasks) < 100 - reached or reached < 2:
            await asyncio.sleep(0.01)
        release.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    # WHEN 100 tasks arrive together
    results = asyncio.run(main())
    # THEN exactly two reached the dependency; the others were rejected
    assert reached == 2
    assert results.count("ok") == 2
    assert sum(isinstance(r, CircuitOpenError) for r in results) == 98


def test_a_slow_await_counts_as_a_slow_call(async_store: Any, clock: FakeClock, name: str) -> None:
    # GIVEN the rate policy, 1 s slow calls at a 50 % threshold, one call enough
    cb = on(
        async_store,
        clock,
        name,
        failure_rate_threshold=0.5,
        slow_call_duration=1.0,
        slow_call_rate_threshold=0.5,
        minimum_calls=1,
    )

    @cb
    async def slow() -> str:
        await asyncio.sleep(0)
        clock.advance(2.0)  # its await took 2 s
        return "ok"

    # WHEN one call's await takes 2 s, THEN the breaker opens on slow calls (it succeeded)
    assert asyncio.run(slow()) == "ok"
    assert cb.state is State.OPEN


class Slow:
    """A store that takes ``seconds`` per request: the latency under test (a thread sleeps
    in it, as one waits for a distant store's answer)."""

    def __init__(self, store: Any, seconds: float) -> None:
        self._store = store
        self._seconds = seconds

    def __getattr__(self, attribute: str) -> Any:
        found = getattr(self._store, attribute)
        if not callable(found) or attribute.startswith("_"):
            return found

        def slowly(*args: Any, **kwargs: Any) -> Any:
            time.sleep(self._seconds)
            return found(*args, **kwargs)

        return slowly


# How long a held request waits for the loop's ticks before it gives up (a failure, never a
# bound on how fast the machine is).
HOLD_GIVE_UP_S = 30.0


class HeldByTheLoop:
    """A store whose every request is held until the event loop has run another task
    ``ticks`` times meanwhile: the latency under test, with no stopwatch. A request made on
    the loop's own thread could never see those ticks (the loop would be stuck in it): it
    gives up after HOLD_GIVE_UP_S and says so, and the test fails."""

    def __init__(self, store: Any, ticks: int) -> None:
        self._store = store
        self._ticks = ticks
        self.ticked = 0
        self.loop_thread: int | None = None
        self.request_threads: list[int] = []
        self.held: list[bool] = []  # per request: the loop ticked while it waited
        self._changed = threading.Condition()

    def tick(self) -> None:
        with self._changed:
            self.ticked += 1
            self._changed.notify_all()

    def __getattr__(self, attribute: str) -> Any:
        found = getattr(self._store, attribute)
        if not callable(found) or attribute.startswith("_"):
            return found

        def held(*args: Any, **kwargs: Any) -> Any:
            self.request_threads.append(threading.get_ident())
            with self._changed:
                wanted = self.ticked + self._ticks
                self.held.append(
                    self._changed.wait_for(lambda: self.ticked >= wanted, timeout=HOLD_GIVE_UP_S)
                )
            return found(*args, **kwargs)

        return held


def test_a_slow_store_stalls_no_other_task(async_store: Any, clock: FakeClock, name: str) -> None:
    # GIVEN a breaker with no cache (every call asks the store) on a store whose every request
    # waits until another task of the event loop has run 3 times
    slow = HeldByTheLoop(async_store, ticks=3)
    cb = on(slow, clock, name, cache_ttl=0, store_deadline_seconds=2 * HOLD_GIVE_UP_S)

    async def ticker(stop: asyncio.Event) -> None:
        slow.loop_thread = threading.get_ident()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            slow.tick()

    async def main() -> list[str]:
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop))

        async def call() -> str:
            return await cb.call_async(asyncio.sleep, 0, "ok")

        # WHEN five calls go through it together, twice over
        results: list[str] = []
        for _ in range(2):
            results += await asyncio.gather(*(call() for _ in range(5)))
        stop.set()
        await ticking
        return results

    results = asyncio.run(main())
    # THEN they all ran; every store request was made off the loop's thread, and the loop ran
    # its other task while each one waited
    assert results == ["ok"] * 10
    assert slow.held
    assert all(slow.held), slow.held
    assert slow.loop_thread not in slow.request_threads


def test_a_shadow_breaker_lets_an_awaited_call_through(
    async_store: Any, clock: FakeClock, name: str
) -> None:
    # GIVEN a breaker the fleet forced open, seen by a shadow breaker on the same record
    on(async_store, clock, name).force_open()
    shadow = on(async_store, clock, name, mode="shadow")

    # WHEN an awaited call comes to the shadow breaker
    async def succeed() -> str:
        await asyncio.sleep(0)
        return "ran"

    # THEN it runs, and counts as a would-be rejection
    assert asyncio.run(shadow.call_async(succeed)) == "ran"
    assert shadow.stats.would_rejects == 1


def test_switched_off_an_awaited_call_never_asks_the_store(
    async_store: Any, clock: FakeClock, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN FLEETBREAKER_DISABLED and a breaker on a store taking 60 s per request
    monkeypatch.setenv("FLEETBREAKER_DISABLED", "true")
    cb = on(Slow(async_store, 60.0), clock, name, failure_threshold=1)

    # WHEN awaited calls fail, THEN they ran, nothing was asked (a request would take 60 s)
    async def main() -> None:
        for _ in range(2):
            with pytest.raises(ConnectionError):
                await cb(failing)()

    asyncio.run(main())
    assert cb.state is State.DISABLED
