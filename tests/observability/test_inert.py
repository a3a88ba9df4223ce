"""Untraced, the X-Ray SDK is never imported; checked in fresh interpreters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LAYER = Path(__file__).resolve().parents[2] / "layer"

# Exercises every hook the tracing listener has: allow (with a store read), failures, a
# transition, rejections and a fallback, then reports which heavy modules got imported.
SCRIPT = r"""
import json, sys
from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, MemoryStore
from fleetbreaker.observability import default_listeners, flush_metrics

breaker = CircuitBreaker(
    "payment-api",
    store=MemoryStore(),
    config=BreakerConfig(failure_threshold=2),
    listeners=default_listeners(),
)

def boom():
    raise ValueError("down")

breaker.call(lambda: "ok")
for _ in range(2):
    try:
        breaker.call(boom)
    except ValueError:
        pass
try:
    breaker.call(lambda: "ok")
except CircuitOpenError:
    pass
breaker(fallback=lambda circuit: "cached")(lambda: "ok")()
flush_metrics()
print(json.dumps({"xray": "aws_xray_sdk" in sys.modules}), file=sys.stderr)
"""

TRACING_ENV = (
    "_X_AMZN_TRACE_ID",
    "AWS_XRAY_DAEMON_ADDRESS",
    "POWERTOOLS_TRACE_DISABLED",
    "AWS_XRAY_SDK_ENABLED",
    "AWS_SAM_LOCAL",
    "LAMBDA_TASK_ROOT",
)


def xray_imported(extra_env: dict[str, str]) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in TRACING_ENV}
    env.update(extra_env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(LAYER), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    return bool(report["xray"])


def test_untraced_process_never_imports_the_sdk() -> None:
    assert xray_imported({}) is False


def test_powertools_trace_disabled_keeps_the_sdk_out_even_in_a_traced_lambda() -> None:
    assert (
        xray_imported(
            {
                "LAMBDA_TASK_ROOT": "/var/task",
                "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
                "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
                "POWERTOOLS_TRACE_DISABLED": "true",
            }
        )
        is False
    )


@pytest.mark.parametrize(
    "env",
    [
        {"AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000", "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR"},
        {"AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000", "AWS_XRAY_CONTEXT_MISSING": "RUNTIME_ERROR"},
    ],
)
def test_traced_process_imports_the_sdk_and_still_runs_without_a_segment(
    env: dict[str, str],
) -> None:
    # The control for the two tests above: the same script does load the SDK when traced,
    # and with no segment open (whatever AWS_XRAY_CONTEXT_MISSING says) nothing raises.
    assert xray_imported(env) is True
