"""`make demo ARGS='--short --policy rate --noise 0.02'`: background errors open a count
breaker, not a rate breaker, and the rate breaker still trips on the outage.

Real time, real processes (see test_demo.py). The noise is drawn from a seeded generator, so
both runs meet the same failed requests in the same order; the short preset's seed fails 3
of the provider's first 48 requests, a quarter of the healthy phase at its pace, which opens
a threshold-3 count breaker however slowly a busy machine runs the fleet.
"""

from __future__ import annotations

import pytest

from bench.demo.report import rate_bound
from tests.demo.conftest import COUNT, RATE, ShortDemo

pytestmark = [pytest.mark.slow, pytest.mark.realtime]  # the demo runs on the wall clock


def test_noise_does_not_open_the_rate_breaker(noisy_demo: ShortDemo) -> None:
    # GIVEN the shared rate breaker's run, where the provider failed some healthy requests
    summary = noisy_demo.run(RATE).summary
    assert summary.noise_failures >= 3

    # THEN it never opened before the outage
    assert summary.spurious_trips == 0


def test_the_rate_breaker_still_trips_on_the_outage(noisy_demo: ShortDemo) -> None:
    # GIVEN the same run, THEN the whole fleet turned payments away before the outage ended
    options, summary = noisy_demo.options, noisy_demo.run(RATE).summary
    assert summary.seconds_to_reject is not None, "the fleet still admitted at the recovery"
    assert 0 < summary.seconds_to_reject < options.outage
    # AND it let through no more failing calls than the rate rule and its delays allow
    assert options.minimum_calls <= summary.failing_calls <= rate_bound(options)


def test_the_same_noise_opens_the_count_breaker(noisy_demo: ShortDemo) -> None:
    # GIVEN the shared count breaker on the same traffic and the same draws of noise
    summary = noisy_demo.run(COUNT).summary

    # THEN the background errors added up to its threshold and opened it while healthy
    assert summary.spurious_trips >= 1


def test_the_expected_spurious_trips_do_not_fail_the_demo(noisy_demo: ShortDemo) -> None:
    # GIVEN the count breaker's spurious trips, THEN they are stated, not failed, and the
    # guarantees checked on the rate run held: the demo exits 0
    result = noisy_demo.result
    assert result.guarantees_held, result.checks
    stated = [sentence for held, sentence in result.checks if held is None]
    assert any("opened on noise" in sentence for sentence in stated)
    text = result.markdown.read_text()
    assert "| spurious trips before the outage (opened on noise)" in text
    assert "| seconds from outage start to every container turning payments away" in text
    assert "✗" not in text
