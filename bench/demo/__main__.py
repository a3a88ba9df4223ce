"""`make demo`: a payment-API outage seen by a fleet of Lambda containers, twice.

Starts a local payment API (healthy, then failing for a while, then recovered) and an embedded
DynamoDB (moto's server on a free loopback port), then runs the same scenario twice with N
containers (processes) invoking the real payment handler: once with the fleet-wide breaker,
once with a breaker per container (same thresholds, no shared state); with --policy rate,
once with the shared rate breaker and once with the shared count breaker. Prints a line per
second, a comparison table, and writes a PNG chart and a markdown summary. No AWS account, no
Docker; every server and process it starts is stopped, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import fields, replace
from pathlib import Path
from types import FrameType

from bench.demo.fleet import FleetError
from bench.demo.runner import FAILED, run_demo
from bench.demo.scenario import (
    DEFAULT,
    FALLBACKS,
    MODES,
    POLICIES,
    SHORT,
    STORES,
    Options,
    OptionsError,
)

# Exit statuses besides 0: a guarantee did not hold or the demo failed (FAILED, 1), bad
# options (2), interrupted (130, as a shell reports Ctrl-C).
BAD_OPTIONS, INTERRUPTED = 2, 130


def parser() -> argparse.ArgumentParser:
    d = DEFAULT
    p = argparse.ArgumentParser(
        prog="python -m bench.demo",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        argument_default=argparse.SUPPRESS,  # only what was given overrides the preset
    )
    add = p.add_argument
    add(
        "--containers",
        type=int,
        metavar="N",
        help=f"simulated Lambda containers (default {d.containers})",
    )
    add(
        "--rate",
        type=float,
        metavar="N",
        help=f"payments per second per container (default {d.rate:g})",
    )
    add(
        "--healthy",
        type=float,
        metavar="S",
        help=f"seconds before the outage (default {d.healthy:g})",
    )
    add(
        "--outage",
        type=float,
        metavar="S",
        help=f"seconds the payment API fails (default {d.outage:g})",
    )
    add("--threshold", type=int, metavar="N", help=f"failure_threshold (default {d.threshold})")
    add(
        "--recovery",
        type=float,
        metavar="S",
        help=f"recovery_timeout in seconds (default {d.recovery:g})",
    )
    add("--probes", type=int, metavar="N", help=f"half_open_max_probes (default {d.probes})")
    add(
        "--cache-ttl",
        type=float,
        metavar="S",
        help=f"cache_ttl in seconds (default {d.cache_ttl:g})",
    )
    add(
        "--store",
        choices=STORES,
        help=f"where the shared breaker keeps its state (default {d.store}); redis starts a "
        "redis-server (`make redis` installs it), memory serves one MemoryStore from a "
        "local process",
    )
    add(
        "--store-deadline",
        type=float,
        metavar="S",
        help="store_deadline_seconds of the breaker (default: 10 s on moto's DynamoDB and the "
        "shared MemoryStore, which answer one write at a time, the function's 1 s on Redis)",
    )
    add(
        "--fallback",
        choices=FALLBACKS,
        help=f"while open: defer the payment to SQS on moto (202), or reject it (503) "
        f"(default {d.fallback})",
    )
    add(
        "--ramp",
        type=float,
        metavar="S",
        help=f"recovery_ramp_seconds: after the close each container admits a share of its "
        f"calls growing from 10 %% to all over S seconds (default {d.ramp:g}: off)",
    )
    add(
        "--policy",
        choices=POLICIES,
        help=f"the breaker's policy (default {d.policy}). count compares the shared breaker "
        "with per-container ones; rate gives the function BREAKER_FAILURE_RATE_THRESHOLD "
        "and BREAKER_MINIMUM_CALLS and compares the shared rate breaker with the shared "
        "count breaker",
    )
    add(
        "--mode",
        choices=MODES,
        help=f"enforce (default {d.mode}) compares the shared breaker with per-container ones "
        "(or, with --policy rate, with the count breaker); shadow runs a shadow fleet beside "
        "the outage instead: the shared breaker in BREAKER_MODE=shadow, which lets every call "
        "through and prints how many it would have rejected",
    )
    add(
        "--failure-rate",
        type=float,
        metavar="X",
        help=f"failure_rate_threshold under --policy rate (default {d.failure_rate:g})",
    )
    add(
        "--minimum-calls",
        type=int,
        metavar="N",
        help=f"minimum_calls under --policy rate (default {d.minimum_calls})",
    )
    add(
        "--window",
        type=float,
        metavar="S",
        help=f"window_seconds of the rate policy (default {d.window:g}); the count policy "
        "keeps the function's 60 s",
    )
    add(
        "--noise",
        type=float,
        metavar="RATE",
        help="background error rate: the fraction of payments the API fails while otherwise "
        f"healthy, e.g. 0.02 (default {d.noise:g})",
    )
    add(
        "--seed",
        type=int,
        metavar="N",
        help=f"seed of the noise's random draws, the same in both runs (default {d.seed})",
    )
    add(
        "--linger",
        type=float,
        metavar="S",
        help=f"seconds of traffic after the fleet closed again (default {d.linger:g})",
    )
    add(
        "--max-after",
        type=float,
        metavar="S",
        help=f"stop a run this long after the recovery at the latest (default {d.max_after:g})",
    )
    add(
        "--output",
        type=Path,
        metavar="DIR",
        help="directory for the chart, the summary and fleet-demo.json, the comparison as JSON "
        "(default demo-output/)",
    )
    add(
        "--short",
        action="store_true",
        help="a quick run (the test suite's): 8 containers, 3 s healthy, 2.5 s outage, "
        "threshold 3, recovery 1 s, rate window 1 s, seed 5; other options still apply",
    )
    return p


def options_from(argv: list[str] | None) -> Options:
    given = vars(parser().parse_args(argv))
    base = SHORT if given.pop("short", False) else DEFAULT
    names = {field.name for field in fields(Options)}
    return replace(base, **{name: value for name, value in given.items() if name in names})


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # The first Ctrl-C (or SIGTERM) stops everything; a second one must not cut that short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    options = options_from(argv)
    try:
        options.validate()
    except OptionsError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return BAD_OPTIONS
    # SIGTERM (a CI runner cancelling, `kill`) cleans up the way Ctrl-C does.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = run_demo(options)
    except KeyboardInterrupt:
        print("\ninterrupted: every server and container has been stopped", flush=True)
        return INTERRUPTED
    except FleetError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return FAILED
    return result.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
