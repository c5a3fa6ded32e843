"""Host time that waits is not host work (issue 30): on the real GPU traces of other teams the
unchanged trace still reproduces itself, a faster GPU shortens the steps where the host waited
for it (against a hand count from the raw JSON), the sensitivity agrees with the critical path,
and the path of a GPU-bound step runs through its kernels.

Hand counts read the raw trace JSON (gzip + json, no engine code): per host ProfilerStep span
(else the whole trace), W = the part of the host's synchronize calls and of its launches lasting
over 10x their name's median during which the GPU was busy (the union of GPU task intervals),
K = kernel time starting in the step. Why only the GPU-busy part of those calls: a launch that
loads a module (param_resnet: one cudaLaunchKernel of 726 ms, the GPU idle all along) or a
synchronize on an idle GPU is host work; no GPU speed-up can shorten it. The raw figure (whole
calls, as the issue counts it) is printed beside it.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from rawjson import raw_events

from tests.conftest import SAMPLES, SHARED_TRACES

pytestmark = [pytest.mark.slow]

_LAUNCH = re.compile(
    r"^(cuda|hip)(LaunchKernel(ExC)?|LaunchCooperativeKernel|ExtModuleLaunchKernel|ModuleLaunchKernel|GraphLaunch)$"
    r"|^cuLaunchKernel(Ex)?$"
)
_RUNTIME = ("cuda_runtime", "runtime", "hip_runtime", "cuda_driver", "hip_driver")
_GPU = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")


def _kineto_paths() -> list[str]:
    man = SHARED_TRACES / "MANIFEST.json"
    if not man.exists():
        return []
    return [e["path"] for e in json.loads(man.read_text()) if e.get("kind") == "kineto"]


PATHS = _kineto_paths()


# ---------------------------------------------------------------- hand counts from the raw JSON
def _union(iv: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    out: list[list[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return np.array([u[0] for u in out]), np.array([u[1] for u in out])


def _busy(us: np.ndarray, ue: np.ndarray, a: float, b: float) -> float:
    return float(np.clip(np.minimum(ue, b) - np.maximum(us, a), 0, None).sum()) if len(us) else 0.0


def hand_count(path) -> dict:
    """Per step (ms): W (GPU-busy part of synchronize calls and of launches > 10x their median),
    W_raw (those calls whole), K (kernels), busy (GPU busy), blocked (GPU-busy part of the
    synchronize calls, of the slow launches and of the copies and memsets that returned after
    their own GPU copy ended), step."""
    evs = [e for e in raw_events(path) if e.get("ph") == "X" and "dur" in e and "ts" in e]

    def cat(e):
        return str(e.get("cat", "")).lower()

    steps = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in evs
        if str(e.get("name", "")).startswith("ProfilerStep#") and not cat(e).startswith("gpu")
    ]
    if not steps:
        steps = [(min(float(e["ts"]) for e in evs), max(float(e["ts"]) + float(e["dur"]) for e in evs))]
    rt = [e for e in evs if cat(e) in _RUNTIME]
    durs: dict[str, list[float]] = {}
    for e in rt:
        durs.setdefault(e["name"], []).append(float(e["dur"]))
    med = {k: float(np.median(v)) for k, v in durs.items()}
    slow = [e for e in rt if _LAUNCH.search(e["name"]) and float(e["dur"]) > 10 * med[e["name"]]]
    sync = [e for e in rt if "Synchronize" in e["name"]]
    copy = [e for e in rt if re.search(r"Memcpy|Memset", e["name"])]
    us, ue = _union([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in evs if cat(e) in _GPU])
    kern = [(float(e["ts"]), float(e["dur"])) for e in evs if cat(e) == "kernel"]

    def per_step(f) -> float:
        return sum(f(a, b) for a, b in steps) / len(steps) / 1e3

    def calls(group, busy_only):
        def f(a, b):
            tot = 0.0
            for e in group:
                s = float(e["ts"])
                if a <= s < b:
                    tot += _busy(us, ue, s, s + float(e["dur"])) if busy_only else float(e["dur"])
            return tot

        return f

    # a copy or memset call that returned after its own GPU copy ended waited for it (0.1 ms of
    # host/GPU clock skew allowed); matched by the correlation id
    gpu_end = {
        (e.get("args") or {}).get("correlation"): float(e["ts"]) + float(e["dur"])
        for e in evs
        if cat(e) in _GPU and cat(e) != "kernel"
    }
    slow_copy = [
        e
        for e in copy
        if gpu_end.get((e.get("args") or {}).get("correlation"), np.inf) <= float(e["ts"]) + float(e["dur"]) + 100
    ]
    blocked_iv = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in (*sync, *slow_copy, *slow)
    ]  # may overlap (nested): union first
    bs, be = _union(blocked_iv)

    def blocked(a, b):
        return sum(_busy(us, ue, max(x, a), min(y, b)) for x, y in zip(bs, be) if y > a and x < b)

    return {
        "W": per_step(calls([*sync, *slow], True)),
        "W_raw": per_step(calls([*sync, *slow], False)),
        "K": per_step(lambda a, b: sum(d for s, d in kern if a <= s < b)),
        "busy": per_step(lambda a, b: _busy(us, ue, a, b)),
        "blocked": per_step(blocked),
        "step": per_step(lambda a, b: b - a),
    }


# ---------------------------------------------------------------- one load per trace and module
@pytest.fixture(scope="module")
def runs(load_shared):
    """`runs(path)`: (trace, unchanged result, GPU 2x result, hand count), computed once."""
    from engine.simulate import simulate

    cache: dict[str, tuple] = {}

    def get(path: str):
        if path not in cache:
            tr = load_shared(path)
            base = simulate(tr)
            gpu2 = simulate(tr, {"version": 1, "edits": [{"kind": "speedup", "category": "gpu", "factor": 2}]})
            cache[path] = (tr, base, gpu2, hand_count(SHARED_TRACES / path))
        return cache[path]

    return get


def _measured_ms(tr) -> float:
    """The trace's own step: its mean ProfilerStep span, else its whole span (task rows)."""
    from engine.analysis.steps import iteration_ms

    m = iteration_ms(tr.events)
    if m is not None:
        return m
    ev = tr.events
    ok = ev["cat"].astype(str).isin(("Trace", "cuda_sync", "gpu_user_annotation", "gpu_instr", "ac2g", "fwdbwd"))
    ev = ev[~ok & np.isfinite(ev["dur_us"]) & (ev["dur_us"] >= 0)]
    return float((ev["ts_us"] + ev["dur_us"]).max() - ev["ts_us"].min()) / 1e3


# ---------------------------------------------------------------- reproduction
@pytest.mark.parametrize("path", PATHS)
def test_unchanged_trace_reproduces_within_half_a_percent(path, shared_traces, runs):
    tr, base, _, _ = runs(path)
    measured = _measured_ms(tr)
    err = 100 * (base.predicted_iteration_ms / measured - 1)
    print(f"{path}: measured {measured:.3f} ms, reproduced {base.predicted_iteration_ms:.3f} ms ({err:+.3f} %)")
    assert abs(err) <= 0.5, (path, measured, base.predicted_iteration_ms)


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer", "dlrm", "resnet_tv", "gpt2_hf"])
def test_samples_still_reproduce(model, cache_dir):
    from engine.simulate import simulate
    from engine.trace import load

    r = simulate(load(SAMPLES / model / f"{model}_kineto.json.gz")).to_json()
    assert r["measured_iteration_ms"] and abs(r["error_pct"]) <= 0.5, r["error_pct"]


# ---------------------------------------------------------------- a faster GPU
@pytest.mark.parametrize("path", PATHS)
def test_gpu_2x_shortens_steps_where_the_host_waited(path, shared_traces, runs):
    """GPU 2x shortens the step by at least 0.4 x min(W, K/2): the host waited W ms per step on
    a GPU that ran K ms of kernels; halving the kernels frees at least part of that wait. Was:
    the wait was fixed host work and the step did not move, to the microsecond."""
    _, base, gpu2, hc = runs(path)
    need = 0.4 * min(hc["W"], hc["K"] / 2)
    gain = base.predicted_iteration_ms - gpu2.predicted_iteration_ms
    print(
        f"{path}: W {hc['W']:.3f} ms (whole calls {hc['W_raw']:.3f}), K {hc['K']:.3f} ms, "
        f"step {base.predicted_iteration_ms:.3f} -> GPU 2x {gpu2.predicted_iteration_ms:.3f} ms "
        f"(-{gain:.3f}, needed -{need:.3f})"
    )
    if need < 1e-3:
        pytest.skip(f"{path}: the host did not wait on a busy GPU (W {hc['W'] * 1e3:.1f} µs per step)")
    assert gain >= need - 1e-6, (path, gain, need)


# ---------------------------------------------------------------- sensitivity against the path
# Where another path nearly ties the critical one, a speed-up soon hands the step to it: the
# gain at 2 % falls below half the path's share although, to first order, it is that share.
# Per trace: what ties, measured (ms per step). Such a trace is checked at a 0.01 % speed-up
# instead (the path is the step's derivative there: gain within 5 % of the path bound).
_NEAR_TIE: dict[str, str] = {
    "hta_trace_diff/test.json.gz": (
        "GPU 96 % busy while the host runs 40-57 ms ahead and catches up at aten::item and "
        "cudaStreamSynchronize every third step: its own work ends ~1.6 ms before the GPU there, "
        "so a 2 % GPU speed-up gains 0.616 of its 1.481 bound (0.42) and the host, 2 % faster, "
        "meets the side streams' event waits (0.091 of 0.308, 0.29); at 0.01 % every category "
        "gains 0.999-1.001 of its bound"
    ),
}
_US = 1e-3  # ms: Kineto timestamps have µs resolution, so equal within 1 µs is equal
_FIRST_ORDER = 1.0001


@pytest.mark.parametrize("path", PATHS)
def test_sensitivity_is_bounded_by_the_critical_path(path, shared_traces, runs):
    """A 2 % speed-up of a category shortens the step by at most its time on the critical path
    x (1 - 1/1.02) (the old path, sped up, is still a path), and by at least half of that
    unless another path nearly ties (_NEAR_TIE, measured per trace: there the gain at a 0.01 %
    speed-up is the path's share within 5 %). Was: the walk's own heuristics (an inter-thread
    window, inferred hand-offs, a walk started on a GPU stream) disagreed with the schedule on
    every multi-thread trace and where the host runs ahead (7 traces xfailed)."""
    from engine.simulate.sensitivity import CATEGORIES, sensitivity
    from engine.simulate.whatif.selectors import SELECTORS

    _, base, _, _ = runs(path)
    g, cp = base.graph, base.critical_path
    if g.cpu_only or cp is None:
        pytest.skip(f"{path}: no GPU work")
    s = sensitivity(g, base.schedule.times, factor=1.02)
    assert s["step_ms"] == pytest.approx(base.predicted_iteration_ms, rel=1e-6)
    on_path = {cat: float(cp.task_ms[SELECTORS[cat](g)].sum()) for cat in CATEGORIES}
    lines, high, low = [], [], []
    for cat in CATEGORIES:
        bound = on_path[cat] * (1 - 1 / 1.02)
        v = s["categories"][cat]
        gain = 0.0 if v["delta_ms"] is None else -v["delta_ms"]
        lines.append(f"{cat} path {on_path[cat]:.3f} ms, bound {bound:.4f}, gain {gain:.4f}")
        if gain > bound * 1.001 + _US:
            high.append(cat)
        if gain < 0.5 * bound - _US:
            low.append(cat)
    print(f"{path}: " + "; ".join(lines) + f"; above the bound: {high}, below half: {low}")
    assert not high, (path, "gain above the path bound", high)
    if path not in _NEAR_TIE:
        assert not low, (path, "gain below half the path bound", low)
        return
    s1 = sensitivity(g, base.schedule.times, factor=_FIRST_ORDER)
    ratios = {}
    for cat in CATEGORIES:
        bound = on_path[cat] * (1 - 1 / _FIRST_ORDER)
        if on_path[cat] >= 1.0:  # below 1 ms the bound is ns: the delta's rounding (1 ns) rules
            ratios[cat] = -s1["categories"][cat]["delta_ms"] / bound
    print(f"{path}: near-tie ({_NEAR_TIE[path]}); gain / bound at {_FIRST_ORDER}: {ratios}")
    assert ratios and all(0.95 <= r <= 1.001 for r in ratios.values()), (path, ratios)


# ---------------------------------------------------------------- the path of a GPU-bound step
# Where the host's own work nearly ties the GPU path, a GPU 2x soon makes the host bind: the step
# cannot shorten by a quarter of the path's GPU time. Per trace, measured (ms per step); checked
# instead: the floor (the GPU 1000x faster) is that close, and a GPU 2x gains half of what any
# GPU speed-up can and a tenth of the time the host sat blocked on a busy GPU (hand count).
_GPU_FLOOR: dict[str, str] = {
    "hta_trace_diff/test.json.gz": (
        "124.09 ms; the GPU 1000x faster 109.39 ms: the host's own work, 14.7 ms below the step, "
        "less than a quarter of the path's 75.5 ms of kernels; GPU 2x 113.56 ms"
    ),
}


@pytest.mark.parametrize("path", PATHS)
def test_critical_path_of_a_gpu_bound_step_runs_through_kernels(path, shared_traces, runs):
    """Where the host sat blocked on a busy GPU for a fifth of the step or more (hand count), the
    path runs through kernels for at least 3/4 of that blocked time and half the GPU's busy time
    (the rest of the busy time overlapped host work that bound the step), a GPU 2x shortens the
    step by at least a quarter of the path's GPU time (unless the host's own work is a nearer
    floor, _GPU_FLOOR), and host gaps the trace did not record are 'host (unrecorded)', never
    idle. Was: on hta_trace_diff/test a side stream's 40 ms wait for the main stream was a fixed
    launch latency, and a GPU 2x gained 0.8 ms (xfailed)."""
    _, base, gpu2, hc = runs(path)
    cp = base.critical_path.to_json()
    kinds = cp["by_kind"]
    on_gpu = kinds["compute"] + kinds["communication"]
    print(f"{path}: GPU busy {hc['busy']:.3f} of {hc['step']:.3f} ms, host blocked {hc['blocked']:.3f}, path {kinds}")
    if hc["blocked"] < 0.2 * hc["step"] or hc["busy"] < 0.3 * hc["step"]:
        pytest.skip(f"{path}: not GPU-bound (host blocked on a busy GPU {hc['blocked']:.3f} of {hc['step']:.3f} ms)")
    assert on_gpu >= 0.75 * hc["blocked"] and on_gpu >= 0.5 * hc["busy"], (path, on_gpu, hc)
    gain = base.predicted_iteration_ms - gpu2.predicted_iteration_ms
    if path in _GPU_FLOOR:
        # the host's own work is a floor under any GPU speed-up (measured: the GPU 1000x faster)
        from engine.simulate import simulate

        spec = {"version": 1, "edits": [{"kind": "speedup", "category": "gpu", "factor": 1000}]}
        most = base.predicted_iteration_ms - simulate(runs(path)[0], spec).predicted_iteration_ms
        print(f"{path}: GPU 2x gains {gain:.3f} of the {most:.3f} ms any GPU speed-up can ({_GPU_FLOOR[path]})")
        # and frees a tenth of the host's blocked time (hand count): was 0.8 ms of 52 ms
        assert most < 0.5 * on_gpu and gain >= 0.5 * most and gain >= 0.1 * hc["blocked"], (path, gain, most, hc)
    else:
        assert gain >= 0.25 * on_gpu, (path, gain, on_gpu)
    host_lanes = ~base.graph.lanes["gpu"].to_numpy()
    seg = base.critical_path.segments
    idle_on_host = seg[(seg["kind"] == "idle") & host_lanes[seg["lane"].to_numpy()]]
    assert idle_on_host.empty, idle_on_host.head()
