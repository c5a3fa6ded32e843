"""The engine's ingestion, graph, capture, replay and compose paths with only torch, pandas and
networkx: every other package is blocked at import in a fresh interpreter (a bare GPU image)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = (
    "streamlit",
    "plotly",
    "orjson",
    "msgspec",
    "pyarrow",
    "psutil",
    "pynvml",
    "tqdm",
    "selenium",
    "hypothesis",
    "re2",
)

SCRIPT = textwrap.dedent("""
    import json, sys, time
    BLOCK = set(sys.argv[1].split(","))
    for name in BLOCK:  # what Python does for an absent package: import fails, find_spec is None
        sys.modules[name] = None
    sys.path.insert(0, sys.argv[2])
    from engine.trace import load, summarize
    from engine.graph import call_tree, data_deps
    from engine.replay import ReplayConfig, replay
    from engine.capture import capture
    from engine.capture.models import build
    from engine.compose import compose, spec_from_dict
    from engine.metrics import MetricsSampler
    from engine import jsonio
    root = sys.argv[2]
    tr = load(root + "/sample_traces/mlp/mlp_et.json.gz", root + "/sample_traces/mlp/mlp_kineto.json.gz")
    out = {"ops": len(tr.ops), "link_rate": tr.meta["link"]["link_rate"], "dag": data_deps(tr).number_of_nodes(),
           "tree": call_tree(tr).number_of_nodes(), "info_kind": summarize(tr)["kind"]}
    res = replay(tr, config=ReplayConfig(device="cpu", warmup=0, iters=1))
    out["replayed"] = res.coverage["replayed"]
    out["result_written"] = res.write(sys.argv[3]).is_file()  # jsonio.dumps(..., default=str)
    b = compose(spec_from_dict({"sources": [root + "/sample_traces/mlp/mlp_et.json.gz"],
                                "segments": [{"selection": {}}], "batch_scale": 2}))
    out["composed_ranks"] = b.world_size
    with MetricsSampler(interval_s=0.02) as m:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.3:
            sum(i * i for i in range(2000))
    s = m.summary()
    out["cpu_util_mean"] = s["cpu_util_pct"]["mean"]
    out["rss_mb_mean"] = s["rss_mb"]["mean"]
    out["json_roundtrip"] = jsonio.loads(jsonio.dumps({"a": [1, 2.5]}, option=jsonio.OPT_INDENT_2))
    try:
        jsonio.loads(b"\\xff\\xfe{")
    except jsonio.JSONDecodeError:
        out["bad_json"] = "JSONDecodeError"
    out["leaked"] = sorted(m for m, mod in sys.modules.items() if m.split(".")[0] in BLOCK and mod is not None)
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_engine_paths_work_with_only_torch_pandas_networkx(tmp_path):
    env = {**os.environ, "MYSTIQUE_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(BLOCKED), str(ROOT), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ops"] == 289 and out["link_rate"] == 1.0 and out["info_kind"] == "execution_trace+kineto"
    assert out["replayed"] == 56 and out["composed_ranks"] == 1 and out["result_written"]
    assert out["dag"] > 50 and out["tree"] == 289
    # stdlib/proc metrics, not NaN: a busy loop reads as CPU use even when the machine is loaded (a
    # share of a core), so the bound is "clearly above zero", not a share that load can take away
    assert out["cpu_util_mean"] > 1 and out["rss_mb_mean"] > 50
    assert out["json_roundtrip"] == {"a": [1, 2.5]} and out["bad_json"] == "JSONDecodeError"
    assert out["leaked"] == []
    # no pyarrow: no parse cache; the meta check's sizes (JSON, engine/replay/metacheck.py) need none
    cached = {p.name for p in (tmp_path / "cache").iterdir()} if (tmp_path / "cache").exists() else set()
    assert cached <= {"meta-sizes"}, cached
