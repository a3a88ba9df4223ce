"""What the rehearsal's tests share: running events through containers and checking them."""

from __future__ import annotations

import json
from typing import Any

from devtools.rehearsal import (
    DeployedFunction,
    Invocation,
    LambdaContainer,
    RehearsalError,
    breaker_problems,
)
from tests.sam.conftest import EVENTS, load_event


def on_fleet_breaker(invocation: Invocation) -> Invocation:
    """``invocation``, after checking its log: a store error or a switch to the local
    breaker is a RehearsalError naming the function and the cause."""
    problems = breaker_problems(invocation.records())
    if not problems and invocation.still_local:
        problems = [f"still on local state since: {invocation.still_local}"]
    if problems:
        raise RehearsalError(
            f"{invocation.function} ran on a local breaker, not the fleet's: " + "; ".join(problems)
        )
    return invocation


def run(container: LambdaContainer, event: Any) -> Any:
    """One invocation's answer, on the fleet's breaker (else a RehearsalError)."""
    return on_fleet_breaker(container.invoke(event)).answer()


def http(container: LambdaContainer, event: Any) -> tuple[int, dict[str, Any]]:
    """An HTTP API invocation: (status, JSON body)."""
    answer = run(container, event)
    return answer["statusCode"], json.loads(answer["body"])


def payment(key: str, amount: int = 1250) -> dict[str, Any]:
    """events/payment-ok.json with a payment of its own."""
    event = load_event(EVENTS / "payment-ok.json")
    event["body"] = json.dumps({"amount": amount, "currency": "EUR", "idempotency_key": key})
    return event


def scheduled_event(rule_arn: str) -> dict[str, Any]:
    """The event an EventBridge schedule (rate(1 minute)) sends its target."""
    return {
        "version": "0",
        "id": "5a3b1c2d-0000-4000-8000-000000000001",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-12-01T12:00:00Z",
        "region": "us-east-1",
        "resources": [rule_arn],
        "detail": {},
    }


def cache_login_problems(functions: dict[str, DeployedFunction]) -> list[str]:
    """Functions the stack points at its cache that cannot log in as the cache's IAM user:
    a missing variable, or no elasticache:Connect on the cache and its user (moto does not
    model ElastiCache, so this is checked statically; the ARNs are placeholders)."""
    problems = []
    for logical_id, function in functions.items():
        variables = function.environment
        if "CIRCUIT_BREAKER_REDIS_URL" not in variables:
            if any("elasticache:" in json.dumps(s) for s in function.statements):
                problems.append(f"{logical_id} may connect to a cache it does not use")
            continue
        for name, value in (
            ("CIRCUIT_BREAKER_REDIS_IAM_USER", "BreakerCacheUser.Ref"),
            ("CIRCUIT_BREAKER_REDIS_IAM_CACHE", "BreakerCache.Ref"),
        ):
            if variables.get(name) != value:
                problems.append(f"{logical_id} uses the cache without {name}={value}")
        connects = [s for s in function.statements if s["Action"] == "elasticache:Connect"]
        if [sorted(s["Resource"]) for s in connects] != [
            ["BreakerCache.ARN", "BreakerCacheUser.Arn"]
        ]:
            problems.append(
                f"{logical_id} uses the cache but its role may not elasticache:Connect "
                "to the cache and its user"
            )
    return problems
