"""What cli.main prints and returns when a store error escapes a command: exit 3 and one
line, the error's first line or, when it has no words, "store error"."""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import MemoryStore, StoreError
from fleetbreaker.cli import commands
from tests.cli.conftest import one_line_error, run_in_process


class FailingStore(MemoryStore):
    """A store whose every read fails with ``message``."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def load(self, name: str, now_ms: int) -> Any:
        raise StoreError(self.message)


def status_on(monkeypatch: pytest.MonkeyPatch, store: MemoryStore) -> Any:
    monkeypatch.setattr(commands, "open_store", lambda args: (store, "table CircuitBreakers"))
    return run_in_process(["--table", "CircuitBreakers", "status", "payment-api"])


def test_a_store_error_exits_3_with_its_first_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a store failing with a two-line error
    result = status_on(monkeypatch, FailingStore("read timed out\nretries: 0"))

    # THEN the operator gets its first line, and exit 3
    assert result.code == 3
    assert one_line_error(result) == "fleetbreaker: error: read timed out"


def test_a_store_error_without_words_is_called_a_store_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = status_on(monkeypatch, FailingStore(""))

    assert result.code == 3
    assert one_line_error(result) == "fleetbreaker: error: store error"
