"""Stands for the reader's inventory client: ``reserve`` raises on failure."""

from __future__ import annotations

from typing import Any

failure: BaseException | None = None  # set by a test: every call raises it
calls = 0


def reserve(sku: Any) -> str:
    global calls
    calls += 1
    if failure is not None:
        raise failure
    return f"reserved {sku}"


def call_inventory_api(event: Any) -> dict[str, Any]:
    return {"statusCode": 200, "body": reserve(event.get("sku", "none"))}
