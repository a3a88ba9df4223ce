"""What `list` and `status` print, character for character, from records built by hand
(pure: no store): aligned columns coloured after padding, unknown figures as dashes, every
status field, JSON Lines with sorted keys; colour only on a terminal without NO_COLOR; a
record that cannot be read shown under its name; and `list` and `status` on a terminal
(cli.main on the memory backend) printing exactly that."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from fleetbreaker import MemoryStore, cli
from fleetbreaker.breaker import system_clock
from fleetbreaker.cli.view import (
    BreakerView,
    colour_enabled,
    gather_all,
    gather_one,
    render_status,
    render_table,
    view_of,
    window_of,
    write_json,
)
from fleetbreaker.errors import CorruptRecordError
from fleetbreaker.record import Record, State
from fleetbreaker.tuning import Action
from tests.cli.conftest import POLICY, Backend, fail, one_line_error
from tests.cli.test_cli import report_calls
from tests.cli.test_watch_in_process import Terminal

T = 1_764_561_600_000  # 2025-12-01T04:00:00Z


def forced_open() -> BreakerView:
    """Open for 30 s more since 5 s ago; an operator acted 1 s ago, giving no reason."""
    record = Record(
        State.OPEN,
        gen=2,
        opened_at=T - 5_000,
        open_until=T + 30_000,
        updated_at=T - 5_000,
        last_action=Action("forced_open", "ops", None, T - 1_000).encode(),
    )
    return view_of("payment-api", record, T)


def tuned_closed() -> BreakerView:
    """Closed with 2 failures counted and two settings tuned live."""
    record = Record(
        State.CLOSED,
        gen=3,
        failures=2,
        window_start=T - 100,
        updated_at=T - 100,
        tuned='{"recovery_timeout":45,"failure_threshold":9}',
    )
    return view_of("ledger", record, T)


def test_the_table_colours_each_state_after_padding_it() -> None:
    # (count-policy breakers: their calls are not counted, shown as a dash)
    shown = render_table([tuned_closed(), forced_open()], colour=True)

    assert shown.splitlines() == [
        "NAME         STATE   FAILURES  CALLS  OPEN UNTIL                LAST CHANGE",
        "ledger       \x1b[32mclosed\x1b[0m  2         -      -                         "
        "2025-12-01T03:59:59.900Z",
        "payment-api  \x1b[31mopen  \x1b[0m  0         -      2025-12-01T04:00:30.000Z  "
        "2025-12-01T03:59:55.000Z",
    ]


def test_the_table_shows_unknown_figures_as_dashes_without_trailing_spaces() -> None:
    # GIVEN a breaker with no record (nothing known of its calls or times) after an open one
    shown = render_table([forced_open(), view_of("x", None, T)], colour=False)

    assert shown.splitlines() == [
        "NAME         STATE   FAILURES  CALLS  OPEN UNTIL                LAST CHANGE",
        "payment-api  open    0         -      2025-12-01T04:00:30.000Z  2025-12-01T03:59:55.000Z",
        "x            closed  0         -      -                         -",
    ]


def test_status_shows_every_figure_and_an_action_given_without_a_reason() -> None:
    assert render_status(forced_open(), colour=False).splitlines() == [
        "name         payment-api",
        "state        open",
        "generation   2",
        "failures     0",
        "calls        -",
        "slow calls   -",
        "containers   0",
        "window       60.0s",
        "open until   2025-12-01T04:00:30.000Z",
        "retry after  30.0s",
        "last change  2025-12-01T03:59:55.000Z",
        "mode         as deployed (BREAKER_MODE)",
        "tuned        -",
        "last action  forced_open by ops at 2025-12-01T03:59:59.000Z",
    ]


def test_status_lists_tuned_settings_sorted_and_no_action_or_retry_as_dashes() -> None:
    shown = render_status(tuned_closed(), colour=False).splitlines()

    assert shown[9:] == [
        "retry after  -",
        "last change  2025-12-01T03:59:59.900Z",
        "mode         as deployed (BREAKER_MODE)",
        "tuned        failure_threshold=9, recovery_timeout=45",
        "last action  -",
    ]


def test_json_lines_carry_their_keys_sorted() -> None:
    out = io.StringIO()

    write_json(out, "jsonl", [forced_open().as_json()])

    (line,) = out.getvalue().splitlines()
    keys = list(json.loads(line))
    assert keys == sorted(keys)


def test_a_terminal_gets_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)

    assert colour_enabled(Terminal())


def test_no_color_turns_a_terminal_s_colour_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")

    assert not colour_enabled(Terminal())


class CorruptStore(MemoryStore):
    def load(self, name: str, now_ms: int) -> Any:
        raise CorruptRecordError("state 'melted' is not a state")


def test_a_record_that_cannot_be_read_is_shown_corrupt_under_its_name() -> None:
    view = gather_one(CorruptStore(), "payment-api", T)

    assert view is not None
    assert (view.name, view.state, view.error) == (
        "payment-api",
        "corrupt",
        "state 'melted' is not a state",
    )


def on_terminal(backend: Backend, *args: str) -> str:
    screen = Terminal()
    with contextlib.redirect_stdout(screen):
        assert cli.main([*backend.options, *args]) == 0
    return screen.getvalue()


def test_list_on_a_terminal_prints_the_coloured_table_and_one_newline(
    memory_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN one breaker, and a terminal that allows colour
    monkeypatch.delenv("NO_COLOR", raising=False)
    fail(memory_backend, "payment-api", 1)

    shown = on_terminal(memory_backend, "list")

    views = gather_all(memory_backend.store, system_clock())
    assert shown == render_table(views, colour=True) + "\n"
    assert "\x1b[32m" in shown


def test_status_on_a_terminal_is_coloured(
    memory_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    fail(memory_backend, "payment-api", 1)

    shown = on_terminal(memory_backend, "status", "payment-api")

    assert "state        \x1b[32mclosed\x1b[0m\n" in shown


def test_status_of_a_record_that_cannot_be_read_ends_with_why() -> None:
    view = gather_one(CorruptStore(), "payment-api", T)
    assert view is not None

    shown = render_status(view, colour=False).splitlines()

    assert shown[-1] == "error        state 'melted' is not a state"


def test_unusable_tuned_settings_are_shown_as_the_error_they_are() -> None:
    # GIVEN a record carrying a threshold no BreakerConfig accepts
    record = Record(State.CLOSED, gen=1, tuned='{"failure_threshold":0}', updated_at=T)

    view = view_of("payment-api", record, T)

    # THEN the view shows no tuning, and says why
    assert (view.tuned, view.error) == (
        {},
        "failure_threshold must be a positive integer up to 1,000,000,000, got 0",
    )


def test_a_record_the_view_cannot_show_is_listed_corrupt_under_its_name_saying_why() -> None:
    # GIVEN a record whose window holds something that is no bucket (under the rate policy)
    store = MemoryStore()
    junk = Record(
        State.CLOSED,
        gen=1,
        buckets={0: "junk"},  # type: ignore[dict-item]
        tuned='{"failure_rate_threshold":0.5}',
        updated_at=T,
        expires_at=T // 1000 + 3600,
    )
    store.seed("payment-api", junk)

    (view,) = gather_all(store, T)

    assert (view.name, view.state, view.error) == (
        "payment-api",
        "corrupt",
        "cannot show it: AttributeError: 'str' object has no attribute 'idx'",
    )


def test_the_window_is_read_from_the_environment_given() -> None:
    args = cli.build_parser().parse_args(["status", "x"])

    assert window_of(args, {"BREAKER_WINDOW_SECONDS": "30"}) == 30.0


def test_a_record_that_stores_no_window_is_counted_over_the_window_given() -> None:
    # GIVEN a record written before records stored their window (window_ms 0), holding a
    # failure 20 s ago
    record = Record(State.CLOSED, gen=1, failures=1, window_start=T - 20_000, updated_at=T)

    # WHEN it is viewed over 30 s, then over 10 s
    over_30 = view_of("ledger", record, T, window_seconds=30)
    over_10 = view_of("ledger", record, T, window_seconds=10)

    # THEN the window given decides: the failure is inside 30 s, outside 10 s
    assert (over_30.failures, over_30.window_seconds) == (1, 30)
    assert (over_10.failures, over_10.window_seconds) == (0, 10)


def test_a_record_that_stores_its_window_is_counted_over_it() -> None:
    # GIVEN the same record, stamped with its 30 s window
    record = Record(
        State.CLOSED, gen=1, failures=1, window_start=T - 20_000, updated_at=T, window_ms=30_000
    )

    # WHEN it is viewed with a 10 s window given
    view = view_of("ledger", record, T, window_seconds=10)

    # THEN its own window counts
    assert (view.failures, view.window_seconds) == (1, 30.0)


def test_list_counts_each_breaker_over_the_window_given(memory_backend: Backend) -> None:
    # GIVEN reports into a 30 s rate-policy window
    report_calls(memory_backend, "payment-api")

    result = memory_backend.run("list", "--json", "--window", "30")

    (listed,) = result.json_lines()
    assert (listed["calls"], listed["failures"], listed["containers"]) == (15, 5, 2)


@pytest.mark.parametrize("command", ["status", "reset"])
def test_an_unknown_breaker_is_not_found_in_the_store_named(
    memory_backend: Backend, command: str
) -> None:
    result = memory_backend.run(command, "nope")

    assert result.code == 1
    assert one_line_error(result) == (
        "fleetbreaker: error: breaker 'nope' not found in table 'cli-memory'"
    )


def test_tune_records_the_reason_given(memory_backend: Backend) -> None:
    result = memory_backend.run(
        "tune", "payment-api", "--minimum-calls", "3", "--reason", "flapping", "--json"
    )

    (shown,) = result.json_lines()
    assert (shown["last_action"]["action"], shown["last_action"]["reason"]) == (
        "tune",
        "flapping",
    )


def test_tune_shows_an_open_breaker_s_retry_after_as_of_now(memory_backend: Backend) -> None:
    # GIVEN an open breaker (30 s open window)
    fail(memory_backend, "payment-api", POLICY.failure_threshold)

    # WHEN it is tuned
    result = memory_backend.run("tune", "payment-api", "--minimum-calls", "3", "--json")

    # THEN the status shown after is read now: the retry comes within the open window
    (shown,) = result.json_lines()
    assert shown["state"] == "open"
    assert 0 < shown["retry_after"] <= 30


def test_tune_shows_the_figures_over_the_window_given(memory_backend: Backend) -> None:
    report_calls(memory_backend, "payment-api")

    result = memory_backend.run(
        "tune", "payment-api", "--minimum-calls", "3", "--json", "--window", "30"
    )

    (shown,) = result.json_lines()
    assert (shown["calls"], shown["failures"]) == (15, 5)
