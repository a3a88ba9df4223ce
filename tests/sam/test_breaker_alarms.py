"""The core stack's breaker alarms fire on what a breaker that opens really writes.

Both sides of the seam: each alarm's Metrics Insights query is read from template.yaml and
evaluated here over the EMF documents a real breaker writes (fleetbreaker.metrics), as
CloudWatch would, one flush standing for one minute's data (each Lambda invocation flushes).
A rename on either side (the metric, a dimension, the namespace parameter or its default) leaves
the query selecting nothing, and these tests fail.

BreakerOpenedAlarm: ``SUM(Trip)`` over every breaker and service, in the minute one opens.
BreakerOpenTooLongAlarm: ``SUM(Rejected)``, breaching in each of BreakerOpenAlarmMinutes.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools.sam_template import load_template
from fleetbreaker import CircuitBreaker, CircuitOpenError, MemoryStore
from fleetbreaker.metrics import DEFAULT_NAMESPACE, NAMESPACE_ENV, MetricsListener
from tests.sam.cloudwatch_queries import (
    Selection,
    alarm_selection,
    breaches,
    datapoint,
    flushed_points,
)
from tests.support import Dependency, FakeClock, breaker_on, trip

CORE_ALARMS = ("BreakerOpenedAlarm", "BreakerOpenTooLongAlarm", "StoreMisconfiguredAlarm")
NAMESPACE = "Payments/Breakers"  # any value of the MetricsNamespace parameter
MINUTE = 60.0


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def properties(template: dict[str, Any], alarm: str) -> dict[str, Any]:
    """The alarm's properties with its parameters at their defaults."""
    found: dict[str, Any] = dict(template["Resources"][alarm]["Properties"])
    for key in ("EvaluationPeriods", "DatapointsToAlarm"):
        value = found[key]
        if isinstance(value, dict):
            found[key] = template["Parameters"][value["Ref"]]["Default"]
    return found


@pytest.fixture(scope="module")
def opened(template: dict[str, Any]) -> dict[str, Any]:
    return properties(template, "BreakerOpenedAlarm")


@pytest.fixture(scope="module")
def too_long(template: dict[str, Any]) -> dict[str, Any]:
    return properties(template, "BreakerOpenTooLongAlarm")


class Minutes:
    """Breakers writing metrics through one listener; each flush is one minute's datapoint."""

    def __init__(self, capsys: pytest.CaptureFixture[str], namespace: str = NAMESPACE) -> None:
        self.capsys = capsys
        self.namespace = namespace
        self.metrics = MetricsListener(namespace=namespace, service="orders")
        self.clock = FakeClock()

    def breaker(self, name: str = "payment-api", **settings: Any) -> CircuitBreaker:
        return breaker_on(
            MemoryStore(), self.clock, name=name, listeners=[self.metrics], **settings
        )

    def flush(self, selection: Selection) -> float:
        """End of the minute: flush, advance the clock, and the minute's datapoint."""
        self.capsys.readouterr()
        self.metrics.flush()
        self.clock.advance(MINUTE)
        return datapoint(selection, flushed_points(self.capsys.readouterr().out), self.namespace)


def rejected(breaker: CircuitBreaker, dependency: Dependency) -> None:
    with pytest.raises(CircuitOpenError):
        breaker.call(dependency)


# --------------------------------------------------------------------------- the template


@pytest.mark.parametrize("alarm", CORE_ALARMS)
def test_each_alarm_is_part_of_the_core(template: dict[str, Any], alarm: str) -> None:
    # GIVEN DeployExample=false: the alarms exist, and notify the optional topic
    resource = template["Resources"][alarm]
    assert resource["Type"] == "AWS::CloudWatch::Alarm"
    assert "Condition" not in resource
    expected = {
        "Fn::If": ["AlarmNotifiesTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
    }
    assert resource["Properties"]["AlarmActions"] == expected
    assert resource["Properties"]["OKActions"] == expected


@pytest.mark.parametrize("alarm", CORE_ALARMS)
def test_each_query_reads_the_namespace_fleetbreaker_writes_by_default(
    template: dict[str, Any], alarm: str
) -> None:
    # GIVEN a function of another stack that attaches the layer and sets no namespace
    selection = alarm_selection(template["Resources"][alarm]["Properties"])
    # THEN the query's namespace parameter defaults to the namespace the layer writes to,
    # which the example functions are given too
    assert selection.namespace == "MetricsNamespace"
    assert template["Parameters"]["MetricsNamespace"]["Default"] == DEFAULT_NAMESPACE
    environment = template["Resources"]["PaymentFunction"]["Properties"]["Environment"]
    assert environment["Variables"][NAMESPACE_ENV] == {"Ref": "MetricsNamespace"}
    # AND a Metrics Insights alarm evaluates 3 hours at most: the longest window fits
    assert selection.period == 60
    longest = template["Parameters"]["BreakerOpenAlarmMinutes"]["MaxValue"]
    assert longest * selection.period <= 3 * 3600


# --------------------------------------------------------------------------- BreakerOpenedAlarm


def test_a_breaker_that_opens_breaches_the_opened_alarm(
    opened: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a breaker of any name, in any service, with the metrics listener
    minutes = Minutes(capsys)
    breaker = minutes.breaker("inventory-api")

    # WHEN its dependency fails failure_threshold times in a minute
    trip(breaker, Dependency())

    # THEN that minute's datapoint counts the one trip, and the alarm fires
    value = minutes.flush(alarm_selection(opened))
    assert value == 1
    assert breaches(opened, [value])


def test_failures_below_the_threshold_do_not(
    opened: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    minutes = Minutes(capsys)
    breaker = minutes.breaker()

    trip(breaker, Dependency(), times=breaker.config.failure_threshold - 1)

    value = minutes.flush(alarm_selection(opened))
    assert value == 0
    assert not breaches(opened, [value])


def test_a_rate_policy_trip_and_a_failed_probe_breach_it_too(
    opened: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two breakers: one on the rate policy, one counting
    minutes = Minutes(capsys)
    selection = alarm_selection(opened)
    rate = minutes.breaker("ledger-api", failure_rate_threshold=0.5, minimum_calls=4)
    counting = minutes.breaker("payment-api", recovery_timeout=30)
    dependency = Dependency()

    # WHEN the rate breaker opens on its failure rate (each failure reported), and the
    # counting one opens
    for _ in range(4):
        trip(rate, dependency, times=1)
        minutes.clock.advance(rate.config.cache_ttl)  # report_interval: cache_ttl
    trip(counting, dependency)
    assert (rate.state.value, counting.state.value) == ("open", "open")
    first = minutes.flush(selection)

    # AND, a minute later, the counting breaker's probe fails and reopens it
    with pytest.raises(ConnectionError):
        counting.call(dependency)
    assert counting.state.value == "open"
    second = minutes.flush(selection)

    # THEN both minutes breach: two breakers summed in one series, then the reopening
    assert (first, second) == (2, 1)
    assert breaches(opened, [first])
    assert breaches(opened, [second])


def test_it_clears_in_the_first_minute_without_a_trip(
    opened: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a breaker that opened, then stays open and rejects for a minute
    minutes = Minutes(capsys)
    selection = alarm_selection(opened)
    breaker = minutes.breaker(recovery_timeout=300)
    dependency = Dependency()
    trip(breaker, dependency)
    values = [minutes.flush(selection)]
    rejected(breaker, dependency)
    values.append(minutes.flush(selection))

    # THEN the alarm fired in the first minute and is OK in the second (the other alarm
    # watches a breaker that stays open)
    assert breaches(opened, values[:1])
    assert not breaches(opened, values)


def test_a_namespace_other_than_the_alarms_is_not_counted(
    opened: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a function that writes to its own POWERTOOLS_METRICS_NAMESPACE
    minutes = Minutes(capsys, namespace="SomeoneElse")
    trip(minutes.breaker(), Dependency())
    minutes.capsys.readouterr()
    minutes.metrics.flush()
    points = flushed_points(minutes.capsys.readouterr().out)

    # THEN a stack whose MetricsNamespace is another one does not see its trip
    assert datapoint(alarm_selection(opened), points, NAMESPACE) == 0
    assert datapoint(alarm_selection(opened), points, "SomeoneElse") == 1


# ---------------------------------------------------------------------- BreakerOpenTooLongAlarm


def test_a_breaker_rejecting_for_the_alarm_minutes_breaches_the_too_long_alarm(
    too_long: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a breaker that opened and stays open (its dependency still down)
    minutes = Minutes(capsys)
    selection = alarm_selection(too_long)
    breaker = minutes.breaker(recovery_timeout=3600, max_recovery_timeout=3600)
    dependency = Dependency()
    trip(breaker, dependency)

    # WHEN it rejects calls in each minute, for BreakerOpenAlarmMinutes minutes
    values = []
    for _ in range(int(too_long["EvaluationPeriods"])):
        rejected(breaker, dependency)
        values.append(minutes.flush(selection))

    # THEN the alarm fires only once every one of those minutes breached
    assert all(value == 1 for value in values)
    assert not breaches(too_long, values[:-1])
    assert breaches(too_long, values)


def test_a_breaker_that_recovers_does_not(
    too_long: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a breaker open for two minutes, whose probe then succeeds
    minutes = Minutes(capsys)
    selection = alarm_selection(too_long)
    breaker = minutes.breaker(recovery_timeout=90)
    dependency = Dependency()
    trip(breaker, dependency)
    values = []
    for _ in range(2):
        rejected(breaker, dependency)
        values.append(minutes.flush(selection))
    dependency.failing = False
    for _ in range(int(too_long["EvaluationPeriods"]) - 2):
        assert breaker.call(dependency) == "ok"
        values.append(minutes.flush(selection))

    # THEN the minutes after the recovery have no rejection, and the alarm stays OK
    assert values[:2] == [1, 1]
    assert set(values[2:]) == {0}
    assert not breaches(too_long, values)
