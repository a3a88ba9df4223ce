"""`make time-tests`' report line (scripts/time_tests.py): the figures docs/testing.md copies."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support import load_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def time_tests() -> ModuleType:
    return load_file(ROOT / "scripts" / "time_tests.py", "time_tests_script")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (419.6, "7 min 0 s"),  # a real run's figure, once printed as "6 min 60 s"
        (478.0, "7 min 58 s"),
        (59.5, "1 min 0 s"),
        (59.4, "0 min 59 s"),
        (600.0, "10 min 0 s"),
    ],
)
def test_a_run_time_is_rounded_before_it_is_split_into_minutes(
    time_tests: ModuleType, seconds: float, shown: str
) -> None:
    # GIVEN pytest's closing time in seconds
    # WHEN the report line spells it out
    # THEN the seconds are whole and below 60
    assert time_tests.as_minutes(seconds) == shown


def test_a_run_without_pytest_closing_line_says_so(time_tests: ModuleType) -> None:
    # GIVEN a run whose log has no closing line (its time is "nan")
    # WHEN it is spelled out
    # THEN no made-up figure appears
    assert time_tests.as_minutes(float("nan")) == "? min ? s"
