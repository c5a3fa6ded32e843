"""engine/ has no import circles between its modules.

A circle makes import order matter and hides which of two modules is the lower layer. The two
the review of issue 25 found (replay's `Resolved`/`DispatchError` living in their biggest user;
simulate's graph types sharing a module with the graph builder) were both closed by late imports
inside functions, so this test counts every import, at module level or inside a function (only
``if TYPE_CHECKING:`` blocks, which never run, are left out). It builds the module import graph
from the source with ``ast`` and fails naming each circle, so a new one is caught the day it
appears.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: anywhere in the module except under
    ``if TYPE_CHECKING:`` (its ``else`` branch runs and counts)."""
    out: list[ast.Import | ast.ImportFrom] = []

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if "TYPE_CHECKING" in ast.unparse(node.test):
                for st in node.orelse:
                    self.visit(st)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            out.append(node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            out.append(node)

    Visitor().visit(tree)
    return out


def import_graph() -> nx.DiGraph:
    """Directed graph over engine modules: an edge a -> b when a imports b."""
    modules = {_module_name(p): p for p in ENGINE.rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from pkg import sub` imports the submodule when there is one
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            for t in targets:
                while t and t not in modules:  # a.b.c where c is a name in a.b -> a.b
                    t = t.rpartition(".")[0]
                if t and t != name:
                    g.add_edge(name, t)
    return g


def import_circles() -> list[list[str]]:
    """The groups of engine modules that import each other (strongly connected components)."""
    g = import_graph()
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_the_graph_sees_engine_imports():
    """The walker finds real edges, late ones included (a broken walker would pass vacuously)."""
    g = import_graph()
    assert g.number_of_nodes() > 100
    assert g.number_of_edges() > 200
    assert g.has_edge("engine.cli.replay", "engine.errors")
    # a late import inside a function body counts (Trace.of_rank imports engine.trace.ranks)
    assert g.has_edge("engine.trace.model", "engine.trace.ranks")


def test_engine_has_no_import_circles():
    """No module of engine/ imports, at load time or later, a module that imports it back."""
    circles = import_circles()
    assert not circles, f"{len(circles)} import circle(s) in engine/: " + "; ".join(" <-> ".join(c) for c in circles)


def test_package_names_are_not_shadowed_by_submodules():
    """A lazily exported name that is also a submodule's name is rebound to the module as soon as
    anything imports that submodule (engine.compose.export once was: `export(bench, out)` then
    raised "'module' object is not callable" depending on test order)."""
    import importlib
    import pkgutil
    import types

    import engine

    for info in pkgutil.walk_packages(engine.__path__, "engine."):
        if not info.ispkg:
            continue
        pkg = importlib.import_module(info.name)
        names = getattr(pkg, "__all__", [])
        for sub in pkgutil.iter_modules(pkg.__path__):
            if sub.name in names:
                importlib.import_module(f"{info.name}.{sub.name}")
                assert not isinstance(getattr(pkg, sub.name), types.ModuleType), f"{info.name}.{sub.name}"
