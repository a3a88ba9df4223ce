"""No test asserts a wall-clock bound: on a busy 2-core machine any such bound flakes.

A test that must show the store was not called counts the calls (a listener, ``stats``);
one that must show a race's order waits on an event or moves an injected clock; one that must
show a store call was cut short runs it against a server that holds the answer and checks
what ended it (the client's own timeout, the breaker's deadline: StoreDeadlineError) and how
many requests reached the server. A wait on work the test does not control may give up
(tests.support.wait_for, a harness's timeout): a liveness guard that raises, never an assert.

The check reads each test module's syntax tree: within a function, a name is wall-clock time
when it is assigned (or unpacked, or iterated) from an expression that reads the clock
(``time.time``, ``time.perf_counter``, ``time.monotonic``, their ``_ns`` forms) or calls a
helper named ``timed``, or a clock imported by name (``perf_counter()``, ``monotonic()``),
or from another such name. Any ``<`` or ``<=`` comparison of an
expression holding such a name with a number under 0.5 (a literal, or a module constant) is
reported with its file and line; so is every ``assert`` that orders such a name, or a clock
read, against anything at all (``asserted_bounds``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.coverage_scope import untraced

TESTS = Path(__file__).resolve().parents[1]
LIMIT_S = 0.5
CLOCK_READS = {"time", "perf_counter", "monotonic", "time_ns", "perf_counter_ns", "monotonic_ns"}
ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
BARE_CLOCK_READS = {"timed", "perf_counter", "monotonic", "perf_counter_ns", "monotonic_ns"}


def _reads_clock(node: ast.AST) -> bool:
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        if isinstance(func, ast.Name) and func.id in BARE_CLOCK_READS:
            return True  # a timed() helper, or a clock imported by name (from time import ...)
        if (
            isinstance(func, ast.Attribute)
            and func.attr in CLOCK_READS
            and isinstance(func.value, ast.Name)
            and func.value.id == "time"
        ):
            return True
    return False


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bindings(function: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, value) for every binding in the function: assignments, loops, comprehensions."""
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield target, node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value:
            yield node.target, node.value
        elif isinstance(node, (ast.For, ast.comprehension)):
            yield node.target, node.iter


def clock_names(function: ast.AST) -> set[str]:
    """The names in ``function`` that hold wall-clock readings, directly or derived."""
    found: set[str] = set()
    bindings = list(_bindings(function))
    changed = True
    while changed:
        changed = False
        for target, value in bindings:
            if _reads_clock(value) or _names(value) & found:
                new = _names(target) - found
                if new:
                    found |= new
                    changed = True
    return found


def _constants(module: ast.Module) -> dict[str, float]:
    values = {}
    for node in module.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        number = isinstance(value, ast.Constant) and type(value.value) in (int, float)
        if isinstance(target, ast.Name) and number:
            values[target.id] = float(value.value)  # type: ignore[union-attr]
    return values


def short_bounds(source: str, filename: str) -> list[str]:
    """``file:line: text`` of every wall-clock bound under LIMIT_S in ``source``."""
    return _short_bounds(ast.parse(source, filename), filename)


def _short_bounds(module: ast.Module, filename: str) -> list[str]:
    constants = _constants(module)
    found = []
    for function in ast.walk(module):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        timed_names = clock_names(function)
        for compare in ast.walk(function):
            if not isinstance(compare, ast.Compare):
                continue
            operands = [compare.left, *compare.comparators]
            for op, left, right in zip(compare.ops, operands, operands[1:], strict=False):
                if not isinstance(op, (ast.Lt, ast.LtE)):
                    continue
                if not (_names(left) & timed_names or _reads_clock(left)):
                    continue
                if isinstance(right, ast.Constant) and isinstance(right.value, (int, float)):
                    bound: float | None = float(right.value)
                elif isinstance(right, ast.Name):
                    bound = constants.get(right.id)
                else:
                    bound = None
                if bound is not None and bound < LIMIT_S:
                    found.append(f"{filename}:{compare.lineno}: {ast.unparse(compare)}")
    return found


def _holds_clock(node: ast.AST, timed_names: set[str]) -> bool:
    return bool(_names(node) & timed_names) or _reads_clock(node)


def asserted_bounds(source: str, filename: str) -> list[str]:
    """``file:line: text`` of every ``assert`` that orders a wall-clock reading against
    anything (a number, a constant, a deadline, a config value), whichever side it is on."""
    return _asserted_bounds(ast.parse(source, filename), filename)


def _asserted_bounds(module: ast.Module, filename: str) -> list[str]:
    found = []
    for function in ast.walk(module):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        timed_names = clock_names(function)
        for statement in ast.walk(function):
            if not isinstance(statement, ast.Assert):
                continue
            for compare in ast.walk(statement.test):
                if not isinstance(compare, ast.Compare):
                    continue
                ordered = [op for op in compare.ops if isinstance(op, ORDERINGS)]
                operands = [compare.left, *compare.comparators]
                if ordered and any(_holds_clock(o, timed_names) for o in operands):
                    found.append(f"{filename}:{statement.lineno}: {ast.unparse(compare)}")
                    break
    return found


def _scan_test_modules() -> dict[str, list[str]]:
    """Both checks over every test module, each module parsed once."""
    found: dict[str, list[str]] = {"short": [], "asserted": []}
    for path in sorted(TESTS.rglob("*.py")):
        filename = str(path.relative_to(TESTS.parent))
        module = ast.parse(path.read_text(), filename)
        found["short"] += _short_bounds(module, filename)
        found["asserted"] += _asserted_bounds(module, filename)
    return found


@pytest.fixture(scope="module")
def suite_scan() -> dict[str, list[str]]:
    """The findings in the suite's own modules: one pass for both tests (they share a worker),
    with coverage's tracer off, since the scan runs none of the measured code (two passes
    under the tracer took 4.5 s of CPU)."""
    scan: dict[str, list[str]] = untraced(_scan_test_modules)()
    return scan


def test_no_test_bounds_a_wall_clock_time_under_half_a_second(
    suite_scan: dict[str, list[str]],
) -> None:
    assert suite_scan["short"] == []


def test_no_test_asserts_a_wall_clock_bound(suite_scan: dict[str, list[str]]) -> None:
    # A busy machine stretches any wall-clock time (issue 44: 5.5 s against a bound of 2 s):
    # a test shows a call was cut short by what the code did, not by how long it took.
    assert suite_scan["asserted"] == []


def test_the_check_finds_the_bounds_it_forbids() -> None:
    # GIVEN the shapes the suite used to have (a timed second call, a sum of timed calls, a
    # clock difference, a module constant) and the shapes it keeps (a simulated time, a
    # bound of 0.5 s or more)
    source = """
QUICK_S = 0.05
def test_a():
    result, first = timed(breaker.call, dep)
    _, second = timed(breaker.call, dep)
    assert second < 0.05
def test_b():
    rest = [timed(lambda: breaker.call(dep)) for _ in range(50)]
    assert sum(seconds for _, seconds in rest) < 0.1
def test_c():
    started = time.perf_counter()
    work()
    assert time.perf_counter() - started <= QUICK_S
def test_kept():
    started = time.monotonic()
    assert time.monotonic() - started < 0.5
    result = simulate()
    assert result.trip_s < 0.1
"""
    # WHEN it is checked, THEN the three short bounds are reported, and only they
    found = short_bounds(source, "example.py")
    assert [line.split(":")[1] for line in found] == ["6", "9", "13"]


def test_the_check_finds_every_asserted_wall_clock_bound() -> None:
    # GIVEN the shapes issue 44 found (a bound of 2 s, a budget constant, a deadline plus
    # slack, a give-up asserted in a wait loop), the bound written on the left, a clock
    # imported by name, and the shapes the suite keeps (a wait loop's condition, a simulated
    # time, a count)
    source = """
def test_gate():
    started = time.perf_counter()
    answer = check()
    elapsed = time.perf_counter() - started
    assert elapsed < 2
def test_budget():
    result, first = timed(breaker.call, dep)
    assert first < BUDGET_S
def test_deadline():
    again, again_s = timed(lambda: breaker.call(dep))
    assert again == "ok" and again_s < CONFIG.store_deadline_seconds + 1
def test_wait():
    deadline = time.monotonic() + 30
    while calls == 0:
        assert time.monotonic() < deadline, "no call"
def test_left():
    started = time.monotonic()
    work()
    assert 30 > time.monotonic() - started
def test_imported():
    began = perf_counter()
    assert perf_counter() - began <= 5
def test_kept():
    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        pass
    assert running() == []
    result = simulate()
    assert result.trip_s < 0.1
    assert calls.attempts <= 2
"""
    # WHEN it is checked, THEN the six asserted bounds are reported, and only they
    found = asserted_bounds(source, "example.py")
    assert [line.split(":")[1] for line in found] == ["6", "9", "12", "16", "20", "23"]
