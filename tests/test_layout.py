"""The layout holds: no import cycles, layers import downward only, the CLI apart.

Every import counts, deferred ones (inside functions, under `TYPE_CHECKING`) included: a cycle
hidden behind a function-level import is still a cycle a reader has to untangle, and the next
top-level import turns it into an import error.

Layers, bottom to top: `vtwin` (shared errors) <- `impl` (the twin) <- `workloads` (the format)
<- `conformance` (the harness); inside the harness, `conformance.cli` (argparse and printing)
sits on top and nothing below imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("vtwin", "impl", "workloads", "conformance")
LAYER = {name: rank for rank, name in enumerate(PACKAGES)}
ROOT_MODULES = {"__init__.py", "paths.py", "rundirs.py"}
"""What may sit at `conformance/`'s root: the package, where things are, run directories."""


def project_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if "tests" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> Iterator[str]:
    """Every dotted name `module` imports, at any depth (`from a import b` yields `a.b` and
    `a`; relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {owner(name) for name in imported_names(module, path)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert "conformance.cli.app" in graph and "impl.sched.scheduler" in graph
    assert "impl.sched.queues" in graph["impl.sched.scheduler"]  # a real edge is seen


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_layers_import_downward_only() -> None:
    upward = [f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
              if LAYER[b.split(".")[0]] > LAYER[a.split(".")[0]]]
    assert not upward, f"upward imports: {upward}"


def test_nothing_below_the_cli_imports_it() -> None:
    into_cli = [f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                if b.startswith("conformance.cli") and not a.startswith("conformance.cli")]
    assert not into_cli, f"library code importing the CLI: {into_cli}"


def test_conformance_root_holds_only_its_entry_modules() -> None:
    loose = sorted(p.name for p in (REPO / "conformance").glob("*.py")
                   if p.name not in ROOT_MODULES)
    assert not loose, f"modules loose at conformance/'s root: {loose} (give each a package)"


@pytest.mark.parametrize("package", ["conformance", "workloads"])
def test_no_module_counts_its_way_to_the_repo_root(package: str) -> None:
    """`Path(__file__).parents[N]` breaks silently when a module moves: ask `paths`."""
    counting = [str(p.relative_to(REPO)) for p in (REPO / package).rglob("*.py")
                if "tests" not in p.parts and p.name != "paths.py"
                and ".parents[" in p.read_text(encoding="utf-8")]
    assert not counting, f"modules deriving the repo root from __file__: {counting}"


def test_planted_cycle_is_found() -> None:
    """The cycle finder itself: a planted three-module ring is reported whole."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
