"""What cli.main prints and returns when a store error escapes a command: exit 3 and one
line, the error's first line or, when it has no words, "store error"; any other exception
is one line too, named by its class."""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import MemoryStore, StoreError
from fleetbreaker.cli import commands
from tests.cli.conftest import one_line_error, run_in_process


class FailingStore(MemoryStore):
    """A store whose every read fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def load(self, name: str, now_ms: int) -> Any:
        raise self.error


def status_on(monkeypatch: pytest.MonkeyPatch, store: MemoryStore) -> Any:
    monkeypatch.setattr(commands, "open_store", lambda args: (store, "table CircuitBreakers"))
    return run_in_process(["--table", "CircuitBreakers", "status", "payment-api"])


def test_a_store_error_exits_3_with_its_first_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a store failing with a two-line error
    result = status_on(monkeypatch, FailingStore(StoreError("read timed out\nretries: 0")))

    # THEN the operator gets its first line, and exit 3
    assert result.code == 3
    assert one_line_error(result) == "fleetbreaker: error: read timed out"


def test_a_store_error_without_words_is_called_a_store_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = status_on(monkeypatch, FailingStore(StoreError("")))

    assert result.code == 3
    assert one_line_error(result) == "fleetbreaker: error: store error"


def test_any_other_exception_exits_3_named_by_its_class_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a store client failing in a way no store turns into a StoreError
    result = status_on(monkeypatch, FailingStore(RuntimeError("socket closed\nat frame 3")))

    # THEN no traceback: exit 3 and the class with the first line of its message
    assert result.code == 3
    assert one_line_error(result) == "fleetbreaker: error: RuntimeError: socket closed"
