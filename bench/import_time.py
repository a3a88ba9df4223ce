"""What `import fleetbreaker` adds to a Lambda cold start, next to `import boto3`.

The figure: whole processes, started alternately, A B A B ... (the pair cancels most of the
machine's drift):

    A  python -c "import boto3, fleetbreaker, fleetbreaker.stores.dynamodb"
    B  python -c "import boto3"

Each run is timed from outside, start to exit (wall clock, and the child's own user + system
CPU time from wait4). The ratio A/B is taken pair by pair and the median is the figure, with
the median of the paired differences in ms: a Lambda function imports boto3 anyway, so what
it pays for the package is the difference. **Target: at most 6 ms, at most 1.04 × B.**
One untimed warm-up pair first fills the bytecode caches.

Then, as a breakdown, each case below runs in a fresh interpreter that times its own imports
with perf_counter (interpreter start-up excluded), interleaved, medians shown.

Last, what the layer's bytecode saves each cold start where Lambda puts the layer (/opt,
read-only: an interpreter that finds no bytecode compiles the source and cannot keep it):
the same A with the package as the layer build leaves it (`layer/compile_bytecode.py`) and
without bytecode, bytecode writing off on both sides.

On a busy machine the spread is wide and the median moves: the load average at the start and
the end is printed with the figures; quote them together.

Usage: python bench/import_time.py [--runs 15] [--check] [--instructions]
(--check exits 1 if the target is missed or aws_xray_sdk is imported; --instructions also
counts A's and B's instructions under valgrind, which the load does not move, and converts
the difference to ms at the run's own median `import boto3`.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_EXTRA_MS = 6.0
TARGET_RATIO = 1.04
LAYER = Path(__file__).resolve().parents[1] / "layer"
# A clean environment: the layer on the path, and bytecode caches written (a Lambda layer
# cannot write them at run time, but then both sides of the ratio pay for boto3's too).
ENV = {"PYTHONPATH": str(LAYER), "PATH": "/usr/bin:/bin"}

WHOLE_A = "import boto3, fleetbreaker, fleetbreaker.stores.dynamodb"
WHOLE_B = "import boto3"

FULL_COST = "+ CircuitBreaker built, one call decided"
# name -> (untimed setup, timed statement)
CASES: dict[str, tuple[str, str]] = {
    "import boto3": ("", "import boto3"),
    "import fleetbreaker": ("", "import fleetbreaker"),
    "import boto3, fleetbreaker": ("", "import boto3, fleetbreaker"),
    "import fleetbreaker (boto3 already in)": ("import boto3", "import fleetbreaker"),
    "+ stores.dynamodb": ("", WHOLE_A),
    # The import alone is the figure; this shows what a handler pays in all before its
    # first call: a count-policy breaker built, and one call decided (MemoryStore: no
    # network in a benchmark of import cost).
    FULL_COST: (
        "",
        "import boto3, fleetbreaker, fleetbreaker.stores.dynamodb;"
        " b = fleetbreaker.CircuitBreaker('bench', store=fleetbreaker.MemoryStore(),"
        " config=fleetbreaker.BreakerConfig()); b.call(int)",
    ),
    "+ observability (default_listeners())": (
        "",
        "import boto3, fleetbreaker; from fleetbreaker.observability import default_listeners;"
        " default_listeners()",
    ),
}
BASE = "import boto3"
WITH_STORE = "+ stores.dynamodb"

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
        env=ENV,
        timeout=120,
    ).stdout
    result: dict[str, float | bool] = json.loads(out.strip().splitlines()[-1])
    return result


def run_whole(statement: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall ms, CPU ms) of one interpreter that runs ``statement`` and exits."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", statement],
        env=env or ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{statement!r} exited {child.returncode}")
    return wall * 1000, (usage.ru_utime + usage.ru_stime) * 1000


def spread(values: list[float], unit: str = "", digits: int = 1) -> str:
    return (
        f"{statistics.median(values):.{digits}f}{unit} "
        f"(min {min(values):.{digits}f}, max {max(values):.{digits}f})"
    )


def instructions(statement: str) -> int:
    """Instructions one interpreter running ``statement`` executes (valgrind callgrind).

    Load-independent where wall time is not: a fixed hash seed and, where ``setarch`` can,
    address randomisation off (either moves the count of the same import by up to 2 M).
    """
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    command += [sys.executable, "-c", statement]
    if shutil.which("setarch"):
        command = ["setarch", os.uname().machine, "-R", *command]
    result = subprocess.run(
        command,
        env={**ENV, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    for line in result.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1].strip())
    raise SystemExit(f"valgrind printed no count for {statement!r}")


def instruction_figures(base_wall_ms: float) -> None:
    """Print A and B in instructions, and what A - B is at this run's `import boto3` speed."""
    run_whole(WHOLE_A)  # bytecode caches
    a, b = instructions(WHOLE_A), instructions(WHOLE_B)
    print(
        f"\ninstructions (valgrind callgrind, one run each): A {a / 1e6:.1f} M, B {b / 1e6:.1f} M"
    )
    print(
        f"  A - B {(a - b) / 1e6:+.1f} M, A / B {a / b:.3f}: about "
        f"{(a - b) / b * base_wall_ms:.1f} ms at this run's median `import boto3` "
        f"({base_wall_ms:.0f} ms)"
    )


def whole_process(runs: int) -> tuple[float, float, float]:
    """Print the A/B figures; return the medians of the wall ratio, the extra wall ms and B."""
    run_whole(WHOLE_A)
    run_whole(WHOLE_B)
    wall_a: list[float] = []
    wall_b: list[float] = []
    cpu_a: list[float] = []
    cpu_b: list[float] = []
    for _ in range(runs):
        a = run_whole(WHOLE_A)
        b = run_whole(WHOLE_B)
        wall_a.append(a[0])
        cpu_a.append(a[1])
        wall_b.append(b[0])
        cpu_b.append(b[1])
    ratio_wall = [a / b for a, b in zip(wall_a, wall_b, strict=True)]
    ratio_cpu = [a / b for a, b in zip(cpu_a, cpu_b, strict=True)]
    extra_wall = [a - b for a, b in zip(wall_a, wall_b, strict=True)]
    extra_cpu = [a - b for a, b in zip(cpu_a, cpu_b, strict=True)]
    print(f"whole process, {runs} pairs A B A B ..., median (min, max)")
    print(f"  A  python -c {WHOLE_A!r}")
    print(f"  B  python -c {WHOLE_B!r}")
    print(f"  wall A {spread(wall_a, ' ms')}   B {spread(wall_b, ' ms')}")
    print(f"  cpu  A {spread(cpu_a, ' ms')}   B {spread(cpu_b, ' ms')}")
    print(f"  A - B wall {spread(extra_wall, ' ms')}   cpu {spread(extra_cpu, ' ms')}")
    print(f"  A / B wall {spread(ratio_wall, '', 3)}   cpu {spread(ratio_cpu, '', 3)}")
    return statistics.median(ratio_wall), statistics.median(extra_wall), statistics.median(wall_b)


def read_only_layer(runs: int) -> float:
    """Print what the layer's bytecode saves where Lambda puts it; return the median ms saved.

    Lambda unpacks a layer under /opt, read-only: without bytecode in the layer, every cold
    start compiles each module it imports and cannot keep the result. Two copies of the
    package, one as the layer build leaves it (checked-hash bytecode from
    ``layer/compile_bytecode.py``) and one without bytecode, are imported with bytecode
    writing off (PYTHONDONTWRITEBYTECODE), in alternating pairs.
    """
    version = "{}.{}".format(*sys.version_info[:2])
    with tempfile.TemporaryDirectory() as scratch:
        envs = {}
        for kind in ("bytecode", "source"):
            target = Path(scratch, kind)
            shutil.copytree(
                LAYER / "fleetbreaker",
                target / "fleetbreaker",
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
            if kind == "bytecode":
                subprocess.run(
                    [sys.executable, str(LAYER / "compile_bytecode.py"), str(target), version],
                    check=True,
                    capture_output=True,
                )
            envs[kind] = {**ENV, "PYTHONPATH": str(target), "PYTHONDONTWRITEBYTECODE": "1"}
        walls: dict[str, list[float]] = {"bytecode": [], "source": []}
        cpus: dict[str, list[float]] = {"bytecode": [], "source": []}
        for kind in envs:
            run_whole(WHOLE_A, envs[kind])
        for _ in range(runs):
            for kind, env in envs.items():
                wall, cpu = run_whole(WHOLE_A, env)
                walls[kind].append(wall)
                cpus[kind].append(cpu)
    saved_wall = [s - b for s, b in zip(walls["source"], walls["bytecode"], strict=True)]
    saved_cpu = [s - b for s, b in zip(cpus["source"], cpus["bytecode"], strict=True)]
    print(f"\nas Lambda loads the layer (read-only, no bytecode written), {runs} pairs:")
    print(f"  {WHOLE_A!r}")
    print(f"  with the layer's bytecode  wall {spread(walls['bytecode'], ' ms')}")
    print(f"  source only (before)      wall {spread(walls['source'], ' ms')}")
    print(f"  saved per cold start      wall {spread(saved_wall, ' ms')}", end="")
    print(f"   cpu {spread(saved_cpu, ' ms')}")
    return statistics.median(saved_wall)


def breakdown(runs: int) -> bool:
    """Print the in-process table; return True if aws_xray_sdk was never imported."""
    for setup, statement in CASES.values():  # warm-up: bytecode caches, page cache
        run_case(setup, statement)
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    xray: dict[str, bool] = dict.fromkeys(CASES, False)
    for _ in range(runs):
        for name, (setup, statement) in CASES.items():
            result = run_case(setup, statement)
            samples[name].append(float(result["ms"]))
            xray[name] = xray[name] or bool(result["xray"])
    print(f"\nbreakdown: imports timed inside the interpreter, {runs} runs per case, ms")
    print(f"{'case':<40} {'median':>8} {'min':>8} {'max':>8}  aws_xray_sdk")
    for name, values in samples.items():
        print(
            f"{name:<40} {statistics.median(values):>8.1f} {min(values):>8.1f} "
            f"{max(values):>8.1f}  {'imported' if xray[name] else 'absent'}"
        )
    # Paired per round (the cases of one round run back to back).
    for case in (WITH_STORE, FULL_COST):
        paired = [b - a for a, b in zip(samples[BASE], samples[case], strict=True)]
        print(f"{case!r} over {BASE!r}, median of paired differences: ", end="")
        print(f"{statistics.median(paired):.1f} ms")
    return not any(xray.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="pairs and runs per case (15)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count A's and B's instructions under valgrind (load-independent)",
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    load_start = [round(x, 2) for x in os.getloadavg()]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load_start}\n")
    ratio, extra_ms, base_ms = whole_process(args.runs)
    if args.instructions:
        if not shutil.which("valgrind"):
            parser.error("--instructions needs valgrind on PATH")
        instruction_figures(base_ms)
    clean = breakdown(args.runs)
    read_only_layer(args.runs)
    load_end = [round(x, 2) for x in os.getloadavg()]
    met = ratio <= TARGET_RATIO and extra_ms <= TARGET_EXTRA_MS
    print(
        f"\nimport cost: {extra_ms:.1f} ms, {ratio:.3f} × `import boto3` (whole process, "
        f"median of {args.runs} pairs; load {load_start} → {load_end})\n"
        f"target <= {TARGET_EXTRA_MS:.0f} ms and <= {TARGET_RATIO:.2f} ×: "
        f"{'met' if met else 'MISSED'}; aws_xray_sdk {'never imported' if clean else 'IMPORTED'}"
    )
    return 0 if (met and clean) or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
