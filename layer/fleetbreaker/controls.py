"""What sets a breaker up and steers it while it runs: the environment, operators'
overrides and live tuning.

An override (forced open, disabled, reset) goes to the store or fails loudly: a silent local
override would leave the rest of the fleet unaware of it. Live-tuned settings travel with the
record: a container adopts them with the answer that brings them, within ``cache_ttl``, and
the hot path reads plain attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from fleetbreaker import state as rules
from fleetbreaker.config import BreakerConfig
from fleetbreaker.errors import ConfigError
from fleetbreaker.events import StateChange
from fleetbreaker.naming import container_key
from fleetbreaker.state import Policy, State
from fleetbreaker.stores.base import AdminStore

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Mapping

    from fleetbreaker.breaker import CircuitBreaker
    from fleetbreaker.cache import RecordCache
    from fleetbreaker.refresh import Census
    from fleetbreaker.reporting import Reporter
    from fleetbreaker.shadow import ShadowMode
    from fleetbreaker.state import Record
    from fleetbreaker.stores.base import Store
    from fleetbreaker.stores.fallback import FallbackStore


class OperatorControls:
    """:class:`~fleetbreaker.breaker.CircuitBreaker`'s environment, overrides and tuning."""

    # Set by CircuitBreaker.__init__.
    name: str
    config: BreakerConfig
    store: Store
    container_id: str
    clock: Callable[[], int]
    rng: random.Random
    _store: FallbackStore
    _cache: RecordCache
    _policy: Policy
    _shadow: ShadowMode | None
    _reporter: Reporter | None
    _reporting: Reporter | None
    _census: Census | None
    _tuned_text: str
    _emit: Callable[..., None]
    _judge: Callable[[Any], bool]
    _state_of: Callable[[Record | None], State]
    _observe: Callable[[Record | None], None]

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
        breaker = cast("type[CircuitBreaker]", cls)
        return breaker(name, store=store_from_env(environ), config=config)

    @property
    def mode(self) -> str:
        """``"enforce"`` or ``"shadow"``: the config's mode, or the fleet's live-tuned one."""
        return "shadow" if self._shadow is not None else "enforce"

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

    def _retune(self, text: str) -> None:
        # Live tuning is rare: its module loads when a record first carries settings.
        from fleetbreaker.tuning import retuned

        config = retuned(self.config, text, self.name)
        # Policy before text: a thread that sees the new text must also see its policy.
        policy = Policy.from_config(config)
        self._adopt_reporting(config, policy)
        self._policy = policy
        self._adopt_mode(config)
        self._tuned_text = text

    def _adopt_reporting(self, config: BreakerConfig, policy: Policy) -> None:
        """Tally and report calls (rate policy, slow calls, quorum) as ``config`` says."""
        reporter = self._reporter
        if reporter is None:
            if not config.reporting:
                return
            from fleetbreaker.reporting import Reporter

            reporter = self._reporter = Reporter(
                self.name,
                self._store,
                self._cache,
                self.config,
                clock=self.clock,
                rng=self.rng,
                container_key=container_key(self.container_id),
                emit=self._emit,
                judge=self._judge,
            )
        self._reporting = reporter if reporter.adopt(config, policy) else None

    def _adopt_mode(self, config: BreakerConfig) -> None:
        """Shadow or enforce, as ``config`` (or live tuning) says."""
        self._shadow = self._shadow_mode() if config.shadow else None

    def _shadow_mode(self) -> ShadowMode:
        # A call admitted in shadow mode finishes in it, even if tuning switched meanwhile.
        from fleetbreaker.shadow import ShadowMode

        return self._shadow or ShadowMode(cast("CircuitBreaker", self))

    def _force(self, target: State, reason: str | None = None, by: str | None = None) -> State:
        # Operator actions go to the store or fail loudly: a silent local override would
        # leave the rest of the fleet unaware of it.
        now = self.clock()
        if reason is None and by is None:
            outcome = self._store.force_state(self.name, self._policy, now, target)
        else:
            from fleetbreaker import tuning

            if not isinstance(self.store, AdminStore):
                raise ConfigError(
                    f"{type(self.store).__name__} cannot record who forced a breaker and why"
                )
            action = tuning.operator_action(target.value, reason, by, now)
            outcome = self._store.force_state(self.name, self._policy, now, target, action=action)
        if outcome.transition is not None:
            self._emit("on_transition", self.name, *outcome.transition)
            gen = outcome.record.gen if outcome.record is not None else 0
            change = StateChange(*outcome.transition, gen, rules.TransitionReason.OPERATOR)
            self._emit("on_state_change", self.name, change)
        return self._state_of(outcome.record)

    def _answered(self, record: Record | None, now: int) -> None:
        # Every shared-store answer refreshes the cache (fresh longer for a large fleet:
        # refresh.refresh_ms); local answers never do.
        reporting = self._reporting
        census = self._census
        if reporting is not None:
            fresh: int | None = reporting.fresh_ms(record, now)
        elif census is not None:
            fresh = census.fresh_ms(record, self._policy, now)
        else:
            fresh = None
        self._cache.put(record, now, fresh)
        self._observe(record)
        # Live tuning travels with the record: a container applies it with the answer that
        # brings it, within cache_ttl, and the hot path reads a plain attribute.
        seen = self._cache.last_seen
        text = seen.tuned if seen is not None else ""
        if text != self._tuned_text:
            self._retune(text)
