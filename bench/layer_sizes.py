"""The size of each layer `sam build` makes, unzipped and zipped: the figures docs quote.

    .venv/bin/python bench/layer_sizes.py [--build-dir .aws-sam/build] [--output PATH]
    .venv/bin/python bench/layer_sizes.py --build-dir .aws-sam/build --print-only

Without --build-dir it runs `sam build` (no Docker; as `make build` does) into a temporary
directory first. With --print-only it prints the sizes and writes no JSON: `make build` ends
with that, so a build shows what it made without changing the figures the docs quote.

Sizes are the sum of the layer's file sizes (what Lambda counts against a function's 250 MB
unzipped) and the size of a deflated zip of them (what `sam package` uploads). A runtime this
machine has no interpreter for gets its layer as source only: the JSON says so (``bytecode``),
and the docs quote that layer apart. tests/sam/test_build.py holds every layer to its size
target on each run; this records the sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make devtools importable
    sys.path.insert(0, str(REPO_ROOT))

from devtools.layer_sizes import tree_size, zipped_size  # noqa: E402
from devtools.sam_template import layer_id, load_template, runtimes  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "bench" / "results" / "layer_sizes.json"


def has_bytecode(path: Path, runtime: str) -> bool:
    tag = f"cpython-{runtime.removeprefix('python').replace('.', '')}"
    return any(path.rglob(f"*.{tag}.pyc"))


def measure(build_dir: Path) -> dict[str, Any]:
    layers: dict[str, Any] = {}
    for runtime in runtimes(load_template()):
        full, slim = (build_dir / layer_id(runtime, slim=s) for s in (False, True))
        if not full.is_dir() or not slim.is_dir():
            raise SystemExit(f"{build_dir}: no layers for {runtime} (is this a `sam build` dir?)")
        layers[runtime] = {
            "full": tree_size(full / "python"),
            "full_zipped": zipped_size(full),
            "slim": tree_size(slim / "python"),
            "slim_zipped": zipped_size(slim),
            "bytecode": has_bytecode(full / "python", runtime),
        }
    return layers


def size_lines(layers: dict[str, Any]) -> list[str]:
    """One line per runtime, in MB to two decimals: the precision the docs quote them at."""
    return [
        f"{runtime}: full {row['full'] / 1e6:.2f} MB ({row['full_zipped'] / 1e6:.2f} zipped),"
        f" slim {row['slim'] / 1e6:.2f} MB ({row['slim_zipped'] / 1e6:.2f} zipped)"
        f"{'' if row['bytecode'] else ', source only'}"
        for runtime, row in layers.items()
    ]


def sam_build(root: Path) -> Path:
    subprocess.run(
        [
            str(Path(sys.executable).parent / "sam"),
            "build",
            "--build-dir",
            str(root / "build"),
            "--cache-dir",
            str(root / "cache"),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHON": sys.executable, "SAM_CLI_TELEMETRY": "0"},
        check=True,
    )
    return root / "build"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", type=Path, help="an existing `sam build` output")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--print-only", action="store_true", help="print the sizes; write no results file"
    )
    args = parser.parse_args(argv)
    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    with tempfile.TemporaryDirectory() as scratch:
        build_dir = args.build_dir or sam_build(Path(scratch))
        layers = measure(build_dir)
    document = {
        "benchmark": "layer_sizes",
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "commit": git.stdout.strip(),
        "python": sys.version.split()[0],
        "layers": layers,
    }
    print("layer sizes, unzipped (zipped):")
    for line in size_lines(layers):
        print(line)
    if args.print_only:
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    print(f"JSON: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
