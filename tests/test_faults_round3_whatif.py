"""Fault injection, round 3 (issue 26): what-if memory and spec files (item 2), regexes and
numbers (item 6), superlinear corners (item 7), and the smaller compose / Kineto / info items
of item 8.

How the faults are made and judged: tests/clirun.py (a fresh process per CLI run: exit 2, one
stderr line naming the file and the problem, no traceback). Each CLI test also checks that a
result written before the bad run is intact and that no process is left behind. Every test
here failed on main at cf161a1; its docstring says how.
"""

from __future__ import annotations

import json
import os
import re
import time

import psutil
import pytest
from clirun import cli, one_line_error
from conftest import SAMPLES

from engine.errors import TraceError

TRANSFORMER = SAMPLES / "transformer"
DLRM = SAMPLES / "dlrm"
DLRM_TBE_ET = SAMPLES / "dlrm_tbe" / "dlrm_tbe_rank0_et.json.gz"
GPT2_ET = SAMPLES / "gpt2_hf" / "gpt2_hf_et.json.gz"
# a pattern that backtracks for minutes on an ordinary op name under Python's `re`
CATASTROPHIC = r"^(\w+|:+|\s+|.)*\d\d$"


def _no_children() -> None:
    from clirun import helper_pids

    ignore = helper_pids()
    assert not [c for c in psutil.Process().children(recursive=True) if c.pid not in ignore]


def _spec_file(tmp_path, name: str, edits=None, text: str | None = None, version=1):
    p = tmp_path / name
    if text is None:
        p.write_text(json.dumps({"version": version, "edits": edits or []}))
    else:
        p.write_text(text)
    return p


@pytest.fixture
def good_sim(tmp_path, cache_dir):
    """A simulation result written before the bad runs (it must survive them)."""
    out = tmp_path / "sim"
    r = cli("simulate", SAMPLES / "mlp", "--out", out, "--json", cache=cache_dir)
    assert r.returncode == 0, r.stderr[-1500:]
    return out, (out / "simulate.json").read_bytes()


def _bad_sim(spec_arg, good, cache, *needles, trace=SAMPLES / "mlp", pre="", timeout=120, extra=()):
    out, before = good
    r = cli("simulate", trace, "--what-if", spec_arg, *extra, "--out", out, cache=cache, pre=pre, timeout=timeout)
    line = one_line_error(r, *needles)
    assert (out / "simulate.json").read_bytes() == before
    _no_children()
    return line


# 2 -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_2_layers_edits_refused_before_the_graph_is_built(tmp_path, cache_dir, good_sim, monkeypatch):
    """Was: three `layers` edits of copies 1000 passed their rules and grew one process to
    23 GB (here: killed by `ulimit -v` with a MemoryError traceback, or past the timeout)."""
    from engine.simulate import simulate
    from engine.simulate.whatif import SpecError
    from engine.trace import load

    edits = [
        {"kind": "layers", "module": r"blocks\.0", "copies": 1000},
        {"kind": "layers", "module": r"blocks\.0", "copies": 1000},
        {"kind": "layers", "module": r"blocks\.1", "copies": 1000},
    ]
    spec = _spec_file(tmp_path, "layers3.json", edits)
    line = _bad_sim(
        spec, good_sim, cache_dir, str(spec), "edits[0].copies", "tasks", "edges", "GiB", "over the limit",
        trace=TRANSFORMER, pre="ulimit -v 4000000",
    )  # fmt: skip
    assert "available" in line  # the limit says what it was derived from
    # API: the same refusal, before any copy is made, under a limit set in the environment
    monkeypatch.setenv("MYSTIQUE_SIM_MAX_BYTES", str(256 << 20))
    tr = load(*sorted(TRANSFORMER.glob("*_kineto.json.gz")), *sorted(TRANSFORMER.glob("*_et.json.gz")))
    with pytest.raises(SpecError) as e:
        simulate(tr, {"version": 1, "edits": edits})
    assert e.value.field == "edits[0].copies" and "over the limit" in str(e.value)
    assert "MYSTIQUE_SIM_MAX_BYTES" in str(e.value) and "tasks" in str(e.value)
    # what fits still runs under the same limit
    assert simulate(tr, {"version": 1, "edits": [dict(edits[0], copies=2)]}).predicted_iteration_ms > 0


@pytest.mark.slow
def test_2_spec_files_are_read_like_compose_specs(tmp_path, cache_dir, good_sim):
    """Was: `--what-if /dev/zero` read 10 GB (MemoryError traceback under ulimit -v) and a FIFO
    blocked the read forever (past the timeout)."""
    from engine.simulate.whatif import WhatIfSpec

    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):
        _bad_sim(path, good_sim, cache_dir, str(path), "not a regular file", pre="ulimit -v 4000000", timeout=60)
        with pytest.raises(TraceError, match="not a regular file"):
            WhatIfSpec.parse(path)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)
    _bad_sim(big, good_sim, cache_dir, str(big), "over the 67,108,864-byte limit")


# 6 -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_6_regexes_run_in_linear_time(tmp_path, cache_dir, good_sim):
    """Was: a catastrophic pattern in a what-if `name` or `--config sync_regex` ran for minutes
    (past the timeout); a bad `sync_regex` raised re.error with a traceback."""
    from engine.errors import TraceError
    from engine.user_regex import compile_user

    name = "autograd::engine::evaluate_function: AddmmBackward0"
    t0 = time.perf_counter()
    assert not compile_user(CATASTROPHIC, "name").search(name)
    assert time.perf_counter() - t0 < 1.0
    for cmd in (
        ("--what-if", json.dumps({"version": 1, "edits": [{"kind": "speedup", "factor": 2, "name": CATASTROPHIC}]})),
        ("--config", json.dumps({"sync_regex": CATASTROPHIC})),
    ):
        t0 = time.perf_counter()
        r = cli("simulate", SAMPLES / "mlp", *cmd, "--json", cache=cache_dir, timeout=90)
        assert r.returncode == 0, r.stderr[-1500:]
        assert time.perf_counter() - t0 < 90
    # refused patterns: named, one line, before anything runs
    one_line_error(
        cli("simulate", SAMPLES / "mlp", "--config", '{"sync_regex": "(a"}', cache=cache_dir),
        "--config", "sync_regex", "not a valid regex", "missing )",
    )  # fmt: skip
    spec = _spec_file(tmp_path, "backref.json", [{"kind": "speedup", "factor": 2, "name": r"(a)\1"}])
    _bad_sim(spec, good_sim, cache_dir, str(spec), "edits[0].name", "no backreferences")
    with pytest.raises(TraceError, match="name_pattern"):
        from engine.graph import select, selection_from_dict
        from engine.trace import load

        select(load(SAMPLES / "mlp" / "mlp_et.json.gz"), selection_from_dict({"name_pattern": r"(?=x)"}))


WHATIF_NUMBERS = [
    ('{"kind": "dependency", "after": "aten::relu", "before": "aten::mm", "delay_us": NaN}', "delay_us", "finite"),
    ('{"kind": "data_parallel", "ranks": 4, "alpha_us": Infinity}', "alpha_us", "finite"),
    ('{"kind": "speedup", "category": "all", "factor": Infinity}', "factor", "finite"),
    ('{"kind": "speedup", "category": "all", "factor": 1e30}', "factor", "between 1e-06 and 1e+06"),
    ('{"kind": "dependency", "after": "a", "before": "b", "delay_us": 1e30}', "delay_us", "between"),
    ('{"kind": "batch", "scale": 1e300, "size": 32}', "scale", "between"),
    ('{"kind": "speedup", "category": "all", "factor": ' + "9" * 5000 + "}", "factor", "5,000 digits"),
    ('{"kind": "layers", "module": "x", "copies": ' + "9" * 5000 + "}", "copies", "5,000 digits"),
]


@pytest.mark.parametrize(("edit", "field", "problem"), WHATIF_NUMBERS, ids=lambda v: str(v)[:24])
@pytest.mark.slow
def test_6_whatif_numbers_name_their_field(tmp_path, cache_dir, good_sim, edit, field, problem):
    """Was: NaN/Inf in delay_us, alpha_us or a factor gave null predictions (exit 0), 1e30 and
    1e300 were accepted, and 5,000-digit numbers raised ValueError with a traceback."""
    from engine.simulate.whatif import SpecError, WhatIfSpec

    text = '{"version": 1, "edits": [' + edit + "]}"
    with pytest.raises(SpecError) as e:
        WhatIfSpec.parse(text)
    assert e.value.field == f"edits[0].{field}" and problem in str(e.value)
    spec = _spec_file(tmp_path, "n.json", text=text)
    _bad_sim(spec, good_sim, cache_dir, str(spec), f"edits[0].{field}", problem)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"version": 1, "edits": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        (b'{"version": 1, "edits": [], "description": "\xff"}', "not UTF-8"),
    ],
    ids=["deep", "non-utf8"],
)
@pytest.mark.slow
def test_6_whatif_documents_refused_in_one_line(tmp_path, cache_dir, good_sim, text, problem):
    """Was: RecursionError and UnicodeDecodeError tracebacks."""
    from engine.simulate.whatif import SpecError, WhatIfSpec

    p = tmp_path / "doc.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SpecError, match=problem):
        WhatIfSpec.parse(p)
    _bad_sim(p, good_sim, cache_dir, str(p), "(document)", problem)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ('{"thread_block_us": NaN}', "thread_block_us: must be a finite number"),
        ('{"stream_bound_gap_us": Infinity}', "stream_bound_gap_us: must be a finite number"),
        ('{"thread_window_us": 1e30}', "thread_window_us: must be between"),
        ('{"max_rounds": ' + "9" * 5000 + "}", "max_rounds: out of range"),
        ("[" * 60_000 + "]" * 60_000, "nested too deeply"),  # inline: argv caps one argument at 128 KiB
    ],
    ids=["nan", "inf", "1e30", "digits", "deep"],
)
def test_6_config_numbers_name_their_field(cache_dir, config, problem):
    """Was: NaN/Infinity config fields gave null predictions; deep nesting and 5,000 digits
    raised tracebacks."""
    from engine.errors import TraceError
    from engine.simulate import SimConfig

    with pytest.raises(TraceError, match=problem.split(":")[0]):
        SimConfig.parse(config)
    one_line_error(cli("simulate", SAMPLES / "mlp", "--config", config, cache=cache_dir), "--config", problem)


def _compose_spec(tmp_path, fname="s.json", **fields):
    spec = {"version": 1, "sources": [str(SAMPLES / "mlp" / "mlp_et.json.gz")], "segments": [{"selection": {}}]}
    spec.update(fields)
    p = tmp_path / fname
    p.write_text(json.dumps(spec))
    return p, spec


@pytest.fixture
def good_compose(tmp_path, cache_dir):
    spec, _ = _compose_spec(tmp_path, fname="good.json")
    out = tmp_path / "bench"
    r = cli("compose", spec, "--out", out, "--json", cache=cache_dir)
    assert r.returncode == 0, r.stderr[-1500:]
    return out, (out / "rank_0.et.json").read_bytes()


def _bad_compose(spec, good, cache, *needles, file=None):
    """`file`: the file the line must name (the spec unless the problem is in a source ET)."""
    out, before = good
    one_line_error(cli("compose", spec, "--out", out, cache=cache), str(file or spec), *needles)
    assert (out / "rank_0.et.json").read_bytes() == before
    _no_children()


def _tbe_et(tmp_path, name: str, edit) -> str:
    import gzip

    doc = json.loads(gzip.decompress(DLRM_TBE_ET.read_bytes()))
    node = next(n for n in doc["nodes"] if n["name"].startswith("fbgemm::split_embedding_codegen_lookup_"))
    edit(node["inputs"])
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


@pytest.mark.slow
def test_6_compose_numbers_and_tbe_dimensions(tmp_path, cache_dir, good_compose):
    """Was: `batch_scale: 1e300` and a negative TBE dimension raised tracebacks (torch overflow
    and negative shapes)."""
    from engine.compose import compose, spec_from_dict

    spec, d = _compose_spec(tmp_path, batch_scale=1e300)
    with pytest.raises(TraceError, match="spec batch_scale: must be between"):
        spec_from_dict(d)
    _bad_compose(spec, good_compose, cache_dir, "batch_scale: must be between 1e-06 and 1e+06, got 1e+300")

    def negative(ins):
        ins["values"][3], ins["values"][4] = -128, -64  # total_D, max_D

    et = _tbe_et(tmp_path, "neg_et.json", negative)
    spec, d = _compose_spec(tmp_path, sources=[et], sharding={"kind": "embedding", "plan": "row", "ranks": 2})
    with pytest.raises(TraceError, match="total_D is -128"):
        compose(spec_from_dict(d))
    _bad_compose(spec, good_compose, cache_dir, "TBE op", "total_D is -128", file=et)  # the ET holds the bad value


# 7 -------------------------------------------------------------------------------------------
def _lpt_reference(shards, n, model):
    """The planner's rule spelled out shard by shard (as main had it before the fast path)."""
    load = [0.0] * n
    for s in sorted(shards, key=lambda s: -model.shard_us(s.rows, s.dim, s.lookups)):
        r = min(range(n), key=lambda j: (load[j], j))
        s.rank = r
        load[r] += model.shard_us(s.rows, s.dim, s.lookups)
    return max(load)


@pytest.mark.slow
def test_7_greedy_sharding_is_fast_and_unchanged(cache_dir):
    """Was: the greedy planner re-ran a shard-by-shard LPT for every split it tried: 6 s at 64
    ranks, 70 s at 256, hours at 4,096 (past the timeout)."""
    from engine.simulate import planners as sh
    from engine.trace import load

    # CLI first, as the issue ran it (bounded by the timeout where the API call is not)
    spec = json.dumps({"version": 1, "edits": [{"kind": "sharding", "ranks": [4096]}]})
    r = cli("simulate", DLRM, "--what-if", spec, "--json", cache=cache_dir, timeout=180)
    assert r.returncode == 0, r.stderr[-1500:]
    assert len(json.loads(r.stdout)["sharding"]["ranking"]["4096"]) == 4

    tr = load(DLRM / "dlrm_et.json.gz", DLRM / "dlrm_kineto.json.gz")
    tables = sh.tables_from_trace(tr)
    model = sh.EmbeddingModel.fit(tables)
    for n in (1, 2, 3, 8, 16):  # the same plan as the rule applied shard by shard, at every split
        got = sh.plan_greedy(tables, n, model)
        best = None
        for k in _greedy_path(tables, n, model):
            shards = [s for t in tables for s in sh._row(t, k[t.index])]
            load_k = _lpt_reference(shards, n, model)
            if best is None or load_k < best[0] - 1e-9:
                best = (load_k, shards)
        assert best is not None
        assert [(s.table, s.rank, s.rows, s.lookups) for s in got] == [
            (s.table, s.rank, s.rows, s.lookups) for s in best[1]
        ]
    t0 = time.perf_counter()
    plan = sh.plan_greedy(tables, 4096, model)
    assert time.perf_counter() - t0 < 30
    per = sh.rank_us(plan, 4096, model)
    row = sh.rank_us(sh.plan_row(tables, 4096, model), 4096, model)
    assert max(per) <= max(row) + 1e-9  # greedy never loses to splitting every table


def _greedy_path(tables, n, model):
    """The splits the greedy planner tries, in order (its documented walk)."""
    import math

    cost = {t.index: model.shard_us(t.rows, t.dim, t.lookups) for t in tables}
    target = sum(cost.values()) / n
    k = {t.index: max(1, min(n, math.ceil(cost[t.index] / target - 1e-9))) for t in tables}
    yield dict(k)
    for _ in range(len(tables) * n):
        cand = [t for t in tables if k[t.index] < n]
        if not cand:
            return
        big = max(cand, key=lambda t: cost[t.index] / k[t.index])
        k[big.index] += 1
        yield dict(k)


@pytest.mark.slow
def test_7_compose_at_the_rank_limit(tmp_path, cache_dir):
    """Was: compose's embedding sharding at 1,024 ranks (its limit) took many minutes in the
    greedy planner (past the timeout)."""
    spec = json.loads((SAMPLES.parent / "examples" / "dlrm_greedy_4ranks.json").read_text())
    spec["sources"] = [str(DLRM / "dlrm_et.json.gz")]
    spec["sharding"]["ranks"] = 1024
    p = tmp_path / "s.json"
    p.write_text(json.dumps(spec))
    r = cli("compose", p, "--out", tmp_path / "b", "--no-validate", "--json", cache=cache_dir, timeout=400)
    assert r.returncode == 0, r.stderr[-1500:]
    assert len(json.loads(r.stdout)["ranks"]) == 1024


PEAK = (
    "import resource, sys\nfrom engine.cli.main import main\n"
    "rc = main(sys.argv[1:])\nprint('PEAK', rc, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n"
)


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.xfail(
    strict=False,
    reason="the measured growth of 40 sources over 1 depends on what the session ran before: ~300 MB "
    "alone, 0-44 MB after test_faults_round3_dist's test_3 and an app journey in the same pytest "
    "process (reproduced in a fresh clone; caches and workspace made private did not change it); "
    "the cause is not found yet",
)
def test_7_compose_estimate_bounds_the_measured_peak(tmp_path, cache_dir):
    """Was: the estimate counted the composed nodes only; validating the written rank parses it
    back at ~9 KiB per node, so a GPT-2 source listed 1,000 times passed at ~2 GB and used
    11.9 GB. Here: the peak growth of GPT-2 listed 40 times over listed once, as the limit,
    must be refused (the estimate is above it); on main it was accepted."""
    import sys

    from clirun import run_fresh

    def spec(n: int):
        p = tmp_path / f"g{n}.json"
        p.write_text(
            json.dumps(
                {
                    "version": 1,
                    "sources": [str(GPT2_ET)] * n,
                    "segments": [{"selection": {}, "source": i} for i in range(n)],
                }
            )
        )
        return p

    def peak(n: int) -> int:
        r = run_fresh(
            [sys.executable, "-c", PEAK, "compose", str(spec(n)), "--out", str(tmp_path / f"o{n}"), "--json"],
            cache=cache_dir,
            timeout=400,
        )
        assert "PEAK 0" in r.stdout, r.stderr[-1500:]
        return int(r.stdout.rsplit("PEAK 0", 1)[1])

    growth = peak(40) - peak(1)
    assert growth > 50 << 20
    lim = tmp_path / "lim.json"
    lim.write_text(json.dumps({"max_bytes": growth}))
    r = cli("compose", spec(40), "--out", tmp_path / "o", "--limits", lim, cache=cache_dir, timeout=400)
    one_line_error(r, "composition too large", "GiB > limit")


# 8 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"name": 12}, "spec name: expected a string, got 12"),
        ({"name": "a\u0000b"}, "name: must be 1 to 200 printable characters"),
        ({"device": "cuda:99999999999999999999"}, "device: must be 'cpu', 'cuda' or 'cuda:N' (N < 1024)"),
    ],
    ids=["name-int", "name-nul", "device"],
)
@pytest.mark.slow
def test_8_compose_name_and_device(tmp_path, cache_dir, good_compose, fields, problem):
    """Was: accepted (exit 0)."""
    from engine.compose import spec_from_dict

    spec, d = _compose_spec(tmp_path, **fields)
    with pytest.raises(TraceError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        spec_from_dict(d)
    _bad_compose(spec, good_compose, cache_dir, problem)


@pytest.mark.slow
def test_8_compose_tbe_of_40_tb_per_rank(tmp_path, cache_dir, good_compose):
    """Was: a TBE of 10^13 weights (40 TB) per rank composed (exit 0) and failed only at replay."""
    from engine.compose import compose, spec_from_dict

    def huge(ins):
        ins["values"][1][0][3] = 10**13
        ins["shapes"][1][0] = [10**13]

    et = _tbe_et(tmp_path, "big_et.json", huge)
    # 10^13 fp32 weights = 37,252.9 GiB; row-sharded over 2 ranks, a rank holds half of them (its
    # TBE shard: no dense [rows, dim] gradient is built beside it, issue 31 item 19)
    for sharding, gib in ((None, "37,252.9"), ({"kind": "embedding", "plan": "row", "ranks": 2}, "18,626.5")):
        spec, d = _compose_spec(tmp_path, sources=[et], sharding=sharding)
        with pytest.raises(TraceError, match=re.escape(f"rank 0 would need ~{gib} GiB")):
            compose(spec_from_dict(d))
        _bad_compose(spec, good_compose, cache_dir, f"rank 0 would need ~{gib} GiB", "max_rank_bytes")


def test_8_kineto_impossible_times_and_ranks_warn(tmp_path, cache_dir):
    """Was: a timestamp of 1e30 and `distributedInfo.rank: -5` loaded without a word."""
    import gzip

    from engine.trace import load

    doc = json.loads(gzip.decompress((SAMPLES / "mlp" / "mlp_kineto.json.gz").read_bytes()))
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    xs[3]["ts"] = 1e30
    doc["distributedInfo"] = {"rank": -5, "world_size": 2}
    p = tmp_path / "bad_kineto.json"
    p.write_text(json.dumps(doc))
    warns = load(p, use_cache=False).meta["warnings"]
    assert any("rank is -5" in w and str(p) in w for w in warns), warns
    assert any("ts 1e+30" in w and str(p) in w for w in warns), warns
    r = cli("info", p, cache=cache_dir)
    assert r.returncode == 0, r.stderr[-1500:]
    assert "warning" in r.stdout and "rank is -5" in r.stdout and "ts 1e+30" in r.stdout
    assert "ranks           0" in r.stdout  # the negative rank is not used


def test_8_whatif_version_true(tmp_path, cache_dir, good_sim):
    """Was: `"version": true` was accepted (True == 1 in Python)."""
    from engine.simulate.whatif import SpecError, WhatIfSpec

    with pytest.raises(SpecError) as e:
        WhatIfSpec.parse({"version": True, "edits": []})
    assert e.value.field == "version"
    spec = _spec_file(tmp_path, "v.json", version=True)
    _bad_sim(spec, good_sim, cache_dir, str(spec), "'version'", "unsupported version True")


def test_8_info_on_a_capture_folder(cache_dir):
    """Was: exit 2 on the folder's `mlp_meta.json` ("not an execution trace or Kineto trace")."""
    from engine.trace import load

    tr = load(SAMPLES / "mlp", use_cache=False)
    assert sorted(s["kind"] for s in tr.meta["sources"]) == ["execution_trace", "kineto"]
    r = cli("info", SAMPLES / "mlp", cache=cache_dir)
    assert r.returncode == 0, r.stderr[-1500:]
    assert "mlp_et.json.gz" in r.stdout and "mlp_kineto.json.gz" in r.stdout and "_meta.json" not in r.stdout
