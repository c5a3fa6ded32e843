"""Every knob on every real trace: compose and what-if, each case ok, refused, wrong or error.

The traces are every file of ../shared/traces (other teams' GPU traces; MANIFEST.json names
their kind) and every folder of sample_traces/. A shared folder holding one ET and one Kineto
trace is one trace (linked); otherwise each of its files is one. A sample folder is one trace
(its ranks together).

Knobs. Compose (needs an ET): batch x2, bf16, DP 2, TP 2, embedding table / row / column /
greedy over 4 ranks; each composed benchmark is exported and replayed (`mystique replay`, one
gloo process per rank where it has several; `--warmup 0 --iters 1`). What-if (needs Kineto):
gemm x2 faster, compute x2 slower, batch x2 (no size), layers x2 (no module), data parallel 64,
embedding sharding; each is simulated against the trace's unedited prediction.

Outcomes. `ok`; `refused_ok`: a one-line TraceError where the knob cannot apply, judged by a
rule on what the trace contains (no ET, no backward pass, no collective, no embedding op...),
never by the trace's name; `refused_bad`: a refusal where the rule says the knob applies;
`wrong`: an invariant fails (a composed benchmark replays under 99 % coverage or with the wrong
rank count; a speed-up lengthens the predicted step; slower kernels, batch x2 or layers x2
shorten it; DP 64 from fewer ranks shortens it; a sharding ranking lacks a plan or a finite
step); `error`: any other exception, a traceback, or a replay that fails.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/real_traces.py [--only TRACE ...] [--knob K ...]
        [--no-replay] [--scratch DIR] [--out JSON]

Composed outputs are cached in the scratch folder, keyed by the engine's source (any change to
engine/ outside simulate/ recomposes); replay results by the composed ETs' bytes and the replay
code (a composition an engine change leaves identical is not replayed again). The results JSON committed is a full run's.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness import RESULTS, ROOT, SAMPLES  # first: puts the repo root on sys.path

from engine.errors import TraceError

if TYPE_CHECKING:
    from benchmarks.report import table

SHARED = ROOT.parent / "shared" / "traces"
MIN_COVERAGE = 0.99
# skips by design, not by a gap: code shipped inside the trace runs only with --allow-trace-code
# (docs/security.md); coverage counts the ops left after them, and the JSON says how many
POLICY_SKIP = re.compile(r"trace code not executed")
# a replay the launcher refuses for this machine's resources (the pre-launch memory check)
MACHINE_LIMIT = re.compile(r"GiB of memory at once|machine has .* to use")
COMPOSE_KNOBS = ("batch_x2", "bf16", "dp_2", "tp_2", "emb_table", "emb_row", "emb_column", "emb_greedy")
WHATIF_KNOBS = ("wi_gemm_x2", "wi_slower_x2", "wi_batch_x2", "wi_layers_x2", "wi_dp_64", "wi_sharding")
KNOBS = COMPOSE_KNOBS + WHATIF_KNOBS
WHATIF_EDITS = {
    "wi_gemm_x2": {"kind": "speedup", "factor": 2.0, "category": "gemm"},
    "wi_slower_x2": {"kind": "speedup", "factor": 0.5, "category": "compute"},
    "wi_batch_x2": {"kind": "batch", "scale": 2.0},
    "wi_layers_x2": {"kind": "layers", "copies": 1},
    "wi_dp_64": {"kind": "data_parallel", "ranks": 64},
    "wi_sharding": {"kind": "sharding", "ranks": [2, 4]},
}
# a what-if that ran but changed nothing says so in a warning: counted as a refusal of the knob
NOOP = re.compile(r"no task matches|nothing changed")
GEMM = re.compile(r"gemm|matmul|aten::(?:mm|addmm|bmm|baddbmm|linear)$|cutlass|cublas|Cijk_|xmma", re.I)
TP_OPS = re.compile(r"^aten::(?:mm|addmm|linear|matmul|bmm|baddbmm)$")
EMBEDDING = re.compile(r"embedding", re.I)
# lookup tables the TorchRec-style plans shard: bags and FBGEMM TBE lookups (a transformer's token
# embedding, aten::embedding, stays replicated under Megatron TP; vocab-parallel is another knob)
EMB_TABLES = re.compile(r"embedding_bag|embedding_codegen_lookup|embedding_lookup", re.I)
LINEAR = re.compile(r"^aten::(?:mm|addmm|linear|matmul)$")
PASS_THROUGH = 8  # ops between two linear layers (activation, dropout, views) a pair may have
MAX_GAP = 1000  # ET node ids between the two linear ops of a pair, at most
INDEXED = re.compile(r"^(?:nn\.Module: )?(?P<stem>.*?[._])\d+$")


@dataclass(kw_only=True)
class Unit:
    """One trace of the matrix: its ETs (one per rank) and Kineto files."""

    name: str
    ets: list[Path] = field(default_factory=list)
    kinetos: list[Path] = field(default_factory=list)

    @property
    def files(self) -> list[Path]:
        return self.ets + self.kinetos


def _sniff(path: Path) -> str:
    """'execution_trace' or 'kineto' for a file MANIFEST.json does not list (read, not guessed by name)."""
    try:
        if path.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as tf:
                head = b"".join(
                    tf.extractfile(m).read(4096)  # type: ignore[union-attr]  # regular members only
                    for m in tf.getmembers()
                    if m.isfile() and m.name.endswith(".json")
                )
        else:
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rb") as fh:
                head = fh.read(1 << 16)
    except (OSError, tarfile.TarError, EOFError):
        return "unknown"
    if b'"traceEvents"' in head:
        return "kineto"
    if b'"nodes"' in head or b'"schema"' in head:
        return "execution_trace"
    return "unknown"


def discover(shared: Path, samples: Path) -> list[Unit]:
    units: list[Unit] = []
    if shared.is_dir():
        manifest = {}
        mf = shared / "MANIFEST.json"
        if mf.exists():
            manifest = {e["path"]: e.get("kind", "") for e in json.loads(mf.read_text())}
        for folder in sorted(p for p in shared.iterdir() if p.is_dir()):
            ets, kins = [], []
            for f in sorted(folder.iterdir()):
                if not f.is_file() or not f.name.endswith((".json", ".json.gz", ".tar.gz")):
                    continue
                kind = manifest.get(f"{folder.name}/{f.name}") or _sniff(f)
                (ets if kind == "execution_trace" else kins if kind == "kineto" else []).append(f)
            if len(ets) <= 1 and len(kins) <= 1:
                if ets or kins:
                    units.append(Unit(name=folder.name, ets=ets, kinetos=kins))
            else:
                for f in ets + kins:
                    stem = f.name.split(".")[0]
                    is_et = f in ets
                    units.append(
                        Unit(name=f"{folder.name}/{stem}", ets=[f] if is_et else [], kinetos=[] if is_et else [f])
                    )
    if samples.is_dir():
        for folder in sorted(p for p in samples.iterdir() if p.is_dir()):
            ets = sorted(folder.glob("*_et.json.gz"))
            kins = sorted(folder.glob("*_kineto.json.gz"))
            if ets or kins:
                units.append(Unit(name=f"sample/{folder.name}", ets=ets, kinetos=kins))
    return units


# ---------------------------------------------------------------- facts: what the trace contains


def _kineto_has_shapes(paths: list[Path]) -> bool:
    """Was the Kineto trace recorded with record_shapes (cpu_op events carry "Input Dims")?"""
    for p in paths:
        opener = gzip.open if p.suffix == ".gz" else open
        try:
            with opener(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    if b'"Input Dims"' in chunk:
                        return True
        except OSError:
            continue
    return False


def facts(unit: Unit, trace) -> dict:
    """What the refusal rules read: independent of the engine's own recognisers where it can be."""
    import numpy as np

    ops, ev, ten = trace.ops, trace.events, trace.tensors
    op_names = set(ops["name"].astype(str)) if ops is not None and len(ops) else set()
    ev_names = set(ev["name"].astype(str)) if ev is not None and len(ev) else set()
    names = op_names | ev_names
    from engine.trace.vocab import is_comm

    backward = bool(
        (ops is not None and len(ops) and (ops["phase"].astype(str) == "backward").any())
        or any("Backward" in n or n.startswith("autograd::engine") for n in names)
    )
    indexed: dict[str, set[str]] = {}
    if ev is not None and len(ev):
        ann = ev[ev["name"].astype(str).str.startswith("nn.Module: ") | (ev["cat"].astype(str) == "user_annotation")]
        for n in set(ann["name"].astype(str)):
            m = INDEXED.match(n)
            if m:
                indexed.setdefault(m.group("stem"), set()).add(n)
    ext = _external_inputs(ops, ten)
    dtypes = set(ten["dtype"].astype(str)) if ten is not None and len(ten) else set()
    shaped = bool(ten is not None and len(ten) and ten["shape"].map(lambda s: s is not None and len(s) > 0).any())
    return {
        "et": bool(unit.ets),
        "kineto": bool(unit.kinetos),
        "et_ranks": len(unit.ets),
        "world_size": trace.meta.get("world_size"),
        "backward": backward,
        "collective": any(is_comm(n) for n in names),
        "gemm_ops": sorted(n for n in op_names if TP_OPS.match(n))[:6],
        "gemm_events": any(GEMM.search(n) for n in ev_names),
        "embedding_ops": sorted(n[:80] for n in names if EMBEDDING.search(n))[:6],
        "embedding_tables": sorted(n[:80] for n in names if EMB_TABLES.search(n))[:6],
        "external_inputs": len(ext),
        "batch_guess": _batch_guess(trace) if unit.ets else None,
        "linear_pair": _linear_pair(ops, ten),
        "float_tensors": any(d.startswith(("float", "bfloat", "half", "double")) for d in dtypes),
        "shapes": shaped,
        "kineto_shapes": _kineto_has_shapes(unit.kinetos) if unit.kinetos else False,
        "repeated_blocks": sorted(k for k, v in indexed.items() if len(v) >= 2)[:6],
        "events": len(ev) if ev is not None else 0,
        "gpu_events": int(np.isin(ev["cat"].astype(str), ("kernel", "gpu_memcpy", "gpu_memset")).sum())
        if ev is not None and len(ev)
        else 0,
    }


def _external_inputs(ops, ten) -> list[tuple[int, tuple]]:
    """(op id, shape) of tensors with >= 1 dimension that ops read but no op of the trace wrote,
    first use first: the model's inputs and parameters."""
    import numpy as np

    if ops is None or ten is None or not len(ten) or not {"op_id", "io", "tensor_id"} <= set(ten):
        return []
    written = set(ten.loc[ten["io"].astype(str) == "out", "tensor_id"])
    rd = ten[(ten["io"].astype(str) == "in") & ~ten["tensor_id"].isin(written)]
    has_dims = np.array([s is not None and len(s) > 0 for s in rd["shape"]], dtype=bool)
    rd = rd[has_dims].sort_values(["op_id", "arg", "sub"])
    rd = rd.drop_duplicates("tensor_id")
    return [(int(o), tuple(int(x) for x in s)) for o, s in zip(rd["op_id"], rd["shape"])]


def _batch_guess(trace) -> int | None:
    """The traced batch B as compose reads it (dim 0 of the forward's first non-parameter input)."""
    from engine.compose.transforms.scale import infer_batch

    try:
        return int(infer_batch(trace))
    except (TraceError, KeyError, ValueError, IndexError, TypeError):
        return None


def _linear_pair(ops, ten) -> bool:
    """Does a linear op's input come (through at most PASS_THROUGH ops) from another linear op's
    output? The pair Megatron TP splits column- then row-parallel."""
    if ops is None or ten is None or not len(ops) or not len(ten) or "op_id" not in ten:
        return False
    fwd = ops[ops["phase"].astype(str) == "forward"] if "phase" in ops else ops
    names = dict(zip(fwd["id"], fwd["name"].astype(str)))
    io = ten["io"].astype(str).to_numpy()
    producers: dict = {}  # every op that writes a tensor (a linear's addmm and its in-place copy_)
    for o, t, k in zip(ten["op_id"], ten["tensor_id"], io):
        if k == "out" and o in names:
            producers.setdefault(t, []).append(o)
    inputs: dict = {}
    for o, t, k in zip(ten["op_id"], ten["tensor_id"], io):
        if k == "in":
            inputs.setdefault(o, []).append(t)
    for o, n in names.items():
        if not LINEAR.match(n):
            continue
        frontier, seen = [o], {o}
        for _ in range(PASS_THROUGH):
            nxt = []
            for x in frontier:
                for t in inputs.get(x, []):
                    for p in producers.get(t, []):
                        # written before, nearby: a recycled tensor id of another iteration is not dataflow
                        if p in seen or not (0 < o - p <= MAX_GAP):
                            continue
                        if LINEAR.match(names.get(p, "")):
                            return True
                        seen.add(p)
                        nxt.append(p)
            frontier = nxt
    return False


def cannot_apply(knob: str, f: dict) -> str | None:
    """Why `knob` cannot apply to a trace with facts `f` (a refusal is then `refused_ok`), else None."""
    if knob in COMPOSE_KNOBS:
        if not f["et"]:
            return "Kineto-only trace: compose needs an ET"
        if knob == "batch_x2" and not f["external_inputs"]:
            return "no tensor with a dimension enters the trace from outside (no input batch to scale)"
        if knob == "bf16" and not f["float_tensors"]:
            return "the ET has no floating-point tensors"
        if knob == "dp_2" and not f["backward"]:
            return "forward-only ET: no gradients to all-reduce"
        if knob == "dp_2" and f["batch_guess"] is not None and f["batch_guess"] % 2:
            return f"the traced batch {f['batch_guess']} does not split over 2 ranks"
        if knob == "tp_2" and not f["linear_pair"]:
            return "no linear layer feeds another (no column/row-parallel pair to split)"
        if knob.startswith("emb_") and not f["embedding_tables"]:
            return "no embedding-bag or TBE lookup table to shard"
        return None
    if not f["kineto"]:
        return "ET-only trace: what-if needs Kineto timing"
    if knob == "wi_gemm_x2" and not f["gemm_events"]:
        return "no GEMM kernel or op in the trace"
    if knob == "wi_batch_x2" and not (f["et"] or f["kineto_shapes"]):
        return "no shapes: no ET and the Kineto trace was not recorded with record_shapes"
    if knob == "wi_batch_x2" and f["et"] and not f["external_inputs"]:
        return "no tensor with a dimension enters the trace from outside (no input batch to scale)"
    if knob == "wi_layers_x2" and not f["repeated_blocks"]:
        return "no repeated module or annotation (Name_N / name.N) to copy"
    if knob == "wi_dp_64":
        if not f["collective"]:
            return "no collective in the trace (nothing to calibrate a ring model on)"
        if not f["world_size"] or int(f["world_size"]) < 2:
            return "collectives but no recorded world size >= 2"
    if knob == "wi_sharding" and not f["embedding_tables"]:
        return "no embedding-bag or TBE lookup table to shard"
    if knob == "wi_sharding" and not f["et"]:
        return "Kineto records no table sizes (rows, dims: values of the lookup's ET arguments)"
    return None


# ---------------------------------------------------------------- compose + replay


def _engine_hash() -> str:
    """Of the engine code a composition and its replay run (what-if code is left out: changing it
    does not recompose)."""
    h = hashlib.sha256()
    for p in sorted((ROOT / "engine").rglob("*.py")):
        if p.relative_to(ROOT / "engine").parts[0] not in ("simulate", "analysis", "figures", "workspace"):
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def compose_specs(unit: Unit, knob: str) -> tuple[list[tuple[dict, int | None]], str]:
    """[(spec, rank placed as)], 'mode': one composition, or one per recorded rank ('per_rank')."""
    ets = [str(p) for p in unit.ets]
    extra: dict = {}
    if knob == "batch_x2":
        extra = {"batch_scale": 2}
    elif knob == "bf16":
        extra = {"dtype": "bf16"}
    elif knob == "dp_2":
        extra = {"sharding": {"kind": "dp", "degree": 2}}
    elif knob == "tp_2":
        extra = {"sharding": {"kind": "tp", "degree": 2}}
    elif knob.startswith("emb_"):
        extra = {"sharding": {"kind": "embedding", "plan": knob[4:], "ranks": 4}}
        segs = [{"selection": {}, "source": i} for i in range(len(ets))]
        return [({"sources": ets, "segments": segs, **extra}, None)], "one"
    if len(ets) > 1 and knob in ("batch_x2", "bf16"):  # each recorded rank transformed alone
        return [({"sources": [e], "segments": [{"selection": {}}], **extra}, r) for r, e in enumerate(ets)], "per_rank"
    return [({"sources": ets[:1], "segments": [{"selection": {}}], **extra}, None)], "one"


def expected_world(unit: Unit, knob: str) -> int:
    if knob.startswith("emb_"):
        return 4
    if knob in ("dp_2", "tp_2"):
        return 2
    return max(1, len(unit.ets))


def run_compose(unit: Unit, knob: str, folder: Path) -> dict:
    """Compose and export into `folder` (cached: folder/compose.json); TraceError propagates."""
    from engine.compose import compose, export, spec_from_dict

    done = folder / "compose.json"
    if done.exists():
        return json.loads(done.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    specs, mode = compose_specs(unit, knob)
    t0 = time.perf_counter()
    warnings: list[str] = []
    if mode == "per_rank":
        folder.mkdir(parents=True)
        for spec, r in specs:
            bench = compose(spec_from_dict({"version": 1, "device": "cpu", "name": f"r{r}", **spec}))
            sub = folder / f"part{r}"
            export(bench, sub)
            (folder / f"bench_rank{r}_et.json").write_bytes((sub / "rank_0.et.json").read_bytes())
            warnings += bench.meta.get("warnings", [])
        world, replay_dir = len(specs), folder
    else:
        spec, _ = specs[0]
        bench = compose(spec_from_dict({"version": 1, "device": "cpu", "name": "bench", **spec}))
        export(bench, folder)
        world, replay_dir, warnings = bench.world_size, folder, list(bench.meta.get("warnings", []))
    row = {
        "world_size": world,
        "mode": mode,
        "compose_s": round(time.perf_counter() - t0, 2),
        "warnings": warnings[:5],
        "dir": str(replay_dir),
    }
    done.write_text(json.dumps(row))
    return row


REPLAY_CODE = ("replay", "distributed", "graph", "cli/replay.py")  # engine/ paths a replay's result depends on


def replay_key(folder: Path, world: int, mirror: int | None) -> str:
    """The composed ETs' bytes, the launch, and the replay code: a composition that an engine
    change leaves byte-identical is not replayed again (replays of big ETs take minutes)."""
    h = hashlib.sha256(f"{world}|{mirror}".encode())
    for p in sorted(folder.rglob("*.et.json")) + sorted(folder.glob("*_et.json")):
        doc = json.loads(p.read_bytes())
        doc.pop("time", None)  # the export's wall-clock stamp
        h.update(p.name.encode())
        h.update(json.dumps(doc, sort_keys=True).encode())
    for p in sorted((ROOT / "engine").rglob("*.py")):
        rel = p.relative_to(ROOT / "engine")
        if rel.parts[0] in REPLAY_CODE or rel.as_posix() in REPLAY_CODE:
            h.update(p.read_bytes())
    return h.hexdigest()[:24]


def run_replay(folder: Path, world: int, timeout: float, mirror: int | None = None, cache: Path | None = None) -> dict:
    """`mystique replay` of an exported folder, cached in `cache` by replay_key; `mirror`: every
    one of `world` ranks replays that composed rank (a one-rank composition of one rank of a
    multi-rank job: its collectives need their peers)."""
    cache = cache or folder
    cache.mkdir(parents=True, exist_ok=True)
    done = cache / f"{replay_key(folder, world, mirror)}.json"
    if done.exists():
        return json.loads(done.read_text())
    cmd = [sys.executable, "-m", "engine.cli.main", "replay", str(folder)]
    cmd += ["--world-size", str(world)] if world > 1 else []
    cmd += ["--mirror-rank", str(mirror)] if mirror is not None else []
    cmd += ["--warmup", "0", "--iters", "1", "--no-profile", "--out", str(folder / "replay_out"), "--json"]
    cmd += ["--timeout", "300"] if world > 1 else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"fail": f"replay ran past {timeout:.0f} s"}  # not cached: a later run may have more time
    secs = round(time.perf_counter() - t0, 1)
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines() or ["?"]
        tb = "Traceback" in p.stderr
        out = {"fail": lines[-1][:300], "rc": p.returncode, "traceback": tb, "replay_s": secs}
    else:
        doc = json.loads(p.stdout)
        cov = doc.get("coverage") or {}
        sel, rep = cov.get("selected", 0), cov.get("replayed", 0)
        by = {str(k): v for k, v in (cov.get("by_reason") or {}).items()}
        policy = sum(v for k, v in by.items() if POLICY_SKIP.search(k))
        out = {
            "coverage": round(rep / (sel - policy), 4) if sel - policy > 0 else None,
            "policy_skipped": policy,
            "hint": doc.get("hint"),
            "replayed": rep,
            "selected": sel,
            "comm": [cov.get("comm_replayed", 0), cov.get("comm_selected", 0)],
            "skipped": by,
            "replay_s": secs,
        }
    done.write_text(json.dumps(out))
    return out


def compose_case(unit: Unit, knob: str, f: dict, scratch: Path, replay: bool, timeout: float) -> dict:
    why = cannot_apply(knob, f)
    if not unit.ets:
        return {"outcome": "refused_ok", "reason": why}
    folder = scratch / unit.name.replace("/", "__") / knob
    try:
        row = run_compose(unit, knob, folder)
    except TraceError as e:
        reason = str(e).splitlines()[0]
        return {"outcome": "refused_ok" if why else "refused_bad", "reason": reason, "rule": why}
    except Exception as e:  # noqa: BLE001 -- the matrix classifies every failure
        return {"outcome": "error", "reason": f"{type(e).__name__}: {e}"[:300], "where": _where(e)}
    out = {"world_size": row["world_size"], "compose_s": row["compose_s"]}
    if row["warnings"]:
        out["warnings"] = row["warnings"]
    want = expected_world(unit, knob)
    if row["world_size"] != want:
        return {**out, "outcome": "wrong", "reason": f"composed {row['world_size']} rank(s), expected {want}"}
    if not replay:
        return {**out, "outcome": "ok", "replay": "skipped (--no-replay)"}
    cache = scratch.parent / "replays"
    rep = run_replay(Path(row["dir"]), row["world_size"], timeout, cache=cache)
    hint = rep.get("hint") or {}
    if row["world_size"] == 1 and int(hint.get("world_size") or 0) > 1:  # one rank of a multi-rank job
        w = int(hint["world_size"])
        mir = run_replay(Path(row["dir"]), w, timeout, mirror=0, cache=cache)
        if "fail" in mir and MACHINE_LIMIT.search(mir["fail"]):
            # this machine cannot host the peers: the single-process replay stands, its skipped
            # collectives counted against coverage, and the refusal is recorded
            rep = {**rep, "mirror_refused": mir["fail"][:200]}
        else:
            rep = {**mir, "mirrored_world": w}
    out.update(rep)
    if "fail" in rep:
        return {**out, "outcome": "error", "reason": f"replay failed: {rep['fail']}"}
    if rep["coverage"] is None or rep["coverage"] < MIN_COVERAGE:
        return {**out, "outcome": "wrong", "reason": f"replay coverage {rep['coverage']} < {MIN_COVERAGE}"}
    return {**out, "outcome": "ok"}


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    fr = [x for x in tb if "/engine/" in x.filename] or tb
    return f"{Path(fr[-1].filename).relative_to(ROOT) if fr[-1].filename.startswith(str(ROOT)) else fr[-1].filename}:{fr[-1].lineno}"


# ---------------------------------------------------------------- what-if


def whatif_case(knob: str, trace, f: dict, base_ms: float | None) -> dict:
    from engine.simulate.api import simulate

    why = cannot_apply(knob, f)
    if not f["kineto"]:
        return {"outcome": "refused_ok", "reason": why}
    if base_ms is None:
        return {"outcome": "error", "reason": "the unedited simulation failed"}
    spec = {"version": 1, "edits": [WHATIF_EDITS[knob]]}
    try:
        res = simulate(trace, spec)
    except TraceError as e:
        reason = str(e).splitlines()[0]
        return {"outcome": "refused_ok" if why else "refused_bad", "reason": reason, "rule": why}
    except Exception as e:  # noqa: BLE001 -- the matrix classifies every failure
        return {"outcome": "error", "reason": f"{type(e).__name__}: {e}"[:300], "where": _where(e)}
    pred = float(res.predicted_iteration_ms)
    out = {
        "base_ms": round(base_ms, 4),
        "pred_ms": round(pred, 4),
        "ratio": round(pred / base_ms, 4) if base_ms else None,
    }
    noop = [w for w in res.warnings if NOOP.search(w)]
    if noop:
        return {**out, "outcome": "refused_ok" if why else "refused_bad", "reason": noop[0][:200], "rule": why}
    tol = 1e-6 * max(base_ms, 1e-9)
    if knob == "wi_gemm_x2" and pred > base_ms + tol:
        return {**out, "outcome": "wrong", "reason": "gemm x2 faster lengthened the step"}
    if knob in ("wi_slower_x2", "wi_batch_x2", "wi_layers_x2") and pred < base_ms - tol:
        return {**out, "outcome": "wrong", "reason": f"{knob[3:]} shortened the step"}
    if knob == "wi_dp_64" and int(f["world_size"] or 0) < 64 and pred < base_ms - tol:
        return {**out, "outcome": "wrong", "reason": "DP 64 from fewer ranks shortened the step"}
    if knob == "wi_sharding":
        rk = (res.extra.get("sharding") or {}).get("ranking") or {}
        for n in ("2", "4"):
            rows = rk.get(n) or []
            plans = {r["plan"] for r in rows}
            if plans != {"table", "row", "column", "greedy"}:
                return {**out, "outcome": "wrong", "reason": f"sharding over {n}: plans {sorted(plans)}"}
            bad = [r for r in rows if not (r["predicted_step_ms"] > 0 and r["predicted_step_ms"] < float("inf"))]
            if bad:
                return {**out, "outcome": "wrong", "reason": f"sharding over {n}: step {bad[0]['predicted_step_ms']}"}
        out["best_4"] = rk["4"][0]["plan"]
    for key in ("batch", "layers"):
        if key in res.extra and knob == f"wi_{key}_x2":
            out["report"] = json.dumps(res.extra[key], default=str)[:200]
    return {**out, "outcome": "ok"}


# ---------------------------------------------------------------- driver


def run_unit(unit: Unit, knobs: list[str], scratch: Path, replay: bool, timeout: float) -> dict:
    import engine.trace as T

    t0 = time.perf_counter()
    try:
        trace = T.load(*unit.files)
    except TraceError as e:
        return {"trace": unit.name, "load_error": str(e).splitlines()[0], "cases": {}}
    f = facts(unit, trace)
    cases: dict[str, dict] = {}
    base_ms = None
    if any(k in WHATIF_KNOBS for k in knobs) and f["kineto"]:
        from engine.simulate.api import simulate

        try:
            base_ms = float(simulate(trace).predicted_iteration_ms)
        except Exception as e:  # noqa: BLE001
            cases["baseline"] = {"outcome": "error", "reason": f"{type(e).__name__}: {e}"[:300]}
    for k in knobs:
        t1 = time.perf_counter()
        if k in COMPOSE_KNOBS:
            c = compose_case(unit, k, f, scratch, replay, timeout)
        else:
            c = whatif_case(k, trace, f, base_ms)
        c["s"] = round(time.perf_counter() - t1, 2)
        cases[k] = c
        print(f"  {unit.name:42s} {k:13s} {c['outcome']:11s} {c.get('reason') or ''}"[:220], flush=True)
    return {
        "trace": unit.name,
        "files": [str(p.relative_to(p.parents[2])) for p in unit.files],
        "facts": f,
        "cases": cases,
        "s": round(time.perf_counter() - t0, 1),
    }


OUTCOMES = ("ok", "refused_ok", "refused_bad", "wrong", "error")


def counts(rows: list[dict]) -> dict[str, int]:
    c = dict.fromkeys(OUTCOMES, 0)
    for r in rows:
        for k, case in r["cases"].items():
            if k != "baseline":
                c[case["outcome"]] += 1
            elif case["outcome"] == "error":
                c["error"] += 1
        if "load_error" in r:
            c["error"] += 1
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="trace names (or substrings) to run")
    ap.add_argument("--knob", nargs="*", default=None, choices=KNOBS, help="knobs to run (default: all)")
    ap.add_argument("--no-replay", action="store_true", help="compose only (quick iteration; not for the results)")
    ap.add_argument("--scratch", default="/tmp/real_traces_scratch", help="composed outputs + replay results cache")
    ap.add_argument("--out", default=None, help="results JSON (default: benchmarks/results/real_traces.json)")
    ap.add_argument("--shared", default=str(SHARED), help="the shared traces folder")
    ap.add_argument("--samples", default=str(SAMPLES))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per replay")
    args = ap.parse_args(argv)
    units = discover(Path(args.shared), Path(args.samples))
    if args.only:
        units = [u for u in units if any(o == u.name or o in u.name for o in args.only)]
    knobs = list(args.knob or KNOBS)
    scratch = Path(args.scratch) / _engine_hash()
    scratch.mkdir(parents=True, exist_ok=True)
    load0 = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    rows = [run_unit(u, knobs, scratch, not args.no_replay, args.timeout) for u in units]
    c = counts(rows)
    import torch

    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "full_run": not args.no_replay and not args.only and not args.knob,
        "replay": not args.no_replay,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "load_average": [load0, [round(x, 2) for x in os.getloadavg()]],
        "wall_s": round(time.perf_counter() - t0, 1),
        "knobs": knobs,
        "counts": c,
        "traces": rows,
    }
    out = Path(args.out) if args.out else RESULTS / "real_traces.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(" ".join(f"{k}={v}" for k, v in c.items()), f"-> {out}")
    return 1 if c["error"] or c["wrong"] else 0


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Every compose knob (batch x2, bf16, DP 2, TP 2, embedding table/row/column/greedy over 4
    ranks) and what-if knob (gemm x2 faster, compute x2 slower, batch x2, layers x2, DP 64,
    sharding) on every shared trace and sample: ok, refused_ok (the knob cannot apply, by a rule
    on what the trace holds), refused_bad, wrong (an invariant fails: replay coverage under 99 %,
    a speed-up that lengthens the step, x2 that shortens it) or error. Composed cases replayed
    (one gloo process per rank where several)."""
    abbrev = {"ok": "ok", "refused_ok": "-", "refused_bad": "REFUSED", "wrong": "WRONG", "error": "ERROR"}
    knobs = d["knobs"]
    rows = [
        [r["trace"], *[abbrev[r["cases"][k]["outcome"]] if k in r["cases"] else "" for k in knobs]] for r in d["traces"]
    ]
    c = d["counts"]
    out = [
        f"Counts: ok {c['ok']}, refused_ok {c['refused_ok']}, refused_bad {c['refused_bad']}, "
        f"wrong {c['wrong']}, error {c['error']} ('-': refused where the knob cannot apply; "
        "each case's reason is in the JSON).",
        "",
    ]
    out += table(["trace", *knobs], rows)
    bad = [
        [r["trace"], k, case["outcome"], str(case.get("reason", ""))[:160].replace("|", "/")]
        for r in d["traces"]
        for k, case in r["cases"].items()
        if case["outcome"] in ("refused_bad", "wrong", "error")
    ]
    if bad:
        out += table(["trace", "knob", "outcome", "reason"], bad)
    rules: dict[str, int] = {}
    for r in d["traces"]:
        for case in r["cases"].values():
            if case["outcome"] == "refused_ok":
                why = str(case.get("rule") or case.get("reason") or "")
                rules[why] = rules.get(why, 0) + 1
    out += table(
        ["why the knob cannot apply (rule)", "cases"], sorted(([k, v] for k, v in rules.items()), key=lambda x: -x[1])
    )
    out += [
        f"Run {d.get('date')} with torch {d.get('torch')} on {d.get('cpu_count')} cores, load average "
        f"{d['load_average'][0][0]:.1f} -> {d['load_average'][1][0]:.1f}.",
        "",
    ]
    return out


if __name__ == "__main__":
    sys.exit(main())
