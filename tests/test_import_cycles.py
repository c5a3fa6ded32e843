"""engine/ has no import circles between its modules, and its packages stack in layers.

A circle makes import order matter and hides which of two modules is the lower layer. The two
the review of issue 25 found (replay's `Resolved`/`DispatchError` living in their biggest user;
simulate's graph types sharing a module with the graph builder) were both closed by late imports
inside functions, so this test counts every import, at module level or inside a function (only
``if TYPE_CHECKING:`` blocks, which never run, are left out). It builds the module import graph
from the source with ``ast`` and fails naming each circle, so a new one is caught the day it
appears.

Layers (`LAYERS`, lowest first; docs/architecture.md draws them): a package may import only
packages of lower layers; packages that share a layer are peers and import neither each other.
The order is read from the code, not wished on it: compose sits above replay and compare because
it measures a composed benchmark by replaying it (`compose.measure`), and above simulate because
its sharding kinds plan with the simulator's planners. A check that holds for modules can still
hide a package circle (trace -> compose -> ... -> trace through one late import each), so the
layer test counts every import the module graph counts, late ones included. Run this file as a
script to print the upward imports and the package pairs that import each other of a checkout
(`python tests/test_import_cycles.py [ROOT]`: 687fac2, before issue 34's layers, had 7 upward
imports in three pairs, analysis <-> simulate, compose <-> simulate and compose <-> trace).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"

# engine's packages (and top-level modules), lowest layer first; "engine" is engine/__init__.py
LAYERS: list[tuple[str, ...]] = [
    ("errors",),
    ("engine",),
    ("envvars",),
    ("jsonio", "progress", "sysinfo", "chatter", "resources", "rules"),
    ("fanout", "outdir", "metrics"),
    ("settings",),
    ("trace",),
    ("user_regex",),
    ("graph",),
    ("analysis",),
    ("simulate",),
    ("distributed",),
    ("replay",),
    ("compare",),
    ("compose", "capture"),
    ("fleet",),  # signatures and picks read traces; a suite's members are composed and replayed
    ("figures", "workspace", "testing"),
    ("cli",),
]
LAYER = {pkg: i for i, tier in enumerate(LAYERS) for pkg in tier}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.Module, type_only: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: anywhere in the module except under
    ``if TYPE_CHECKING:`` (its ``else`` branch runs and counts); with `type_only`, those too."""
    out: list[ast.Import | ast.ImportFrom] = []

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if not type_only and "TYPE_CHECKING" in ast.unparse(node.test):
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


def import_graph(root: Path = ROOT, type_only: bool = False) -> nx.DiGraph:
    """Directed graph over engine modules: an edge a -> b when a imports b (with `type_only`,
    also when only a type checker reads the import)."""
    modules = {_module_name(p, root): p for p in (root / "engine").rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path)), type_only):
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


def import_circles(root: Path = ROOT, type_only: bool = False) -> list[list[str]]:
    """The groups of engine modules that import each other (strongly connected components)."""
    g = import_graph(root, type_only=type_only)
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def package_of(module: str) -> str:
    """engine.simulate.whatif.dims -> simulate; engine.errors -> errors; engine -> engine."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(root: Path = ROOT) -> list[tuple[str, str]]:
    """(importer, imported) module pairs whose packages break `LAYERS`: the imported package sits
    in a higher layer, or in the same layer as a peer. A package missing from `LAYERS` counts
    as breaking it (a new package must be placed)."""
    out = []
    for a, b in import_graph(root).edges():
        pa, pb = package_of(a), package_of(b)
        if pa == pb:
            continue
        la, lb = LAYER.get(pa), LAYER.get(pb)
        if la is None or lb is None or lb >= la:
            out.append((a, b))
    return sorted(out)


def package_circles(root: Path = ROOT) -> list[tuple[str, str]]:
    """The pairs of engine packages that import each other (late imports included), sorted."""
    g = nx.DiGraph()
    for a, b in import_graph(root).edges():
        if package_of(a) != package_of(b):
            g.add_edge(package_of(a), package_of(b))
    return sorted({tuple(sorted((a, b))) for a, b in g.edges() if g.has_edge(b, a)})


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


def test_the_shared_types_live_below_their_users():
    """Counting also the imports only a type checker reads, the composer, the exporter, the meta
    check and the what-if package are in no circle: the composed `Benchmark`
    (compose/benchmark.py), the meta walk's state (compose/meta_state.py) and the edits'
    `EditContext` (simulate/whatif/context.py) each live below every module that names them.
    The simulator's settings are in none either: `SimConfig.parse` reads JSON through
    engine/jsonio.py `loads_document`, as what-if specs do, not through the what-if package. One
    small circle remains, closed by one late import of a declaration that loads its
    implementation when it runs: a sharding kind's `apply` (compose/shard/kinds.py)."""
    circles = import_circles(type_only=True)
    below = {
        "engine.compose.build",
        "engine.compose.export",
        "engine.compose.meta_check",
        "engine.compose.meta_outputs",
        "engine.simulate.whatif",
        "engine.simulate.result",
        "engine.simulate.graph",
        "engine.simulate.config",
        "engine.simulate.whatif.spec",
    }
    assert not below & {m for c in circles for m in c}, circles
    assert all("engine.compose.shard.kinds" in c for c in circles), circles


def test_every_engine_package_has_a_layer():
    """A new package (or top-level module) is placed in `LAYERS`; a stale entry is removed."""
    found = {package_of(n) for n in import_graph().nodes}
    assert found == set(LAYER), f"unplaced: {sorted(found - set(LAYER))}; stale: {sorted(set(LAYER) - found)}"


def test_engine_packages_import_only_lower_layers():
    """No package imports a package of its own or a higher layer (late imports included), so the
    packages form no circle: today's order holds with no exception."""
    up = upward_imports()
    assert not up, f"{len(up)} upward import(s) in engine/: " + "; ".join(f"{a} -> {b}" for a, b in up)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The check is not vacuous: a late upward import like trace.layout -> compose.shard.kinds,
    which main had before issue 34, is caught and its package pair named."""
    (tmp_path / "engine" / "trace").mkdir(parents=True)
    (tmp_path / "engine" / "compose").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text("")
    (tmp_path / "engine" / "trace" / "__init__.py").write_text("")
    (tmp_path / "engine" / "compose" / "__init__.py").write_text("import engine.trace\n")
    (tmp_path / "engine" / "trace" / "layout.py").write_text(
        "def f():\n    from engine.compose import kinds\n    return kinds\n"
    )
    (tmp_path / "engine" / "compose" / "kinds.py").write_text("")
    assert upward_imports(tmp_path) == [("engine.trace.layout", "engine.compose.kinds")]
    assert package_circles(tmp_path) == [("compose", "trace")]


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


if __name__ == "__main__":  # python tests/test_import_cycles.py [ROOT]: the upward imports of a checkout
    import sys

    where = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    found = upward_imports(where)
    for a, b in found:
        print(f"{a} -> {b}")
    print(f"{len(found)} upward import(s) in {where / 'engine'}")
    typed = import_circles(where, type_only=True)
    if typed:
        print(
            f"{len(typed)} module circle(s) counting type-only imports: "
            + "; ".join(f"{len(c)} modules" for c in typed)
        )
    pairs = package_circles(where)
    print(f"{len(pairs)} package pair(s) importing each other" + "".join(f"; {a} <-> {b}" for a, b in pairs))
