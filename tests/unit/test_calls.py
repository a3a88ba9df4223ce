"""A call's ticket: what it holds, and the one object a healthy closed call shares."""

from __future__ import annotations

from fleetbreaker import BreakerConfig, MemoryStore
from fleetbreaker.calls import COUNTED, PROBING, SHADOW_PROBING, UNCOUNTED, Call
from tests.support import FakeClock, breaker_on


def test_the_kinds_are_distinct_words() -> None:
    assert len({COUNTED, PROBING, SHADOW_PROBING, UNCOUNTED}) == 4


def test_a_call_holds_what_ends_it() -> None:
    call = Call(PROBING, token="abc")
    assert (call.kind, call.counting, call.ticket, call.token, call.before) == (
        PROBING,
        None,
        None,
        "abc",
        None,
    )


def test_a_call_has_no_room_for_anything_else() -> None:
    call = Call(COUNTED)
    try:
        call.extra = 1  # type: ignore[attr-defined]
    except AttributeError:
        return
    raise AssertionError("a Call took an attribute it does not declare")


def test_healthy_count_policy_calls_share_one_ticket(clock: FakeClock) -> None:
    # The hot path allocates nothing: a closed call with nothing to time or send first.
    breaker = breaker_on(MemoryStore(), clock, BreakerConfig(), listeners=[])
    core = breaker._core
    assert core.closed(clock()) is core.closed(clock())


def test_a_timed_call_gets_its_own_ticket(clock: FakeClock) -> None:
    config = BreakerConfig(failure_rate_threshold=0.5, slow_call_duration=1.0)
    core = breaker_on(MemoryStore(), clock, config, listeners=[])._core
    first, second = core.closed(clock()), core.closed(clock())
    assert first is not second
    assert first.ticket != second.ticket
