"""No import circle hidden behind `if TYPE_CHECKING:` (or inside a function).

A module that imports another only for its annotations, while that other imports it at run time, is a circle
the type checker closes and the interpreter does not see: the two modules cannot be read (or moved) apart. Every
module under mcpgate/ is parsed (not imported), its imports found wherever they are: at the top, under
TYPE_CHECKING, or inside a function (a lazy import). A plain run-time circle would fail at import; one that
takes a TYPE_CHECKING or a lazy edge fails here, naming its modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support import ROOT

PACKAGE = ROOT / "mcpgate"
Edge = tuple[str, str, str]  # (importer, imported, how: "run" | "typing" | "lazy")


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _typing_guard(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(body: list[ast.stmt], how: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement under `body`, with how it runs: at import ("run"), never ("typing"), or later when a
    function runs ("lazy")."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, how
        elif isinstance(node, ast.If) and _typing_guard(node):
            yield from _imports(node.body, "typing")
            yield from _imports(node.orelse, how)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _imports(node.body, "typing" if how == "typing" else "lazy")
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    stmts = [s for s in inner if isinstance(s, ast.stmt)]
                    stmts += [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body]
                    yield from _imports(stmts, how)


def _targets(node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        assert node.level == 0, "relative imports are banned (ruff TID252)"
        base = node.module or ""
        # `from a.b import c`: the module a.b.c when there is one, else a name of a.b
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    for name in names:
        if name in known:
            yield name


def edges() -> list[Edge]:
    known = modules()
    found: set[Edge] = set()
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, how in _imports(tree.body, "run"):
            for target in _targets(node, known):
                if target != name:
                    found.add((name, target, how))
    return sorted(found)


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A shortest import path from `start` to `goal` (breadth first), or None."""
    came: dict[str, str | None] = {start: None}
    queue = [start]
    for here in queue:
        if here == goal:
            path, step = [], here
            while step is not None:
                path.append(step)
                step = came[step]  # type: ignore[assignment]
            return path[::-1]
        for there in sorted(graph.get(here, ())):
            if there not in came:
                came[there] = here
                queue.append(there)
    return None


def circles(found: list[Edge]) -> list[str]:
    """Each TYPE_CHECKING or lazy edge A -> B for which B leads back to A: the circle, spelled out."""
    graph: dict[str, set[str]] = {}
    for importer, imported, _how in found:
        graph.setdefault(importer, set()).add(imported)
    out = []
    for importer, imported, how in found:
        if how == "run":
            continue
        back = _path(graph, imported, importer)
        if back is not None:
            out.append(f"{importer} -({how})-> " + " -> ".join(back))
    return out


def test_the_graph_sees_every_kind_of_import() -> None:
    kinds = {how for _importer, _imported, how in edges()}
    assert {"run", "typing"} <= kinds


def test_a_circle_through_a_typing_import_is_found() -> None:
    made = [("a", "b", "run"), ("b", "c", "run"), ("c", "a", "typing"), ("d", "a", "typing")]
    assert circles(made) == ["c -(typing)-> a -> b -> c"]


def test_no_import_circle_hides_behind_type_checking_or_a_function() -> None:
    found = circles(edges())
    assert not found, "import circles:\n" + "\n".join(found)
