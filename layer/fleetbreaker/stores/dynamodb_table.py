"""A breaker table in one call, shaped as template.yaml declares ``CircuitBreakersTable``.

Partition key ``name`` (S), on-demand billing, TTL on the record's TTL attribute
(``expires_at``), encryption at rest with the AWS managed KMS key, and, when asked, a stream
of new and old images (what the stack's BreakerEventsFunction reads). Point-in-time recovery,
a template parameter, is a backup choice and is left to the owner of the table.

``fleetbreaker create-table`` uses :func:`ensure_table`; tests compare :func:`create_request`
and :func:`ttl_request` with the template's properties. Nothing on a breaker's path imports
this module.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from fleetbreaker.errors import StoreError
from fleetbreaker.stores.dynamodb import KEY_ATTRIBUTE, TTL_ATTRIBUTE

BILLING_MODE = "PAY_PER_REQUEST"
STREAM_VIEW_TYPE = "NEW_AND_OLD_IMAGES"
# DynamoDB's rule for table names.
TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
# TTL and SSE statuses that mean "on" (the ...ING ones: AWS is applying it).
TTL_ON = ("ENABLED", "ENABLING")
SSE_ON = ("ENABLED", "ENABLING", "UPDATING")
# How long a new table may take to become ACTIVE, and how often to look.
ACTIVE_TIMEOUT_S = 300.0
POLL_S = 1.0


def create_request(table: str, *, stream: bool = False) -> dict[str, Any]:
    """CreateTable's parameters for a breaker table named ``table``."""
    request: dict[str, Any] = {
        "TableName": table,
        "AttributeDefinitions": [{"AttributeName": KEY_ATTRIBUTE, "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}],
        "BillingMode": BILLING_MODE,
        # Enabled without a key type: the AWS managed key (aws/dynamodb), as in the template.
        "SSESpecification": {"Enabled": True},
    }
    if stream:
        request["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": STREAM_VIEW_TYPE,
        }
    return request


def ttl_request(table: str) -> dict[str, Any]:
    """UpdateTimeToLive's parameters: expire items on the record's TTL attribute."""
    return {
        "TableName": table,
        "TimeToLiveSpecification": {"AttributeName": TTL_ATTRIBUTE, "Enabled": True},
    }


def describe_shape(*, stream: bool) -> str:
    """The shape, in words, for the command's output."""
    words = (
        f"key {KEY_ATTRIBUTE} (S), on-demand, TTL on {TTL_ATTRIBUTE}, encrypted with KMS "
        "(AWS managed key)"
    )
    return words + (f", stream {STREAM_VIEW_TYPE}" if stream else "")


def differences(
    table: Mapping[str, Any], ttl: Mapping[str, Any], *, stream: bool = False
) -> list[str]:
    """How an existing table (DescribeTable's ``Table``, DescribeTimeToLive's description)
    differs from a breaker table; empty when it has that shape.

    A stream is required only when ``stream`` is asked for; any KMS key counts as encrypted.
    """
    found = [
        key_difference(table),
        billing_difference(table),
        ttl_difference(ttl),
        encryption_difference(table),
        stream_difference(table) if stream else None,
    ]
    return [difference for difference in found if difference is not None]


def key_difference(table: Mapping[str, Any]) -> str | None:
    """How the table's key differs from ``name`` (S) alone, or None."""
    types = {
        a.get("AttributeName"): a.get("AttributeType")
        for a in table.get("AttributeDefinitions", [])
    }
    keys = [(k.get("AttributeName"), k.get("KeyType")) for k in table.get("KeySchema", [])]
    if keys == [(KEY_ATTRIBUTE, "HASH")] and types.get(KEY_ATTRIBUTE) == "S":
        return None
    have = ", ".join(f"{name} ({types.get(name)}, {kind})" for name, kind in keys)
    return f"key is {have or 'unknown'}; want {KEY_ATTRIBUTE} (S, HASH) only"


def billing_difference(table: Mapping[str, Any]) -> str | None:
    """How the table's billing differs from on-demand, or None."""
    billing = table.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED")
    if billing == BILLING_MODE:
        return None
    return f"billing mode is {billing}; want {BILLING_MODE} (on-demand)"


def ttl_difference(ttl: Mapping[str, Any]) -> str | None:
    """How the table's TTL (DescribeTimeToLive's description) differs from on, on the
    record's TTL attribute, or None."""
    status, attribute = ttl.get("TimeToLiveStatus"), ttl.get("AttributeName")
    if status not in TTL_ON:
        return f"TTL is {str(status).lower()}; want it on {TTL_ATTRIBUTE}"
    if attribute != TTL_ATTRIBUTE:
        return f"TTL is on {attribute}; want it on {TTL_ATTRIBUTE}"
    return None


def encryption_difference(table: Mapping[str, Any]) -> str | None:
    """How the table's encryption at rest differs from KMS (any key), or None."""
    sse = table.get("SSEDescription") or {}
    if sse.get("Status") in SSE_ON and sse.get("SSEType") == "KMS":
        return None
    have = f"{sse.get('SSEType')} {sse.get('Status')}" if sse else "the AWS owned key"
    return f"encryption at rest uses {have}; want KMS (SSEEnabled)"


def stream_difference(table: Mapping[str, Any]) -> str | None:
    """How the table's stream differs from one of new and old images, or None."""
    spec = table.get("StreamSpecification") or {}
    if spec.get("StreamEnabled") and spec.get("StreamViewType") == STREAM_VIEW_TYPE:
        return None
    view = spec.get("StreamViewType") if spec.get("StreamEnabled") else "off"
    return f"stream is {view}; want {STREAM_VIEW_TYPE}"


class Ensured(NamedTuple):
    """What :func:`ensure_table` found and did."""

    created: bool
    """This call created the table."""
    finished: bool
    """The table existed without its TTL, and with nothing else missing (what a run
    interrupted before it turned the TTL on leaves): this call turned it on."""
    differences: list[str]
    """How the table differs from a breaker table; empty when it has that shape."""


# A breaker table whose TTL is simply off (never turned on, or off and settled).
_TTL_ON = {"TimeToLiveStatus": "ENABLED", "AttributeName": TTL_ATTRIBUTE}


def ensure_table(
    client: Any,
    table: str,
    *,
    stream: bool = False,
    timeout_s: float = ACTIVE_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Ensured:
    """Create the breaker table ``table`` unless it exists.

    A new table gets its TTL once it is ACTIVE. An existing one is compared and its
    differences returned; it is changed only when its TTL is off and nothing else differs,
    what a run interrupted between CreateTable and UpdateTimeToLive leaves: its TTL is turned
    on, so running the command again finishes the table. botocore's ClientError escapes for
    anything else (credentials, permissions, an endpoint without TTL such as dynalite).
    """
    from botocore.exceptions import ClientError

    try:
        client.create_table(**create_request(table, stream=stream))
        created = True
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
            raise
        created = False
    description = wait_until_active(client, table, timeout_s=timeout_s, clock=clock, sleep=sleep)
    finished = False
    if not created:
        ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        finished = ttl.get("TimeToLiveStatus") == "DISABLED" and not differences(
            description, _TTL_ON, stream=stream
        )
    if created or finished:
        client.update_time_to_live(**ttl_request(table))
    ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    return Ensured(created, finished, differences(description, ttl, stream=stream))


def wait_until_active(
    client: Any,
    table: str,
    *,
    timeout_s: float = ACTIVE_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """DescribeTable's ``Table`` once its status is ACTIVE; StoreError past ``timeout_s``."""
    deadline = clock() + timeout_s
    while True:
        description: dict[str, Any] = client.describe_table(TableName=table)["Table"]
        status = description.get("TableStatus")
        if status == "ACTIVE":
            return description
        if status not in ("CREATING", "UPDATING"):
            raise StoreError(f"table {table!r} is {status}, not becoming ACTIVE")
        if clock() >= deadline:
            raise StoreError(f"table {table!r} still {status} after {timeout_s:.0f} s")
        sleep(POLL_S)
