"""The live display: one plain line per second of each run, readable in a terminal and in CI.

A line is printed a moment after its second has ended (the containers send their calls in
batches), so the counts are complete; nothing is redrawn, so a log file reads the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.demo.summary import STATES, StateIndex, interval

if TYPE_CHECKING:
    from typing import TextIO

    from bench.demo.summary import Interval, RunRecord

# Calls of a second arrive within the containers' batch period (0.2 s) after it ends.
GRACE = 0.45
COLUMNS = (
    f"{'time':>6}  {'provider':<9}{'to API':>7}{'failed':>8}{'rejected':>10}{'fallback':>10}"
    f"{'probes':>8}{'store req':>11}  containers saw"
)


def state_mix(states: dict[str, int]) -> str:
    """``"12 open, 3 closed, 1 half_open"``: most common first."""
    parts = sorted(
        ((n, s) for s, n in states.items() if n), key=lambda p: (-p[0], STATES.index(p[1]))
    )
    return ", ".join(f"{n} {state}" for n, state in parts)


def provider_state(record: RunRecord, at: float) -> str:
    """How the payment API is doing at ``at``."""
    down, back = record.outage
    if at < down:
        return "healthy"
    return "DOWN" if at < back else "recovered"


class Progress:
    """Prints each completed second of one run, and the moments that matter, as they pass."""

    def __init__(self, out: TextIO, record: RunRecord) -> None:
        self.out = out
        self.record = record
        self.printed = 0  # whole seconds printed so far
        self._announced: set[str] = set()

    def header(self, lines: list[str]) -> None:
        for line in lines:
            self._print(line)
        self._print(COLUMNS)

    def tick(self, now: float, final: bool = False) -> None:
        """Print every second that ended at least GRACE before ``now`` (all of them if final)."""
        index: StateIndex | None = None
        while self.printed + 1 <= (now if final else now - GRACE):
            second = self.printed + 1
            index = index or StateIndex(self.record)
            self._moments(second)
            self._line(interval(self.record, second - 1, second, index))
            self.printed = second

    def note(self, text: str) -> None:
        self._print(f"{'':>8}{text}")

    def _moments(self, second: int) -> None:
        down, back = self.record.outage
        if "down" not in self._announced and down < second:
            self._announced.add("down")
            self.note(f"-- {down:.1f} s: the payment API starts failing (HTTP 503)")
        if "back" not in self._announced and back < second:
            self._announced.add("back")
            self.note(f"-- {back:.1f} s: the payment API has recovered")

    def _line(self, row: Interval) -> None:
        self._print(
            f"{row.end:>5.0f}s  {provider_state(self.record, row.end - 0.001):<9}"
            f"{row.api_charged + row.api_failed:>7}{row.api_failed:>8}{row.turned_away:>10}"
            f"{row.deferred:>10}{row.probes:>8}{row.store_requests:>11}  {state_mix(row.states)}"
        )

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)
