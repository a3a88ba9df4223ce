"""What a breaker answers its caller: an admission for a call, a result for a recorded outcome.

The package's result types, from the rules up:

- :class:`~fleetbreaker.record.Decision`: allow, probe or reject, the one word every layer uses;
- :class:`~fleetbreaker.rules.Verdict`: what the rules make of a record at a time (decision,
  state, wait in ms): it says nothing about who asked;
- :class:`~fleetbreaker.record.Outcome`: what one store operation wrote and the record it left;
- :class:`Admission`: the breaker's answer to one call, a verdict plus what only the breaker
  knows (its name, the probe's lease token, degraded mode, shadow mode), with the wait in
  seconds, as Retry-After and :class:`~fleetbreaker.errors.CircuitOpenError` give it;
- :class:`RecordResult`: what :meth:`CircuitBreaker.record` did with an outcome.
"""

from __future__ import annotations

from fleetbreaker.frozen import mutable_value, public_value
from fleetbreaker.record import Decision, State


@mutable_value  # a dataclass without generated code (cold start)
class StoreErrorStats:
    """A breaker's counters in this container (``breaker.stats``, kept by its
    :class:`~fleetbreaker.stores.fallback.FallbackStore`): store errors, degradations,
    corrupt records and shadow mode's would-be rejections. It counts no calls."""

    store_errors: int = 0
    degradations: int = 0
    corrupt_records: int = 0
    # Shadow mode: calls an enforcing breaker would have rejected (counted by the breaker).
    would_rejects: int = 0


@public_value
class Admission:
    """The breaker's answer for one call.

    ``retry_after_s``: for a rejection, seconds until the breaker may admit calls again.

    ``token`` is set for a probe: pass it back to :meth:`CircuitBreaker.record` (it is what a
    Step Functions workflow carries between the gate's check and record steps).

    ``shadow`` is set in shadow mode when an enforcing breaker would not simply have allowed
    the call: ``reject`` (the call runs anyway) or ``probe`` (it runs without a lease, and
    its outcome settles a probe only after it finished). ``decision`` is then ``allow``.
    """

    name: str
    decision: Decision
    state: State
    retry_after_s: float = 0.0
    token: str | None = None
    degraded: bool = False
    shadow: Decision | None = None

    def __init__(
        self,
        name: str,
        decision: Decision,
        state: State,
        retry_after_s: float = 0.0,
        token: str | None = None,
        degraded: bool = False,
        shadow: Decision | None = None,
    ) -> None:
        # Written out: every rejection is one, and frozen's shared __init__ costs twice
        # this. The fields in order, with their defaults (tests/unit/test_frozen.py).
        self.__dict__.update(
            name=name,
            decision=decision,
            state=state,
            retry_after_s=retry_after_s,
            token=token,
            degraded=degraded,
            shadow=shadow,
        )

    @property
    def would_reject(self) -> bool:
        """Shadow mode: an enforcing breaker would have rejected this call."""
        return self.shadow is Decision.REJECT

    @property
    def allowed(self) -> bool:
        return self.decision is not Decision.REJECT


@public_value
class RecordResult:
    """What :meth:`CircuitBreaker.record` did with an outcome."""

    applied: bool
    state: State
    detail: str
