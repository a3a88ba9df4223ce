"""Probe leases: a claim, a settle, a release (a cancelled probe's lease given back)."""

from __future__ import annotations

from fleetbreaker import BreakerConfig, MemoryStore, State
from fleetbreaker.policy import Policy
from fleetbreaker.probes import ProbeLeases
from fleetbreaker.record import Outcome
from fleetbreaker.stores.fallback import FallbackStore
from tests.support import T0

CONFIG = BreakerConfig(failure_threshold=1, recovery_timeout=10, recovery_jitter=0.0)
POLICY = Policy.from_config(CONFIG)


class Heard:
    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[object, ...]]] = []
        self.observed: list[object] = []
        self.answers: list[Outcome] = []

    def emit(self, hook: str, *args: object) -> None:
        self.events.append((hook, args))

    def observe(self, record: object) -> None:
        self.observed.append(record)

    def answered(self, answer: Outcome, now_ms: int) -> None:
        self.answers.append(answer)


def leases() -> tuple[ProbeLeases, FallbackStore, Heard]:
    import random

    heard = Heard()
    store = FallbackStore(MemoryStore(), clock=lambda: T0)
    store.record_failure("dep", POLICY, T0, None)
    probes = ProbeLeases(
        "dep",
        store,
        rng=random.Random(1),
        recovery_jitter=0.0,
        emit=heard.emit,
        answered=heard.answered,
        observe=heard.observe,
    )
    return probes, store, heard


def test_a_claim_after_the_open_window_gets_a_token_and_is_observed() -> None:
    probes, _, heard = leases()
    outcome = probes.claim(POLICY, T0 + 10_000, None)
    assert outcome.token is not None
    assert heard.observed == [outcome.record]
    assert heard.answers == [outcome]


def test_a_settled_success_closes_and_is_heard() -> None:
    probes, _, heard = leases()
    token = probes.claim(POLICY, T0 + 10_000, None).token
    assert token is not None
    result = probes.settle(POLICY, token, True, T0 + 10_001, None)
    assert (result.applied, result.state) == (True, State.CLOSED)
    assert ("on_probe", ("dep", True, True)) in heard.events


def test_a_release_frees_the_slot_and_counts_nothing() -> None:
    # GIVEN a claimed probe (one slot)
    probes, store, heard = leases()
    token = probes.claim(POLICY, T0 + 10_000, None).token
    assert token is not None
    assert probes.claim(POLICY, T0 + 10_000, None).token is None  # the slot is held
    # WHEN it is released
    result = probes.release(POLICY, token, T0 + 10_001, None)
    # THEN the record is still half-open with no success counted, and the slot is free
    record = store.load("dep", T0 + 10_001)
    assert result.applied is True
    assert record is not None
    assert (record.state, record.successes) == (State.HALF_OPEN, 0)
    assert probes.claim(POLICY, T0 + 10_002, None).token is not None
    assert not [event for event in heard.events if event[0] == "on_probe"]


def test_a_stale_token_releases_nothing() -> None:
    probes, _, _ = leases()
    token = probes.claim(POLICY, T0 + 10_000, None).token
    assert token is not None
    probes.settle(POLICY, token, False, T0 + 10_001, None)
    assert probes.release(POLICY, token, T0 + 10_002, None).applied is False
