"""The count policy's strategy: a failure is one store request the driver sends; a success
writes nothing; nothing pends (flush has nothing to send)."""

from __future__ import annotations

from fleetbreaker import BreakerConfig, MemoryStore, State
from fleetbreaker.count import CountStrategy
from tests.support import FakeClock, FlakyStore, breaker_on

CONFIG = BreakerConfig(failure_threshold=2, recovery_jitter=0.0)


def strategy(store: MemoryStore, clock: FakeClock) -> CountStrategy:
    counting = breaker_on(store, clock, CONFIG, listeners=[])._core.mode.counting
    assert isinstance(counting, CountStrategy)
    return counting


def test_a_success_is_no_request(clock: FakeClock) -> None:
    counting = strategy(MemoryStore(), clock)
    assert counting.end(None, failed=False) is None


def test_a_failure_is_written_only_when_its_request_is_sent(clock: FakeClock) -> None:
    # GIVEN a count strategy on a store that counts its requests
    store = FlakyStore()
    counting = strategy(store, clock)
    before = store.calls
    # WHEN a failed call ends
    request = counting.end(None, failed=True)
    # THEN nothing was sent; sending it writes one failure, and returns the write's answer
    # with its result (for the breaker's core)
    assert request is not None
    assert store.calls == before
    result, answers = request()
    assert (store.calls, result.applied, result.state) == (before + 1, True, State.CLOSED)
    assert [answer.outcome.record for answer in answers] == [store.load("payment-api", clock())]


def test_nothing_is_due_before_a_call_and_nothing_pends(clock: FakeClock) -> None:
    store = FlakyStore()
    counting = strategy(store, clock)
    before = store.calls
    assert counting.due(clock()) is None
    assert counting.start(clock()) is None
    assert counting.flush(clock()) == ()
    assert store.calls == before


def test_record_counts_a_failure_at_once(clock: FakeClock) -> None:
    store = MemoryStore()
    counting = strategy(store, clock)
    read = unread
    counting.count(False, clock(), read)
    result, _ = counting.count(False, clock(), read)
    assert result.state is State.OPEN


def unread(now_ms: int) -> None:
    raise AssertionError("a failure is written, not read")
