"""`sam local invoke` out of the box: events/env.json and scripts/local_services.py.

Docker is not available here, so the container itself is not run. What it would receive is:
sam local passes a function exactly the variables its template declares, overridden by the
env-vars file; the file's values are checked against the template and against each
function's own settings parser, and the payment function is run in-process with them
against the services local_services.py starts where the file says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from devtools.functions import load_function
from devtools.sam_template import load_template
from devtools.servers import REPO_ROOT, free_port
from tests.support import load_file

ENV_JSON = REPO_ROOT / "events" / "env.json"
SCRIPT = REPO_ROOT / "scripts" / "local_services.py"


local_services = load_file(SCRIPT, "local_services")


@pytest.fixture(scope="module")
def env_vars() -> dict[str, dict[str, str]]:
    loaded: dict[str, dict[str, str]] = json.loads(ENV_JSON.read_text())
    return loaded


def functions_with_environment() -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]["Environment"]["Variables"]
        for name, resource in load_template()["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
        and "Environment" in resource["Properties"]
    }


def test_env_json_sets_every_variable_each_function_declares(
    env_vars: dict[str, dict[str, str]],
) -> None:
    # GIVEN the template's functions WHEN compared with env.json THEN each has an entry with
    # exactly its declared variables: sam local drops undeclared ones, and a declared one
    # left out would get the template's value, unresolved (a logical id or "")
    declared = {name: set(variables) for name, variables in functions_with_environment().items()}
    assert {name: set(variables) for name, variables in env_vars.items()} == declared
    for variables in env_vars.values():
        assert all(isinstance(value, str) for value in variables.values())


def test_env_json_is_what_the_template_gives_each_function() -> None:
    # GIVEN the template's variables for every function, resolved for the default stack with
    # its resources on loopback services WHEN compared with the committed env.json THEN they
    # are the same, values and all: a variable added or changed in the template cannot drift
    from devtools.sam_template import env_json_text

    assert ENV_JSON.read_text() == env_json_text(), "events/env.json drifted: make env-json"


def test_env_json_points_at_loopback_services(env_vars: dict[str, dict[str, str]]) -> None:
    moto_port, table, api_port = local_services.services(env_vars)
    assert table == "CircuitBreakers"
    assert moto_port != api_port


def test_env_json_is_valid_for_each_function(
    env_vars: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN env.json WHEN each function's settings parser reads its entry THEN none refuses it
    for name, value in env_vars["PaymentFunction"].items():
        monkeypatch.setenv(name, value)  # the payment module builds its handler at import
    # A copy of its own: the session's cached payment module keeps the handler other tests built.
    module_name = "fleetbreaker_functions.payment"
    cached = sys.modules.pop(module_name, None)
    try:
        payment = load_function("payment").Settings.from_env(env_vars["PaymentFunction"])
    finally:
        sys.modules.pop(module_name, None)
        if cached is not None:
            sys.modules[module_name] = cached
    assert payment.table_name == "CircuitBreakers"
    gate = load_function("breaker_gate").GateSettings.from_env(env_vars["BreakerGateFunction"])
    assert gate.allowed_breakers == {env_vars["PaymentFunction"]["BREAKER_NAME"]}
    charge = load_function("charge").ChargeSettings.from_env(env_vars["ChargeFunction"])
    assert charge.payment_api_url == env_vars["PaymentFunction"]["PAYMENT_API_URL"]


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"F": {"AWS_ENDPOINT_URL": "http://10.0.0.1:5000"}}, "AWS_ENDPOINT_URL must be"),
        (
            {
                "F": {
                    "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
                    "PAYMENT_API_URL": "http://127.0.0.1:8081/charges",
                    "CIRCUIT_BREAKER_TABLE": "A",
                },
                "G": {"CIRCUIT_BREAKER_TABLE": "B"},
            },
            "expected one CIRCUIT_BREAKER_TABLE",
        ),
    ],
)
def test_local_services_refuse_what_they_cannot_serve(
    variables: dict[str, Any], message: str
) -> None:
    with pytest.raises(local_services.LocalConfigError, match=message):
        local_services.services(variables)


# Runs in the child that local_services.py starts: the payment handler, imported with the
# env.json variables the container would get, on one sample event.
INVOKE = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    from devtools.functions import load_function
    from devtools.lambda_context import FakeLambdaContext
    os.environ.update(json.loads(sys.argv[2])["PaymentFunction"])
    app = load_function("payment")
    with open(sys.argv[3]) as f:
        response = app.lambda_handler(json.load(f), FakeLambdaContext())
    print("STATUS", response["statusCode"])
    """
)


def test_local_services_serve_what_env_json_names(
    env_vars: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    # GIVEN env.json moved to free ports (this machine is shared), and the local services
    text = ENV_JSON.read_text()
    for old in ("127.0.0.1:5000", "127.0.0.1:8081"):
        text = text.replace(old, f"127.0.0.1:{free_port()}")
    moved = tmp_path / "env.json"
    moved.write_text(text)

    # WHEN the payment handler runs inside them with exactly those variables
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--env-vars",
            str(moved),
            "--",
            sys.executable,
            "-c",
            INVOKE,
            str(REPO_ROOT),
            text,
            str(REPO_ROOT / "events" / "payment-ok.json"),
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # THEN the table exists where AWS_ENDPOINT_URL points and the provider charged it
    assert result.returncode == 0, result.stdout + result.stderr
    assert "STATUS 200" in result.stdout
    assert "payment API calls: 1" in result.stdout


def test_make_invoke_runs_sam_local_with_env_json() -> None:
    # GIVEN the Makefile WHEN make prints the invoke recipe THEN it runs sam local invoke
    # inside local_services.py with env.json, on the host's network and this machine's arch
    result = subprocess.run(
        ["make", "-n", "invoke", "LOCAL_ARCH=x86_64"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    recipe = result.stdout.replace("\\\n", " ")
    assert "scripts/local_services.py --env-vars events/env.json --" in recipe
    assert "local invoke PaymentFunction" in recipe
    assert "--env-vars events/env.json" in recipe
    assert "--docker-network host" in recipe
    assert "Architecture=x86_64" in recipe
