"""The package's seams, from its own imports: no cycles, no reach-ins, short import chains.

Read statically from layer/fleetbreaker's source (nothing is imported):

- **no import cycle**, counting every import: at module level, under ``TYPE_CHECKING``, and
  inside functions, and the package ``__init__`` that importing a submodule runs first;
- **no reach-in**: no module reads another module's underscore name, whether imported
  (``from m import _x``) or as an attribute (``thing._x``, anything but ``self``/``cls``);
  a name shared between modules drops its underscore;
- **import chains of at most MAX_CHAIN**: the longest path of imports, where each top-level
  module is one step and each subpackage (``stores``, ``cli``) one step, as the rooms of a
  plan: a subsystem's own layering is its own, and it has MAX_CHAIN steps inside too.

The checks run on the package and, so that each can fail, on small packages written here.
"""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

LAYER = Path(__file__).resolve().parents[2] / "layer"
PACKAGE = "fleetbreaker"
MAX_CHAIN = 8


def modules(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` under ``root``: dotted name -> path."""
    found = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _target(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, every import counted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in found.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = _target(module, path, node)
                named = [
                    f"{target}.{alias.name}" if f"{target}.{alias.name}" in found else target
                    for alias in node.names
                ]
            else:
                continue
            for name in named:
                if name in found and name != module:
                    graph[module].add(name)
                    # Importing a.b.c runs a.b's __init__ first, unless the importer is in a.b.
                    parts = name.split(".")
                    for cut in range(2, len(parts)):
                        parent = ".".join(parts[:cut])
                        if parent in found and not module.startswith(f"{parent}."):
                            graph[module].add(parent)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(graph) | {n for targets in graph.values() for n in targets}):
        if node not in index:
            visit(node)
    return found


def reach_ins(found: dict[str, Path]) -> Iterator[str]:
    """Every read of another module's underscore name, as ``module: what``."""
    for module, path in sorted(found.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if _private(alias.name):
                        yield f"{module}: from {_target(module, path, node)} import {alias.name}"
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    yield f"{module}: {ast.unparse(owner)}.{node.attr}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def room(module: str, package: str = PACKAGE) -> str:
    """The step a module is in a chain: a top-level module, or its subpackage."""
    parts = module.split(".")
    return ".".join(parts[:2])


def longest_chain(graph: dict[str, set[str]], step: dict[str, str]) -> list[str]:
    """The longest path of imports between steps (``step`` maps module -> its step)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            if step[module] != step[target]:
                edges[step[module]].add(step[target])
    memo: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in memo:
            memo[node] = [node]  # a cycle would stop here; cycles are checked apart
            best = max((chain(nxt) for nxt in edges.get(node, ())), key=len, default=[])
            memo[node] = [node, *best]
        return memo[node]

    return max((chain(node) for node in set(step.values())), key=len)


# -- the package --------------------------------------------------------------------------


def package_graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    found = modules(LAYER)
    return found, imports(found)


def test_the_package_has_no_import_cycle() -> None:
    _, graph = package_graph()
    assert cycles(graph) == []


def test_no_module_reads_another_modules_underscore_name() -> None:
    found, _ = package_graph()
    assert list(reach_ins(found)) == []


def test_import_chains_are_at_most_eight_steps() -> None:
    found, graph = package_graph()
    chain = longest_chain(graph, {module: room(module) for module in found})
    assert len(chain) <= MAX_CHAIN, " -> ".join(chain)


@pytest.mark.parametrize("subpackage", ["fleetbreaker.stores", "fleetbreaker.cli"])
def test_each_subpackage_has_short_chains_inside_too(subpackage: str) -> None:
    found, graph = package_graph()
    inside = {m: m for m in found if m == subpackage or m.startswith(f"{subpackage}.")}
    local = {m: targets & set(inside) for m, targets in graph.items() if m in inside}
    chain = longest_chain(local, inside) if local else []
    assert len(chain) <= MAX_CHAIN, " -> ".join(chain)


def test_the_readme_path_of_one_call_is_short() -> None:
    # GIVEN the modules a healthy call passes through (docs/architecture.md, "One call")
    found, graph = package_graph()
    path = [
        "fleetbreaker.breaker",
        "fleetbreaker.sync_driver",
        "fleetbreaker.core",
        "fleetbreaker.admission",
        "fleetbreaker.view",
    ]

    # THEN the breaker imports each of the others: the call can be followed from it
    assert set(path[1:]) <= graph["fleetbreaker.breaker"]
    assert all(module in found for module in path)


# -- the checks themselves ----------------------------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, source in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return modules(root, "pkg")


def test_a_cycle_through_type_checking_is_found(tmp_path: Path) -> None:
    found = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.b import B\n",
            "b.py": """
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from pkg.a import A
            """,
        },
    )
    assert cycles(imports(found)) == [["pkg.a", "pkg.b"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    # GIVEN top importing a submodule of sub, inside a function (which runs sub's __init__
    # first), and sub's __init__ importing top
    found = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "top.py": """
                def f():
                    from pkg.sub import leaf
            """,
            "sub/__init__.py": "from pkg.top import f\n",
            "sub/leaf.py": "",
        },
    )
    # THEN it is a cycle
    assert cycles(imports(found)) == [["pkg.sub", "pkg.top"]]


def test_reach_ins_are_found_both_ways(tmp_path: Path) -> None:
    found = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "_hidden = 1\n",
            "b.py": """
                from pkg.a import _hidden
                from pkg import a
                class C:
                    def f(self):
                        return self._mine, a._hidden, a.__name__
            """,
        },
    )
    assert list(reach_ins(found)) == ["pkg.b: from pkg.a import _hidden", "pkg.b: a._hidden"]


def test_a_long_chain_is_measured_in_steps(tmp_path: Path) -> None:
    files = {"__init__.py": ""}
    for number in range(MAX_CHAIN + 1):
        files[f"m{number}.py"] = f"import pkg.m{number + 1}\n" if number < MAX_CHAIN else ""
    found = write_package(tmp_path, files)
    chain = longest_chain(imports(found), {m: room(m) for m in found})
    assert len(chain) == MAX_CHAIN + 1


def test_a_subpackage_is_one_step(tmp_path: Path) -> None:
    found = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "top.py": "from pkg.sub import c\n",
            "sub/__init__.py": "",
            "sub/a.py": "from pkg.sub import b\n",
            "sub/b.py": "from pkg.sub import c\n",
            "sub/c.py": "from pkg import leaf\n",
            "leaf.py": "",
        },
    )
    chain = longest_chain(imports(found), {m: room(m) for m in found})
    assert chain == ["pkg.top", "pkg.sub", "pkg.leaf"]


# -- wired once: the breaker and its call path assign into no other object ----------------------

# The modules that wire a breaker and run its calls: after construction they swap their own
# references (one Mode), never an attribute of a part (issue 43: "wired once").
WIRING_MODULES = ("breaker.py", "core.py", "sync_driver.py", "async_driver.py")


def foreign_assignments(source: str) -> list[str]:
    """Each assignment into an attribute of an object other than ``self``/``cls`` or a
    function the same scope has just defined (a decorator marking its own wrapper), and
    each ``setattr`` call: ``line: target``."""
    found: list[str] = []

    def visit(scope: ast.AST, defined: frozenset[str]) -> None:
        local = defined | {
            child.name
            for child in ast.iter_child_nodes(scope)
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        for node in ast.iter_child_nodes(scope):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if not isinstance(sub, ast.Attribute):
                        continue
                    owner = sub.value
                    if isinstance(owner, ast.Name) and owner.id in {"self", "cls", *local}:
                        continue
                    found.append(f"{node.lineno}: {ast.unparse(target)}")
                    break  # one line per target, however deep its chain
            for call in ast.walk(node) if not hasattr(node, "body") else ():
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == "setattr"
                ):
                    found.append(f"{call.lineno}: {ast.unparse(call)}")
            if hasattr(node, "body"):
                visit(node, local)

    visit(ast.parse(source), frozenset())
    return found


@pytest.mark.parametrize("module", WIRING_MODULES)
def test_the_call_path_assigns_into_no_other_object(module: str) -> None:
    source = (LAYER / PACKAGE / module).read_text()

    assert foreign_assignments(source) == []


@pytest.mark.parametrize(
    "source",
    [
        "class B:\n    def tune(self):\n        self._pipeline.policy = 1\n",
        "def adopt(view, refresh):\n    view.refresh = refresh\n",
        "class B:\n    def tune(self):\n        self._view.cache.ttl_ms += 1\n",
        "class B:\n    def tune(self):\n        setattr(self._pipeline, 'shadow', None)\n",
        "class B:\n    def go(self):\n        if True:\n            self._ctx.key = 'k'\n",
    ],
)
def test_the_assignment_check_finds_each_reach_in(source: str) -> None:
    assert foreign_assignments(source) != []


def test_the_assignment_check_lets_a_decorator_mark_its_own_wrapper() -> None:
    source = textwrap.dedent(
        """
        class B:
            def decorate(self, fn):
                def protected():
                    return fn()
                protected.breaker = self
                self._mode = object()
                return protected
        """
    )

    assert foreign_assignments(source) == []
