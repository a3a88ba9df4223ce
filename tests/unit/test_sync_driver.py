"""The sync driver: the fast path of a closed breaker, the slow path that looks, and how a
call's ending reaches the store (inline)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, MemoryStore, State
from fleetbreaker.events import BreakerListener
from fleetbreaker.record import Decision
from tests.support import Dependency, FakeClock, FlakyStore, breaker_on

CONFIG = BreakerConfig(failure_threshold=2, recovery_timeout=10, recovery_jitter=0.0)


class Decisions(BreakerListener):
    def __init__(self) -> None:
        self.seen: list[Decision] = []

    def on_decision(self, name: str, decision: Decision, state: State) -> None:
        self.seen.append(decision)


def test_a_healthy_call_within_the_cache_makes_no_store_request(clock: FakeClock) -> None:
    # GIVEN a breaker whose first call read the record
    store, dep = FlakyStore(), Dependency()
    breaker = breaker_on(store, clock, CONFIG, listeners=[])
    breaker.call(dep)
    asked = store.calls
    # WHEN 100 more run within cache_ttl
    for _ in range(100):
        breaker.call(dep)
    # THEN none asked the store
    assert (store.calls, dep.calls) == (asked, 101)


def test_a_decision_listener_hears_every_call(clock: FakeClock) -> None:
    # GIVEN a listener of decisions (no fast path for it)
    heard = Decisions()
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[heard])
    for _ in range(3):
        breaker.call(Dependency())
    assert heard.seen == [Decision.ALLOW] * 3


def test_the_fast_path_ends_when_another_call_opens_the_breaker(clock: FakeClock) -> None:
    # GIVEN a closed breaker on the fast path
    dep = Dependency()
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.call(dep)
    # WHEN two failures open it (the answer of the second comes back to the cache)
    dep.failing = True
    for _ in range(2):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    # THEN the next call, within the same cache_ttl, is rejected
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)


def test_a_recovery_ramp_keeps_calls_off_the_fast_path_until_it_ends(clock: FakeClock) -> None:
    # GIVEN a breaker that just recovered, with a 10 s ramp and a draw above every share
    class High(random.Random):
        def random(self) -> float:
            return 0.999

    config = dataclasses.replace(CONFIG, recovery_ramp_seconds=10)
    breaker = CircuitBreaker(
        "payment-api", store=MemoryStore(), config=config, clock=clock, listeners=[], rng=High()
    )
    breaker.force_open()
    breaker.reset()
    # THEN calls are judged by the ramp (not admitted blindly) until it ends
    assert breaker.check().decision is Decision.REJECT
    clock.advance(10)
    assert breaker.call(lambda: "ran") == "ran"


def test_a_fallback_answers_a_rejection(clock: FakeClock) -> None:
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.force_open()
    answer = breaker(fallback=lambda circuit, x: f"later {x}")(lambda x: x)
    assert answer("o-1") == "later o-1"


def test_a_keyboard_interrupt_counts_nothing(clock: FakeClock) -> None:
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[], failure_threshold=1)

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        breaker.call(interrupted)
    assert breaker.state is State.CLOSED


def opened(clock: FakeClock) -> CircuitBreaker:
    """A breaker whose open window just ended: the next call probes (one slot)."""
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    breaker.record(False)
    breaker.record(False)
    clock.advance(10)
    return breaker


def test_an_interrupted_probe_gives_its_slot_back(clock: FakeClock) -> None:
    # GIVEN a probing call interrupted by Ctrl-C
    breaker = opened(clock)

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        breaker.call(interrupted)
    # THEN the slot is free at once: the next call probes and closes the breaker
    assert breaker.call(lambda: "ok") == "ok"
    assert breaker.state is State.CLOSED


def test_a_with_block_probes_and_settles(clock: FakeClock) -> None:
    breaker = opened(clock)
    with breaker:
        pass
    assert breaker.state is State.CLOSED


def test_an_interrupted_with_block_gives_its_probe_slot_back(clock: FakeClock) -> None:
    breaker = opened(clock)
    with pytest.raises(KeyboardInterrupt), breaker:
        raise KeyboardInterrupt
    assert breaker.check().decision is Decision.PROBE


def test_a_coroutine_returned_to_a_probe_gives_its_slot_back(clock: FakeClock) -> None:
    breaker = opened(clock)

    async def fetch() -> str:
        return "ok"

    with pytest.raises(TypeError, match="returned a coroutine"):
        breaker.call(lambda: fetch())
    assert breaker.check().decision is Decision.PROBE


def test_a_with_block_sends_a_report_that_is_due_first(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with a tallied call whose report is due
    store = MemoryStore()
    rate = BreakerConfig(failure_rate_threshold=0.5, recovery_jitter=0.0)
    breaker = breaker_on(store, clock, rate, listeners=[])
    breaker.call(lambda: "ok")
    clock.advance(5)
    # WHEN a block is entered
    with breaker:
        # THEN the due report went before it ran
        assert breaker_on(store, clock, rate, listeners=[]).snapshot().calls == 1


# -- what the drivers' mutation run found unasserted (issue 43) ---------------------------------


def test_keyword_arguments_reach_the_function(clock: FakeClock) -> None:
    # GIVEN a closed breaker
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])
    # WHEN a call passes positional and keyword arguments
    answer = breaker.call(lambda order, *, region: f"{order} in {region}", "o-1", region="eu")
    # THEN the function got both
    assert answer == "o-1 in eu"


def test_a_coroutine_returned_to_a_sync_entry_is_refused_with_the_remedy(
    clock: FakeClock,
) -> None:
    # GIVEN a sync function that returns a coroutine
    breaker = breaker_on(MemoryStore(), clock, CONFIG, listeners=[])

    async def fetch() -> str:
        return "ok"

    # WHEN the sync entry point runs it
    with pytest.raises(TypeError) as refused:
        breaker.call(lambda: fetch())
    # THEN the error names the coroutine and both ways to await it
    assert str(refused.value) == (
        f"{fetch.__qualname__} returned a coroutine: a sync breaker entry point cannot count "
        "what it does; use `await breaker.call_async(fn, ...)`, or put @breaker on the "
        "`async def`"
    )
