"""Compile a built layer's Python to bytecode, once for each runtime the layer declares.

Lambda unpacks a layer under /opt, which is read-only: an interpreter that finds no bytecode
for a module compiles its source on every cold start and cannot keep the result. So the build
writes the bytecode: for each Python runtime given (``3.11`` ...) whose interpreter is on this
machine, every ``.py`` under the directory gets ``__pycache__/<name>.cpython-3XY.pyc``.

The files are *checked-hash* pycs (PEP 552): the interpreter compares a hash of the source
with the one in the file instead of the source's modification time, which a zip round trip
does not keep to the second. A pyc that no longer matches its source is ignored, never run.

A runtime with no interpreter here is skipped with a line saying so (its cold starts compile
the source, as before); a file of a bundled dependency (one pip installed: listed in a
``*.dist-info/RECORD``) that an interpreter cannot compile (another version's syntax) is
listed and left as source. Any other file that does not compile (the package's, a
function's own modules) fails the build. No interpreter for any of the runtimes is a warning:
the layer then works as before, compiling at each cold start.

``--source-only PATH`` (relative to the directory, repeatable) leaves a file or a folder
as source: for what no cold start imports and a caller reaches only by asking for a
feature fleetbreaker does not use, bytecode buys nothing and weighs as much as the source. A
path that does not exist fails the build (a dependency that moved it would otherwise get its
bytecode back unnoticed).

    python compile_bytecode.py DIRECTORY [--source-only PATH ...] 3.11 3.12 3.13 3.14
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# Run by each interpreter: compile every .py under the directory but the source-only paths
# (argv[2], a JSON list), print the ones that failed.
COMPILE = """
import json, py_compile, sys
from pathlib import Path
root = Path(sys.argv[1])
source_only = [root / path for path in json.loads(sys.argv[2])]
failed = []
for path in sorted(root.rglob("*.py")):
    if any(path == skip or skip in path.parents for skip in source_only):
        continue
    try:
        py_compile.compile(
            str(path), doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    except py_compile.PyCompileError:
        failed.append(str(path))
print("\\n".join(failed))
"""


def installed_files(directory: Path) -> set[str]:
    """The files pip installed under ``directory`` (relative, "/"-separated), from RECORDs."""
    files: set[str] = set()
    for record in directory.glob("*.dist-info/RECORD"):
        for line in record.read_text().splitlines():
            path = line.rsplit(",", 2)[0]
            if path:
                files.add(path.replace(os.sep, "/"))
    return files


def interpreter(version: str) -> str | None:
    """An interpreter for Python ``version`` (e.g. "3.12") on this machine, or None."""
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [
        shutil.which(f"python{version}"),
        *sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"), reverse=True),
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ]
    for candidate in candidates:
        if not candidate or not os.access(candidate, os.X_OK):
            continue
        # A pyenv shim exists for every installed version but runs only the selected ones.
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="compile_bytecode.py",
        description="Compile a built layer's (or function's) Python to checked-hash bytecode.",
    )
    parser.add_argument("directory", type=Path)
    parser.add_argument("versions", nargs="+", metavar="VERSION", help="3.11, 3.12 ...")
    parser.add_argument(
        "--source-only",
        action="append",
        default=[],
        metavar="PATH",
        help="a file or folder under DIRECTORY to leave without bytecode (repeatable)",
    )
    # Options may come between the directory and the versions.
    return parser.parse_intermixed_args(argv)


def main(argv: list[str]) -> int:
    arguments = parse(argv)
    directory, versions = arguments.directory, arguments.versions
    if not directory.is_dir():
        print(f"compile_bytecode: {directory} is not a directory", file=sys.stderr)
        return 2
    missing = [path for path in arguments.source_only if not (directory / path).exists()]
    if missing:
        print(
            f"compile_bytecode: --source-only {', '.join(missing)}: not under {directory}",
            file=sys.stderr,
        )
        return 2
    compiled = 0
    for version in versions:
        python = interpreter(version)
        if python is None:
            print(f"compile_bytecode: no python{version} here: its cold starts compile the source")
            continue
        result = subprocess.run(
            [python, "-c", COMPILE, str(directory), json.dumps(arguments.source_only)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            print(f"compile_bytecode: python{version} failed:\n{result.stderr}", file=sys.stderr)
            return 1
        failed = [line for line in result.stdout.splitlines() if line]
        installed = installed_files(directory)
        ours = [
            path for path in failed if Path(path).relative_to(directory).as_posix() not in installed
        ]
        if ours:
            print(f"compile_bytecode: python{version} cannot compile {ours}", file=sys.stderr)
            return 1
        compiled += 1
        note = f", {len(failed)} file(s) left as source: {failed}" if failed else ""
        if arguments.source_only:
            note += f", source only as asked: {', '.join(arguments.source_only)}"
        print(f"compile_bytecode: python{version} ({python}){note}")
    if compiled == 0:
        # The layer still works on every runtime; its cold starts compile the package.
        print(
            f"compile_bytecode: WARNING: no interpreter here for any of {', '.join(versions)}:"
            " the layer carries no bytecode",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
