"""`watch` through cli.main in-process: a terminal's frames clear the screen (piped ones and
JSON Lines never do), an unknown breaker is named with its store, a count must be positive."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from fleetbreaker import MemoryStore, StoreError, cli
from fleetbreaker.breaker import system_clock
from fleetbreaker.cli import commands
from tests.cli.conftest import POLICY, Backend, fail, one_line_error
from tests.cli.test_cli import report_calls

CLEAR = "\x1b[H\x1b[2J"
HOME = "\x1b[H"
ERASE_LINE = "\x1b[K"
ERASE_BELOW = "\x1b[J"


class Terminal(io.StringIO):
    """Standard output as a terminal: isatty() is what watch asks."""

    def isatty(self) -> bool:
        return True


def watch_on_terminal(backend: Backend, *args: str) -> str:
    screen = Terminal()
    with contextlib.redirect_stdout(screen):
        code = cli.main([*backend.options, "watch", *args, "--count", "2", "--interval", "0.01"])
    assert code == 0
    return screen.getvalue()


def test_watch_on_a_terminal_clears_the_screen_once_then_redraws_in_place(
    in_process_backend: Backend, name: str
) -> None:
    fail(in_process_backend, name, 1)

    shown = watch_on_terminal(in_process_backend, name)

    # THEN the first frame clears the screen; the second moves home and overwrites it, each
    # line erased to its end and the rest of the screen below it (nothing scrolls)
    assert shown.startswith(CLEAR)
    assert shown.count(CLEAR) == 1
    second = shown[shown.index(ERASE_BELOW) + len(ERASE_BELOW) :]
    assert second.startswith(HOME)
    assert second.endswith(ERASE_BELOW)
    assert all(line.endswith(ERASE_LINE) for line in second[len(HOME) :].splitlines()[:-1])


class Screen:
    """The few VT100 controls watch sends, applied to a grid of lines: what a terminal shows
    (a newline moves to the next line's start, as a terminal's output processing does)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.row = self.col = 0
        self.scrolled: list[str] = []  # lines a clear pushed into the scrollback

    def play(self, text: str) -> list[str]:
        import re

        for part in re.split(r"(\x1b\[[0-9;]*[A-Za-z]|\n)", text):
            while len(self.lines) <= self.row:
                self.lines.append("")
            line = self.lines[self.row]
            if part == HOME:
                self.row = self.col = 0
            elif part == "\x1b[2J":
                self.scrolled += [kept for kept in self.lines if kept]
                self.lines = []
            elif part == ERASE_LINE:
                self.lines[self.row] = line[: self.col]
            elif part == ERASE_BELOW:
                self.lines[self.row] = line[: self.col]
                del self.lines[self.row + 1 :]
            elif part == "\n":
                self.row, self.col = self.row + 1, 0
            elif part:
                padded = line.ljust(self.col)
                self.lines[self.row] = padded[: self.col] + part + padded[self.col + len(part) :]
                self.col += len(part)
        return [shown for shown in self.lines if shown]


def test_a_terminal_shows_only_the_last_frame_and_keeps_none_in_its_scrollback(
    in_process_backend: Backend, name: str
) -> None:
    # GIVEN a breaker watched on a terminal for three frames, the last after a store error
    # (a frame shorter than the ones before it)
    fail(in_process_backend, name, 1)
    screen = Terminal()
    drops = [lambda: None, lambda: drop_table(in_process_backend)]
    steps = iter(drops)
    parsed = cli.build_parser().parse_args(
        [*in_process_backend.options, "watch", name, "--count", "3"]
    )
    assert cli.run(parsed, screen, system_clock, lambda _seconds: next(steps)()) == 0

    # WHEN a terminal plays what watch wrote
    terminal = Screen()
    shown = terminal.play(screen.getvalue())

    # THEN it shows the last frame alone: nothing of the status frames is left below it
    assert len(shown) == 1
    assert "store error" in shown[0]
    # AND no frame went to the scrollback (the screen was cleared once, when it was empty)
    assert terminal.scrolled == []


def test_watch_into_a_pipe_appends_frames_with_no_terminal_control(
    in_process_backend: Backend, name: str
) -> None:
    # GIVEN a breaker watched into a pipe (not a terminal) for two frames
    fail(in_process_backend, name, 1)

    shown = watch_with(in_process_backend, [lambda: None], name)

    # THEN both frames are there, one after the other, with no cursor movement or clearing
    assert "\x1b[" not in shown
    lines = shown.splitlines()
    assert len([line for line in lines if line.startswith("at ")]) == 2
    assert len([line for line in lines if line.startswith("name ")]) == 2


def test_watch_as_json_on_a_terminal_never_clears_it(
    in_process_backend: Backend, name: str
) -> None:
    fail(in_process_backend, name, 1)

    shown = watch_on_terminal(in_process_backend, name, "--json")

    assert CLEAR not in shown
    assert len(shown.splitlines()) == 2


def test_watch_of_an_unknown_breaker_names_it_and_the_store(
    in_process_backend: Backend, name: str
) -> None:
    table = in_process_backend.options[in_process_backend.options.index("--table") + 1]

    result = in_process_backend.run("watch", name, "--count", "1")

    assert result.code == 1
    assert f"breaker {name!r} not found in table {table!r}" in one_line_error(result)


@pytest.mark.parametrize("count", ["0", "-1"])
def test_a_count_under_one_is_refused_saying_what_it_must_be(
    in_process_backend: Backend, name: str, count: str
) -> None:
    result = in_process_backend.run("watch", name, "--count", count)

    assert result.code == 2
    assert f"must be a positive whole number, got {count!r}" in one_line_error(result)


def watch_with(backend: Backend, between_frames: list[Callable[[], None]], *args: str) -> str:
    """``watch`` for one frame more than ``between_frames``, running each between two frames."""
    steps = iter(between_frames)
    parsed = cli.build_parser().parse_args(
        [*backend.options, "watch", *args, "--count", str(len(between_frames) + 1)]
    )
    out = io.StringIO()
    assert cli.run(parsed, out, system_clock, lambda _seconds: next(steps)()) == 0
    return out.getvalue()


def drop_table(backend: Backend) -> None:
    backend.store.client.delete_table(TableName=backend.store.table_name)


def test_watch_carries_on_after_a_store_error_and_says_so_as_a_json_line(
    in_process_backend: Backend, name: str
) -> None:
    # GIVEN a watched breaker WHEN its table is gone for the second frame
    fail(in_process_backend, name, 1)
    shown = watch_with(in_process_backend, [lambda: drop_table(in_process_backend)], name, "--json")

    # THEN the second frame is a JSON line naming the breaker, the error and when
    first, second = (json.loads(line) for line in shown.splitlines())
    assert first["failures"] == 1
    assert list(second) == ["at", "error", "name"]  # sorted, as every frame's keys
    assert second["name"] == name
    assert second["error"].startswith("store error: ")
    assert second["at"].endswith("Z")


def test_watch_carries_on_after_a_store_error_and_says_so_as_text(
    in_process_backend: Backend, name: str
) -> None:
    fail(in_process_backend, name, 1)

    shown = watch_with(in_process_backend, [lambda: drop_table(in_process_backend)], name)

    (error,) = [line for line in shown.splitlines() if "store error" in line]
    stamp, _, problem = error.partition("  ")
    assert stamp.endswith("Z")
    assert problem.startswith("store error: ")


def test_watch_of_a_breaker_removed_meanwhile_shows_it_closed_and_empty(
    in_process_backend: Backend, name: str
) -> None:
    # GIVEN a watched open breaker WHEN its record is deleted before the second frame
    fail(in_process_backend, name, POLICY.failure_threshold)

    def delete_record() -> None:
        in_process_backend.store.client.delete_item(
            TableName=in_process_backend.store.table_name, Key={"name": {"S": name}}
        )

    shown = watch_with(in_process_backend, [delete_record], name, "--json")

    # THEN the second frame still names it, closed, with nothing counted
    first, second = (json.loads(line) for line in shown.splitlines())
    assert (first["state"], second["state"]) == ("open", "closed")
    assert (second["name"], second["generation"], second["failures"]) == (name, 0, 0)


def test_watch_counts_the_window_it_is_given(in_process_backend: Backend, name: str) -> None:
    # GIVEN calls reported into a 30 s window
    report_calls(in_process_backend, name)

    # WHEN watch is asked for that window
    shown = watch_with(in_process_backend, [], name, "--json", "--window", "30")

    # THEN its frame shows the window's figures
    (frame,) = (json.loads(line) for line in shown.splitlines())
    assert (frame["calls"], frame["failures"], frame["slow_calls"]) == (15, 5, 1)
    # AND its keys come in one order, sorted, frame after frame (a diff of two frames is clean)
    assert list(frame) == sorted(frame)


class FailingStore(MemoryStore):
    """A MemoryStore that, once given ``answers``, answers that many reads, then fails every
    read with ``message``."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message
        self.answers: int | None = None

    def load(self, name: str, now_ms: int) -> Any:
        if self.answers is not None:
            if self.answers == 0:
                raise StoreError(self.message)
            self.answers -= 1
        return super().load(name, now_ms)


def test_watch_shows_the_store_s_own_words_escaped_after_a_store_error(
    memory_backend: Backend, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a watched breaker whose store answers one read, then fails with a BEL in its text
    store = FailingStore("throttled\x07")
    fail(Backend("memory", [], store), name, 1)
    store.answers = 1
    monkeypatch.setattr(commands, "open_store", lambda args: (store, "table T"))

    # WHEN watch shows its one frame
    shown = watch_with(memory_backend, [], name)

    # THEN the frame quotes the error, its control character escaped
    (error,) = [line for line in shown.splitlines() if "store error" in line]
    assert error.partition("  ")[2] == "store error: throttled\\x07"


def test_watch_waits_one_second_between_frames_by_default(
    memory_backend: Backend, name: str
) -> None:
    # GIVEN a breaker, watched for two frames without --interval
    fail(memory_backend, name, 1)
    parsed = cli.build_parser().parse_args([*memory_backend.options, "watch", name, "--count", "2"])
    waits: list[float] = []

    # WHEN it runs (its sleep recorded, not slept)
    assert cli.run(parsed, io.StringIO(), system_clock, waits.append) == 0

    # THEN it waited once, one second
    assert waits == [1.0]
