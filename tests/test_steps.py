"""One step model (engine/trace/steps.py, issue 34 item 2; issue 30 "Steps without ProfilerStep").

Every step detector asks the one model, so the string that names a step appears in code only in
the vocabulary and the model. A serving trace without `ProfilerStep#N` spans takes its step from
the framework's per-step annotation (vLLM / xDiT `execute_...`, SGLang `step[...]`), else from
the whole window, and says which. Golden values are read from the raw JSON here (a hand count of
the b200 trace: one `user_annotation` named `execute_context_1(888_788544)_generation_0(0)`,
87412.863 us long, and no ProfilerStep span at all).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from clirun import cli
from rawjson import raw_events

from engine.trace import load
from engine.trace.steps import iteration_ms, measured_steps, step_spans

ROOT = Path(__file__).resolve().parent.parent


def _kineto(path: Path, events: list[dict]) -> Path:
    """A mini Kineto trace: one cpu_op under each span, a kernel, and the spans given."""
    evs = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]
    evs.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12, "dur": 900, "args": {}})
    for e in events:
        evs.append({"ph": "X", "pid": 1, "tid": 1, **e})
    path.write_text(json.dumps({"traceEvents": evs}))
    return path


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("execute_model", "annotation:execute_*"),  # vLLM V0
        ("execute_context_2(96)_generation_14(14)", "annotation:execute_*"),  # vLLM V1
        ("execute_diffusion_step_3", "annotation:execute_diffusion_*"),  # xDiT
        ("step[prefill=1,decode=7]", "annotation:step[*]"),  # SGLang
    ],
)
def test_a_serving_step_comes_from_the_framework_annotation(tmp_path, cache_dir, name, source):
    spans = [
        {"cat": "user_annotation", "name": name, "ts": 0, "dur": 400},
        {"cat": "user_annotation", "name": name, "ts": 500, "dur": 600},
        # a GPU-side copy of the range is not the step (as for ProfilerStep)
        {"cat": "gpu_user_annotation", "name": name, "ts": 3, "dur": 5000, "pid": 0, "tid": 7},
    ]
    tr = load(_kineto(tmp_path / "serve.json", spans), use_cache=False)
    ms = measured_steps(tr.events)
    assert ms.step_source == source
    assert ms.spans["dur_us"].tolist() == [400.0, 600.0]
    assert iteration_ms(tr.events) == pytest.approx(0.5)
    assert tr.meta["iterations"] == []  # meta["iterations"] stays the ProfilerStep record


def test_profiler_step_wins_and_nested_ranges_count_once(tmp_path, cache_dir):
    spans = [
        {"cat": "user_annotation", "name": "ProfilerStep#4", "ts": 0, "dur": 1000},
        {"cat": "user_annotation", "name": "execute_model", "ts": 1, "dur": 900},
    ]
    tr = load(_kineto(tmp_path / "both.json", spans), use_cache=False)
    assert measured_steps(tr.events).step_source == "ProfilerStep"
    assert iteration_ms(tr.events) == pytest.approx(1.0)
    # an execute_model range holding the framework's own execute_* sub-ranges is one step
    nested = [
        {"cat": "user_annotation", "name": "execute_model", "ts": 0, "dur": 1000},
        {"cat": "user_annotation", "name": "execute_context_1(8)_generation_0(0)", "ts": 5, "dur": 900},
    ]
    tr = load(_kineto(tmp_path / "nested.json", nested), use_cache=False)
    ms = measured_steps(tr.events)
    assert ms.spans["name"].tolist() == ["execute_model"] and iteration_ms(tr.events) == pytest.approx(1.0)


def test_without_steps_the_window_is_named_and_no_step_is_measured(tmp_path, cache_dir):
    tr = load(_kineto(tmp_path / "bare.json", []), use_cache=False)
    ms = measured_steps(tr.events)
    assert ms.step_source == "window"
    assert ms.spans["dur_us"].tolist() == [902.0]  # 10 .. 912: the cpu_op's start to the kernel's end
    assert iteration_ms(tr.events) is None and step_spans(tr.events).empty


def test_b200_serving_trace_reports_its_execute_step(shared_traces, cache_dir):
    path = shared_traces / "tracelens_b200_eager" / "eager_trace.json.gz"
    xs = [e for e in raw_events(path) if e.get("ph") == "X"]
    assert not any(e["name"].startswith("ProfilerStep#") for e in xs)
    want = [e["dur"] for e in xs if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    assert want == [87412.863]
    info = cli("info", path, "--json", cache=cache_dir)
    assert info.returncode == 0, info.stderr
    doc = json.loads(info.stdout)
    o = doc[0] if isinstance(doc, list) else doc
    assert o["step_source"] == "annotation:execute_*"
    assert o["step_ms"] == pytest.approx(want[0] / 1000, rel=1e-9)
    from engine.simulate import simulate

    res = simulate(load(path)).to_json()
    assert res["measured_iteration_ms"] == pytest.approx(want[0] / 1000, rel=1e-9)


def _code_strings(path: Path) -> list[str]:
    """String constants of a module, docstrings and comments left out."""
    tree = ast.parse(path.read_text())
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_only_the_vocabulary_and_the_step_model_name_a_step():
    """The seven detectors (loader, store rows, phases, analysis steps, fleet program, critical
    path, timeline) ask engine/trace/steps.py: no other module spells the step's prefix."""
    home = {ROOT / "engine" / "trace" / "vocab.py", ROOT / "engine" / "trace" / "steps.py"}
    spelled = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "engine").rglob("*.py"))
        if p not in home and any("ProfilerStep#" in s for s in _code_strings(p))
    ]
    assert spelled == []


# modules that name the prefix for another reason than finding steps: label rules (a step span is
# a label, not work), the store's Arrow prefilter before the model decides, and the writers of
# synthetic traces
_PREFIX_USERS = {
    "engine/trace/vocab.py",
    "engine/trace/steps.py",
    "engine/trace/phases.py",
    "engine/trace/categories.py",
    "engine/trace/store/rows.py",
    "engine/trace/store/handle.py",  # SQL prefilter of a big trace's first view (rows, not steps)
    "engine/trace/store/summary.py",  # SQL prefilter; measured_steps decides
    "engine/testing/fleet.py",
    "engine/testing/tiled.py",
    "engine/testing/launch_queue.py",
}


def test_step_detectors_use_the_step_model_not_the_prefix():
    """A module that tests names against STEP_PREFIX itself is a step detector of its own; it asks
    `engine.trace.steps` (step_mask, step_spans, measured_steps) instead."""
    users = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "engine").rglob("*.py"))
        if "STEP_PREFIX" in p.read_text() and str(p.relative_to(ROOT)) not in _PREFIX_USERS
    ]
    assert users == []


@pytest.mark.slow
def test_step_ms_is_the_median_host_step_of_the_raw_json_and_every_reader_reports_it(shared_traces, cache_dir):
    """`step_ms(trace)` against a hand count: the median of the host `ProfilerStep#N` spans read
    from the raw JSON. nw4's first step is a warm-up outlier (~215 ms against ~174 ms), so a mean
    would differ; compare's two readers report the same number through it."""
    import statistics

    from engine.compare import compare_traces
    from engine.compare.replay import original_step_ms
    from engine.trace.steps import measured_iterations, step_ms

    d = shared_traces / "kineto_resnet50_dataloader"
    nw0, nw4 = d / "nw0_worker0.pt.trace.json.gz", d / "nw4_worker0.pt.trace.json.gz"
    want = {}
    for p in (nw0, nw4):
        durs = [
            e["dur"]
            for e in raw_events(p)
            # host rows: this capture tags them "Operator" (newer Kineto: "user_annotation"); not the GPU lanes
            if e.get("ph") == "X"
            and str(e.get("name", "")).startswith("ProfilerStep#")
            and not str(e.get("cat", "")).lower().startswith(("gpu_", "kernel"))
        ]
        assert len(durs) >= 3, p
        want[p] = (statistics.median(durs) / 1000, len(durs), statistics.fmean(durs) / 1000)
    a, b = load(nw0), load(nw4)
    for t, p in ((a, nw0), (b, nw4)):
        assert step_ms(t) == pytest.approx(want[p][0], rel=1e-9)
        assert len(measured_iterations(t)) == want[p][1]
        assert original_step_ms(t, None)[0] == pytest.approx(want[p][0], rel=1e-9)
    assert abs(want[nw4][2] - want[nw4][0]) > 1.0  # the mean is not the median here: the check can fail
    e2e = compare_traces(a, b).e2e
    assert e2e["a_ms"] == pytest.approx(want[nw0][0], rel=1e-9)
    assert e2e["b_iterations"] == want[nw4][1]


def test_only_the_step_model_reads_the_recorded_steps_durations():
    """A module that loops over `meta["iterations"]` and reads `dur_us` computes a step time of its
    own; it calls `step_ms`, `measured_iterations` or `step_ms_by_rank` instead."""
    readers = []
    for p in sorted((ROOT / "engine").rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        if rel == "engine/trace/steps.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            gens = node.generators if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp) else []
            loops = [g.iter for g in gens] + ([node.iter] if isinstance(node, ast.For) else [])
            if any("'iterations'" in ast.unparse(it) for it in loops) and "'dur_us'" in ast.unparse(node):
                readers.append(f"{rel}:{node.lineno}")
    assert readers == []
