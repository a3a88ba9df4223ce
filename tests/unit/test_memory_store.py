"""MemoryStore.seed, the helper that starts a local breaker from the fleet's view: a record
replaces the stored one wholesale, None removes it (and is no error where there is none)."""

from __future__ import annotations

from fleetbreaker import MemoryStore, State
from fleetbreaker.record import Record

T0 = 1_700_000_000_000


def test_seeding_none_removes_the_stored_record() -> None:
    store = MemoryStore()
    store.seed("payment-api", Record(State.OPEN, gen=1, expires_at=T0 // 1000 + 3600))

    store.seed("payment-api", None)

    assert store.load("payment-api", T0) is None


def test_seeding_none_where_there_is_no_record_leaves_none() -> None:
    store = MemoryStore()

    store.seed("payment-api", None)

    assert store.load("payment-api", T0) is None
