"""Run the payment function in-process on sample events, without Docker or an AWS account.

Starts moto's DynamoDB server and a fake payment API on loopback, creates a CircuitBreakers
table, imports functions/payment/app.py the way Lambda does (its handler is built from the
environment at import), invokes ``lambda_handler`` with each event, prints each response, and
stops both servers.

    make invoke-local EVENT=events/payment-ok.json
    make invoke-local EVENT='events/payment-*.json'
    .venv/bin/python scripts/invoke_local.py events/payment-ok.json --provider fail --repeat 7

``--provider fail`` with ``--repeat`` shows the breaker opening: 502s until the threshold,
then 503s with Retry-After that never reach the provider.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

# The servers, fakes and loader the test suite uses too (devtools/): one implementation to trust.
from devtools.functions import load_function  # noqa: E402
from devtools.lambda_context import FakeLambdaContext  # noqa: E402
from devtools.payment_api import MODES, FakePaymentApi  # noqa: E402
from devtools.servers import MotoServer, make_table  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events", nargs="+", type=Path, help="event JSON files")
    parser.add_argument(
        "--provider",
        choices=[mode for mode in MODES if mode != "hold"],
        default="ok",
        help="how the fake payment API answers (default: ok)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="invoke each event N times")
    parser.add_argument("--verbose", action="store_true", help="show the function's logs")
    return parser.parse_args(argv)


def local_environment(table: str, endpoint: str, api_url: str, verbose: bool) -> dict[str, str]:
    env = {
        "CIRCUIT_BREAKER_TABLE": table,
        "PAYMENT_API_URL": api_url,
        # The standard boto3 variable: the function's code has no local special case.
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        # Dummy credentials and a region: nothing here may reach a real account.
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "POWERTOOLS_SERVICE_NAME": "payment",
    }
    if not verbose:
        env["POWERTOOLS_LOG_LEVEL"] = "WARNING"
        env["POWERTOOLS_METRICS_DISABLED"] = "true"
    return env


def show(path: Path, response: dict[str, Any]) -> None:
    body = response.get("body")
    with contextlib.suppress(ValueError):
        body = json.loads(body) if isinstance(body, str) else body
    printable = {
        "statusCode": response.get("statusCode"),
        "headers": response.get("headers", {}),
        "body": body,
    }
    print(f"--- {path} -> {response.get('statusCode')}", flush=True)
    print(json.dumps(printable, indent=2), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = [str(path) for path in args.events if not path.is_file()]
    if missing:
        print(f"no such event file: {', '.join(missing)}", file=sys.stderr)
        return 2
    for name in [key for key in os.environ if key.startswith("AWS_ENDPOINT_URL")]:
        del os.environ[name]
    moto = MotoServer()
    with moto, FakePaymentApi(args.provider) as api:
        table = make_table(moto.endpoint_url, "CircuitBreakers")
        os.environ.update(local_environment(table, moto.endpoint_url, api.url, args.verbose))
        print(f"moto DynamoDB at {moto.endpoint_url}, table {table}", flush=True)
        print(f"fake payment API at {api.url} ({args.provider})", flush=True)
        app = load_function("payment")
        for _ in range(args.repeat):
            for path in args.events:
                event = json.loads(path.read_text())
                show(path, app.lambda_handler(event, FakeLambdaContext()))
        print(f"payment API calls: {api.calls}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
