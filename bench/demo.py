"""`make demo`: a breaker going closed → open → half_open → closed against a local DynamoDB.

Starts moto's DynamoDB server on a free loopback port, creates the CircuitBreakers table,
and drives a breaker around a fake payment API that fails for a while and then recovers.
Needs no AWS account and no Docker; stops everything it started, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleetbreaker import (
    BreakerConfig,
    BreakerListener,
    CircuitBreaker,
    CircuitOpenError,
    DynamoDBStore,
    State,
)
from tests.servers import MotoServer, dynamodb_client, make_table


class Printer(BreakerListener):
    def __init__(self, started: float) -> None:
        self.started = started

    def on_transition(self, name: str, before: State, after: State) -> None:
        print(f"  {time.monotonic() - self.started:6.2f}s  {name}: {before} -> {after}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=3.0, help="seconds the API fails")
    parser.add_argument("--threshold", type=int, default=5, help="failure_threshold")
    parser.add_argument("--recovery", type=float, default=1.0, help="recovery_timeout (s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    with MotoServer() as server:
        table = make_table(server.endpoint_url, "CircuitBreakers")
        store = DynamoDBStore(table, boto3_client=dynamodb_client(server.endpoint_url))
        started = time.monotonic()
        breaker = CircuitBreaker(
            "payment-api",
            store=store,
            config=BreakerConfig(
                failure_threshold=args.threshold,
                recovery_timeout=args.recovery,
                cache_ttl=0.2,
            ),
            listeners=[Printer(started)],
        )
        recovers_at = started + args.outage

        def payment_api() -> str:
            if time.monotonic() < recovers_at:
                raise ConnectionError("payment API unavailable")
            return "charged"

        print(f"DynamoDB (moto) at {server.endpoint_url}, table {table}")
        print(f"payment API fails for {args.outage:.1f}s, then recovers")
        counts = {"ok": 0, "failed": 0, "rejected": 0}
        seen: list[State] = []
        while time.monotonic() < recovers_at + args.recovery * 4 + 1:
            try:
                breaker.call(payment_api)
                counts["ok"] += 1
            except ConnectionError:
                counts["failed"] += 1
            except CircuitOpenError:
                counts["rejected"] += 1
            if not seen or seen[-1] is not breaker.state:
                seen.append(breaker.state)
            time.sleep(0.05)  # a request every 50 ms: a demo paced for people
        print(
            f"calls: {counts['ok']} ok, {counts['failed']} failed (reached the API), "
            f"{counts['rejected']} rejected without calling it"
        )
        print("states seen:", " -> ".join(state.value for state in seen))
        return 0 if breaker.state is State.CLOSED else 1


if __name__ == "__main__":
    raise SystemExit(main())
