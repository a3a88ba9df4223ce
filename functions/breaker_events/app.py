"""Breaker events: pauses queue consumers while their breaker is open, and announces changes.

Two triggers, one function:

- The CircuitBreakers table's DynamoDB stream (NEW_AND_OLD_IMAGES). A record whose ``state``
  changed is a transition, whichever container's write made it: the mappings registered for
  that breaker are disabled (open, forced open) or enabled (closed, disabled), and a
  "Circuit Breaker State Changed" event goes to EventBridge. Failure counts and probe claims
  change other attributes only and are skipped.
- A schedule (every minute): for each registered breaker, the record is read (one GetItem)
  and the mappings brought to what it wants (``breaker_events.consumers_wanted``). This
  resumes the consumers of a breaker whose open window ended while nobody called it (they
  claim the probe themselves), and repairs a toggle that failed.

Environment
-----------
``BREAKER_MAPPINGS`` (JSON ``{"breaker": ["mapping UUID", ...]}``, may be empty),
``EVENT_BUS_NAME`` (default ``default``), and the store, read by
:func:`fleetbreaker.stores.from_env` as every function reads it: ``CIRCUIT_BREAKER_TABLE``, or
``CIRCUIT_BREAKER_REDIS_URL`` with the cache's IAM login ``CIRCUIT_BREAKER_REDIS_IAM_USER`` and
``CIRCUIT_BREAKER_REDIS_IAM_CACHE`` (the scheduled check then reads Redis; the stream stays
silent, and the containers making transitions publish them through ``TransitionListener``).

A stream batch whose toggle or publication fails raises, so Lambda retries it (at-least-once:
a retried batch may publish an event twice; consumers of the event must tolerate that).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from breaker_events import (
    MappingSwitch,
    StateChangePublisher,
    consumers_wanted,
    parse_registry,
    state_change,
    wanted_in,
)
from fleetbreaker.errors import ConfigError, CorruptRecordError
from fleetbreaker.stores import from_env as stores_from_env

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from fleetbreaker.stores.base import Store

logger = Logger(service="breaker-events")


def wall_clock() -> int:
    return time.time_ns() // 1_000_000


class BreakerEvents:
    """Turns stream records and scheduled checks into mapping toggles and EventBridge events."""

    def __init__(
        self,
        switch: MappingSwitch,
        publisher: StateChangePublisher,
        store: Store | None,
        clock: Callable[[], int] = wall_clock,
    ) -> None:
        self.switch = switch
        self.publisher = publisher
        self.store = store
        self.clock = clock

    def __call__(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        if isinstance(event.get("Records"), list):
            return self.on_stream(event["Records"])
        return self.reconcile()

    def on_stream(self, records: list[Mapping[str, Any]]) -> dict[str, Any]:
        now = self.clock()
        changes = 0
        for record in records:
            try:
                change = state_change(record, now)
            except CorruptRecordError as exc:
                # Not an item this package wrote: nothing to tell anyone.
                logger.warning("unreadable breaker item skipped", extra={"error": str(exc)})
                continue
            if change is None:
                continue
            changes += 1
            logger.info("breaker state changed", extra=change.detail())
            wanted = wanted_in(change.after)
            if wanted is not None:
                self.switch.set(change.breaker, wanted)
            self.publisher.publish(change)
        return {"records": len(records), "state_changes": changes}

    def reconcile(self) -> dict[str, Any]:
        """Bring every registered breaker's mappings to what its record wants now.

        One breaker's trouble never stops the others: a corrupt record reads as closed (as
        every breaker reads it, until the next write replaces it), and a breaker whose read
        or toggle fails is logged and retried by the next run; the run then raises, after
        every other breaker was handled, so the failure shows.
        """
        now = self.clock()
        changed: dict[str, list[str]] = {}
        if self.store is None:
            return {"changed": changed}  # nothing registered: create_handler built no store
        corrupt: list[str] = []
        failed: dict[str, str] = {}
        for breaker in self.switch.registry:
            try:
                try:
                    record = self.store.load(breaker, now)
                except CorruptRecordError as exc:
                    logger.warning(
                        "unreadable breaker record: read as closed",
                        extra={"breaker": breaker, "error": str(exc)},
                    )
                    corrupt.append(breaker)
                    record = None
                wanted = consumers_wanted(record, now)
                if wanted is not None:
                    changed[breaker] = self.switch.set(breaker, wanted)
            except Exception as exc:
                logger.exception("scheduled check failed", extra={"breaker": breaker})
                failed[breaker] = f"{type(exc).__name__}: {exc}"
        if failed:
            raise RuntimeError(
                f"scheduled check failed for {len(failed)} breaker(s) (the others were "
                f"handled: {sorted(changed)}): {failed}"
            )
        return {"changed": changed, "corrupt": corrupt}


def create_handler(
    env: Mapping[str, str] | None = None,
    *,
    clock: Callable[[], int] = wall_clock,
    endpoint_url: str | None = None,
    store: Store | None = None,
) -> BreakerEvents:
    """Build the function's handler from environment variables (tests pass a local endpoint)."""
    import boto3
    from botocore.config import Config

    env = os.environ if env is None else env
    session = boto3.session.Session()
    config = Config(connect_timeout=2, read_timeout=5, retries={"mode": "standard"})
    registry = parse_registry(env.get("BREAKER_MAPPINGS"))
    switch = MappingSwitch(
        session.client("lambda", endpoint_url=endpoint_url, config=config), registry
    )
    publisher = StateChangePublisher(
        session.client("events", endpoint_url=endpoint_url, config=config),
        env.get("EVENT_BUS_NAME", "").strip() or "default",
    )
    if store is None and registry:
        try:
            store = stores_from_env(env, endpoint_url=endpoint_url)
        except ConfigError as exc:
            raise ConfigError(f"BREAKER_MAPPINGS needs the breakers' store: {exc}") from None
    return BreakerEvents(switch, publisher, store, clock)


handler = create_handler()


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handler(event, context)
