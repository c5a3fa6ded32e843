"""The app's layering (issue 34 item 4): pages draw, app/views.py computes.

Every engine computation a page shows goes through one cached view in app/views.py, so a rerun
that changes nothing recomputes nothing and two pages showing the same table share one entry.
A page that calls the engine itself (Explore's Breakdown once did, uncached on every rerun) or
keeps a cache of its own (the What-if page once did) fails here, naming the line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "pages").glob("*.py"))

# Engine functions that compute over a trace (what a view caches). A page may still import
# metadata (configs, rules, enums, selectors), figures, errors, and call the two actions it
# runs on a click (export_kineto, the job runner).
COMPUTE = {
    "simulate",
    "compare",
    "compare_traces",
    "bookkeeping",
    "step_spans",
    "class_shares",
    "select",
    "plan_ranks",
    "world_budget",
    "check_world_memory",
    "rank_inputs",
    "capture_rank_medians",
    "open_trace",
}
SELFTIME = {"time_by", "gpu_idle", "op_time_by", "top_ops", "kernel_table", "self_times"}


def _engine_names(tree: ast.Module) -> set[str]:
    """Names a page binds by importing them from engine.*."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine"):
            out |= {a.asname or a.name for a in node.names}
    return out


def test_pages_make_no_engine_computation_and_keep_no_cache_of_their_own():
    bad = []
    for page in PAGES:
        tree = ast.parse(page.read_text())
        from_engine = _engine_names(tree)
        rel = page.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in COMPUTE and f.id in from_engine:
                    bad.append(f"{rel}:{node.lineno}: {f.id}()")
                if isinstance(f, ast.Attribute) and ast.unparse(f.value) == "selftime" and f.attr in SELFTIME:
                    bad.append(f"{rel}:{node.lineno}: selftime.{f.attr}()")
            if isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    text = ast.unparse(d)
                    if "cache_" in text or "views.view" in text:
                        bad.append(f"{rel}:{node.lineno}: {node.name} cached on the page ({text})")
    assert bad == [], "engine work on a page (move it to a view in app/views.py):\n" + "\n".join(bad)


def test_the_app_state_lives_in_modules_named_by_role():
    """app/state.py (541 lines, 33 functions, 9 roles) is split: no page or app module imports it."""
    assert not (ROOT / "app" / "state.py").exists()
    users = [
        str(p.relative_to(ROOT))
        for top in ("app", "pages", "tests")
        for p in (ROOT / top).glob("*.py")
        if any(
            isinstance(n, ast.ImportFrom)
            and (n.module == "app.state" or (n.module == "app" and any(a.name == "state" for a in n.names)))
            for n in ast.walk(ast.parse(p.read_text()))
        )
    ]
    assert users == []
