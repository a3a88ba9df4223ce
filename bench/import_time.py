"""What `import fleetbreaker` adds to a Lambda cold start, next to `import boto3`.

The figure: whole processes, started alternately, A B A B ... (the pair cancels most of the
machine's drift):

    A  python -c "import boto3, fleetbreaker, fleetbreaker.stores.dynamodb"
    B  python -c "import boto3"

Each run is timed from outside, start to exit (wall clock, and the child's own user + system
CPU time from wait4). The ratio A/B is taken pair by pair and the median is the figure, with
the median of the paired differences in ms: a Lambda function imports boto3 anyway, so what
it pays for the package is the difference. **Target: at most 1.04 × B, which is 6 ms where
`import boto3` takes 150 ms.** The ms depend on the machine's speed (on the 2-core
development machine `import boto3` took 180 to 520 ms over one day), the ratio much less:
the verdict gives both, and what the ratio is at 150 ms.
One untimed warm-up pair first fills the bytecode caches.

Then, as a breakdown, each case below runs in a fresh interpreter that times its own imports
with perf_counter (interpreter start-up excluded), interleaved, medians shown.

Last, what the layer's bytecode saves each cold start where Lambda puts the layer (/opt,
read-only: an interpreter that finds no bytecode compiles the source and cannot keep it):
the same A with the package as the layer build leaves it (`layer/compile_bytecode.py`) and
without bytecode, bytecode writing off on both sides.

`--reference REV` (repeatable) also times A as the package was at git revision REV
(`git archive`: its layer/ alone) in the same rounds; each round runs its processes
forwards or backwards in turn. The same code measured again gives a scale for figures taken
on another day, and A - reference is paired between processes that both import the package.

On a busy machine the spread is wide and the median moves: the load average at the start and
the end is printed with the figures; quote them together.

Usage: python bench/import_time.py [--runs 15] [--check] [--instructions] [--reference REV]
(--check exits 1 if the ratio is over 1.04 or aws_xray_sdk is imported; --instructions also
counts A's and B's instructions under valgrind (and each reference's A), which the load does
not move, and converts the difference to ms at the run's own median `import boto3`. With
--instructions the target is judged on the instruction counts' ratio, else on wall clock.)
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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

TARGET_EXTRA_MS = 6.0  # at a 150 ms `import boto3`: the ratio below
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


def instructions(statement: str, env: dict[str, str] | None = None) -> int:
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
        env={**(env or ENV), "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    for line in result.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1].strip())
    raise SystemExit(f"valgrind printed no count for {statement!r}")


def instruction_figures(
    base_wall_ms: float, references: dict[str, dict[str, str]]
) -> dict[str, Any]:
    """A and B in instructions (the target's measure), and A - B at this run's `import boto3`."""
    run_whole(WHOLE_A)  # bytecode caches
    a, b = instructions(WHOLE_A), instructions(WHOLE_B)
    speed_ms = TARGET_EXTRA_MS / (TARGET_RATIO - 1)
    print(
        f"\ninstructions (valgrind callgrind, one run each): A {a / 1e6:.1f} M, B {b / 1e6:.1f} M"
    )
    print(
        f"  A - B {(a - b) / 1e6:+.1f} M, A / B {a / b:.3f}: about "
        f"{(a - b) / b * base_wall_ms:.1f} ms at this run's median `import boto3` "
        f"({base_wall_ms:.0f} ms), {(a - b) / b * speed_ms:.1f} ms where it takes "
        f"{speed_ms:.0f} ms"
    )
    theirs: dict[str, int] = {}
    for rev, env in references.items():
        count = theirs[rev] = instructions(WHOLE_A, env)
        print(f"  reference {rev}: A {count / 1e6:.1f} M, over B {(count - b) / 1e6:+.1f} M")
    return {
        "a": a,
        "b": b,
        "ratio": round(a / b, 4),
        "extra_ms": round((a - b) / b * base_wall_ms, 1),
        "ms_at_150ms_boto3": round((a - b) / b * speed_ms, 1),
        "references": theirs,
    }


def quartiles(values: list[float], unit: str = "", digits: int = 1) -> str:
    """Median and interquartile range: where the middle half of the pairs fell."""
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return f"{median:.{digits}f}{unit} (middle half {q1:.{digits}f} to {q3:.{digits}f})"


def reference_layer(rev: str, scratch: Path) -> dict[str, str]:
    """The environment that imports the package as it was at ``rev`` (a git revision).

    Only the revision's ``layer/`` is taken (``git archive``), with bytecode caches written
    by a first import, as this checkout's own are.
    """
    root = LAYER.parent
    found = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode:
        raise SystemExit(f"--reference {rev!r}: not a commit of {root}")
    commit = found.stdout.strip()
    target = scratch / commit[:12]
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", commit, "layer"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    env = {**ENV, "PYTHONPATH": str(target / "layer")}
    tried = subprocess.run(
        [sys.executable, "-c", WHOLE_A], env=env, capture_output=True, text=True, timeout=120
    )
    if tried.returncode:
        last = (tried.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"--reference {rev!r}: {WHOLE_A!r} fails there: {last}")
    return env


def middle_half(values: list[float], digits: int = 3) -> list[float]:
    """The first and third quartiles, for the results JSON (what `quartiles` prints)."""
    q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return [round(q1, digits), round(q3, digits)]


def whole_process(runs: int, references: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Print the A/B figures; return the wall ratio's, the extra wall ms' and B's medians.

    Each figure comes with the middle half of its pairs, as the results JSON records it.

    Each round runs B, A and every reference's A once, forwards in even rounds and backwards
    in odd ones, so a drift of the machine's speed during a round falls on both sides alike.
    """
    sides: dict[str, tuple[str, dict[str, str]]] = {"B": (WHOLE_B, ENV), "A": (WHOLE_A, ENV)}
    for rev, env in references.items():  # keyed apart from "A" and "B" (a branch may be "B")
        sides[f"reference {rev}"] = (WHOLE_A, env)
    for statement, env in sides.values():
        run_whole(statement, env)
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    for round_ in range(runs):
        for name in order if round_ % 2 == 0 else reversed(order):
            statement, env = sides[name]
            w, c = run_whole(statement, env)
            wall[name].append(w)
            cpu[name].append(c)

    def extra(name: str, kind: dict[str, list[float]]) -> list[float]:
        return [a - b for a, b in zip(kind[name], kind["B"], strict=True)]

    def ratio(name: str, kind: dict[str, list[float]]) -> list[float]:
        return [a / b for a, b in zip(kind[name], kind["B"], strict=True)]

    print(f"whole process, {runs} rounds (B, A and any reference, alternating), median (min, max)")
    print(f"  A  python -c {WHOLE_A!r}")
    print(f"  B  python -c {WHOLE_B!r}")
    print(f"  wall A {spread(wall['A'], ' ms')}   B {spread(wall['B'], ' ms')}")
    print(f"  cpu  A {spread(cpu['A'], ' ms')}   B {spread(cpu['B'], ' ms')}")
    print(f"  A - B wall {spread(extra('A', wall), ' ms')}   cpu {spread(extra('A', cpu), ' ms')}")
    print(f"  A / B wall {spread(ratio('A', wall), '', 3)}   cpu {spread(ratio('A', cpu), '', 3)}")
    print(f"  A - B wall {quartiles(extra('A', wall), ' ms')}")
    print(f"  A / B wall {quartiles(ratio('A', wall), '', 3)}")
    for rev in references:
        side = f"reference {rev}"
        print(f"  {side} (its layer/, same A), over B in the same rounds:")
        print(f"    wall {quartiles(extra(side, wall), ' ms')}")
        print(f"    wall {quartiles(ratio(side, wall), ' x', 3)}")
        ours = [a - r for a, r in zip(wall["A"], wall[side], strict=True)]
        print(f"    A - reference, wall {quartiles(ours, ' ms')}")
    return {
        "ratio": round(statistics.median(ratio("A", wall)), 4),
        "ratio_middle_half": middle_half(ratio("A", wall)),
        "extra_ms": round(statistics.median(extra("A", wall)), 2),
        "extra_ms_middle_half": middle_half(extra("A", wall), 2),
        "boto3_ms": round(statistics.median(wall["B"]), 1),
        "boto3_ms_range": [round(min(wall["B"]), 1), round(max(wall["B"]), 1)],
    }


def read_only_layer(runs: int) -> dict[str, Any]:
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
    return {
        "saved_ms": round(statistics.median(saved_wall), 1),
        "saved_ms_middle_half": middle_half(saved_wall, 1),
        "source_ms": round(statistics.median(walls["source"]), 1),
        "bytecode_ms": round(statistics.median(walls["bytecode"]), 1),
    }


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
    parser.add_argument("--check", action="store_true", help="exit 1 if the ratio target is missed")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count A's and B's instructions under valgrind (load-independent)",
    )
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="REV",
        help="also time A as the package was at git revision REV, in the same rounds (repeatable)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the figures as JSON (bench/results/import_time.json is what docs quote)",
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.instructions and not shutil.which("valgrind"):
        parser.error("--instructions needs valgrind on PATH")

    load_start = [round(x, 2) for x in os.getloadavg()]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load_start}\n")
    with tempfile.TemporaryDirectory() as scratch:
        references = {rev: reference_layer(rev, Path(scratch)) for rev in args.reference}
        whole = whole_process(args.runs, references)
        counted = instruction_figures(whole["boto3_ms"], references) if args.instructions else None
    clean = breakdown(args.runs)
    layer = read_only_layer(args.runs)
    ratio, extra_ms, base_ms = whole["ratio"], whole["extra_ms"], whole["boto3_ms"]
    load_end = [round(x, 2) for x in os.getloadavg()]
    # The target is counted in instructions where valgrind counted them: the load moves a
    # wall-clock median by several per cent, not the count.
    verdict = "instructions" if counted is not None else "wall clock"
    ratio_met = (counted["ratio"] if counted is not None else ratio) <= TARGET_RATIO
    # The 6 ms is the ratio's allowance where `import boto3` takes 150 ms; on a slower
    # machine every import takes longer and the ratio is the figure that carries over.
    speed_ms = TARGET_EXTRA_MS / (TARGET_RATIO - 1)
    print(
        f"\nimport cost: {extra_ms:.1f} ms, {ratio:.3f} × `import boto3` (whole process, "
        f"median of {args.runs} rounds; load {load_start} → {load_end})\n"
        f"target <= {TARGET_RATIO:.2f} × in {verdict}: {'met' if ratio_met else 'MISSED'}; "
        f"<= {TARGET_EXTRA_MS:.0f} ms here: {'met' if extra_ms <= TARGET_EXTRA_MS else 'missed'} "
        f"(`import boto3` took {base_ms:.0f} ms; {TARGET_EXTRA_MS:.0f} ms is "
        f"{TARGET_RATIO:.2f} × a {speed_ms:.0f} ms one, where this ratio is "
        f"{(ratio - 1) * speed_ms:.1f} ms)\n"
        f"aws_xray_sdk {'never imported' if clean else 'IMPORTED'}"
    )
    if args.json is not None:
        document = {
            "benchmark": "import_time",
            "environment": {
                "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
                "python": sys.version.split()[0],
                "cpu_count": os.cpu_count(),
                "loadavg": [load_start, load_end],
                "references": args.reference,
            },
            "runs": args.runs,
            "target": {"ratio": TARGET_RATIO, "extra_ms_at_150ms": TARGET_EXTRA_MS},
            "whole_process": whole,
            "ms_at_150ms_boto3": round((ratio - 1) * speed_ms, 1),
            "instructions": counted,
            "verdict": verdict,
            "read_only_layer": layer,
            "aws_xray_sdk_imported": not clean,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"JSON: {args.json}")
    return 0 if (ratio_met and clean) or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
