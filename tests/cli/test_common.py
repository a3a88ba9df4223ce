"""What every command shows the same way: times (none for 0) and text from the store with
control characters escaped (pure: no store)."""

from __future__ import annotations

from fleetbreaker.cli.common import iso, printable


def test_time_0_is_shown_as_no_time() -> None:
    assert iso(0) is None


def test_the_first_millisecond_is_a_date() -> None:
    assert iso(1) == "1970-01-01T00:00:00.001Z"


def test_a_control_character_past_latin_1_is_escaped_as_u() -> None:
    # GIVEN a line separator (U+2028), which some terminals act on
    assert printable("a\u2028b") == "a\\u2028b"
