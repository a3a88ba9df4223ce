"""The demo's stores (bench/demo/stores.py): the shared MemoryStore a manager process serves
to every container (``--store memory``), and the WatchedStore between a breaker and its store."""

from __future__ import annotations

import contextlib
import gc
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest
import redis.exceptions
from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

from bench.demo.container import exit_with_parent
from bench.demo.fleet import CTX
from bench.demo.stores import SharedStoreManager, StoreSpec, WatchedStore
from fleetbreaker import BreakerConfig, CircuitBreaker, MemoryStore
from fleetbreaker.errors import StoreError
from fleetbreaker.record import Record
from tests.coverage_scope import children_unmeasured
from tests.support import FakeClock

NAME = "payment-api-shared"
T0 = 1_700_000_000_000
RUNS = 3  # runs a container serves, one after another


class CollectedWhenSent(str):
    """A breaker name that runs the cyclic garbage collector as a store call pickles it: in
    the middle of the call, after the proxy took its connection and before it wrote the
    request, where in a container any allocation may run the collector. It is sent as a
    plain ``str``."""

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        gc.collect()
        return str, (str(self),)


@pytest.fixture(scope="module")
def shared_memory() -> Iterator[StoreSpec]:
    """The shared MemoryStore in a manager process, started as the demo starts it."""
    authkey = os.urandom(16)
    manager = SharedStoreManager(address=("127.0.0.1", 0), authkey=authkey, ctx=CTX)
    with children_unmeasured():  # the manager runs the demo's code only, not the package's
        manager.start(exit_with_parent, (os.getpid(),))
    try:
        address = manager.address
        assert isinstance(address, tuple)
        host, port = address
        yield StoreSpec("memory", f"{host}:{port}", authkey=authkey)
    finally:
        manager.shutdown()


def test_the_last_runs_store_collected_as_garbage_never_breaks_a_call_of_the_next(
    shared_memory: StoreSpec,
) -> None:
    # GIVEN a container that serves runs one after another, each with the store it builds for
    # it; a finished run's store is left in a reference cycle (its handler's and breaker's),
    # which only the cyclic garbage collector frees, whenever it next runs
    enabled = gc.isenabled()
    gc.disable()  # it runs where the test says, never before
    try:
        for _ in range(RUNS):
            finished = shared_memory.build()
            assert finished.load(NAME, T0) is None
            cycle: list[object] = [finished]
            cycle.append(cycle)
            del finished, cycle
            store = shared_memory.build()
            # WHEN the collector runs in the middle of the next run's first store call
            # THEN the call is answered (it raised TypeError from os.write: the finished
            # run's proxy, freed, closed the connection the call was writing to; a noisy
            # demo logged "store load failed" and a container ran on local state)
            assert store.load(CollectedWhenSent(NAME), T0) is None
    finally:
        if enabled:
            gc.enable()


class Raising(MemoryStore):
    """A store whose loads raise ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def load(self, name: str, now_ms: int) -> None:
        raise self.error


def wrapped(error: Exception, cause: Exception) -> Exception:
    """``error`` raised from ``cause``, as a store raises its StoreError from its client's."""
    try:
        raise error from cause
    except Exception as raised:
        return raised


ENDPOINT = "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("error", "name"),
    [
        (TimeoutError("timed out"), "TimeoutError"),
        (ReadTimeoutError(endpoint_url=ENDPOINT), "ReadTimeoutError"),
        (ConnectTimeoutError(endpoint_url=ENDPOINT), "ConnectTimeoutError"),
        (
            wrapped(StoreError("Redis load failed"), redis.exceptions.TimeoutError("Timeout")),
            "StoreError from TimeoutError",
        ),
    ],
)
def test_a_timeout_the_store_raised_is_noted_as_load(error: Exception, name: str) -> None:
    # GIVEN a store that timed out, behind a WatchedStore
    store = WatchedStore(Raising(error))

    # WHEN the breaker loads through it, THEN the breaker gets the error
    with pytest.raises(type(error)):
        store.load(NAME, T0)
    # AND it is noted as a timeout, by name, and as no fault
    assert (store.timeouts, store.faults) == ({name: 1}, {})


@pytest.mark.parametrize(
    ("error", "name"),
    [
        (TypeError("'NoneType' object cannot be interpreted as an integer"), "TypeError"),
        (ConnectionRefusedError(111, "Connection refused"), "ConnectionRefusedError"),
        (
            wrapped(StoreError("Redis load failed"), redis.exceptions.ConnectionError("reset")),
            "StoreError from ConnectionError",
        ),
    ],
)
def test_any_other_error_the_store_raised_is_noted_as_a_fault(error: Exception, name: str) -> None:
    # GIVEN a store that raised an error that is no timeout, twice
    store = WatchedStore(Raising(error))
    for _ in range(2):
        with pytest.raises(type(error)):
            store.load(NAME, T0)

    # THEN it is noted as a fault, by name, twice
    assert (store.faults, store.timeouts) == ({name: 2}, {})


def test_a_fault_that_put_the_breaker_on_local_state_is_noted() -> None:
    # GIVEN a breaker on a WatchedStore whose store raises TypeError, as a container's is
    store = WatchedStore(Raising(TypeError("'NoneType' object cannot be interpreted")))
    breaker = CircuitBreaker(NAME, store=store, clock=FakeClock())

    # WHEN the breaker reads its record, THEN it runs on local state
    assert breaker.state.value == "closed"
    assert breaker.stats.degradations == 1
    # AND the error that put it there is noted as a fault
    assert store.faults == {"TypeError": 1}


class Down(Exception):
    """The dependency's failure."""


def drive(breaker: CircuitBreaker, store: Any, clock: FakeClock) -> list[Record | None]:
    """Twenty minutes of one call every 0.4 s, every fifth failing (refreshes, census writes and
    failure writes, short of a trip): the record after each call."""

    def call(fails: bool) -> None:
        if fails:
            raise Down()

    seen = []
    for step in range(3_000):
        clock.advance(0.4)
        with contextlib.suppress(Down):
            breaker.call(call, step % 5 == 0)
        seen.append(store.load(breaker.name, clock()))
    return seen


def test_a_breaker_on_a_watched_store_writes_what_it_writes_on_the_store_itself(
    shared_memory: StoreSpec,
) -> None:
    # GIVEN two count-policy breakers alike (clock, random source, container id): one on a
    # MemoryStore, one on a WatchedStore around the demo's shared store, as a container's is
    config = BreakerConfig(failure_threshold=10_000, window_seconds=600)
    name = f"{NAME}-fidelity-{os.getpid()}"
    histories = []
    for store in (MemoryStore(), WatchedStore(shared_memory.build())):
        clock = FakeClock()
        breaker = CircuitBreaker(
            name,
            store=store,
            config=config,
            clock=clock,
            rng=random.Random(7),
            container_id="container-1",
            listeners=[],
        )
        # WHEN both see the same calls at the same times
        histories.append(drive(breaker, store, clock))
        assert breaker.stats.degradations == 0

    # THEN the watched one wrote what the bare store's did, census writes included
    bare, watched = histories
    assert any(record is not None and record.census for record in bare)
    assert watched == bare
