"""The broker's import graph (issue 15): no module of ``strom/server`` imports another in a circle, and nothing
below the broker wiring imports ``strom.server.broker`` (handlers get their collaborators from KafkaApis).

Imports inside ``if TYPE_CHECKING:`` blocks are type hints only and do not count; imports inside functions do
(they are the usual way to hide a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SERVER = Path(__file__).resolve().parents[3] / "strom" / "server"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SERVER.parents[1]).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(tree: ast.Module) -> set[str]:
    out: set[str] = set()

    def visit(node: ast.AST, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                for orelse in child.orelse:
                    visit(orelse, type_checking)
                continue
            if isinstance(child, ast.ImportFrom) and child.module and not type_checking:
                out.add(child.module)
                out.update(f"{child.module}.{a.name}" for a in child.names)
            elif isinstance(child, ast.Import) and not type_checking:
                out.update(a.name for a in child.names)
            visit(child, type_checking)

    visit(tree, False)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in SERVER.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = _runtime_imports(ast.parse(path.read_text(encoding="utf-8")))
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        color[n] = GREY
        stack.append(n)
        for m in sorted(graph[n]):
            if color[m] == GREY:
                return stack[stack.index(m):] + [m]
            if color[m] == WHITE:
                found = dfs(m)
                if found:
                    return found
        stack.pop()
        color[n] = BLACK
        return None

    for n in sorted(graph):
        if color[n] == WHITE:
            found = dfs(n)
            if found:
                return found
    return None


def test_no_import_cycle_in_the_broker() -> None:
    graph = import_graph()
    assert len(graph) > 40  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_nothing_below_the_wiring_imports_the_broker() -> None:
    importers = sorted(n for n, deps in import_graph().items() if "strom.server.broker" in deps)
    assert importers == [], importers


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
