"""With the server's clock (TIME), a container whose own clock is off keeps the server's answer.

The scripts decide on the server's clock, so a container's skew cannot change what the store
does; it could only make the container ask too often. A container whose clock runs 4 s ahead
sees the open window end 4 s early and asks for a probe; the server refuses. It must then
keep that refusal for as long as the server said, not ask again on every call (before: 51
calls, 51 store requests). The breaker's clock is a FakeClock set ahead of this host's clock,
which is redis-server's clock too.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from fleetbreaker import BreakerConfig, CircuitBreaker, Decision, RedisStore, State

MakeStore = Callable[..., RedisStore]
AHEAD_MS = 4_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Clock:
    def __init__(self, start_ms: int) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now


def opened_ahead(make_store: MakeStore, name: str) -> tuple[RedisStore, CircuitBreaker, Clock]:
    """A breaker on the server's clock, opened for 6 s by a container 4 s ahead of it."""
    store = make_store(use_server_time=True)
    clock = Clock(wall_ms() + AHEAD_MS)
    config = BreakerConfig(
        failure_threshold=1,
        recovery_timeout=6,
        recovery_jitter=0.0,
        probe_lease_seconds=3,
        cache_ttl=1.0,
        store_deadline_seconds=30,
    )
    breaker = CircuitBreaker(
        name, store=store, config=config, clock=clock, listeners=[], rng=random.Random(3)
    )
    breaker.record(success=False)
    assert store.load(name, 0).state is State.OPEN  # type: ignore[union-attr]
    return store, breaker, clock


def test_a_container_ahead_of_the_server_asks_once_then_keeps_the_servers_answer(
    make_store: MakeStore, name: str
) -> None:
    # GIVEN a breaker on the server's clock, opened for 6 s by a container 4 s ahead of it
    store, breaker, clock = opened_ahead(make_store, name)

    # WHEN, 2.5 s later on its own clock (the window ended there, not on the server's), it
    # takes 51 calls over the next second
    clock.now += 2_500
    before = store.stats.writes
    answers = []
    for _ in range(51):
        answers.append(breaker.check())
        clock.now += 20

    # THEN every call is rejected, and only the first asked the store for a probe
    assert {a.decision for a in answers} == {Decision.REJECT}
    assert store.stats.writes - before == 1
    # AND the wait it names is the server's: about 6 s from the trip, less the time gone
    assert 2.0 < answers[0].retry_after_s <= 6.0


def test_the_kept_answer_ends_with_the_generation_it_was_given_for(
    make_store: MakeStore, name: str
) -> None:
    # GIVEN the container ahead of the server holds a refusal for this open window
    store, breaker, clock = opened_ahead(make_store, name)
    clock.now += 2_500
    assert breaker.check().decision is Decision.REJECT

    # WHEN an operator resets the breaker and it trips again (a new generation)
    breaker.reset(reason="test")
    breaker.record(success=False)
    clock.now += 6_500  # past the new window on its clock, not on the server's

    # THEN it asks the server again rather than reusing the old answer
    before = store.stats.writes
    assert breaker.check().decision is Decision.REJECT
    assert store.stats.writes - before == 1
