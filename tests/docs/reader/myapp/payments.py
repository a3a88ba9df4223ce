"""Stands for the reader's payment client: ``charge`` raises on failure."""

from __future__ import annotations

from typing import Any

failure: BaseException | None = None  # set by a test: every call raises it
calls = 0


def charge(order: Any) -> dict[str, Any]:
    global calls
    calls += 1
    if failure is not None:
        raise failure
    return {"charged": order}
