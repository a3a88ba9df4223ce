"""template.yaml's optional breaker cache (BreakerStore=redis): off by default, lint-clean on.

tests/sam/test_template.py lints the template as written, where the cache is off. Here the
same template is linted with the cache switched on, and its wiring is checked against what
RedisStore and the payment function expect.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.servers import REPO_ROOT
from fleetbreaker import RedisStore

TEMPLATE = REPO_ROOT / "template.yaml"
CFN_LINT = Path(sys.executable).parent / "cfn-lint"
SUBNETS = "subnet-0123456789abcdef0,subnet-0fedcba9876543210"
SECURITY_GROUPS = "sg-0123456789abcdef0"


def load_template() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse

    template: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    return template


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def test_the_cache_is_off_by_default(template: dict[str, Any]) -> None:
    parameters = template["Parameters"]
    assert parameters["BreakerStore"]["Default"] == "dynamodb"
    assert parameters["BreakerStore"]["AllowedValues"] == ["dynamodb", "redis"]
    assert parameters["BreakerCacheSubnetIds"]["Default"] == ""
    assert parameters["BreakerCacheSecurityGroupIds"]["Default"] == ""
    cache = template["Resources"]["BreakerCache"]
    assert cache["Condition"] == "BreakerOnRedis"
    assert template["Outputs"]["BreakerCacheEndpoint"]["Condition"] == "BreakerOnRedis"


def test_redis_without_a_network_is_refused_at_deploy(template: dict[str, Any]) -> None:
    # The condition also requires the network, so a half-configured stack would silently stay
    # on DynamoDB; the rule makes CloudFormation refuse it with a message instead.
    rule = template["Rules"]["BreakerCacheNeedsANetwork"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "BreakerStore"}, "redis"]}
    described = {a["AssertDescription"] for a in rule["Assertions"]}
    assert described == {
        "BreakerStore=redis needs BreakerCacheSubnetIds",
        "BreakerStore=redis needs BreakerCacheSecurityGroupIds",
    }


def test_cfn_lint_is_clean_with_the_cache_on(tmp_path: Path) -> None:
    # GIVEN the template with the cache switched on: defaults set to redis and real-looking
    # IDs, and the condition reduced to the parameter test, which cfn-lint can evaluate (it
    # then checks the Fn::If branches that only exist with the cache)
    text = TEMPLATE.read_text()
    text = text.replace("    Default: dynamodb\n", "    Default: redis\n", 1)
    for parameter, value in [
        ("BreakerCacheSubnetIds", SUBNETS),
        ("BreakerCacheSecurityGroupIds", SECURITY_GROUPS),
    ]:
        empty = f'  {parameter}:\n    Type: CommaDelimitedList\n    Default: ""\n'
        assert text.count(empty) == 1, f"expected {parameter} with an empty default"
        text = text.replace(empty, empty.replace('""', f'"{value}"'))
    condition_start = text.index("  BreakerOnRedis: !And\n")
    condition_end = text.index("\n  DeferWhenOpen:")
    text = (
        text[:condition_start]
        + "  BreakerOnRedis: !Equals [!Ref BreakerStore, redis]"
        + text[condition_end:]
    )
    enabled = tmp_path / "template-redis.yaml"
    enabled.write_text(text)

    # WHEN cfn-lint checks it, informational findings included
    result = subprocess.run(
        [str(CFN_LINT), "--include-checks", "I", "--", str(enabled)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # THEN it reports nothing
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_the_cache_is_valkey_serverless_in_the_given_network(template: dict[str, Any]) -> None:
    properties = template["Resources"]["BreakerCache"]["Properties"]
    assert properties["Engine"] == "valkey"
    assert properties["SubnetIds"] == {"Ref": "BreakerCacheSubnetIds"}
    assert properties["SecurityGroupIds"] == {"Ref": "BreakerCacheSecurityGroupIds"}
    assert properties["CacheUsageLimits"]["DataStorage"] == {"Maximum": 1, "Unit": "GB"}


def test_the_payment_function_joins_the_network_and_gets_the_url(
    template: dict[str, Any],
) -> None:
    function = template["Resources"]["PaymentFunction"]["Properties"]
    assert function["VpcConfig"] == {
        "Fn::If": [
            "BreakerOnRedis",
            {
                "SubnetIds": {"Ref": "BreakerCacheSubnetIds"},
                "SecurityGroupIds": {"Ref": "BreakerCacheSecurityGroupIds"},
            },
            {"Ref": "AWS::NoValue"},
        ]
    }
    url = function["Environment"]["Variables"]["CIRCUIT_BREAKER_REDIS_URL"]
    condition, value, otherwise = url["Fn::If"]
    assert (condition, otherwise) == ("BreakerOnRedis", {"Ref": "AWS::NoValue"})
    assert value == {
        "Fn::Sub": "rediss://${BreakerCache.Endpoint.Address}:${BreakerCache.Endpoint.Port}"
    }


def test_the_url_the_template_builds_is_one_redis_store_takes() -> None:
    # What the Fn::Sub above renders to, for an endpoint ElastiCache Serverless could return
    url = "rediss://fleetbreaker-1a2b3c4d-xyz123.serverless.use1.cache.amazonaws.com:6379"

    store = RedisStore(url=url)  # connects on first use only

    pool = store.client.connection_pool  # type: ignore[attr-defined]
    assert pool.connection_kwargs["host"].endswith(".cache.amazonaws.com")
    assert pool.connection_kwargs["port"] == 6379
    assert pool.connection_class.__name__ == "SSLConnection"
