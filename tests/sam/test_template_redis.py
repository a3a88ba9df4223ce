"""template.yaml's optional breaker cache (BreakerStore=redis): off by default, lint-clean on.

tests/sam/test_template.py lints the template as written, where the cache is off. Here the
same template is linted with the cache switched on, and its wiring is checked against what
RedisStore and the payment function expect.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools.sam_template import load_template
from fleetbreaker import RedisStore
from tests.sam.conftest import SECURITY_GROUPS, SUBNETS

# Every function that keeps or reads a breaker: each has a role of its own (see below).
FUNCTION_ROLES = [
    "PaymentFunctionRole",
    "BreakerGateFunctionRole",
    "DeferredPaymentsFunctionRole",
    "BreakerEventsFunctionRole",
]


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
    asserted = {a["AssertDescription"]: a["Assert"] for a in rule["Assertions"]}
    assert asserted == {
        f"BreakerStore=redis needs {parameter}": {
            "Fn::Not": [{"Fn::Contains": [{"Ref": parameter}, ""]}]
        }
        for parameter in ("BreakerCacheSubnetIds", "BreakerCacheSecurityGroupIds")
    }


# What CloudFormation allows in Rules (its "rule-specific intrinsic functions"), plus Ref.
RULE_FUNCTIONS = {
    "Fn::And",
    "Fn::Contains",
    "Fn::EachMemberEquals",
    "Fn::EachMemberIn",
    "Fn::Equals",
    "Fn::Not",
    "Fn::Or",
    "Fn::RefAll",
    "Fn::ValueOf",
    "Fn::ValueOfAll",
    "Ref",
}


def functions_in(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(functions_in(item) for item in node))
    if not isinstance(node, dict):
        return set()
    found = {key for key in node if key == "Ref" or key.startswith("Fn::")}
    return found.union(*(functions_in(value) for value in node.values()))


def test_the_rules_use_rule_functions_only(template: dict[str, Any]) -> None:
    used = functions_in(template["Rules"])
    assert used, "the rules use no function at all"
    assert used <= RULE_FUNCTIONS, used - RULE_FUNCTIONS


def evaluate_rule(node: Any, values: dict[str, Any]) -> Any:
    """A rule expression's value, with the functions as CloudFormation defines them.

    ``values``: each parameter's value, a list for a CommaDelimitedList, a str otherwise.
    """
    if not isinstance(node, dict):
        return node
    ((function, argument),) = node.items()
    if function == "Ref":
        return values[argument]
    arguments = [evaluate_rule(item, values) for item in argument]
    if function == "Fn::Not":
        return not arguments[0]
    if function == "Fn::Contains":
        return arguments[1] in arguments[0]
    if function == "Fn::Equals":
        return arguments[0] == arguments[1]
    raise AssertionError(f"no evaluation for {function} in a rule")


@pytest.mark.parametrize(
    ("subnets", "groups", "holds"),
    [
        (SUBNETS, SECURITY_GROUPS, True),
        ("", SECURITY_GROUPS, False),
        (SUBNETS, "", False),
        ("subnet-1,,subnet-2", SECURITY_GROUPS, False),
    ],
)
def test_the_rule_needs_both_lists_of_ids(
    template: dict[str, Any], subnets: str, groups: str, holds: bool
) -> None:
    # A CommaDelimitedList parameter is its value split at commas: "" is [""].
    values = {
        "BreakerCacheSubnetIds": subnets.split(","),
        "BreakerCacheSecurityGroupIds": groups.split(","),
    }
    rule = template["Rules"]["BreakerCacheNeedsANetwork"]
    results = [evaluate_rule(a["Assert"], values) for a in rule["Assertions"]]
    assert all(results) is holds


# --------------------------------------------------------------------------- access control


def test_the_cache_admits_only_its_iam_user_group(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    cache = resources["BreakerCache"]["Properties"]
    assert cache["UserGroupId"] == {"Ref": "BreakerCacheUserGroup"}
    group = resources["BreakerCacheUserGroup"]
    assert group["Condition"] == "BreakerOnRedis"
    assert group["Properties"]["Engine"] == "valkey"
    assert group["Properties"]["UserIds"] == [{"Ref": "BreakerCacheUser"}]
    user = resources["BreakerCacheUser"]
    assert user["Condition"] == "BreakerOnRedis"
    assert user["Properties"]["AuthenticationMode"] == {"Type": "iam"}
    # IAM authentication requires the user's name to be its id
    assert user["Properties"]["UserName"] == user["Properties"]["UserId"]
    assert "Passwords" not in user["Properties"]
    access = user["Properties"]["AccessString"].split()
    assert access[:2] == ["on", "~fleetbreaker:*"]
    assert "+@all" not in access
    assert "~*" not in access


@pytest.mark.parametrize(
    "function",
    ["PaymentFunction", "BreakerGateFunction", "DeferredPaymentsFunction", "BreakerEventsFunction"],
)
def test_the_functions_connect_as_the_iam_user_with_tls(
    template: dict[str, Any], function: str
) -> None:
    variables = template["Resources"][function]["Properties"]["Environment"]["Variables"]
    assert variables["CIRCUIT_BREAKER_REDIS_URL"]["Fn::If"][1]["Fn::Sub"].startswith("rediss://")
    assert variables["CIRCUIT_BREAKER_REDIS_IAM_USER"] == {
        "Fn::If": ["BreakerOnRedis", {"Ref": "BreakerCacheUser"}, {"Ref": "AWS::NoValue"}]
    }
    assert variables["CIRCUIT_BREAKER_REDIS_IAM_CACHE"] == {
        "Fn::If": ["BreakerOnRedis", {"Ref": "BreakerCache"}, {"Ref": "AWS::NoValue"}]
    }


@pytest.mark.parametrize("role", FUNCTION_ROLES)
def test_the_roles_may_connect_to_exactly_the_cache_and_user(
    template: dict[str, Any], role: str
) -> None:
    [policy] = template["Resources"][role]["Properties"]["Policies"]
    connects = [s["Fn::If"] for s in policy["PolicyDocument"]["Statement"] if "Fn::If" in s]
    [(condition, statement, otherwise)] = [
        c for c in connects if c[1].get("Sid") == "BreakerCacheConnect"
    ]
    assert (condition, otherwise) == ("BreakerOnRedis", {"Ref": "AWS::NoValue"})
    assert statement["Action"] == "elasticache:Connect"
    assert statement["Resource"] == [
        {"Fn::GetAtt": ["BreakerCache", "ARN"]},
        {"Fn::GetAtt": ["BreakerCacheUser", "Arn"]},
    ]


@pytest.mark.parametrize("role", FUNCTION_ROLES)
def test_the_vpc_access_policy_comes_only_with_the_redis_store(
    template: dict[str, Any], role: str
) -> None:
    # SAM would attach it unconditionally to a function with any VpcConfig: the functions
    # therefore have their own roles, where the attachment follows the condition.
    arns = template["Resources"][role]["Properties"]["ManagedPolicyArns"]
    vpc = [a for a in arns if "AWSLambdaVPCAccessExecutionRole" in str(a)]
    assert vpc == [
        {
            "Fn::If": [
                "BreakerOnRedis",
                {
                    "Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/"
                    "AWSLambdaVPCAccessExecutionRole"
                },
                {"Ref": "AWS::NoValue"},
            ]
        }
    ]
    function = role.removesuffix("Role")
    assert template["Resources"][function]["Properties"]["Role"] == {"Fn::GetAtt": [role, "Arn"]}
    assert "Policies" not in template["Resources"][function]["Properties"]


def test_cfn_lint_is_clean_with_the_cache_on(cfn_lint_findings: dict[str, list[str]]) -> None:
    # GIVEN the template with the cache switched on (tests/sam/conftest.py's
    # template_with_the_cache_on) WHEN cfn-lint checks it, informational findings included
    # THEN it reports nothing
    assert cfn_lint_findings["template-redis.yaml"] == []


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
