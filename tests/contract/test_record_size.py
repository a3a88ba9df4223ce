"""The rate policy's record stays within one DynamoDB write unit (1 KB) at any fleet size.

DynamoDB bills a write by item size in 1 KB units, and one item takes at most 1,000 write units
a second: a record over 1 KB would halve both the writes a breaker can take and its budget.
The fullest record there can be: every bucket of the window in use with large counts, and both
quorum maps full (``min_containers`` at its maximum, 10), written through the real store.
The breaker's name is stored in the item too: names up to 64 bytes keep it within 1 KB.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from fleetbreaker import DynamoDBStore
from fleetbreaker.config import MAX_MIN_CONTAINERS
from fleetbreaker.naming import container_key
from fleetbreaker.record import WINDOW_BUCKETS, Report
from fleetbreaker.rules import sliding_window
from tests.support import make_policy

T0 = 1_700_000_000_000


def value_size(value: dict[str, Any]) -> int:
    """An attribute value's size by DynamoDB's rules (strings in UTF-8 bytes, numbers by
    their significant digits, maps at 3 bytes plus 1 per element and its name and value)."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(raw.encode("utf-8"))
    if kind == "N":
        digits = Decimal(raw).normalize().as_tuple().digits
        return (len(digits) + 1) // 2 + 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in raw.items())
    raise AssertionError(kind)


def item_size(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def test_the_fullest_rate_record_fits_one_write_unit(moto_inprocess_store: DynamoDBStore) -> None:
    store = moto_inprocess_store
    policy = make_policy(
        failure_rate_threshold=1.0,
        slow_call_duration=1.0,
        slow_call_rate_threshold=1.0,
        minimum_calls=10**9,  # never trips: the window only fills
        min_containers=MAX_MIN_CONTAINERS,
        window_seconds=60,
    )
    name = "payment-api-" + "x" * 100  # a long breaker name counts too
    for bucket in range(WINDOW_BUCKETS):
        for container in range(MAX_MIN_CONTAINERS):
            now = T0 + bucket * policy.bucket_ms + container
            report = Report(
                container_key(f"container-{bucket}-{container}-" + "y" * 40),
                calls=987_654_321,
                failures=123_456_789,
                slow=12_345_678,
            )
            store.report(name, policy, now, report, store.load(name, now))
    now = T0 + (WINDOW_BUCKETS - 1) * policy.bucket_ms + MAX_MIN_CONTAINERS
    record = store.load(name, now)
    assert len(record.buckets) == WINDOW_BUCKETS
    assert len(record.failing) == len(record.slowing) == MAX_MIN_CONTAINERS
    assert sliding_window(policy).counts(record, now).reports == WINDOW_BUCKETS * MAX_MIN_CONTAINERS

    item = store.client.get_item(TableName=store.table_name, Key={"name": {"S": name}})["Item"]

    # THEN everything but the name takes at most 960 bytes: a 64-byte name still fits 1 KB
    without_name = item_size(item) - item_size({"name": item["name"]})
    assert without_name <= 1024 - 64, without_name
