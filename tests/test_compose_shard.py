"""Embedding-table sharding of the DLRM sample: plans, per-rank lookups, collectives, balance."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import engine.trace as et
from engine.compose import compose, export, measure, spec_from_dict, validate_et
from engine.compose.shard.embedding import Table, plan_shards

ROOT = Path(__file__).resolve().parents[1]
DLRM = ROOT / "sample_traces" / "dlrm" / "dlrm_et.json.gz"
FWD = ("aten::embedding_bag",)  # the top-level op (its child aten::_embedding_bag repeats the lookups)


@pytest.fixture(scope="module")
def original():
    if not DLRM.exists():
        pytest.skip(f"sample trace {DLRM} missing (regenerate with `mystique capture --all-samples`)")
    t = et.load(DLRM)
    ids = t.ops.loc[t.ops["name"].astype(str).isin(FWD), "id"]
    idx = t.tensors[t.tensors["op_id"].isin(ids) & (t.tensors["io"].astype(str) == "in") & (t.tensors["arg"] == 1)]
    return {
        "lookups": int(idx["numel"].sum()),
        "tables": len(ids),
        "rows": sorted(
            int(s[0])
            for s in t.tensors[
                t.tensors["op_id"].isin(ids) & (t.tensors["arg"] == 0) & (t.tensors["io"].astype(str) == "in")
            ]["shape"]
        ),
    }


def _rank_lookups(path: Path) -> tuple[int, list[tuple]]:
    t = et.load(path, use_cache=False)
    ids = t.ops.loc[t.ops["name"].astype(str).isin(FWD), "id"]
    tt = t.tensors[t.tensors["op_id"].isin(ids) & (t.tensors["io"].astype(str) == "in")]
    weights = [tuple(s) for s in tt[tt["arg"] == 0]["shape"]]
    return int(tt[tt["arg"] == 1]["numel"].sum()), weights


def _shard(tmp_path, plan: str, n: int):
    bench = compose(
        spec_from_dict(
            {
                "sources": [str(DLRM)],
                "segments": [{"selection": {}}],
                "sharding": {"kind": "embedding", "plan": plan, "ranks": n},
            }
        )
    )
    res = export(bench, tmp_path / f"{plan}{n}")
    return bench, {int(r): Path(p) for r, p in res["ranks"].items()}


def test_sample_has_four_tables(original):
    assert original["tables"] == 4
    assert original["rows"] == [2000, 10000, 40000, 100000]
    assert original["lookups"] > 4 * 1024


@pytest.mark.parametrize("plan", ["table", "row"])
@pytest.mark.parametrize("n", [2, 4])
def test_lookups_add_up(tmp_path, cache_dir, original, plan, n):
    bench, paths = _shard(tmp_path, plan, n)
    assert sorted(paths) == list(range(n))
    total = 0
    rows: dict = {}
    for r, p in paths.items():
        lk, weights = _rank_lookups(p)
        total += lk
        assert lk == bench.meta["sharding"]["per_rank"][r]["lookups"]
        validate_et(p)
        t = et.load(p, use_cache=False)
        comm = t.ops[t.ops["category"].astype(str) == "communication"]
        assert list(comm["name"].astype(str)) == ["c10d::alltoall_base_"] * 2  # forward + backward
        for w in weights:
            rows.setdefault(w[1], []).append(w[0])
    assert total == original["lookups"]
    if plan == "row":  # every rank holds ~rows/N of every table and ~1/N of the lookups
        per = [bench.meta["sharding"]["per_rank"][r]["lookups"] for r in range(n)]
        assert max(per) - min(per) <= 4
        assert sum(sum(v) for v in rows.values()) == sum(original["rows"])
    else:  # whole tables, round-robin by table index
        assert [bench.meta["sharding"]["per_rank"][r]["tables"] for r in range(n)] == [
            [i for i in range(4) if i % n == r] for r in range(n)
        ]


def test_column_plan_keeps_all_lookups(tmp_path, cache_dir, original):
    _bench, paths = _shard(tmp_path, "column", 4)
    for _r, p in paths.items():
        lk, weights = _rank_lookups(p)
        assert lk == original["lookups"]
        assert all(w[1] == 16 for w in weights) and sorted(w[0] for w in weights) == original["rows"]


def test_greedy_plan_balances_cost():
    """Greedy is the simulator's planner on its cost model: never worse than the naive or the
    row-wise plan by that model, near a perfect split, and every row and lookup served once."""
    from engine.compose.shard.embedding import cost_model

    tables = [
        Table(index=i, fwd={}, bwd={}, rows=r, dim=64, itemsize=4, lookups=20000, batch=1024)
        for i, r in enumerate((100_000, 40_000, 10_000, 2_000))
    ]
    model = cost_model(tables)
    for n in (2, 4):
        load = lambda sh, n=n: max(sum(s.cost for s in sh if s.rank == r) for r in range(n))  # noqa: E731 -- local one-liner
        naive, row, greedy = (plan_shards(tables, p, n, model) for p in ("table", "row", "greedy"))
        total = sum(model.shard_us(t.rows, t.dim, t.lookups) for t in tables)
        assert load(greedy) < load(naive)
        assert load(greedy) <= load(row) + 1e-6
        assert load(greedy) <= 1.05 * total / n  # within 5 % of a perfect split
        assert sum(s.lookups for s in greedy) == 4 * 20000
        assert sum(s.rows for s in greedy) == 152_000
        for t in tables:  # the shards of a table tile its rows in order
            mine = [s for s in greedy if s.table == t.index]
            assert [s.row0 for s in mine] == [sum(x.rows for x in mine[:i]) for i in range(len(mine))]


def test_composed_plan_is_the_plan_the_whatif_ranks():
    """One planner for compose and the what-if: the composed greedy shards are the what-if's."""
    from engine.compose.shard.embedding import cost_model, cost_tables
    from engine.simulate.planners import PLANNERS

    tables = [
        Table(index=i, fwd={}, bwd={}, rows=r, dim=32, itemsize=4, lookups=lk, batch=512)
        for i, (r, lk) in enumerate(((400_000, 9000), (20_000, 12000), (5_000, 30000), (1_000, 500)))
    ]
    model = cost_model(tables)
    for n in (2, 4):
        composed = [(s.table, s.rank, s.rows, s.lookups) for s in plan_shards(tables, "greedy", n, model)]
        ranked = [(s.table, s.rank, s.rows, s.lookups) for s in PLANNERS["greedy"](cost_tables(tables), n, model)]
        assert composed == ranked


@pytest.mark.perf
def test_greedy_slowest_rank_beats_naive_replayed(tmp_path, cache_dir, original):
    """Replay every rank's compute; the slowest greedy rank must beat the slowest table-wise rank.

    Timed in the replay thread's CPU time (the replay runs on 1 thread): on a shared 2-core CI
    host, wall time also counts the time the thread waited for a core; a CI run on 2026-12-07 saw
    greedy / naive 1.00 by wall time where this machine measures 0.78-0.88 by either clock."""
    res = measure.dlrm_plans(ranks=(2, 4), plans=("table", "greedy"), rounds=9, tmp=tmp_path, clock=time.thread_time)
    for n in ("2_ranks", "4_ranks"):
        info = res[n]
        assert sum(info["greedy"]["lookups_per_rank"]) == original["lookups"]
        per_rank = {p: info[p]["rank_ms"] for p in ("table", "greedy")}
        assert info["greedy"]["slowest_ms"] < info["table"]["slowest_ms"], (n, per_rank)


@pytest.fixture(scope="module")
def two_step_dlrm(tmp_path_factory):
    """A DLRM capture whose ET recorded two steps (every table looked up twice)."""
    from engine.capture import capture_sample

    out = tmp_path_factory.mktemp("dlrm2")
    res = capture_sample(
        "dlrm",
        overrides={"batch": 64, "table_rows": (5000, 2000, 1000)},
        out_dir=out,
        steps=2,
        warmup=0,
        timing_steps=1,
        command="test",
    )
    return res.paths()


def test_a_two_step_trace_shards_each_table_once(two_step_dlrm, tmp_path):
    """Was: a table per lookup, so two recorded steps composed six 'tables' (the same table on
    two ranks) and the what-if counted each backward twice."""
    from engine.simulate.planners import tables_from_trace

    trace = et.load(two_step_dlrm["et"], two_step_dlrm["kineto"])
    names = trace.ops["name"].astype(str)
    assert int((names == "aten::embedding_bag").sum()) == 6  # 3 tables x 2 steps
    tables = tables_from_trace(trace)
    assert [t.rows for t in tables] == [5000, 2000, 1000]
    # per-step figures: each table's mean lookup and half its backward ops (golden: the raw ops)
    for col, name, got in (
        ("k_dur_us", "aten::embedding_bag", sum(t.fwd_us for t in tables)),
        ("k_dur_us", "aten::_embedding_bag_backward", sum(t.bwd_us for t in tables)),
    ):
        assert got == pytest.approx(float(trace.ops.loc[names == name, col].sum()) / 2, rel=1e-9)
    spec = {"sources": [two_step_dlrm["et"]], "segments": [{"selection": {}}]}
    spec["sharding"] = {"kind": "embedding", "plan": "greedy", "ranks": 2}
    bench = compose(spec_from_dict(spec, base_dir=ROOT))
    sh = bench.meta["sharding"]
    assert [t["rows"] for t in sh["tables"]] == [5000, 2000, 1000]
    assert {s["table"] for s in sh["shards"]} == {0, 1, 2}
    assert sh["lookups"] == sum(t.lookups for t in tables)  # one step's lookups
