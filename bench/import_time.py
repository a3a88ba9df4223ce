"""What `import fleetbreaker` adds to a Lambda cold start, next to `import boto3`.

Each case runs in a fresh interpreter that times its own imports with perf_counter (the
interpreter's start-up is excluded: it is paid with or without this package). Cases run
interleaved, after one untimed warm-up round that fills the bytecode caches, and the table
shows medians. The figure that matters is "extra": `import boto3, fleetbreaker` minus
`import boto3` alone, since a Lambda function imports boto3 anyway.

Usage: python bench/import_time.py [--runs 21] [--check]
(--check exits 1 if the target is missed or aws_xray_sdk is imported.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

TARGET_EXTRA_MS = 50.0
LAYER = Path(__file__).resolve().parents[1] / "layer"

# name -> (untimed setup, timed statement)
CASES: dict[str, tuple[str, str]] = {
    "import boto3": ("", "import boto3"),
    "import fleetbreaker": ("", "import fleetbreaker"),
    "import boto3, fleetbreaker": ("", "import boto3, fleetbreaker"),
    "import fleetbreaker (boto3 already in)": ("import boto3", "import fleetbreaker"),
    "+ DynamoDBStore class": ("", "import boto3, fleetbreaker; fleetbreaker.DynamoDBStore"),
    "+ observability (default_listeners())": (
        "",
        "import boto3, fleetbreaker; from fleetbreaker.observability import default_listeners;"
        " default_listeners()",
    ),
}
BASE = "import boto3"
WITH_BOTO3 = "import boto3, fleetbreaker"

PROBE = """
import json, sys, time
{setup}
started = time.perf_counter()
{statement}
elapsed = time.perf_counter() - started
print(json.dumps({{"ms": elapsed * 1000, "xray": "aws_xray_sdk" in sys.modules}}))
"""


def run_case(setup: str, statement: str) -> dict[str, float | bool]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup, statement=statement)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(LAYER), "PATH": "/usr/bin:/bin"},
        timeout=120,
    ).stdout
    result: dict[str, float | bool] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="timed runs per case (default 21)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args()

    for setup, statement in CASES.values():  # warm-up: bytecode caches, page cache
        run_case(setup, statement)
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    xray: dict[str, bool] = dict.fromkeys(CASES, False)
    for _ in range(args.runs):
        for name, (setup, statement) in CASES.items():
            result = run_case(setup, statement)
            samples[name].append(float(result["ms"]))
            xray[name] = xray[name] or bool(result["xray"])

    medians = {name: statistics.median(values) for name, values in samples.items()}
    # Paired per round (the cases of one round run back to back), which cancels most of the
    # machine's drift between rounds.
    paired = [b - a for a, b in zip(samples[BASE], samples[WITH_BOTO3], strict=True)]
    extra_ms = statistics.median(paired)
    print(f"python {sys.version.split()[0]}, {args.runs} runs per case, times in ms\n")
    print(f"{'case':<40} {'median':>8} {'min':>8} {'max':>8}  aws_xray_sdk")
    for name, values in samples.items():
        print(
            f"{name:<40} {medians[name]:>8.1f} {min(values):>8.1f} {max(values):>8.1f}  "
            f"{'imported' if xray[name] else 'absent'}"
        )
    direct = medians["import fleetbreaker (boto3 already in)"]
    met = extra_ms <= TARGET_EXTRA_MS
    clean = not any(xray.values())
    print(
        f"\nextra over `import boto3` alone (median of paired differences): {extra_ms:.1f} ms; "
        f"timed after boto3: {direct:.1f} ms\n"
        f"target <= {TARGET_EXTRA_MS:.0f} ms: {'met' if met else 'MISSED'}; "
        f"aws_xray_sdk {'never imported' if clean else 'IMPORTED'}"
    )
    return 0 if (met and clean) or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
