"""The circuit breaker: its entry points, its wiring, and what steers it.

One call through the breaker, file by file (docs/architecture.md, "One call"):

1. an entry point here (:meth:`CircuitBreaker.call`, the decorator, ``with``; on async code
   :meth:`CircuitBreaker.call_async`, the decorator on an ``async def``, ``async with``)
   hands the call to a driver: :mod:`fleetbreaker.sync_driver` or
   :mod:`fleetbreaker.async_driver`;
2. the driver asks the core (:mod:`fleetbreaker.core`) for an admission (the pipeline of
   :mod:`fleetbreaker.admission` over the view of :mod:`fleetbreaker.view`) and a plan, runs
   or awaits the call, and gives the core its ending;
3. the core judges it and returns the store request its counting needs (the strategy of
   :mod:`fleetbreaker.count` or :mod:`fleetbreaker.rate`, a probe's settle through
   :mod:`fleetbreaker.probes`), which the driver hands back to the core to send;
4. every store operation goes through :class:`~fleetbreaker.stores.fallback.FallbackStore`
   (the deadline, degraded mode), which returns its answer as a value to whoever asked; the
   asker returns it up, with its result, to the core, which takes every answer in one place
   (:meth:`CallCore.answered`: the cache, the strategy, live tuning). No part below the
   core holds a way back into it or the breaker.

The breaker builds the parts once, owns the operator overrides (``force_open``,
``disable``, ``reset``), ``from_env``, the refusals of async code at a sync entry point, and
what a snapshot of the process needs (``flush`` before it, ``restart`` after a restore:
:mod:`fleetbreaker.restore`).
"""

from __future__ import annotations

import functools
import math
import os
import random
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar, overload

from fleetbreaker.admission import AdmissionPipeline, Shadow
from fleetbreaker.classify import OutcomeJudge
from fleetbreaker.clock import system_clock
from fleetbreaker.config import BreakerConfig
from fleetbreaker.core import CallCore
from fleetbreaker.count import CountStrategy
from fleetbreaker.counting import CountingContext
from fleetbreaker.errors import ConfigError, InvalidTokenError
from fleetbreaker.events import BreakerListener, Hooks, LoggingListener
from fleetbreaker.live import LiveTuning
from fleetbreaker.naming import (
    container_key,
    process_container_id,
    validate_container_id,
    validate_name,
)
from fleetbreaker.probes import ProbeLeases
from fleetbreaker.record import Decision, State
from fleetbreaker.results import Admission, RecordResult, StoreErrorStats
from fleetbreaker.rules import lease_slot
from fleetbreaker.stores.fallback import FallbackStore
from fleetbreaker.switch import announce, switched_off
from fleetbreaker.sync_driver import SyncDriver
from fleetbreaker.view import RecordCache, RecordView

if TYPE_CHECKING:
    from collections.abc import Awaitable, Coroutine, Mapping
    from typing import ParamSpec, Protocol

    from fleetbreaker.async_driver import AsyncDriver
    from fleetbreaker.calls import Call
    from fleetbreaker.core import Heard
    from fleetbreaker.counting import Counting
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Record
    from fleetbreaker.shared_refresh import SharedReads
    from fleetbreaker.snapshot import Snapshot
    from fleetbreaker.stores.base import Store

    P = ParamSpec("P")

    class Decorator(Protocol):
        """What ``@breaker(fallback=...)`` returns: a decorator of sync or async functions."""

        @overload
        def __call__(
            self, fn: Callable[P, Coroutine[Any, Any, R]], /
        ) -> Callable[P, Coroutine[Any, Any, R]]: ...

        @overload
        def __call__(self, fn: Callable[P, R], /) -> Callable[P, R]: ...


R = TypeVar("R")
Clock = Callable[[], int]

# Read on every call: module globals, not enum attributes (see admission.py).
_ALLOW = Decision.ALLOW
_CLOSED, _DISABLED = State.CLOSED, State.DISABLED

_UNSET: Any = object()


class CircuitBreaker:
    """One named breaker, shared by every container that uses the same store and name.

    Parameters
    ----------
    name:
        The dependency this breaker protects, e.g. ``"payment-api"`` (1 to 1024 UTF-8 bytes).
    store:
        Where the fleet's shared state lives: ``DynamoDBStore``, ``RedisStore`` or, for one
        process only, ``MemoryStore``. When omitted: a ``RedisStore`` if
        ``CIRCUIT_BREAKER_REDIS_URL`` is set, else a ``DynamoDBStore`` if
        ``CIRCUIT_BREAKER_TABLE`` is set (see :func:`fleetbreaker.stores.from_env`). The
        breaker wraps it in a :class:`~fleetbreaker.stores.fallback.FallbackStore`: each
        store operation gets ``store_deadline_seconds``, and a store that fails or misses
        it is left alone for ``store_backoff_seconds`` while local state answers.
    config:
        A :class:`BreakerConfig`. When omitted it is read from the ``BREAKER_*`` variables
        (:meth:`BreakerConfig.from_env`), as the store is from ``CIRCUIT_BREAKER_*``; an
        explicit ``config`` ignores them. Precedence: explicit argument, then environment,
        then the documented defaults.
    fallback:
        Called instead of raising :class:`CircuitOpenError` when a call is rejected, as
        ``fallback(circuit, *args, **kwargs)`` where ``circuit`` is the rejecting
        :class:`Admission` and the rest are the call's own arguments.
    listeners:
        Event hooks; defaults to a :class:`LoggingListener`.
    clock, rng:
        Injectable epoch-millisecond clock and random source (tests move time by hand).
        Call durations (slow calls) are measured on this clock too.
    container_id:
        The identity ``min_containers`` counts; default a random id per process (one Lambda
        container is one process). Pass one to run a fleet inside one process. After a
        restored snapshot (:func:`fleetbreaker.after_restore`) the breaker takes the
        process's new id, whatever was passed: it was the snapshot's.
    shared_refresh_dir:
        A directory the processes of one execution environment share, through which they
        share their reads of the record (:mod:`fleetbreaker.shared_refresh`): one store read
        per refresh for the environment instead of one per process, at the same staleness.
        By default the temporary directory on Lambda Managed Instances (several processes
        per environment; not with a ``MemoryStore``, whose records are the process's own),
        none elsewhere. ``None`` turns it off.

    With ``FLEETBREAKER_DISABLED=true`` in the environment (unit tests of your own code),
    every breaker lets every call through and makes no store request
    (:mod:`fleetbreaker.switch`).

    Example
    -------
    >>> breaker = CircuitBreaker("payment-api", store=MemoryStore())
    >>> @breaker
    ... def charge(amount):
    ...     return f"charged {amount}"
    >>> charge(10)
    'charged 10'
    >>> breaker.call(charge, 20)
    'charged 20'
    """

    def __init__(
        self,
        name: str,
        store: Store | None = None,
        config: BreakerConfig | None = None,
        fallback: Callable[..., Any] | None = None,
        *,
        listeners: Iterable[BreakerListener] | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        container_id: str | None = None,
        shared_refresh_dir: str | os.PathLike[str] | None = _UNSET,
    ) -> None:
        self.name = validate_name(name)
        if config is None:
            config = BreakerConfig.from_env()
        elif not isinstance(config, BreakerConfig):
            raise ConfigError(f"config must be a BreakerConfig, got {type(config).__name__}")
        self.config = config
        if fallback is not None and not callable(fallback):
            raise ConfigError(f"fallback must be callable, got {fallback!r}")
        self.fallback = fallback
        off = switched_off()
        if store is None:
            store = _default_store() if not off else _inert_store()
        self.store: Store = store
        self.listeners: list[BreakerListener] = (
            list(listeners) if listeners is not None else [LoggingListener()]
        )
        self.clock: Clock = clock or system_clock
        self.rng = rng or random.Random()
        self.container_id = (
            process_container_id() if container_id is None else validate_container_id(container_id)
        )
        if config.reporting and not callable(getattr(store, "report", None)):
            raise ConfigError(
                f"{type(store).__name__} has no report operation: the rate policy, slow "
                "calls and min_containers need one (every store of this package has it)"
            )
        self._hooks = hooks = Hooks(self.listeners, self.name)
        self._store = guarded = FallbackStore(
            store,
            clock=self.clock,
            backoff_seconds=config.store_backoff_seconds,
            deadline_seconds=config.store_deadline_seconds,
            emit=hooks.emit,
            watch_calls=hooks.watching("on_store_call_start", "on_store_result", "on_store_call"),
        )
        self.stats: StoreErrorStats = self._store.fallback_stats
        tuning = LiveTuning(config, self.name)
        cache_ms = round(config.cache_ttl * 1000)
        ramp_ms = round(config.recovery_ramp_seconds * 1000)
        # The parts are built from locals, never from self: no part holds a way back into
        # the breaker (or its core); their store answers come back up as values.
        name = self.name
        stats = self.stats
        self._view = view = RecordView(
            name,
            guarded,
            RecordCache(cache_ms, ramp_ms),
            wait_s=config.store_deadline_seconds + 1.0,
        )
        self._shared_reads = None if off else self._share_reads(store, shared_refresh_dir)
        self._context = context = CountingContext(
            name,
            guarded,
            view,
            clock=self.clock,
            rng=self.rng,
            container_key=container_key(self.container_id),
            emit=hooks.emit,
            judge=OutcomeJudge(config, name),
            shared=self._shared_reads,
        )
        probes = ProbeLeases(
            name,
            guarded,
            rng=self.rng,
            recovery_jitter=config.recovery_jitter,
            emit=hooks.emit,
        )

        # Whether the store wrapper answers from its local twin now: its property, read with
        # no frame of ours in between (every admission but a healthy call's asks).
        degraded: Callable[[], bool] = functools.partial(getattr, guarded, "degraded")

        pipeline = AdmissionPipeline(
            name,
            probes,
            hooks,
            degraded=degraded,
            ramp_seconds=config.recovery_ramp_seconds,
            rng=self.rng,
        )

        def make_shadow(tuned: BreakerConfig) -> Shadow:
            return Shadow(
                name,
                stats=stats,
                hooks=hooks,
                claim=probes.claim,
                settle=probes.settle,
                lease_ms=max(1, round(tuned.store_deadline_seconds * 2000)),
                degraded=degraded,
            )

        def make_counting(tuned: BreakerConfig, policy: Policy, heard: Heard) -> Counting:
            if tuned.reporting:
                # The rate policy's modules load when a breaker's settings first report.
                from fleetbreaker.rate import RateStrategy

                return RateStrategy(context, tuned, policy, cache_ms, heard)
            return CountStrategy(context, policy, cache_ms)

        self._core = CallCore(
            self.name,
            view=view,
            pipeline=pipeline,
            probes=probes,
            hooks=hooks,
            judge=context.judge,
            tuning=tuning,
            make_counting=make_counting,
            make_shadow=make_shadow,
            clock=self.clock,
        )
        self._tuning = tuning
        self._watched = bool(hooks.decision)
        self._sync = SyncDriver(self._core, view.cache, watched=self._watched)
        self._async: AsyncDriver | None = None  # built by the first async entry point
        # Each `with breaker:` entry's call, per thread and per asyncio task (contextvars):
        # concurrent blocks never share one.
        self._entered: ContextVar[tuple[Call, ...]] = ContextVar(f"fleetbreaker:{name}", default=())
        # Switched off (FLEETBREAKER_DISABLED): never a store request.
        self._off = off
        if off:
            announce(self.name)
        elif config.verify_store:
            # One read at init: a misconfigured store fails the init (ConfigError); an
            # unreachable one (weather) lets it start, degraded.
            now = self.clock()
            self._core.answered(self._store.verify(self.name, now), now)
        # Known to the snapshot hooks (Lambda SnapStart), which the first breaker registers;
        # loaded here, not by `import fleetbreaker`, and never on a call's path.
        from fleetbreaker.restore import track

        track(self)

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, store={type(self.store).__name__})"

    @classmethod
    def from_env(
        cls, name: str, *, environ: Mapping[str, str] | None = None, **config_overrides: Any
    ) -> CircuitBreaker:
        """A breaker whose store and config both come from the environment.

        The store from the ``CIRCUIT_BREAKER_*`` variables (:func:`fleetbreaker.stores.
        from_env`), the config from ``BREAKER_*`` (:meth:`BreakerConfig.from_env`), with
        ``config_overrides`` (classification predicates, for instance) taking precedence
        over the variables. ``environ`` defaults to ``os.environ``.

        Example
        -------
        >>> breaker = CircuitBreaker.from_env(
        ...     "payment-api",
        ...     environ={"CIRCUIT_BREAKER_TABLE": "CircuitBreakers",
        ...              "BREAKER_FAILURE_THRESHOLD": "3"},
        ...     failure_exceptions=(TimeoutError,),
        ... )
        >>> breaker.config.failure_threshold, breaker.config.failure_exceptions
        (3, (<class 'TimeoutError'>,))
        """
        from fleetbreaker.stores import from_env as store_from_env

        config = BreakerConfig.from_env(environ, **config_overrides)
        # Switched off, the breaker never asks a store: none need be named.
        store = None if switched_off() else store_from_env(environ)
        return cls(name, store=store, config=config)

    # -- what the breaker says -------------------------------------------------------------

    @property
    def state(self) -> State:
        """The breaker's state as this container sees it (cached for ``cache_ttl``)."""
        if self._off:
            return _DISABLED
        return _state_of(self._core.read(self.clock()))

    @property
    def degraded(self) -> bool:
        """True while the store is unreachable and the breaker runs on local state."""
        return self._store.degraded

    @property
    def effective_config(self) -> BreakerConfig:
        """The config in force: ``config`` with the fleet's live tuning applied (the record
        carries it; ``config`` is the one the breaker was built with)."""
        return self._tuning.config

    @property
    def mode(self) -> str:
        """``"enforce"`` or ``"shadow"``: the config's mode, or the fleet's live-tuned one."""
        return self._core.mode.name

    def snapshot(self) -> Snapshot:
        """The fleet's view of this breaker, read through the cache.

        State, generation, the sliding window's calls, failures and slow calls, the failing
        containers (up to ``min_containers``), the rates, ``retry_after`` and ``open_until``.
        """
        from fleetbreaker.snapshot import snapshot_of

        now = self.clock()
        record = None if self._off else self._core.read(now)
        mode = self._core.mode
        snapshot = snapshot_of(self.name, record, mode.policy, now, mode.name)
        if self._off:
            from fleetbreaker.frozen import replace

            return replace(snapshot, state=_DISABLED)
        return snapshot

    def report_hung_calls(self) -> int:
        """Report the calls running past ``slow_call_duration`` as slow calls, now.

        The breaker's watcher thread does this every quarter of that duration; a simulation
        or a test with an injected clock calls it after moving the clock. Returns how many
        calls it reported.
        """
        return self._core.report_hung_calls()

    # -- calls -----------------------------------------------------------------------------

    def call(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` through the breaker.

        Raises :class:`CircuitOpenError` when rejected and no fallback is set; otherwise
        returns ``fn``'s result (or the fallback's) and re-raises ``fn``'s exceptions. A
        coroutine function is refused with a TypeError: its call would count the creation
        of its coroutine, not what the await did (use :meth:`call_async`).
        """
        # _is_async(fn), its common case (a function: its code's flags) written out.
        code = getattr(fn, "__code__", None)
        if code.co_flags & _COROUTINE_FLAGS if code is not None else _is_async(fn):
            raise TypeError(
                f"breaker.call() got the coroutine function {_name_of(fn)}: use "
                "`await breaker.call_async(fn, ...)`, which counts what the await did"
            )
        if self._off:
            return fn(*args, **kwargs)
        return self._sync.run(fn, self.fallback, args, kwargs)

    async def call_async(self, fn: Callable[..., Awaitable[R]], /, *args: Any, **kwargs: Any) -> R:
        """Await ``fn(*args, **kwargs)`` through the breaker: the awaitable counterpart of
        :meth:`call`, counted by what the await did.

        ``fn`` returns an awaitable (an ``async def``, or a function that returns a
        coroutine); a rejected call never calls it. A ``fn`` whose result is not awaitable
        is refused with a TypeError and counted nowhere. The store is asked off the event
        loop (:mod:`fleetbreaker.async_driver`); a cancelled call counts nowhere.

        Example
        -------
        >>> import asyncio
        >>> breaker = CircuitBreaker("payment-api", store=MemoryStore())
        >>> async def charge(amount):
        ...     return f"charged {amount}"
        >>> asyncio.run(breaker.call_async(charge, 10))
        'charged 10'
        """
        if self._off:
            return await fn(*args, **kwargs)
        return await self._async_driver().run(fn, self.fallback, args, kwargs)

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def __call__(
        self, fn: None = None, /, *, fallback: Callable[..., Any] | None = ...
    ) -> Decorator: ...

    def __call__(self, fn: Callable[..., Any] | None = None, /, *, fallback: Any = _UNSET) -> Any:
        """Decorator: ``@breaker`` or ``@breaker(fallback=...)``, on a function, a method or
        an ``async def`` (which stays one: the awaited outcome is what counts)."""
        if fn is not None:
            return self._decorate(fn, self.fallback)
        if fallback is not _UNSET and fallback is not None and not callable(fallback):
            raise ConfigError(f"fallback must be callable, got {fallback!r}")
        chosen = self.fallback if fallback is _UNSET else fallback
        return lambda inner: self._decorate(inner, chosen)

    def __enter__(self) -> CircuitBreaker:
        """``with breaker:`` counts the block as one call; a rejected entry raises
        :class:`CircuitOpenError` (no fallback: the block has no result to replace)."""
        if not self._off:
            call = self._sync.enter()
            self._entered.set((*self._entered.get(), call))
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if not self._off:
            self._sync.exit(self._leave(), exc)

    async def __aenter__(self) -> CircuitBreaker:
        """``async with breaker:``: as ``with``, the store asked off the event loop."""
        if not self._off:
            call = await self._async_driver().enter()
            self._entered.set((*self._entered.get(), call))
        return self

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if not self._off:
            await self._async_driver().exit(self._leave(), exc)

    def _leave(self) -> Call:
        entered = self._entered.get()
        if not entered:
            raise RuntimeError(
                f"breaker {self.name!r} exited a block it did not enter in this thread or task"
            )
        self._entered.set(entered[:-1])
        return entered[-1]

    def check(self, *, probe_seconds: float | None = None) -> Admission:
        """Decide one call without running anything: allow, probe (with a token) or reject.

        Pair it with :meth:`record`. ``call`` and the decorator do both for you.

        ``probe_seconds`` is how long the call may take (its deadline, e.g. a workflow step's
        timeout): should this check win a probe, its lease lasts that long, capped by
        ``probe_lease_seconds``, so callers turned away meanwhile are told to come back at
        the probe's deadline rather than at the end of a whole lease. Default: the lease.
        """
        lease_ms = None
        if probe_seconds is not None:
            if (
                isinstance(probe_seconds, bool)
                or not isinstance(probe_seconds, (int, float))
                or not 0 < probe_seconds < math.inf
            ):
                raise ValueError(f"probe_seconds must be a positive number, got {probe_seconds!r}")
            lease_ms = max(1, round(probe_seconds * 1000))
        if self._off:
            return Admission(self.name, _ALLOW, _DISABLED)
        return self._core.admit(self.clock(), lease_ms)

    def record(self, success: bool, token: str | None = None) -> RecordResult:
        """Report the outcome of a call admitted by :meth:`check`.

        With a probe ``token`` the probe is settled (a token whose lease has ended is a
        no-op, reported with ``applied=False``); without one the outcome is counted by the
        policy (a failure written, or tallied; a success, in closed state, writes nothing).
        """
        now = self.clock()
        if token is not None and (not isinstance(token, str) or lease_slot(token) is None):
            raise InvalidTokenError(f"not a probe token of this package: {token!r}")
        if self._off:
            return RecordResult(False, _DISABLED, "switched off by FLEETBREAKER_DISABLED")
        if token is not None:
            return self._core.settle(token, success, now)
        return self._core.record(success, now)

    def _decorate(self, fn: Any, fallback: Callable[..., Any] | None) -> Any:
        if isinstance(fn, (classmethod, staticmethod)):
            kind = type(fn).__name__
            raise TypeError(
                f"@breaker was applied to a {kind} object: put @breaker below @{kind}, "
                f"next to the function (@{kind} on top)"
            )
        if not callable(fn):
            raise TypeError(f"@breaker needs a function, got {fn!r}")
        off = self._off
        if _is_async(fn):
            driver = self._async_driver()

            @functools.wraps(fn)
            async def protected_async(*args: Any, **kwargs: Any) -> Any:
                if off:
                    return await fn(*args, **kwargs)
                return await driver.run(fn, fallback, args, kwargs)

            protected_async.breaker = self  # type: ignore[attr-defined]
            return protected_async

        run = self._sync.run

        @functools.wraps(fn)
        def protected(*args: Any, **kwargs: Any) -> Any:
            if off:
                return fn(*args, **kwargs)
            return run(fn, fallback, args, kwargs)

        protected.breaker = self  # type: ignore[attr-defined]
        return protected

    def _async_driver(self) -> AsyncDriver:
        driver = self._async
        if driver is None:
            # Loaded with the first async entry point: `import fleetbreaker` stays asyncio-free.
            from fleetbreaker.async_driver import AsyncDriver

            hooks = self._hooks
            driver = self._async = AsyncDriver(
                self._core,
                self._view.cache,
                watched=self._watched,
                handoff=hooks.handed_off if hooks.handoffs else None,
            )
        return driver

    # -- operator overrides ----------------------------------------------------------------

    def force_open(self, *, reason: str | None = None, by: str | None = None) -> State:
        """Operator override: reject every call until :meth:`reset`.

        ``reason`` and ``by`` (default: the local user), when either is given, are stored
        with the record as its last operator action (the store must be an AdminStore).
        """
        return self._force(State.FORCED_OPEN, reason, by)

    def disable(self, *, reason: str | None = None, by: str | None = None) -> State:
        """Operator override: allow every call and record nothing until :meth:`reset`."""
        return self._force(State.DISABLED, reason, by)

    def reset(self, *, reason: str | None = None, by: str | None = None) -> State:
        """Release an override or close the breaker, forgetting failures and back-off."""
        return self._force(State.CLOSED, reason, by)

    def _force(self, target: State, reason: str | None, by: str | None) -> State:
        # Operator actions go to the store or fail loudly: a silent local override would
        # leave the rest of the fleet unaware of it.
        if self._off:
            return _DISABLED
        now = self.clock()
        policy = self._tuning.policy
        if reason is None and by is None:
            outcome = self._store.force_state(self.name, policy, now, target)
        else:
            from fleetbreaker.stores.base import AdminStore
            from fleetbreaker.tuning import operator_action

            if not isinstance(self.store, AdminStore):
                raise ConfigError(
                    f"{type(self.store).__name__} cannot record who forced a breaker and why"
                )
            action = operator_action(target.value, reason, by, now)
            outcome = self._store.force_state(self.name, policy, now, target, action=action)
        self._core.answered(outcome, now)
        return _state_of(outcome.record)

    # -- shared reads ----------------------------------------------------------------------

    def _share_reads(self, store: Store, directory: Any) -> SharedReads | None:
        """The environment's shared reads, when its processes share a directory."""
        # At construction, not import: a cold start's imports stay the healthy path's.
        from fleetbreaker.shared_refresh import (
            SharedCopy,
            SharedReads,
            copy_key,
            environment_directory,
        )

        if directory is _UNSET:
            directory = environment_directory()
            if getattr(store, "process_local", False):
                directory = None  # another process's MemoryStore is another fleet
        if directory is None:
            return None
        copy = SharedCopy(directory, copy_key(store, self.name))
        return SharedReads(self.name, self._store, copy, self._view.cache)

    # -- snapshots of the process ----------------------------------------------------------

    def flush(self, now: int | None = None) -> None:
        """Send what this container has pending now: the rate policy's tally of calls not
        reported yet (the count policy writes each failure as it happens: nothing pends).

        :func:`fleetbreaker.before_snapshot` calls this on every live breaker, so the counts
        of calls made at init reach the fleet's window once, from the process that made
        them, rather than never (restored environments start with an empty tally).
        """
        if self._off:
            return
        self._core.flush(self.clock() if now is None else now)

    def restart(self, now: int | None = None) -> None:
        """Become a new container: a new id and random source, no cached view, every
        schedule drawn afresh, fresh store connections on the next call.

        A Lambda SnapStart restore (and any other snapshot of a live process) resumes many
        execution environments from one memory image: each must stop being the snapshot's
        container. :func:`fleetbreaker.after_restore` calls this on every live breaker,
        after giving the process its new id.

        The id is the process's (:func:`~fleetbreaker.naming.process_container_id`), also for
        a breaker built with a ``container_id`` of its own: that id was the snapshot's, the
        same in every restored environment. The random source, yours too if you passed one,
        is reseeded in place from ``os.urandom``. The tally of calls not reported is dropped
        (:meth:`flush` sent it before the snapshot), and the store wrapper forgets its
        degraded mode and drops the store's connections
        (:meth:`~fleetbreaker.stores.fallback.FallbackStore.restart`).
        """
        at = self.clock() if now is None else now
        # In place: every part holding the random source draws from the new stream.
        self.rng.seed(int.from_bytes(os.urandom(32), "big"))
        self.container_id = process_container_id()
        self._context.become(container_key(self.container_id))
        self._view.forget()
        if self._shared_reads is not None:
            self._shared_reads.copy.forget()
        self._core.restart(at)
        self._store.restart()


# CO_COROUTINE | CO_ITERABLE_COROUTINE (inspect's flags; inspect itself is a cold start's
# milliseconds, loaded only for a callable without code of its own).
_COROUTINE_FLAGS = 0x80 | 0x100


def _is_async(fn: Any) -> bool:
    """Whether ``fn`` is a coroutine function (also a bound method, or a functools.partial
    of one)."""
    code = getattr(fn, "__code__", None)
    if code is not None:
        return bool(code.co_flags & _COROUTINE_FLAGS)
    while isinstance(fn, functools.partial):
        fn = fn.func
    import inspect

    return inspect.iscoroutinefunction(fn)


def _name_of(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _state_of(record: Record | None) -> State:
    return record.state if record is not None else _CLOSED


def _default_store() -> Store:
    from fleetbreaker.stores import from_env

    return from_env()


def _inert_store() -> Store:
    # Switched off without a store: a breaker needs one to hold, never one to ask.
    from fleetbreaker.stores.memory import MemoryStore

    return MemoryStore()
