"""RecordCache on its own: freshness, the newest-generation guard, the one-refresh claim."""

from __future__ import annotations

from typing import Any

from fleetbreaker.record import Record, State
from fleetbreaker.view import RecordCache

TTL_MS = 1_000
T = 50_000  # a "now" well away from 0, so sums and differences of times differ


def record(gen: int, failures: int = 0) -> Record:
    return Record(State.CLOSED, gen=gen, failures=failures, updated_at=T)


def test_a_record_is_fresh_for_its_ttl_and_stale_after() -> None:
    cache = RecordCache(TTL_MS)
    cache.put(record(1), T)

    assert cache.get(T + TTL_MS - 1) == (True, record(1))
    assert cache.get(T + TTL_MS) == (False, None)
    assert cache.last_seen == record(1)  # kept past its freshness


def test_a_ttl_of_zero_turns_caching_off() -> None:
    cache = RecordCache(0)
    cache.put(record(1), T)

    assert cache.get(T) == (False, None)
    assert cache.last_seen == record(1)


def test_a_ttl_of_one_millisecond_still_caches_for_that_millisecond() -> None:
    # GIVEN a 1 ms TTL (cache_ttl=0.001)
    cache = RecordCache(1)
    cache.put(record(1), T)

    # THEN a read in the same millisecond is a hit
    assert cache.get(T) == (True, record(1))


def test_a_slow_answer_of_an_older_generation_does_not_roll_back_a_fresh_newer_one() -> None:
    # GIVEN a fresh entry of generation 5
    cache = RecordCache(TTL_MS)
    cache.put(record(5), T)

    # WHEN an answer of generation 4 arrives in the same millisecond, and later within the TTL
    cache.put(record(4), T)
    cache.put(record(4), T + TTL_MS - 1)

    # THEN the cache keeps generation 5
    assert cache.get(T + TTL_MS - 1) == (True, record(5))


def test_a_later_answer_of_the_same_generation_replaces_the_entry() -> None:
    cache = RecordCache(TTL_MS)
    cache.put(record(5, failures=1), T)

    cache.put(record(5, failures=2), T + 1)

    assert cache.get(T + 1) == (True, record(5, failures=2))


def test_an_older_generation_replaces_an_entry_past_its_ttl() -> None:
    # GIVEN an entry of generation 5 whose TTL has just run out (the store may have been
    # reset: an older generation is then the truth)
    cache = RecordCache(TTL_MS)
    cache.put(record(5), T)

    cache.put(record(4), T + TTL_MS)

    assert cache.get(T + TTL_MS) == (True, record(4))


def test_an_answer_of_no_record_replaces_the_entry() -> None:
    cache = RecordCache(TTL_MS)
    cache.put(record(5), T)

    cache.put(None, T)

    assert cache.get(T) == (True, None)
    assert cache.last_seen is None


def test_one_thread_at_a_time_holds_the_refresh() -> None:
    # GIVEN a claimed refresh, THEN a second claim without a wait is refused at once (it
    # must not block: the claimant would wait on itself), and after the release it succeeds
    cache = RecordCache(TTL_MS)
    assert cache.begin_refresh()

    assert not cache.begin_refresh()

    cache.end_refresh()
    assert cache.begin_refresh()


class RecordingLock:
    """A lock that notes how it was asked for, and grants it."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def acquire(self, **how: Any) -> bool:
        self.asked.append(how)
        return True


def test_a_claim_waits_as_long_as_it_was_told_and_no_longer() -> None:
    # GIVEN a cache whose refresh lock notes how it is acquired
    cache = RecordCache(TTL_MS)
    lock = RecordingLock()
    cache._refreshing = lock  # type: ignore[assignment]

    # WHEN a claim is made with no wait, and with waits of half a second and 30 s
    cache.begin_refresh()
    cache.begin_refresh(0.5)
    cache.begin_refresh(30)

    # THEN the first does not block, the others wait at most what they were told
    assert lock.asked == [{"blocking": False}, {"timeout": 0.5}, {"timeout": 30}]


class ReleasableRecordingLock(RecordingLock):
    def release(self) -> None:
        """Nothing to release: every claim was granted and noted."""


def test_put_returns_the_newest_record_the_cache_holds() -> None:
    # GIVEN a fresh entry of generation 5
    cache = RecordCache(TTL_MS)
    assert cache.put(record(5), T) == record(5)

    # WHEN a slow answer of generation 4 is put, THEN put says generation 5 is what it holds
    # (the core reads live tuning from it: the newest record, as last_seen is)
    assert cache.put(record(4), T + 1) == record(5) == cache.last_seen


def test_the_refresh_steps_claim_and_release_the_lock_as_begin_and_end_refresh_do() -> None:
    # GIVEN the refresh steps a view binds, for a wait and for none
    cache = RecordCache(TTL_MS)
    begin, end = cache.refresh_steps(0.5)
    begin_now, _ = cache.refresh_steps(0)

    # THEN they hold the cache's one refresh claim: claimed by one, refused to the next
    assert begin()
    assert not cache.begin_refresh()
    end()
    assert begin_now()
    assert not begin_now()
    cache.end_refresh()

    # AND they wait as long as they were told, no longer (a wait of 0 never blocks)
    lock = ReleasableRecordingLock()
    cache._refreshing = lock  # type: ignore[assignment]
    cache.refresh_steps(0)[0]()
    cache.refresh_steps(0.5)[0]()
    assert lock.asked == [{"blocking": False}, {"timeout": 0.5}]
