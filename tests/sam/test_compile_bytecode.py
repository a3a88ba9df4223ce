"""layer/compile_bytecode.py: the layer build's bytecode, and what it does with bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devtools.servers import REPO_ROOT

SCRIPT = REPO_ROOT / "layer" / "compile_bytecode.py"
HERE = "{}.{}".format(*sys.version_info[:2])
TAG = sys.implementation.cache_tag


def compile_layer(directory: Path, *versions: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(directory), *versions],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_every_module_gets_checked_hash_bytecode_for_the_runtime(tmp_path: Path) -> None:
    # GIVEN a layer directory with the package and a dependency
    write(tmp_path / "fleetbreaker" / "__init__.py", "VALUE = 1\n")
    write(tmp_path / "dependency" / "core.py", "def f():\n    return 2\n")

    # WHEN its bytecode is compiled for this interpreter's version
    result = compile_layer(tmp_path, HERE)

    # THEN each module has a checked-hash pyc (flags 0b11) for it
    assert result.returncode == 0, result.stderr
    for pyc in (
        tmp_path / "fleetbreaker" / "__pycache__" / f"__init__.{TAG}.pyc",
        tmp_path / "dependency" / "__pycache__" / f"core.{TAG}.pyc",
    ):
        assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b11


def test_a_runtime_without_an_interpreter_here_is_named_and_skipped(tmp_path: Path) -> None:
    # GIVEN a layer directory, and a runtime version no interpreter here runs
    write(tmp_path / "fleetbreaker" / "__init__.py", "VALUE = 1\n")

    # WHEN both that version and this interpreter's are asked for
    result = compile_layer(tmp_path, "3.99", HERE)

    # THEN the build goes on for this one and says the other's cold starts compile the source
    assert result.returncode == 0, result.stderr
    assert "no python3.99 here: its cold starts compile the source" in result.stdout


def test_a_package_module_that_does_not_compile_fails_the_build(tmp_path: Path) -> None:
    # GIVEN a package module with a syntax error
    write(tmp_path / "fleetbreaker" / "broken.py", "def f(:\n")

    # WHEN the bytecode is compiled
    result = compile_layer(tmp_path, HERE)

    # THEN the build fails and names the module
    assert result.returncode == 1
    assert "fleetbreaker/broken.py" in result.stderr


def test_a_function_module_that_does_not_compile_fails_the_build(tmp_path: Path) -> None:
    # GIVEN a function's directory: its own handler (broken) beside a dependency pip installed
    write(tmp_path / "app.py", "def handler(event, context:\n")
    write(tmp_path / "dependency" / "core.py", "VALUE = 1\n")
    write(tmp_path / "dependency-1.0.dist-info" / "RECORD", "dependency/core.py,sha256=x,10\n")

    # WHEN the bytecode is compiled
    result = compile_layer(tmp_path, HERE)

    # THEN the build fails and names the handler: only what pip installed may stay source
    assert result.returncode == 1
    assert "app.py" in result.stderr


def test_a_dependency_file_that_does_not_compile_is_listed_and_left_as_source(
    tmp_path: Path,
) -> None:
    # GIVEN a dependency pip installed (its RECORD lists the file) with a file this Python
    # cannot compile (another version's syntax)
    write(tmp_path / "fleetbreaker" / "__init__.py", "VALUE = 1\n")
    write(tmp_path / "dependency" / "py2_only.py", "print 'hello'\n")
    write(
        tmp_path / "dependency-1.0.dist-info" / "RECORD",
        "dependency/py2_only.py,sha256=x,14\ndependency-1.0.dist-info/RECORD,,\n",
    )

    # WHEN the bytecode is compiled
    result = compile_layer(tmp_path, HERE)

    # THEN the build goes on, names the file, and writes no bytecode for it
    assert result.returncode == 0, result.stderr
    assert "1 file(s) left as source" in result.stdout
    assert "dependency/py2_only.py" in result.stdout
    assert not (tmp_path / "dependency" / "__pycache__" / f"py2_only.{TAG}.pyc").exists()


def test_no_interpreter_for_any_runtime_warns_and_leaves_the_source(tmp_path: Path) -> None:
    # GIVEN only runtime versions with no interpreter here
    write(tmp_path / "fleetbreaker" / "__init__.py", "VALUE = 1\n")

    # WHEN the bytecode is compiled
    result = compile_layer(tmp_path, "3.98", "3.99")

    # THEN the build goes on (the layer works, compiling at each cold start) and warns
    assert result.returncode == 0
    assert "WARNING: no interpreter here for any of 3.98, 3.99" in result.stderr
    assert not list(tmp_path.rglob("*.pyc"))


def test_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    # WHEN the directory does not exist
    result = compile_layer(tmp_path / "absent", HERE)

    # THEN the script says so and exits 2
    assert result.returncode == 2
    assert "is not a directory" in result.stderr


def test_a_source_only_folder_gets_no_bytecode(tmp_path: Path) -> None:
    # GIVEN a dependency with a subpackage no cold start imports
    write(tmp_path / "dependency" / "core.py", "VALUE = 1\n")
    write(tmp_path / "dependency" / "extras" / "rare.py", "VALUE = 2\n")

    # WHEN the bytecode is compiled with that subpackage left as source
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--source-only", "dependency/extras", HERE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # THEN the rest is compiled, the subpackage is not, and the build says so
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dependency" / "__pycache__" / f"core.{TAG}.pyc").is_file()
    assert not list((tmp_path / "dependency" / "extras").rglob("*.pyc"))
    assert "source only as asked: dependency/extras" in result.stdout


def test_a_source_only_path_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    # GIVEN a layer whose dependency no longer has the path the build leaves as source
    write(tmp_path / "dependency" / "core.py", "VALUE = 1\n")

    # WHEN the bytecode is compiled
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--source-only", "dependency/moved", HERE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # THEN nothing is compiled: the build stops, naming the path, before it gets bytecode back
    assert result.returncode == 2
    assert "--source-only dependency/moved: not under" in result.stderr
    assert not list(tmp_path.rglob("*.pyc"))
