"""What the SnapStart hooks cost a restored environment: after_restore() and before_snapshot().

For K breakers (1, 10, 100), each a rate-policy breaker with a DynamoDBStore on dynalite
(which keeps its connections alive, as DynamoDB does), the hooks are timed in this process
with perf_counter, ROUNDS times each. Between rounds each breaker makes one call: its view is
fresh, its client's pool holds a connection, and its tally one call, which before_snapshot()
reports (one store write per breaker: that hook's figure is mostly dynalite's answer time,
paid once, when a version is published). after_restore() does no I/O: it closes the pooled
connections and restarts each breaker. Figures: median and 90th percentile, microseconds,
with the load average before and after (a busy machine moves them).

What this does not measure: the first call after a restore, which reads the record on a new
connection (one TCP and TLS handshake to the store, as a cold start's first call pays); no
local server shows what that costs against DynamoDB.

Usage: python bench/restore.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layer"))

from devtools.servers import DynaliteServer, make_table
from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore
from fleetbreaker.restore import after_restore, before_snapshot

BREAKERS = (1, 10, 100)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    load_before = os.getloadavg()
    server = DynaliteServer().start()
    try:
        table = make_table(server.endpoint_url)
        print(f"{'breakers':>8}  {'hook':<16} {'median us':>10} {'p90 us':>10}")
        for count in BREAKERS:
            breakers = [
                CircuitBreaker(
                    f"bench-{count}-{n}",
                    store=DynamoDBStore(table, endpoint_url=server.endpoint_url),
                    config=BreakerConfig(failure_rate_threshold=0.5, store_deadline_seconds=10.0),
                )
                for n in range(count)
            ]
            timings: dict[str, list[float]] = {"after_restore": [], "before_snapshot": []}
            for _ in range(rounds):
                for breaker in breakers:
                    breaker.call(len, "")
                started = time.perf_counter()
                before_snapshot()
                timings["before_snapshot"].append((time.perf_counter() - started) * 1e6)
                started = time.perf_counter()
                after_restore()
                timings["after_restore"].append((time.perf_counter() - started) * 1e6)
            for hook, samples in timings.items():
                median, p90 = statistics.median(samples), percentile(samples, 0.9)
                print(f"{count:>8}  {hook:<16} {median:>10.1f} {p90:>10.1f}")
    finally:
        server.stop()
    load_after = os.getloadavg()
    print(
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
        f"{rounds} rounds; Python {sys.version.split()[0]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
