"""A breaker's state changes, told to the queue consumers it guards and to EventBridge.

While a breaker is open there is no point polling a queue whose messages it would reject: the
consumer's event source mapping is disabled when the breaker opens and enabled when it closes,
fleet-wide, whichever container's write made the transition. Who notices the transition:

- DynamoDB store: the CircuitBreakers table's stream feeds functions/breaker_events, which
  compares each item's old and new ``state`` (:func:`state_change`).
- Redis store: no stream; the container that made the transition tells the others through a
  :class:`TransitionListener` on its breaker (the example functions add it when
  ``BREAKER_MAPPINGS`` is set).

Either way the same :class:`MappingSwitch` toggles the mappings registered for the breaker
(``BREAKER_MAPPINGS``, JSON ``{"breaker name": ["mapping UUID", ...]}``: the function's IAM
policy names exactly those mappings) and the same :class:`StateChangePublisher` puts a
"Circuit Breaker State Changed" event on EventBridge for alerts.

A breaker nobody calls stays open after its open window (only a caller moves it to half-open),
so a paused consumer would wait forever: :func:`consumers_wanted` also says "resume" for an
open breaker whose window has ended, and the breaker-events function checks that on a
schedule; the consumer's own breaker then claims the probe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetbreaker import BreakerListener, State
from fleetbreaker.stores.dynamodb import parse_item

if TYPE_CHECKING:
    from fleetbreaker import StateChange as BreakerStateChange
    from fleetbreaker.record import Record

DETAIL_TYPE = "Circuit Breaker State Changed"
SOURCE = "fleetbreaker"
# A mapping toggled while it is still updating answers ResourceConflictException; a few
# seconds later the same call succeeds, and the scheduled check catches what was missed.
SETTLED_STATES = frozenset({"Enabled", "Disabled"})

log = logging.getLogger("fleetbreaker.breaker_events")


class RegistryError(ValueError):
    """``BREAKER_MAPPINGS`` is not a JSON object of breaker names to lists of mapping UUIDs."""


def parse_registry(text: str | None) -> dict[str, tuple[str, ...]]:
    """The mappings registered per breaker, from ``BREAKER_MAPPINGS`` (empty when unset).

    Example
    -------
    >>> parse_registry('{"payment-api": ["6f1c0a52-5c1e-4a8e-9d0b-2b9f3c1f7a10"]}')
    {'payment-api': ('6f1c0a52-5c1e-4a8e-9d0b-2b9f3c1f7a10',)}
    """
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        raise RegistryError("BREAKER_MAPPINGS: not valid JSON") from None
    if not isinstance(data, dict):
        raise RegistryError("BREAKER_MAPPINGS: must be a JSON object of breaker name to UUIDs")
    registry: dict[str, tuple[str, ...]] = {}
    for name, uuids in data.items():
        if not isinstance(uuids, list) or not all(isinstance(u, str) and u for u in uuids):
            raise RegistryError(
                f"BREAKER_MAPPINGS: {name!r} must map to a list of event source mapping UUIDs"
            )
        registry[name] = tuple(uuids)
    return registry


# --------------------------------------------------------------------------- deciding


def wanted_in(state: State) -> bool | None:
    """Whether consumers should poll in ``state``; None: leave them as they are.

    Half-open leaves them alone: a probe is in flight, and its outcome (closed or open) is the
    next transition.
    """
    if state in (State.CLOSED, State.DISABLED):
        return True
    if state in (State.OPEN, State.FORCED_OPEN):
        return False
    return None


def consumers_wanted(record: Record | None, now_ms: int) -> bool | None:
    """Whether consumers should poll, given the breaker's record at ``now_ms``.

    Like :func:`wanted_in`, except that a breaker whose open window has ended (open, or
    half-open with every probe lease expired) wants its consumers back: one of them claims the
    probe, so a breaker nobody else calls still recovers.
    """
    if record is None:
        return True  # never tripped, or expired: closed
    if record.state is State.OPEN and now_ms >= record.open_until:
        return True
    if record.state is State.HALF_OPEN:
        return True if all(lease.until <= now_ms for lease in record.leases.values()) else None
    return wanted_in(record.state)


@dataclass(frozen=True)
class StateChange:
    """One breaker moved from ``before`` (None: it had no record) to ``after``."""

    breaker: str
    before: State | None
    after: State
    generation: int | None = None
    open_until_ms: int | None = None

    def detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "breaker": self.breaker,
            "from_state": self.before.value if self.before is not None else None,
            "state": self.after.value,
        }
        if self.generation is not None:
            detail["generation"] = self.generation
        if self.open_until_ms and self.after in (State.OPEN, State.HALF_OPEN):
            detail["open_until_ms"] = self.open_until_ms
        return detail


def state_change(stream_record: Mapping[str, Any], now_ms: int) -> StateChange | None:
    """The state change a CircuitBreakers stream record carries; None when ``state`` is unchanged.

    Raises ``CorruptRecordError`` for an image this package did not write.
    """
    if stream_record.get("eventName") not in ("INSERT", "MODIFY"):
        return None  # REMOVE: TTL deleting an idle (closed) breaker, or an operator's delete
    images = stream_record.get("dynamodb", {})
    new = parse_item(images.get("NewImage"), now_ms)
    old = parse_item(images.get("OldImage"), now_ms)
    if new is None:
        return None
    before = old.state if old is not None else None
    if before is new.state or (before is None and new.state is State.CLOSED):
        return None  # a failure counted, a lease claimed: not a transition
    name = images.get("Keys", {}).get("name", {}).get("S")
    if not isinstance(name, str):
        return None
    return StateChange(name, before, new.state, new.gen, new.open_until)


# --------------------------------------------------------------------------- acting


class MappingSwitch:
    """Enables or disables the event source mappings registered for a breaker."""

    def __init__(self, lambda_client: Any, registry: Mapping[str, tuple[str, ...]]) -> None:
        self.client = lambda_client
        self.registry = dict(registry)

    def set(self, breaker: str, enabled: bool) -> list[str]:
        """Bring the breaker's mappings to ``enabled``; returns the UUIDs it changed."""
        changed = []
        for uuid in self.registry.get(breaker, ()):
            current = self.client.get_event_source_mapping(UUID=uuid)["State"]
            if current == ("Enabled" if enabled else "Disabled"):
                continue
            self.client.update_event_source_mapping(UUID=uuid, Enabled=enabled)
            changed.append(uuid)
            log.info(
                "consumer mapping %s %s for breaker %s",
                uuid,
                "enabled" if enabled else "disabled",
                breaker,
                extra={"breaker": breaker, "mapping": uuid, "enabled": enabled},
            )
        return changed


class StateChangePublisher:
    """Puts "Circuit Breaker State Changed" events on an EventBridge bus."""

    def __init__(self, events_client: Any, bus_name: str = "default") -> None:
        self.client = events_client
        self.bus_name = bus_name

    def publish(self, change: StateChange) -> None:
        answer = self.client.put_events(
            Entries=[
                {
                    "Source": SOURCE,
                    "DetailType": DETAIL_TYPE,
                    "Detail": json.dumps(change.detail()),
                    "EventBusName": self.bus_name,
                }
            ]
        )
        if answer.get("FailedEntryCount"):
            raise RuntimeError(f"EventBridge refused the event: {answer['Entries']}")


class TransitionListener(BreakerListener):
    """For stores without a stream (Redis): the container that made a transition tells the fleet.

    Runs inline in the call that made the transition (once per transition, not per call); a
    failure is logged by the breaker and swallowed, and the scheduled check repairs the
    mapping within a minute.
    """

    def __init__(self, switch: MappingSwitch, publisher: StateChangePublisher | None) -> None:
        self.switch = switch
        self.publisher = publisher

    def on_state_change(self, name: str, change: BreakerStateChange) -> None:
        wanted = wanted_in(change.after)
        if wanted is not None:
            self.switch.set(name, wanted)
        if self.publisher is not None:
            self.publisher.publish(StateChange(name, change.before, change.after))


def transition_listeners(
    env: Mapping[str, str], endpoint_url: str | None = None
) -> list[BreakerListener]:
    """The listener a function's breaker needs when no stream reports its transitions.

    Empty unless ``BREAKER_MAPPINGS`` is set (the template sets it on the functions that make
    transitions only with the Redis store).
    """
    registry = parse_registry(env.get("BREAKER_MAPPINGS"))
    if not registry:
        return []
    import boto3
    from botocore.config import Config

    # Inline in the call that made the transition: keep it short.
    config = Config(connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 2})
    session = boto3.session.Session()
    switch = MappingSwitch(
        session.client("lambda", endpoint_url=endpoint_url, config=config), registry
    )
    publisher = StateChangePublisher(
        session.client("events", endpoint_url=endpoint_url, config=config),
        env.get("EVENT_BUS_NAME", "").strip() or "default",
    )
    return [TransitionListener(switch, publisher)]
