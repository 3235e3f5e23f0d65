"""The import structure: every import runs down the pipeline (model facts -> rope dict -> renderings -> commands).

Imports inside functions count as edges too: one there to load numpy late is fine, one that only dodges a circle
is the circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posenc_cli"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """posenc module -> the posenc modules it imports anywhere in its body (relative imports resolved)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    # engines.render imports its engines at module level; frequencies reads scaling inside for_request
    assert "posenc_cli.engines.vllm" in graph["posenc_cli.engines.render"]
    assert "posenc_cli.rope.scaling" in graph["posenc_cli.rope.frequencies"]
    assert len(graph) > 50


def test_no_import_circle_anywhere() -> None:
    assert cycles(import_graph()) == []


def test_a_circle_would_be_found() -> None:
    graph = import_graph()
    graph["posenc_cli.rope.scaling"] = graph["posenc_cli.rope.scaling"] | {"posenc_cli.engines.render"}
    assert any("posenc_cli.rope.scaling" in c and "posenc_cli.engines.render" in c for c in cycles(graph))


def test_the_core_never_imports_the_command_line() -> None:
    graph = import_graph()
    for name, imported in graph.items():
        if not name.startswith("posenc_cli.cli") and name != "posenc_cli.__main__":  # `python -m posenc_cli`
            assert not {m for m in imported if m.startswith("posenc_cli.cli")}, name


def test_engines_never_reach_up_to_the_request_or_policy_layers() -> None:
    """An engine renders a rope dict and model facts; how a request became that dict is not its business."""
    graph = import_graph()
    above = {
        "posenc_cli.models.extension", "posenc_cli.pick.picker", "posenc_cli.pick.planning", "posenc_cli.pick.rules"}
    for name, imported in graph.items():
        if name.startswith("posenc_cli.engines"):
            assert not imported & above, (name, imported & above)
    # and the bottom of the pipeline imports nothing above it
    assert graph["posenc_cli.rope.scaling"] <= {"posenc_cli.errors", "posenc_cli.units"}
