"""Probe leases: a claim, a settle, a release (a cancelled probe's lease given back). Each
returns what the store answered as a value (for the breaker's core); nothing is called back."""

from __future__ import annotations

from fleetbreaker import BreakerConfig, MemoryStore, State
from fleetbreaker.policy import Policy
from fleetbreaker.probes import ProbeLeases
from fleetbreaker.stores.fallback import FallbackStore
from tests.support import T0

CONFIG = BreakerConfig(failure_threshold=1, recovery_timeout=10, recovery_jitter=0.0)
POLICY = Policy.from_config(CONFIG)


class Heard:
    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[object, ...]]] = []

    def emit(self, hook: str, *args: object) -> None:
        self.events.append((hook, args))


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
    )
    return probes, store, heard


def test_a_claim_after_the_open_window_gets_a_token_as_its_answer() -> None:
    probes, _, _ = leases()
    outcome = probes.claim(POLICY, T0 + 10_000, None)
    assert outcome.token is not None
    assert outcome.record is not None
    assert outcome.record.state is State.HALF_OPEN


def test_a_settled_success_closes_and_returns_its_answer_as_a_probes() -> None:
    probes, _, heard = leases()
    token = probes.claim(POLICY, T0 + 10_000, None).token
    assert token is not None
    result, answers = probes.settle(POLICY, token, True, T0 + 10_001, None)
    assert (result.applied, result.state) == (True, State.CLOSED)
    assert ("on_probe", ("dep", True, True)) in heard.events
    [answer] = answers
    assert answer.outcome.record is not None
    assert (answer.outcome.record.state, answer.at_ms, answer.from_probe) == (
        State.CLOSED,
        T0 + 10_001,
        True,
    )


def test_a_release_frees_the_slot_and_counts_nothing() -> None:
    # GIVEN a claimed probe (one slot)
    probes, store, heard = leases()
    token = probes.claim(POLICY, T0 + 10_000, None).token
    assert token is not None
    assert probes.claim(POLICY, T0 + 10_000, None).token is None  # the slot is held
    # WHEN it is released
    result, _ = probes.release(POLICY, token, T0 + 10_001, None)
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
    assert probes.release(POLICY, token, T0 + 10_002, None)[0].applied is False
