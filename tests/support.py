"""Small test doubles shared by the suites: a clock moved by hand, stores that fail, a
dependency that counts its calls, and the helpers that build and trip breakers."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, State
from fleetbreaker.errors import StoreError
from fleetbreaker.events import BreakerListener
from fleetbreaker.policy import Policy
from fleetbreaker.record import Record
from fleetbreaker.stores.memory import MemoryStore

T0 = 1_700_000_000_000


class FakeClock:
    """Epoch milliseconds that move only when a test says so."""

    def __init__(self, start_ms: int = T0) -> None:
        self.now = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += round(seconds * 1000)


class FlakyStore(MemoryStore):
    """A MemoryStore that can be switched to raise StoreError on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise StoreError("store is down (test)")

    def load(self, name: str, now_ms: int) -> Any:
        self._check()
        return super().load(name, now_ms)

    def record_failure(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().record_failure(*args, **kwargs)

    def claim_probe(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().claim_probe(*args, **kwargs)

    def settle_probe(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().settle_probe(*args, **kwargs)

    def force_state(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().force_state(*args, **kwargs)

    def report(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().report(*args, **kwargs)

    def census(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().census(*args, **kwargs)


class Dependency:
    """A protected function whose behaviour a test sets, counting the calls that reach it."""

    def __init__(self) -> None:
        self.calls = 0
        self.failing = False

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        if self.failing:
            raise ConnectionError("dependency down (test)")
        return "ok"


def breaker_on(
    store: Any,
    clock: FakeClock,
    config: BreakerConfig | None = None,
    *,
    name: str = "payment-api",
    listeners: Iterable[BreakerListener] | None = None,
    **settings: Any,
) -> CircuitBreaker:
    """A breaker named ``name`` on ``store``, driven by ``clock``: ``config`` (default
    BreakerConfig()) with ``settings`` replaced; ``listeners`` None keeps the default logger."""
    config = dataclasses.replace(config or BreakerConfig(), **settings)
    return CircuitBreaker(name, store=store, config=config, clock=clock, listeners=listeners)


def trip(breaker: CircuitBreaker, dep: Dependency, times: int | None = None) -> None:
    """Fail ``times`` calls (default: the breaker's threshold) through the breaker; the
    dependency is left failing."""
    dep.failing = True
    for _ in range(breaker.config.failure_threshold if times is None else times):
        with pytest.raises(ConnectionError):
            breaker.call(dep)


def trip_store(store: Any, name: str, policy: Policy, now: int) -> Record:
    """Count failures on ``store`` (each against the record it holds) until the breaker opens;
    the opened record."""
    outcome = None
    for _ in range(policy.failure_threshold):
        outcome = store.record_failure(name, policy, now, store.load(name, now))
        if outcome.transition is not None:
            break
    assert outcome is not None
    assert outcome.transition == (State.CLOSED, State.OPEN)
    assert outcome.record is not None
    record: Record = outcome.record
    return record


def function_reads(source: str, variable: str) -> bool:
    """Whether a function's source reads an environment variable: by name, through
    BreakerConfig.from_env (the BREAKER_* settings), through Powertools (POWERTOOLS_*), or
    through boto3 (AWS_ENDPOINT_URL, its endpoint override for every client), through
    the store factory (the CIRCUIT_BREAKER_* store variables), or through the shared
    breaker_events.transition_listeners (BREAKER_MAPPINGS). AWS_LAMBDA_EXEC_WRAPPER is the
    Lambda runtime's (it starts the ADOT layer's wrapper): it counts when the function picks
    its tracer with default_listeners(), which then finds the provider the wrapper set."""
    from fleetbreaker.config import ENV_FIELDS
    from fleetbreaker.stores import STORE_VARIABLES

    if variable == "AWS_LAMBDA_EXEC_WRAPPER":
        return "default_listeners(" in source
    # The store factory: fleetbreaker.stores.from_env or StoreSettings.from_env (both read
    # every store variable, the Redis store's IAM user and cache included).
    reads_store = "from fleetbreaker.stores import from_env" in source or (
        "StoreSettings.from_env(" in source
    )
    if variable == "AWS_ENDPOINT_URL":
        return "boto3" in source or "Store(" in source or reads_store
    if variable in STORE_VARIABLES:
        return reads_store
    if variable == "BREAKER_MAPPINGS":  # read by functions/shared/breaker_events.py
        return "transition_listeners(" in source
    if variable.startswith("POWERTOOLS_") or f'"{variable}"' in source:
        return True
    from_env = {f"BREAKER_{field.upper()}" for field in ENV_FIELDS}
    return variable in from_env and "BreakerConfig.from_env(" in source


def quiet_rng() -> random.Random:
    """A seeded random source for a count-policy breaker whose test counts store requests.

    Such a breaker turns a refresh into a census write with a chance of its refresh gap
    over 200 s (fleetbreaker.census.census_chance: 1 % for the longest counted gap), drawn
    from its random source. Seeded with 7944, its first 500 draws are all above 2 %: no
    census write in any test that counts requests.
    """
    return random.Random(7944)


@contextlib.contextmanager
def ctrl_c_when(ready: Callable[[], bool], timeout_s: float = 30.0) -> Iterator[None]:
    """Send the main thread a real SIGINT (Ctrl-C) once ``ready()`` holds, from another thread.

    The main thread, blocked in what the block runs (a store call waiting for a server that
    holds its answer), gets the KeyboardInterrupt Python raises for it. ``ready`` is polled
    at most ``timeout_s``; past it nothing is sent, and the block's own checks fail.
    """
    main = threading.main_thread().ident
    assert main is not None
    assert main == threading.get_ident(), "Ctrl-C reaches the main thread only"

    inside = [True]
    lock = threading.Lock()

    def watch() -> None:
        give_up = time.monotonic() + timeout_s
        while not ready():
            if time.monotonic() > give_up:
                return
            time.sleep(0.005)  # polls a condition; moves no clock
        with lock:
            if inside[0]:  # never after the block: a stray Ctrl-C would end the test session
                signal.pthread_kill(main, signal.SIGINT)

    watcher = threading.Thread(target=watch, name="ctrl-c", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            inside[0] = False
        watcher.join(timeout_s)


def in_a_fresh_thread(function: Callable[[], Any]) -> Any:
    """``function()`` run in a new thread, whose exception (or result) it passes on.

    For deep, hot call paths under pytest (moto's request handling, several hundred thousand
    calls): CPython 3.11 keeps each thread's frames in 16 KB chunks and frees a chunk as soon
    as the stack shrinks back out of it, so a hot call that crosses a chunk's edge maps and
    unmaps one each time. Under pytest's own 60-odd frames the DynamoDB stateful machine
    did that 1.3 million times a run (strace), a third of its CPU in the kernel; from a new
    thread's shallow stack, 1 s of its 19 s.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fresh") as pool:
        return pool.submit(function).result()


def load_file(path: Path, name: str) -> ModuleType:
    """The Python file at ``path`` as a module named ``name``: a script (scripts/, bench/)
    that is not in a package, loaded by the tests that check it."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None, path
    assert spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# How long a wait for another thread or process to reach a point may take before the test
# gives up. A liveness guard, not a speed claim: it only turns a hang into a failure that
# names what never happened, long before pytest's own timeout would.
GIVE_UP_S = 120.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` if it never does.

    For waits on work the test does not control (an execution in moto's Step Functions, a
    child process). The give-up is GIVE_UP_S whatever the wait: a test that must show how
    quickly something happens asserts a deadline the code enforces, never this.
    """
    give_up = time.monotonic() + GIVE_UP_S
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up after {GIVE_UP_S:g} s: {what}")
        time.sleep(0.01)  # polls a condition; moves no clock
