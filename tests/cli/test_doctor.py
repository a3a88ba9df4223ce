"""`fleetbreaker doctor`: one line per check, exit 0 when all pass, 1 naming the failing check
and the option or variable to change.

Each run a process of its own (forked from the CLI's server: tests/cli/forked.py) against
real stores: moto's server enforcing IAM (a denied write,
refused credentials), moto's server and dynalite (a missing table, a table of the wrong
shape), a TLS redis-server that lets anyone in, a plain one, and one shaped like the stack's
cache (TLS only, no default user, the IAM user with the template's access string).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools import servers
from devtools.rehearsal import ElastiCacheLikeRedis
from devtools.rehearsal import client as signed_client
from devtools.sam_template import load_template
from devtools.servers import make_certificates
from fleetbreaker import DynamoDBStore
from fleetbreaker.breaker import system_clock
from fleetbreaker.cli.doctor import setting_text
from fleetbreaker.errors import ACCESS_DENIED, StoreMisconfiguredError
from fleetbreaker.stores import doctor as checks
from fleetbreaker.stores.dynamodb_table import create_request
from tests.cli.conftest import Result, one_line_error, run_forked
from tests.conftest import IamMoto

DYNAMODB_CHECKS = ["reachable", "table", "key", "ttl", "encryption", "read", "write"]
REDIS_CHECKS = ["reachable", "tls", "login", "scripts", "read", "write"]
IAM_USER = "fleetbreaker-1a2b3c4d"
IAM_VARIABLES = "CIRCUIT_BREAKER_REDIS_IAM_USER and CIRCUIT_BREAKER_REDIS_IAM_CACHE"


def lines(result: Result) -> dict[str, tuple[str, str]]:
    """The check lines: name -> (status, the rest), in order; the heading line aside."""
    found = {}
    heading, *rows = result.out.splitlines()
    assert heading.startswith("doctor: "), result.out
    for row in rows:
        status, check, rest = row.split(maxsplit=2)
        found[check] = (status, rest)
    return found


def statuses(result: Result) -> dict[str, str]:
    return {check: status for check, (status, _) in lines(result).items()}


# -- DynamoDB --------------------------------------------------------------------------------


@pytest.fixture
def as_admin(iam_moto: IamMoto) -> dict[str, str]:
    return iam_moto.environment(iam_moto.admin)


def doctor_on(endpoint: str, table: str, env: dict[str, str], *more: str) -> Result:
    return run_forked(["--table", table, "--endpoint-url", endpoint, "doctor", *more], env)


def test_a_breaker_table_passes_every_check(iam_moto: IamMoto, as_admin: dict[str, str]) -> None:
    # GIVEN a table shaped as template.yaml declares it (create-table's), and the admin
    table = iam_moto.breaker_table()

    # WHEN doctor checks it
    result = doctor_on(iam_moto.endpoint_url, table, as_admin, "--name", "payment-api")

    # THEN every check passes, one line each, in order, and it exits 0
    assert result.code == 0, result.out + result.err
    assert statuses(result) == dict.fromkeys(DYNAMODB_CHECKS, "ok")
    found = lines(result)
    assert "read breaker 'payment-api': no record (closed)" in found["read"][1]
    assert "removed (DeleteItem)" in found["write"][1]
    assert result.err == ""


@pytest.fixture(params=["moto_server", "dynalite_server"])
def endpoint(request: pytest.FixtureRequest) -> str:
    found: str = request.getfixturevalue(request.param)
    return found


def test_a_missing_table_fails_the_table_check_naming_the_option(endpoint: str) -> None:
    result = doctor_on(endpoint, "NoSuchBreakers", {})

    assert result.code == 1
    found = lines(result)
    status, rest = found["table"]
    assert status == "FAIL"
    assert "'NoSuchBreakers' does not exist in us-east-1; change --table:" in rest
    assert "fleetbreaker create-table NoSuchBreakers" in rest
    assert [statuses(result)[c] for c in DYNAMODB_CHECKS[2:]] == ["skip"] * 5
    assert one_line_error(result) == (
        "fleetbreaker: error: doctor: 1 check(s) failed: table (change --table)"
    )


def test_a_missing_table_named_by_the_variable_names_the_variable(endpoint: str) -> None:
    result = run_forked(
        ["--endpoint-url", endpoint, "doctor"], {"CIRCUIT_BREAKER_TABLE": "NoSuchBreakers"}
    )

    assert result.code == 1
    assert "table (change CIRCUIT_BREAKER_TABLE)" in one_line_error(result)


def test_a_table_keyed_otherwise_fails_the_key_check(endpoint: str) -> None:
    # GIVEN a table shaped as the template's but keyed by "id"
    table = f"keyed-by-id-{uuid.uuid4().hex[:8]}"
    request = create_request(table)
    request["AttributeDefinitions"] = [{"AttributeName": "id", "AttributeType": "S"}]
    request["KeySchema"] = [{"AttributeName": "id", "KeyType": "HASH"}]
    client = servers.dynamodb_client(endpoint)
    client.create_table(**request)
    client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 0.2})

    result = doctor_on(endpoint, table, {})

    # THEN the key check fails naming --table, and so does the read (the breaker's key)
    assert result.code == 1
    status, rest = lines(result)["key"]
    assert status == "FAIL"
    assert "key is id (S, HASH); want name (S, HASH) only; change --table" in rest
    assert statuses(result)["read"] == "FAIL"
    assert "key (change --table)" in one_line_error(result)


def test_a_table_without_ttl_or_kms_fails_those_checks(moto_server: str) -> None:
    # GIVEN a table keyed right, on-demand, with neither TTL nor a KMS key
    table = servers.make_table(moto_server)

    result = doctor_on(moto_server, table, {})

    assert result.code == 1
    found = lines(result)
    assert found["ttl"][0] == found["encryption"][0] == "FAIL"
    assert "TTL is disabled; want it on expires_at" in found["ttl"][1]
    assert "update-time-to-live" in found["ttl"][1]
    assert "want KMS" in found["encryption"][1]
    assert statuses(result)["write"] == "ok"
    assert one_line_error(result) == (
        "fleetbreaker: error: doctor: 2 check(s) failed: ttl (the fix above); "
        "encryption (the fix above)"
    )


def test_a_denied_write_fails_the_write_check_naming_the_policy(iam_moto: IamMoto) -> None:
    # GIVEN an operator allowed to describe and read the table, not to update it
    table = iam_moto.breaker_table()
    reader = iam_moto.principal(
        "dynamodb:DescribeTable", "dynamodb:DescribeTimeToLive", "dynamodb:GetItem"
    )

    result = doctor_on(iam_moto.endpoint_url, table, iam_moto.environment(reader))

    assert result.code == 1
    status, rest = lines(result)["write"]
    assert status == "FAIL"
    assert "not authorized to perform: dynamodb:UpdateItem" in rest
    assert "change the caller's IAM policy: allow dynamodb:GetItem and dynamodb:UpdateItem" in rest
    assert [statuses(result)[c] for c in DYNAMODB_CHECKS[:-1]] == ["ok"] * 6
    assert "write (change the caller's IAM policy)" in one_line_error(result)


def test_a_functions_policy_reads_and_writes_but_cannot_describe(iam_moto: IamMoto) -> None:
    # GIVEN the two actions the stack's CircuitBreakersAccessPolicy gives functions
    table = iam_moto.breaker_table()
    function = iam_moto.principal("dynamodb:GetItem", "dynamodb:UpdateItem")

    result = doctor_on(iam_moto.endpoint_url, table, iam_moto.environment(function))

    # THEN a breaker could run (read and write pass), the shape cannot be checked, and the
    # sentinel the write made, not deletable with this policy, is left to expire
    assert result.code == 1
    found = statuses(result)
    assert (found["read"], found["write"]) == ("ok", "ok")
    assert found["table"] == "FAIL"
    assert [found[c] for c in ("key", "ttl", "encryption")] == ["skip"] * 3
    assert "dynamodb:DescribeTable" in lines(result)["table"][1]
    assert f"expires within {checks.SENTINEL_TTL_S} s" in lines(result)["write"][1]
    admin = DynamoDBStore(table, boto3_client=iam_moto.client())
    later = system_clock() + (checks.SENTINEL_TTL_S + 1) * 1000
    assert [e.name for e in admin.list_records(later)] == []


def test_refused_credentials_fail_the_reachable_check(iam_moto: IamMoto) -> None:
    table = iam_moto.breaker_table()
    wrong = {"AWS_ACCESS_KEY_ID": iam_moto.admin.access_key_id, "AWS_SECRET_ACCESS_KEY": "nope"}

    result = doctor_on(iam_moto.endpoint_url, table, wrong)

    assert result.code == 1
    assert lines(result)["reachable"][0] == "FAIL"
    assert [statuses(result)[c] for c in DYNAMODB_CHECKS[1:]] == ["skip"] * 6
    assert "reachable (change --profile, or the AWS credentials in the environment)" in (
        one_line_error(result)
    )


def test_the_profiles_credentials_are_the_ones_checked(
    iam_moto: IamMoto, tmp_path: Path, as_admin: dict[str, str]
) -> None:
    # GIVEN the admin's keys in the environment and a reader's in the profile "reader"
    table = iam_moto.breaker_table()
    reader = iam_moto.principal("dynamodb:DescribeTable", "dynamodb:DescribeTimeToLive")
    config = tmp_path / "config"
    config.write_text(
        f"[profile reader]\naws_access_key_id = {reader.access_key_id}\n"
        f"aws_secret_access_key = {reader.secret_access_key}\n"
    )
    env = {**as_admin, "AWS_CONFIG_FILE": str(config)}

    # WHEN doctor runs with --profile reader THEN the reader's permissions are checked
    result = doctor_on(iam_moto.endpoint_url, table, env, "--profile", "reader")
    assert statuses(result)["read"] == "FAIL"
    assert "not authorized to perform: dynamodb:GetItem" in lines(result)["read"][1]
    # AND without it, the environment's (the admin's)
    assert doctor_on(iam_moto.endpoint_url, table, env).code == 0


class ScopedToNames(DynamoDBStore):
    """A function's store whose policy allows only the breaker "payment-api"
    (dynamodb:LeadingKeys): what IAM would answer, since moto ignores condition keys."""

    def force_state(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name != "payment-api":
            raise StoreMisconfiguredError(
                f"access denied: {name!r} is not in dynamodb:LeadingKeys", problem=ACCESS_DENIED
            )
        return super().force_state(name, *args, **kwargs)


def test_a_policy_scoped_to_breaker_names_passes_with_one_of_them(iam_moto: IamMoto) -> None:
    # GIVEN a store whose writes are allowed on "payment-api" only
    table = iam_moto.breaker_table()
    function = iam_moto.principal("dynamodb:GetItem", "dynamodb:UpdateItem")
    client = signed_client(iam_moto.endpoint_url, "dynamodb", function)
    store = ScopedToNames(table, boto3_client=client)

    # WHEN the checks run with --name payment-api, and without a name
    named = checks.run_checks(store, "payment-api", system_clock())
    unnamed = checks.run_checks(store, None, system_clock())

    # THEN the write passes on the named breaker (a write fenced to change nothing)
    write = {check.name: check for check in named}["write"]
    assert (write.status, "scoped to breaker names" in write.detail) == ("ok", True)
    # AND without a name it fails, saying to pass --name
    write = {check.name: check for check in unnamed}["write"]
    assert write.failed
    assert "pass --name" in write.fix
    # AND the named breaker's record was not written
    assert DynamoDBStore(table, boto3_client=iam_moto.client()).load("payment-api", 0) is None


# -- Redis -----------------------------------------------------------------------------------


def template_access_string() -> list[str]:
    user = load_template()["Resources"]["BreakerCacheUser"]["Properties"]
    access: str = user["AccessString"]
    return access.split()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_certificates(tmp_path_factory.mktemp("doctor-tls"))


@contextlib.contextmanager
def cache_like(
    certificates: tuple[Path, Path, Path], access_string: list[str]
) -> Iterator[ElastiCacheLikeRedis]:
    """A cache shaped like the stack's whose IAM user has ``access_string``."""
    server = ElastiCacheLikeRedis(*certificates, iam_user=IAM_USER, access_string=access_string)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def stack_cache(
    redis_server: str, certificates: tuple[Path, Path, Path]
) -> Iterator[ElastiCacheLikeRedis]:
    """The stack's cache: TLS only, no default user, the IAM user with the template's access
    string (redis_server: the missing-backend rule)."""
    with cache_like(certificates, template_access_string()) as server:
        yield server


def cache_env(server: Any, *, iam: bool) -> dict[str, str]:
    env = {"SSL_CERT_FILE": str(server.ca), "AWS_REGION": "eu-west-1"}
    if iam:
        env.update(
            {
                "CIRCUIT_BREAKER_REDIS_IAM_USER": IAM_USER,
                "CIRCUIT_BREAKER_REDIS_IAM_CACHE": IAM_USER,
            }
        )
    return env


def doctor_redis(url: str, env: dict[str, str], *more: str) -> Result:
    return run_forked(["--redis-url", url, "doctor", *more], env)


def test_the_stacks_cache_logged_in_as_its_iam_user_passes_every_check(
    stack_cache: ElastiCacheLikeRedis,
) -> None:
    url = f"rediss://127.0.0.1:{stack_cache.port}"

    result = doctor_redis(url, cache_env(stack_cache, iam=True), "--name", "payment-api")

    assert result.code == 0, result.out + result.err
    assert statuses(result) == dict.fromkeys(REDIS_CHECKS, "ok")
    assert f"logged in as IAM user {IAM_USER!r}" in lines(result)["login"][1]
    assert "removed (DEL)" in lines(result)["write"][1]


def test_the_stacks_cache_without_a_login_fails_the_login_check(
    stack_cache: ElastiCacheLikeRedis,
) -> None:
    url = f"rediss://127.0.0.1:{stack_cache.port}"

    result = doctor_redis(url, cache_env(stack_cache, iam=False))

    assert result.code == 1
    found = statuses(result)
    assert (found["reachable"], found["tls"], found["login"]) == ("ok", "ok", "FAIL")
    assert [found[c] for c in ("scripts", "read", "write")] == ["skip"] * 3
    assert f"login (change {IAM_VARIABLES})" in one_line_error(result)


def test_a_tls_server_that_lets_anyone_in_fails_the_login_check(tls_redis: Any) -> None:
    result = doctor_redis(tls_redis.url, cache_env(tls_redis, iam=False))

    assert result.code == 1
    found = statuses(result)
    assert found == {**dict.fromkeys(REDIS_CHECKS, "ok"), "login": "FAIL"}
    assert "no login" in lines(result)["login"][1]
    assert one_line_error(result) == (
        f"fleetbreaker: error: doctor: 1 check(s) failed: login (change {IAM_VARIABLES})"
    )


def test_a_certificate_no_trusted_ca_signed_fails_tls_naming_the_ca_bundle(
    tls_redis: Any,
) -> None:
    # GIVEN a TLS server whose certificate a private CA signed, and no SSL_CERT_FILE naming it
    env = {k: v for k, v in cache_env(tls_redis, iam=False).items() if k != "SSL_CERT_FILE"}

    # WHEN doctor checks it
    result = doctor_redis(tls_redis.url, env)

    # THEN the server is reachable, the handshake's refusal fails tls (never "verified"), the
    # fix names the CA bundle rather than the network, and what needs TLS is not checked
    assert result.code == 1, result.out + result.err
    found = lines(result)
    assert [found[c][0] for c in REDIS_CHECKS] == ["ok", "FAIL", *["skip"] * 4]
    rest = found["tls"][1]
    assert "CERTIFICATE_VERIFY_FAILED" in rest
    assert "verified" not in rest.split(";")[0]
    assert "change SSL_CERT_FILE" in rest
    assert "network" not in rest
    assert "reach" not in rest
    assert "tls (change SSL_CERT_FILE (the CA bundle this machine trusts))" in one_line_error(
        result
    )


def test_a_certificate_for_another_host_fails_tls_naming_the_url(tls_redis: Any) -> None:
    # GIVEN the server's CA trusted, but the URL names a host its certificate does not
    url = tls_redis.url.replace("127.0.0.1", "localhost")

    result = doctor_redis(url, cache_env(tls_redis, iam=False))

    # THEN tls fails on the host name, and the fix is the URL's host
    assert result.code == 1, result.out + result.err
    status, rest = lines(result)["tls"]
    assert status == "FAIL"
    assert "CERTIFICATE_VERIFY_FAILED" in rest
    assert "change --redis-url: connect with a host name the certificate names" in rest


def test_a_rediss_url_to_a_plain_text_server_says_it_may_not_speak_tls(
    redis_server: str,
) -> None:
    # GIVEN a rediss:// URL naming a server that does not speak TLS (it waits for a command
    # while the client waits for the handshake's answer)
    result = doctor_redis(redis_server.replace("redis://", "rediss://"), {})

    # THEN no answer (exit 3), tls not claimed, and the fix says TLS may be what is missing
    assert result.code == 3, result.out + result.err
    found = lines(result)
    assert (found["reachable"][0], found["tls"][0]) == ("FAIL", "skip")
    assert "with rediss://, one that speaks TLS on that port" in found["reachable"][1]


def test_tls_is_verified_only_after_a_handshake_verified_it(tls_redis: Any) -> None:
    # GIVEN the same server with its CA in SSL_CERT_FILE
    result = doctor_redis(tls_redis.url, cache_env(tls_redis, iam=False))

    # THEN tls passes, saying which CA bundle the handshake checked the certificate against
    status, rest = lines(result)["tls"]
    assert status == "ok"
    assert "the handshake verified the server's certificate" in rest
    assert str(tls_redis.ca) in rest


def test_a_wrong_password_in_the_url_names_the_url_not_the_iam_variables(
    redis_factory: Any,
) -> None:
    # GIVEN a server whose user 'app' has another password than the URL's
    import redis

    server = redis_factory()
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    admin.execute_command("ACL", "SETUSER", "app", "on", ">right", "~*", "&*", "+@all")
    admin.close()

    # WHEN doctor checks it with a wrong password in --redis-url
    result = doctor_redis(f"redis://app:wrong@127.0.0.1:{server.port}/0", {})

    # THEN the login fails, and the fix names the URL's user and password
    assert result.code == 1
    status, rest = lines(result)["login"]
    assert status == "FAIL"
    assert "change the user and password in --redis-url" in rest
    assert "IAM" not in one_line_error(result)
    assert "login (change the user and password in --redis-url)" in one_line_error(result)


def test_an_unreachable_cache_exits_3_as_every_command_does() -> None:
    # GIVEN a Redis URL where nothing listens
    result = doctor_redis(f"redis://127.0.0.1:{servers.refused_port()}/0", {})

    # THEN reachable fails and doctor exits 3, as status would: "unreachable", not "misconfigured"
    assert result.code == 3, result.out + result.err
    assert lines(result)["reachable"][0] == "FAIL"
    assert lines(result)["login"] == ("skip", "not checked: no answer")


def test_an_unreachable_table_endpoint_exits_3() -> None:
    result = doctor_on(f"http://127.0.0.1:{servers.refused_port()}", "Breakers", {})

    assert result.code == 3, result.out + result.err
    assert lines(result)["reachable"][0] == "FAIL"
    assert "reachable (change --endpoint-url)" in one_line_error(result)


def test_a_plain_text_server_fails_the_tls_check(redis_server: str) -> None:
    result = doctor_redis(redis_server, {})

    assert result.code == 1
    status, rest = lines(result)["tls"]
    assert status == "FAIL"
    assert "plain text (redis://)" in rest
    assert "tls (change --redis-url)" in one_line_error(result)


def test_a_user_that_may_not_load_scripts_fails_the_scripts_check(
    redis_server: str, certificates: tuple[Path, Path, Path]
) -> None:
    # GIVEN the stack's cache whose user lacks +script|load
    access = [word for word in template_access_string() if word != "+script|load"]
    with cache_like(certificates, access) as server:
        url = f"rediss://127.0.0.1:{server.port}"

        result = doctor_redis(url, cache_env(server, iam=True))

        assert result.code == 1
        status, rest = lines(result)["scripts"]
        assert status == "FAIL"
        assert "+script|load" in rest
        assert "scripts (change the cache user's access string)" in one_line_error(result)


# -- output and naming -----------------------------------------------------------------------


def test_output_json_is_one_document_with_every_check(moto_server: str) -> None:
    result = doctor_on(moto_server, "NoSuchBreakers", {}, "--output", "json")

    assert result.code == 1
    document = json.loads(result.out)
    assert (document["store"], document["ok"]) == ("table 'NoSuchBreakers'", False)
    assert [check["check"] for check in document["checks"]] == DYNAMODB_CHECKS
    table = document["checks"][1]
    assert (table["status"], table["change"]) == ("FAIL", "--table")
    assert document["checks"][0]["fix"] is None


def test_output_jsonl_is_one_check_per_line(moto_server: str) -> None:
    result = doctor_on(moto_server, "NoSuchBreakers", {}, "--output", "jsonl")

    assert [line["check"] for line in result.json_lines()] == DYNAMODB_CHECKS


@pytest.mark.parametrize(
    ("options", "setting", "named"),
    [
        ({"table": "T"}, checks.TABLE, "--table"),
        ({}, checks.TABLE, "CIRCUIT_BREAKER_TABLE"),
        ({"stack": "prod"}, checks.TABLE, "--stack prod (its output CircuitBreakersTableName)"),
        ({"redis_url": "rediss://h"}, checks.REDIS_URL, "--redis-url"),
        ({}, checks.REDIS_URL, "CIRCUIT_BREAKER_REDIS_URL"),
        ({"stack": "prod"}, checks.REDIS_URL, "--stack prod (its output BreakerCacheEndpoint)"),
        ({}, checks.IAM_USER, IAM_VARIABLES),
        (
            {"stack": "prod"},
            checks.IAM_USER,
            "--stack prod (its outputs BreakerCacheUserId and BreakerCacheName)",
        ),
        ({}, checks.POLICY, "the caller's IAM policy"),
        ({}, checks.ENDPOINT, "--region or --endpoint-url"),
        ({"endpoint_url": "http://localhost:8000"}, checks.ENDPOINT, "--endpoint-url"),
        ({"region": "eu-west-1"}, checks.ENDPOINT, "--region"),
        ({"redis_url": "rediss://h"}, checks.URL_LOGIN, "the user and password in --redis-url"),
        ({}, checks.URL_LOGIN, "the user and password in CIRCUIT_BREAKER_REDIS_URL"),
        ({}, checks.CA, "SSL_CERT_FILE (the CA bundle this machine trusts)"),
        ({}, checks.ACCESS, "the cache user's access string"),
    ],
)
def test_a_setting_is_named_as_the_command_was_run(
    options: dict[str, str], setting: str, named: str
) -> None:
    args = argparse.Namespace(**{"table": None, "redis_url": None, "stack": None, **options})

    assert setting_text(setting, args) == named
