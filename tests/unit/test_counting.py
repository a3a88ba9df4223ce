"""What both strategies share: the counting context (a restored container's new key) and
the strategy interface both implement."""

from __future__ import annotations

from fleetbreaker import BreakerConfig, MemoryStore
from fleetbreaker.count import CountStrategy
from fleetbreaker.counting import Counting
from fleetbreaker.rate import RateStrategy
from tests.support import FakeClock, breaker_on

METHODS = [
    name for name in vars(Counting) if not name.startswith("_") and callable(vars(Counting)[name])
]


def test_both_strategies_implement_the_whole_interface() -> None:
    for strategy in (CountStrategy, RateStrategy):
        missing = [name for name in METHODS if not callable(getattr(strategy, name, None))]
        assert missing == [], strategy.__name__


def test_a_context_becomes_another_container(clock: FakeClock) -> None:
    breaker = breaker_on(MemoryStore(), clock, BreakerConfig(), listeners=[])
    context = breaker._context
    context.become("container-b")
    assert context.container_key == "container-b"


def test_a_context_reads_through_its_store(clock: FakeClock) -> None:
    store = MemoryStore()
    breaker = breaker_on(store, clock, BreakerConfig(failure_threshold=1), listeners=[])
    breaker.record(False)
    record, answers = breaker._context.load(clock())
    assert record is not None
    assert [answer.outcome.record for answer in answers] == [record]
    assert record.state.value == "open"
