"""`make demo --fallback defer` (the default): the deferred payments are drained after recovery.

The drain is the real consumer (functions/deferred_payments) on the run's queue and breaker;
"charged twice" is counted by the provider itself, per idempotency key.
"""

from __future__ import annotations

import re

import pytest

from tests.demo.conftest import ShortDemo

pytestmark = pytest.mark.realtime  # the demo runs on the wall clock

LINE = re.compile(
    r"deferred payments: (\d+) queued, (\d+) charged after recovery, (\d+) charged twice"
)


def test_every_deferred_payment_is_charged_once_after_recovery(short_demo: ShortDemo) -> None:
    # GIVEN the shared run, whose breaker deferred payments while it was open
    drain = short_demo.shared.record.drain
    assert drain is not None
    # THEN every one of them was charged after the recovery, none twice, none left behind
    assert drain.queued == short_demo.shared.summary.deferred > 0
    assert drain.charged == drain.queued
    assert drain.twice == 0
    assert drain.left == 0


def test_the_drain_charges_only_after_the_provider_recovered(short_demo: ShortDemo) -> None:
    # GIVEN the times at which the consumer charged deferred payments
    record = short_demo.shared.record
    # THEN none of them ran before the recovery: the consumer was paused while it was open
    assert record.drained
    assert min(record.drained) >= record.outage[1]


def test_the_drain_line_is_printed_and_in_the_summary(short_demo: ShortDemo) -> None:
    # GIVEN what the demo printed and the markdown it wrote
    markdown = short_demo.result.markdown.read_text()
    # THEN the line is there for each run, with the figures of the record
    printed = [tuple(map(int, m)) for m in LINE.findall(short_demo.output)]
    written = [tuple(map(int, m)) for m in LINE.findall(markdown)]
    expected = [
        (d.queued, d.charged, d.twice)
        for d in (run.record.drain for run in short_demo.result.runs)
        if d is not None
    ]
    assert len(expected) == 2
    for figures in expected:
        assert figures in printed
        assert figures in written
