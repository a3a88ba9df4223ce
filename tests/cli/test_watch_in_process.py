"""`watch` through cli.main in-process: a terminal's frames clear the screen (piped ones and
JSON Lines never do), an unknown breaker is named with its store, a count must be positive."""

from __future__ import annotations

import contextlib
import io

import pytest

from fleetbreaker import cli
from tests.cli.conftest import Backend, fail, one_line_error

CLEAR = "\x1b[H\x1b[2J"


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


def test_watch_on_a_terminal_clears_the_screen_before_each_frame(
    in_process_backend: Backend, name: str
) -> None:
    fail(in_process_backend, name, 1)

    shown = watch_on_terminal(in_process_backend, name)

    assert shown.count(CLEAR) == 2
    assert shown.startswith(CLEAR)


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
