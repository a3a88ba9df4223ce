"""A misconfigured store, as deployed: said once by the function, refused at its init when it
verifies its store, and `fleetbreaker doctor` on the deployed stack.

The payment function runs in its own process with its stack's environment and IAM policy
(moto enforcing it); only CIRCUIT_BREAKER_TABLE (and BREAKER_VERIFY_STORE) are changed here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.rehearsal import LambdaContainer, RehearsalError
from devtools.servers import REPO_ROOT
from tests.rehearsal.conftest import STACK, Rehearsal, unique_key
from tests.rehearsal.support import payment

pytestmark = pytest.mark.rehearsal

CLI = Path(sys.executable).with_name("fleetbreaker")


def payment_container(rehearsal: Rehearsal, **changes: str) -> LambdaContainer:
    """A container of the payment function, its environment with ``changes``."""
    environment = {**rehearsal.environment("PaymentFunction"), **changes}
    container = LambdaContainer(
        rehearsal.functions["PaymentFunction"], environment, REPO_ROOT / "functions/payment"
    )
    rehearsal.containers.append(container)
    return container


def test_a_missing_table_is_one_error_line_naming_the_variable(default_set: Rehearsal) -> None:
    # GIVEN the payment function deployed with a table name that does not exist
    container = payment_container(default_set, CIRCUIT_BREAKER_TABLE="NoSuchBreakers").start()

    # WHEN it takes two payments
    invocations = [container.invoke(payment(unique_key())) for _ in range(2)]

    # THEN both are charged, and its log holds one ERROR line naming the variable
    assert [i.answer()["statusCode"] for i in invocations] == [200, 200]
    records = [r for i in invocations for r in i.records()]
    misconfigured = [r for r in records if r.get("breaker_event") == "store_misconfigured"]
    assert len(misconfigured) == 1, records
    assert misconfigured[0]["level"] == "ERROR"
    assert misconfigured[0]["variable"] == "CIRCUIT_BREAKER_TABLE"
    assert misconfigured[0]["problem"] == "table_not_found"
    assert "'NoSuchBreakers' does not exist" in misconfigured[0]["message"]


def test_verify_store_fails_the_init_naming_the_variable(default_set: Rehearsal) -> None:
    container = payment_container(
        default_set, CIRCUIT_BREAKER_TABLE="NoSuchBreakers", BREAKER_VERIFY_STORE="true"
    )

    with pytest.raises(
        RehearsalError, match=r"(?s)PaymentFunction: init failed.*does not exist.*TABLE"
    ):
        container.start()


def test_verify_store_passes_the_init_on_the_stacks_own_table(default_set: Rehearsal) -> None:
    container = payment_container(default_set, BREAKER_VERIFY_STORE="true").start()

    assert container.invoke(payment(unique_key())).answer()["statusCode"] == 200


def doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`fleetbreaker doctor` with ``env`` over this process's environment."""
    return subprocess.run(
        [str(CLI), "doctor", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def as_admin(rehearsal: Rehearsal) -> dict[str, str]:
    """An operator's environment: the admin's keys, the rehearsal's moto for every service."""
    return {
        "AWS_ENDPOINT_URL": rehearsal.endpoint,
        "AWS_ACCESS_KEY_ID": rehearsal.admin.access_key_id,
        "AWS_SECRET_ACCESS_KEY": rehearsal.admin.secret_access_key,
    }


def test_doctor_on_the_deployed_stacks_table(core_rehearsal: Rehearsal) -> None:
    # GIVEN the core stack as CloudFormation (moto) deployed it from template.yaml
    # WHEN an operator runs doctor on the stack
    result = doctor("--stack", STACK, "--name", "payment-api", env=as_admin(core_rehearsal))

    # THEN the stack's outputs name the table, its key is the breakers', a read and a fenced
    # write pass. moto's CloudFormation applies neither TimeToLiveSpecification nor
    # SSESpecification, so those two fail here; that the template declares them as
    # create-table makes them is tests/cli/test_create_table.py's, and doctor passes on
    # create-table's table (tests/cli/test_doctor.py).
    checks = {row.split()[1]: row.split()[0] for row in result.stdout.splitlines()[1:]}
    assert checks == {
        **dict.fromkeys(("reachable", "table", "key", "read", "write"), "ok"),
        "ttl": "FAIL",
        "encryption": "FAIL",
    }, result.stdout + result.stderr
    assert result.stdout.startswith("doctor: table 'fleetbreaker-CircuitBreakersTable-")


def test_doctor_in_a_functions_environment_names_what_it_may_not_do(
    default_set: Rehearsal,
) -> None:
    # GIVEN the payment function's environment as deployed: its CIRCUIT_BREAKER_TABLE and its
    # role's credentials (moto enforcing the role's statements)
    env = default_set.environment("PaymentFunction")

    # WHEN doctor runs in it
    result = doctor("--name", "payment-api", env=env)

    # THEN its breaker can run (read and write pass); describing the table, which only
    # operators need, is what fails, naming the policy
    assert result.returncode == 1, result.stdout + result.stderr
    checks = {row.split()[1]: row.split()[0] for row in result.stdout.splitlines()[1:]}
    assert (checks["read"], checks["write"], checks["table"]) == ("ok", "ok", "FAIL")
    assert "table (change the caller's IAM policy)" in result.stderr
