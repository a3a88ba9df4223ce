"""DynamoDB store: one item per breaker, every change one conditional UpdateItem.

Three modules, one job each:

- ``codec``: a raw item to a ``Record`` (``parse_item``) and a planned change to one
  UpdateItem's expressions and conditions (``Write``); pure, no client.
- ``wire``: the client, the botocore hooks that refuse a garbled answer or a blind re-send
  of a count, and the GetItem / UpdateItem / Scan requests with their read-back.
- ``store``: ``DynamoDBStore``, which plans each operation through the rules, fences its
  write on what it observed, and re-plans from the item a lost race returns.
"""

from __future__ import annotations

from fleetbreaker.stores.dynamodb.codec import (
    KEY_ATTRIBUTE,
    OP_ATTRIBUTE,
    TTL_ATTRIBUTE,
    parse_item,
)
from fleetbreaker.stores.dynamodb.store import DynamoDBStore
from fleetbreaker.stores.dynamodb.wire import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUTS,
    check_answer,
    note_looser_client,
    refuse_blind_resend,
)

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUTS",
    "KEY_ATTRIBUTE",
    "OP_ATTRIBUTE",
    "TTL_ATTRIBUTE",
    "DynamoDBStore",
    "check_answer",
    "note_looser_client",
    "parse_item",
    "refuse_blind_resend",
]
