"""Small test doubles shared by the suites: a clock moved by hand, stores that fail, a
dependency that counts its calls, a listener that records every hook, the policy factory,
and the helpers that build and trip breakers."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.util
import inspect
import random
import signal
import sys
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


# The breaker the store-level suites (the store contract, the Redis store) describe: a 10 s
# window, open 5 s and doubling up to 60 s, a 2 s probe lease, records kept an hour.
STORE_CONFIG = BreakerConfig(
    failure_threshold=3,
    window_seconds=10,
    recovery_timeout=5,
    max_recovery_timeout=60,
    probe_lease_seconds=2,
    record_ttl_seconds=3_600,
)


def make_policy(config: BreakerConfig | None = None, /, **overrides: Any) -> Policy:
    """The Policy a breaker derives from ``config`` (default BreakerConfig()) with
    ``overrides`` (BreakerConfig fields) replaced: the same numbers the breaker's stores get.

    Example: ``make_policy(failure_threshold=2, recovery_timeout=10)``,
    ``make_policy(STORE_CONFIG, half_open_max_probes=2)``.
    """
    return Policy.from_config(dataclasses.replace(config or BreakerConfig(), **overrides))


STORE_POLICY = make_policy(STORE_CONFIG)

# Every hook a listener can receive: BreakerListener's on_* methods, read when this module
# loads, so a hook the package adds or drops is recorded without an edit here.
HOOKS: tuple[str, ...] = tuple(name for name in vars(BreakerListener) if name.startswith("on_"))


@dataclasses.dataclass(frozen=True)
class Heard:
    """One hook a listener received: its name, its arguments (positional, in the order
    BreakerListener declares them) and the clock's time (None without a clock)."""

    hook: str
    args: tuple[Any, ...]
    at_ms: int | None = None


class RecordingListener(BreakerListener):
    """A listener that records every hook it receives, in order, from any thread.

    Each of BreakerListener's hooks is overridden (so the breaker calls it), and records a
    :class:`Heard`; keyword arguments are bound to their positions, so a test reads the same
    tuple however the package passes them. ``clock`` (optional) stamps each one.

    Example::

        listener = RecordingListener()
        breaker = breaker_on(store, clock, listeners=[listener])
        ...
        assert listener.count("on_state_change") == 1
    """

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self.heard: list[Heard] = []
        self.clock = clock
        self._lock = threading.Lock()

    def record(self, hook: str, args: tuple[Any, ...]) -> None:
        at_ms = None if self.clock is None else self.clock()
        with self._lock:
            self.heard.append(Heard(hook, args, at_ms))

    def of(self, *hooks: str) -> list[Heard]:
        """What was heard on ``hooks`` (all of them when none is named), in order."""
        unknown = set(hooks) - set(HOOKS)
        assert not unknown, f"no such hook: {sorted(unknown)}"
        with self._lock:
            return [h for h in self.heard if not hooks or h.hook in hooks]

    def args(self, hook: str) -> list[tuple[Any, ...]]:
        """The arguments of each call of ``hook``, in order (the breaker's name first)."""
        return [heard.args for heard in self.of(hook)]

    def values(self, hook: str, parameter: str) -> list[Any]:
        """The argument named ``parameter`` (as BreakerListener names it) of each call of
        ``hook``, in order: ``values("on_decision", "decision")``."""
        parameters = _parameters(hook)
        assert parameter in parameters, f"{hook} has no argument {parameter!r}: {parameters}"
        position = parameters.index(parameter)
        return [args[position] for args in self.args(hook)]

    def count(self, hook: str) -> int:
        """How many times ``hook`` was called."""
        return len(self.of(hook))

    def clear(self) -> None:
        with self._lock:
            self.heard.clear()


def _parameters(hook: str) -> list[str]:
    """The names of ``hook``'s arguments, after ``self``."""
    return list(inspect.signature(getattr(BreakerListener, hook)).parameters)[1:]


def _recorder(hook: str) -> Callable[..., None]:
    signature = inspect.signature(getattr(BreakerListener, hook))
    arity = len(signature.parameters) - 1

    def record(self: RecordingListener, *args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != arity:  # the common case, all positional, skips binding
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            args = bound.args[1:]
        self.record(hook, args)

    record.__name__ = hook
    record.__qualname__ = f"RecordingListener.{hook}"
    record.__doc__ = f"Records {hook} and its arguments."
    return record


for _hook in HOOKS:
    setattr(RecordingListener, _hook, _recorder(_hook))


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


def objects_reachable_from(start: object, limit: int | None = None) -> list[object]:
    """Every object ``start`` holds, followed through gc referents (at most ``limit``).
    Modules, classes and module dicts (a function's globals) are shared by everything: the
    walk stops there. Weak references hold nothing."""
    module_dicts = {id(vars(module)) for module in list(sys.modules.values()) if module}
    seen: set[int] = {id(start)}
    found: list[object] = []
    todo = [start]
    while todo and (limit is None or len(found) < limit):
        for ref in gc.get_referents(todo.pop()):
            if id(ref) in seen or id(ref) in module_dicts:
                continue
            if isinstance(ref, (ModuleType, type)):
                continue
            seen.add(id(ref))
            found.append(ref)
            todo.append(ref)
    return found
