"""The suite's own helpers that a test's verdict passes through."""

from __future__ import annotations

import threading

import pytest

from tests.support import in_a_fresh_thread


def test_a_fresh_thread_gives_back_the_result_from_another_thread() -> None:
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    assert in_a_fresh_thread(work) == 42
    assert len(seen) == 1
    assert seen[0] is not threading.current_thread()


def test_a_fresh_thread_passes_a_failure_on() -> None:
    def fails() -> None:
        raise AssertionError("the invariant broke")

    with pytest.raises(AssertionError, match="the invariant broke"):
        in_a_fresh_thread(fails)
