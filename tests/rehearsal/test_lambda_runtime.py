"""devtools/lambda_runtime.py: a container finds the packages Lambda's Python runtime has, not
the dev venv's extras (awscrt and pyOpenSSL, which the SAM CLI brings)."""

from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from devtools.lambda_runtime import ABSENT_IN_LAMBDA
from devtools.rehearsal import DeployedFunction, LambdaContainer
from devtools.servers import REPO_ROOT

HANDLER = """
import boto3
import botocore.compat
import botocore.httpsession


def handler(event, context):
    found = {}
    for name in event["names"]:
        try:
            __import__(name)
            found[name] = "imported"
        except ModuleNotFoundError as exc:
            found[name] = type(exc).__name__
    return {
        "has_crt": botocore.compat.HAS_CRT,
        "found": found,
        "dynamodb": type(boto3.client("dynamodb", region_name="us-east-1")).__name__,
    }
"""


def invoke_once(code_dir: Path, event: dict[str, object]) -> Any:
    """One container of ``code_dir``'s app.handler, as the rehearsal starts it; one
    invocation's result."""
    function = DeployedFunction(
        logical_id="ProbeFunction",
        name="probe",
        arn="arn:aws:lambda:us-east-1:123456789012:function:probe",
        handler="app.handler",
        runtime="python3.11",
        memory_size=128,
        environment={},
        layers=[],
        vpc={},
        role_name="probe-role",
        statements=[],
        managed_policies=[],
    )
    environment = {**os.environ, "_HANDLER": "app.handler", "PYTHONPATH": str(REPO_ROOT)}
    with LambdaContainer(function, environment, code_dir) as container:
        invocation = container.invoke(event)
    assert invocation.error is None, invocation.error
    return invocation.result


@pytest.mark.parametrize("name", ABSENT_IN_LAMBDA)
def test_the_dev_venv_has_what_a_container_must_not_find(name: str) -> None:
    # The test below says something only while the dev venv has these packages.
    assert importlib.util.find_spec(name) is not None


def test_a_container_finds_neither_the_crt_nor_pyopenssl(tmp_path: Path) -> None:
    # GIVEN a function that imports boto3 and reports what botocore found
    (tmp_path / "app.py").write_text(textwrap.dedent(HANDLER))
    # WHEN a container of it is invoked
    result = invoke_once(tmp_path, {"names": [*ABSENT_IN_LAMBDA, "jmespath"]})
    # THEN botocore runs without the CRT, neither package imports, as in Lambda's runtime,
    # and what the runtime has still does
    assert result == {
        "has_crt": False,
        "found": {
            "awscrt": "ModuleNotFoundError",
            "OpenSSL": "ModuleNotFoundError",
            "jmespath": "imported",
        },
        "dynamodb": "DynamoDB",
    }
