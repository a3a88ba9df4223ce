"""What the example functions call, on the loopback addresses an env-vars file names.

``sam local invoke`` runs a function in Docker with the variables of ``events/env.json``:
a CircuitBreakers table behind ``AWS_ENDPOINT_URL`` and a payment API at ``PAYMENT_API_URL``.
This starts those on the same addresses: moto's server (DynamoDB, SQS) with the table
created, and the fake payment API the tests use. Then it runs the command given after
``--`` and stops both (``make invoke`` does this), or, with no command, serves until Ctrl-C
so that ``sam local invoke`` or ``sam local start-api`` can be run by hand.

    .venv/bin/python scripts/local_services.py -- .venv/bin/sam local invoke ...
    .venv/bin/python scripts/local_services.py --provider fail
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

# The local servers and fakes are the development package's: one implementation to trust.
from devtools.payment_api import MODES, FakePaymentApi  # noqa: E402
from devtools.servers import LOOPBACK, MotoServer, make_table  # noqa: E402

DEFAULT_ENV_VARS = REPO_ROOT / "events" / "env.json"


class LocalConfigError(ValueError):
    """The env-vars file does not name services this script can start."""


def loopback_port(url: str, variable: str) -> int:
    """The port of a loopback ``http://`` URL, or a LocalConfigError naming the variable."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname != LOOPBACK or parts.port is None:
        raise LocalConfigError(f"{variable} must be http://{LOOPBACK}:<port>..., got {url!r}")
    return parts.port


def services(env_vars: dict[str, Any]) -> tuple[int, str, int]:
    """(moto's port, the table's name, the payment API's port) from an env-vars file.

    Every function in the file must agree: one table, one endpoint, one payment API.
    """
    endpoints, tables, apis = set(), set(), set()
    for function, variables in env_vars.items():
        if not isinstance(variables, dict):
            raise LocalConfigError(f"{function}: expected an object of variables")
        if variables.get("AWS_ENDPOINT_URL"):
            endpoints.add(loopback_port(variables["AWS_ENDPOINT_URL"], "AWS_ENDPOINT_URL"))
        if variables.get("CIRCUIT_BREAKER_TABLE"):
            tables.add(variables["CIRCUIT_BREAKER_TABLE"])
        if variables.get("PAYMENT_API_URL"):
            apis.add(loopback_port(variables["PAYMENT_API_URL"], "PAYMENT_API_URL"))
    for name, found in [
        ("AWS_ENDPOINT_URL", endpoints),
        ("CIRCUIT_BREAKER_TABLE", tables),
        ("PAYMENT_API_URL", apis),
    ]:
        if len(found) != 1:
            raise LocalConfigError(f"expected one {name} across the functions, got {sorted(found)}")
    return endpoints.pop(), tables.pop(), apis.pop()


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-vars", type=Path, default=DEFAULT_ENV_VARS, help="sam's --env-vars")
    parser.add_argument(
        "--provider",
        choices=[mode for mode in MODES if mode != "hold"],
        default="ok",
        help="how the fake payment API answers (default: ok)",
    )
    return parser.parse_args(argv), command


def main(argv: list[str] | None = None) -> int:
    args, command = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        moto_port, table, api_port = services(json.loads(args.env_vars.read_text()))
    except (OSError, ValueError) as exc:
        print(f"{args.env_vars}: {exc}", file=sys.stderr)
        return 2
    moto = MotoServer(moto_port)
    with moto, FakePaymentApi(args.provider, port=api_port) as api:
        make_table(moto.endpoint_url, table)
        print(f"moto (DynamoDB, SQS) at {moto.endpoint_url}, table {table}", flush=True)
        print(f"fake payment API at {api.url} ({args.provider})", flush=True)
        if not command:
            print("serving until Ctrl-C", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
            return 0
        returncode = subprocess.run(command, check=False).returncode
        print(f"payment API calls: {api.calls}", flush=True)
        return returncode


if __name__ == "__main__":
    raise SystemExit(main())
