"""The rehearsal's checks, seen failing: each fault it exists to catch, planted on purpose.

A dropped variable, a missing permission, a function that cannot log in to the cache (and so
runs on its local breaker), a role without elasticache:Connect, a stack whose resources
depend on each other: each fails with a message naming the function (or resources) and the
cause. Planted on the default parameter set (the cheapest), or on a cache of their own.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from devtools.rehearsal import (
    ElastiCacheLikeRedis,
    LambdaContainer,
    RehearsalError,
    container_environment,
    create_user,
    dependency_cycle,
    local_since,
    put_alarms,
)
from devtools.sam_template import condition_values, load_template
from devtools.servers import REPO_ROOT, make_certificates
from tests.conftest import _start
from tests.rehearsal.conftest import Rehearsal, unique_key
from tests.rehearsal.support import cache_login_problems, http, payment

pytestmark = pytest.mark.rehearsal


def payment_container(rehearsal: Rehearsal, environment: dict[str, str]) -> LambdaContainer:
    """A container of the payment function with ``environment`` instead of its own."""
    container = LambdaContainer(
        rehearsal.functions["PaymentFunction"], environment, REPO_ROOT / "functions/payment"
    )
    rehearsal.containers.append(container)
    return container


def test_a_dropped_variable_fails_the_function_by_name(default_set: Rehearsal) -> None:
    # GIVEN the payment function's environment without the table it keeps its breaker in
    environment = default_set.environment("PaymentFunction")
    del environment["CIRCUIT_BREAKER_TABLE"]
    # WHEN its container starts THEN its init fails, naming the function and the variable
    with pytest.raises(
        RehearsalError, match=r"PaymentFunction: init failed.*CIRCUIT_BREAKER_TABLE"
    ):
        payment_container(default_set, environment).start()


def test_a_missing_permission_fails_as_it_fails_in_aws(default_set: Rehearsal) -> None:
    # GIVEN a principal holding the payment function's role without dynamodb:UpdateItem
    function = default_set.functions["PaymentFunction"]
    statements = [
        {
            "Effect": "Allow",
            "Action": [a for a in s["Action"] if a != "dynamodb:UpdateItem"],
            "Resource": "*",
        }
        for s in function.statements
    ]
    credentials = create_user(
        default_set.endpoint, f"bite-{unique_key()}", statements, default_set.admin
    )
    environment = container_environment(function, credentials, default_set.endpoint)
    container = payment_container(default_set, environment).start()
    # WHEN a failing payment must be counted
    default_set.api.mode = "fail"
    # THEN moto refuses the write and the rehearsal names the function and the cause
    with pytest.raises(
        RehearsalError,
        match=r"(?s)PaymentFunction ran on a local breaker.*AccessDenied.*UpdateItem",
    ):
        http(container, payment(unique_key()))


def test_the_cache_refuses_a_function_that_does_not_log_in_as_its_user(
    default_set: Rehearsal, tmp_path: Path
) -> None:
    # GIVEN a cache with the stack's rules (default user off, only the IAM user) and the
    # payment function pointed at it without the IAM variables (the bug of issue 19)
    access = load_template()["Resources"]["BreakerCacheUser"]["Properties"]["AccessString"]
    cache = _start(
        ElastiCacheLikeRedis(
            *make_certificates(tmp_path),
            iam_user="BreakerCacheUser.Ref",
            access_string=access.split(),
        )
    )
    try:
        environment = default_set.environment("PaymentFunction")
        environment["CIRCUIT_BREAKER_REDIS_URL"] = f"rediss://127.0.0.1:{cache.port}"
        environment["SSL_CERT_FILE"] = str(cache.ca)
        container = payment_container(default_set, environment).start()
        # WHEN it takes a payment THEN it ran on its local breaker, and the rehearsal says so
        with pytest.raises(RehearsalError, match=r"PaymentFunction ran on a local breaker"):
            http(container, payment(unique_key()))
        # AND with the IAM variables it logs in as the cache's user, on the fleet's breaker
        environment["CIRCUIT_BREAKER_REDIS_IAM_USER"] = "BreakerCacheUser.Ref"
        environment["CIRCUIT_BREAKER_REDIS_IAM_CACHE"] = "BreakerCache.Ref"
        container = payment_container(default_set, environment).start()
        status, body = http(container, payment(unique_key()))
        assert status == 200, body
        assert "BreakerCacheUser.Ref" in cache.clients()
    finally:
        cache.stop()


def test_a_role_without_elasticache_connect_is_named(default_set: Rehearsal) -> None:
    # GIVEN the gate as the Redis store deploys it, and the same gate without the Connect
    function = copy.deepcopy(default_set.functions["BreakerGateFunction"])
    function.environment.update(
        {
            "CIRCUIT_BREAKER_REDIS_URL": "rediss://BreakerCache.Endpoint.Address:6379",
            "CIRCUIT_BREAKER_REDIS_IAM_USER": "BreakerCacheUser.Ref",
            "CIRCUIT_BREAKER_REDIS_IAM_CACHE": "BreakerCache.Ref",
        }
    )
    connect = {
        "Effect": "Allow",
        "Action": "elasticache:Connect",
        "Resource": ["BreakerCache.ARN", "BreakerCacheUser.Arn"],
    }
    function.statements.append(connect)
    assert cache_login_problems({"BreakerGateFunction": function}) == []
    # WHEN the statement is dropped THEN the check names the function and the permission
    function.statements.remove(connect)
    assert cache_login_problems({"BreakerGateFunction": function}) == [
        "BreakerGateFunction uses the cache but its role may not elasticache:Connect "
        "to the cache and its user"
    ]


def test_resources_that_depend_on_each_other_are_named() -> None:
    # GIVEN a consumer whose environment names its own mapping, which names the consumer
    template: dict[str, Any] = {
        "Resources": {
            "Consumer": {
                "Type": "AWS::Lambda::Function",
                "Properties": {"Environment": {"Variables": {"M": {"Fn::Sub": "${Mapping}"}}}},
            },
            "Mapping": {
                "Type": "AWS::Lambda::EventSourceMapping",
                "Properties": {"FunctionName": {"Ref": "Consumer"}},
            },
        }
    }
    # THEN the cycle is found (CloudFormation refuses such a stack)
    assert dependency_cycle(template, {}) == ["Consumer", "Mapping", "Consumer"]
    # AND a condition that removes the reference removes the cycle
    variables = template["Resources"]["Consumer"]["Properties"]["Environment"]["Variables"]
    variables["M"] = {"Fn::If": ["Paused", {"Fn::Sub": "${Mapping}"}, {"Ref": "AWS::NoValue"}]}
    assert dependency_cycle(template, {"Paused": False}) is None


def test_an_alarm_property_the_rehearsal_cannot_resolve_is_named(default_set: Rehearsal) -> None:
    # GIVEN an alarm whose description reads another resource's attribute (CloudFormation
    # would resolve it; put_alarms resolves parameters only)
    template = copy.deepcopy(default_set.translated)
    alarm = template["Resources"]["BreakerOpenedAlarm"]["Properties"]
    alarm["AlarmDescription"] = {"Fn::GetAtt": ["CircuitBreakersTable", "Arn"]}
    # WHEN it is put THEN the rehearsal refuses it by name instead of sending a guess
    conditions = condition_values(template, {})
    with pytest.raises(RehearsalError, match=r"alarm BreakerOpenedAlarm: .* \['Fn::GetAtt'\]"):
        put_alarms(default_set.endpoint, default_set.admin, "bites", template, {}, conditions)


def test_a_container_that_went_local_stays_flagged_until_it_recovers() -> None:
    # GIVEN a container whose breaker logged its switch to local state once
    switched = [{"breaker_event": "degraded", "message": "circuit payment-api: running on local"}]
    reason = local_since(switched, None)
    # WHEN later invocations log nothing about the store (it is left alone for a back-off)
    # THEN they still count as run on the local breaker, until the store answers again
    assert local_since([], reason) == "circuit payment-api: running on local"
    assert local_since([{"breaker_event": "recovered"}], reason) is None
