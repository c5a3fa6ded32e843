"""`compose(spec) -> Benchmark`: select segments, repeat them with fresh ids, then transform.

Why ids are renumbered: the replayer runs ops in id order and names ops by id everywhere, so a
composed ET gets new, unique, execution-ordered node ids (root = 1, then segment by segment,
repeat by repeat). Tensor identity (Lumos-style layer duplication):
  * tensors a segment consumes from outside keep one identity across repeats (shared inputs),
  * tensors a segment produces get fresh tensor/storage ids in every repeat after the first,
  * a repeated segment *chains* when its outputs match its external inputs in shape and dtype
    (a decoder layer: hidden -> hidden): repeat i+1 reads repeat i's output instead.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.compose.benchmark import Benchmark, rank_summary
from engine.compose.context import ORIGIN_KEY, ComposeContext
from engine.compose.nodes import ROOT_ID, is_defined, label_node, node_from_row, root_node, set_slot, tensors_of
from engine.compose.spec import BenchmarkSpec
from engine.errors import TraceError
from engine.progress import Progress, report, scaled
from engine.trace.ranks import of_rank

if TYPE_CHECKING:
    from engine.trace.model import Trace

_SKIP_ANCESTORS = ("[pytorch|profiler|execution_trace|",)


class _Ids:
    """Allocators for node ids and fresh tensor/storage ids."""

    def __init__(self, first_tensor_id: int):
        self.node = ROOT_ID
        self.tensor = first_tensor_id

    def next_node(self) -> int:
        self.node += 1
        return self.node

    def fresh(self) -> int:
        self.tensor += 1
        return self.tensor


def _max_tensor_id(trace: Trace) -> int:
    t = trace.tensors
    if len(t) == 0:
        return 0
    return int(max(t["tensor_id"].max(), t["storage_id"].max()))


def _chain_pairs(sub, phase: dict, params: set) -> dict[tuple[int, int], tuple[int, int]]:
    """external input key -> output key of the same shape/dtype/phase (latest producer first).

    Parameters (and optimizer state) never chain: a layer's weight grad has the weight's shape
    but must not replace the weight of the next repeat. Pairs stay within one phase, so a
    segment holding a layer's forward and backward chains activations with activations.
    """
    ext, out = sub.external_inputs, sub.outputs
    if len(ext) == 0 or len(out) == 0:
        return {}
    outs = sorted(
        (
            (int(r.producer), (int(r.tensor_id), int(r.storage_id)), tuple(r.shape), str(r.dtype))
            for r in out.itertuples(index=False)
            if int(r.storage_id) not in params
        ),
        reverse=True,
    )
    used: set = set()
    pairs = {}
    for r in ext.sort_values("consumer", kind="stable").itertuples(index=False):
        if getattr(r, "aliases_internal", False) or int(r.storage_id) in params:
            continue
        for prod, okey, shp, dt in outs:
            if (
                okey not in used
                and shp == tuple(r.shape)
                and dt == str(r.dtype)
                and len(shp) >= 2
                and phase.get(prod) == phase.get(int(r.consumer))
            ):
                pairs[(int(r.tensor_id), int(r.storage_id))] = okey
                used.add(okey)
                break
    return pairs


def _segment_nodes(trace: Trace, sub) -> tuple[list[dict], set[int], dict[int, str]]:
    """Node dicts of a Subgraph (id order) plus its annotation ancestors (module/phase labels),
    the ids to replay, and each node's phase (by source node id)."""
    ops = of_rank(trace.ops, sub.rank)
    parent = dict(zip(ops["id"].to_numpy(dtype=np.int64).tolist(), ops["parent"].to_numpy(dtype=np.int64).tolist()))
    cat = dict(zip(ops["id"].astype(int), ops["category"].astype(str)))
    name = dict(zip(ops["id"].astype(int), ops["name"].astype(str)))
    keep = {int(i) for i in sub.op_ids}
    for i in list(keep):
        p = parent.get(i, -1)
        while p >= 0 and p in parent and p not in keep:
            if cat.get(p) == "annotation" and not name[p].startswith(_SKIP_ANCESTORS):
                keep.add(p)
            p = parent[p] if parent[p] != p else -1
    rows = ops[ops["id"].isin(keep)].sort_values("id", kind="stable")
    nodes = [node_from_row(r) for r in rows.itertuples(index=False)]
    phases = {n["id"]: ph for n, ph in zip(nodes, rows["phase"].astype(str))}
    for n in nodes:  # reparent onto the nearest kept ancestor (or the segment label)
        p = n["ctrl_deps"]
        while p >= 0 and p not in keep and p in parent and parent[p] != p:
            p = parent[p]
        n["ctrl_deps"] = p if p in keep else -1
    return nodes, {int(i) for i in sub.replay_ids}, phases


@dataclass(kw_only=True, slots=True)
class _Repeat:
    """One repeat of a segment while it is emitted (module docstring for the tensor rules).

    chain_sub: external input key -> (values, strides) of the previous repeat's output it reads
    instead; chain_sid: the same by storage id; out_watch: output keys a later repeat chains
    to, whose emitted (values, strides) land in seen_out; replay_ids: the emitted ids to replay.
    """

    segment: int
    source: int
    index: int  # 0-based repeat index
    label_id: int
    chain_sub: dict
    chain_sid: dict
    out_watch: set
    seen_out: dict = field(default_factory=dict)
    replay_ids: list[int] = field(default_factory=list)


def _emit_repeat(nodes, replay, ids: _Ids, canon: dict, canon_s: dict, r: _Repeat) -> list[dict]:
    """One repeat of a segment: renumbered nodes with remapped tensor ids and their provenance."""
    label_id, rep, chain_sub, chain_sid, out_watch, seen_out = (
        r.label_id,
        r.index,
        r.chain_sub,
        r.chain_sid,
        r.out_watch,
        r.seen_out,
    )
    new_id = {}
    out_nodes = []
    local_t: dict = {}
    local_s: dict = {}
    seen_in: set = set()
    seen_sin: set = set()
    for n in nodes:
        m = copy.deepcopy(n)
        nid = ids.next_node()
        new_id[n["id"]] = nid
        m["id"] = nid
        m["ctrl_deps"] = new_id.get(n["ctrl_deps"], label_id)
        if n["id"] in replay:
            r.replay_ids.append(nid)
        for io_name, io, arg, sub, v in tensors_of(m):
            if not is_defined(v):
                continue
            key = (v[0], v[1])
            if io_name == "in" and key in chain_sub and key not in local_t:
                nv, nst = chain_sub[key]
                set_slot(io, "values", arg, sub, list(nv))
                if nst is not None and io.get("strides"):
                    set_slot(io, "strides", arg, sub, list(nst))
                continue
            if key not in local_t:
                internal = io_name == "out" and key not in seen_in and rep > 0
                local_t[key] = ids.fresh() if internal else canon.setdefault(key, key[0])
            if v[1] not in local_s:
                internal_s = io_name == "out" and v[1] not in seen_sin and rep > 0
                local_s[v[1]] = ids.fresh() if internal_s else chain_sid.get(v[1], canon_s.setdefault(v[1], v[1]))
            if io_name == "in":
                seen_in.add(key)
                seen_sin.add(v[1])
            nv = [local_t[key], local_s[v[1]], *v[2:]]
            set_slot(io, "values", arg, sub, nv)
            if io_name == "out" and key in out_watch:
                st = io.get("strides")
                seen_out[key] = (nv, (st[arg] if sub is None else st[arg][sub]) if st else None)
        m[ORIGIN_KEY] = {"id": int(n["id"]), "segment": r.segment, "repeat": rep, "source": r.source}
        out_nodes.append(m)
    return out_nodes


def compose(spec: BenchmarkSpec, progress: Progress | None = None, limits=None) -> Benchmark:
    """Build the benchmark a spec describes (see module docstring and engine.compose).
    `limits` (engine.compose.limits.ComposeLimits, default its defaults) bounds the size,
    checked on an estimate before any node is built."""
    from engine.compose.limits import ComposeLimits, estimate

    if not isinstance(spec, BenchmarkSpec):
        raise TraceError(f"compose() needs a BenchmarkSpec, not {type(spec).__name__}")
    limits = limits if limits is not None else ComposeLimits()
    limits.check_spec(spec)
    paths = spec.source_paths()
    traces = _load_sources(paths, progress)
    prepared = _select_segments(spec, traces, paths, progress)
    world = spec.sharding.world_size if spec.sharding is not None else 1
    limits.check(
        estimate(
            [
                (len(sn), sum(1 for n in sn for _ in tensors_of(n)), seg.repeat)
                for seg, (_, sn, _r, _p) in zip(spec.segments, prepared)
            ],
            world,
        )
    )
    ctx = ComposeContext()
    nodes, replay, seg_meta = _emit_segments(spec, traces, prepared, ctx, progress)
    meta: dict[str, Any] = {"segments": seg_meta, "sources": [str(p) for p in paths], "warnings": [], "transforms": []}
    _note_synthesized(spec, traces, paths, meta)
    from engine.compose.transforms.scale import param_storages, parameters

    meta["param_storages"] = sorted(param_storages(traces[0]))
    if spec.sharding is not None and spec.sharding.needs_params:
        ctx.params = parameters(traces[spec.segments[0].source])
    meta["time"] = __import__("datetime").datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    bench = Benchmark(spec=spec, ranks={0: nodes}, replay_ids={0: replay}, meta=meta, context=ctx)
    _transform(bench, traces, paths, progress)
    limits.check_ranks({r: rank_summary(bench, r)["estimated_memory_bytes"] for r in bench.ranks})
    report(progress, 1.0, "composed")
    return bench


def _load_sources(paths: list, progress: Progress | None) -> list[Trace]:
    """Each source's trace, in spec order (a source listed many times is loaded once); a
    Kineto-only source gets its ET synthesized."""
    import engine.trace as et_load

    traces = []
    loaded: dict = {}
    for k, p in enumerate(paths):
        report(progress, 0.3 * k / len(paths), f"loading {p.name}")
        if not p.exists():
            raise TraceError(f"sources[{k}]: trace not found", p)
        key = str(p.resolve())
        if key not in loaded:
            loaded[key] = et_load.load(p)
            if not loaded[key].has_et and loaded[key].has_kineto:  # Kineto-only: synthesize its ET
                from engine.compose.synth import load_synthesized

                loaded[key] = load_synthesized(p)
        traces.append(loaded[key])
    return traces


def _select_segments(spec: BenchmarkSpec, traces: list[Trace], paths: list, progress: Progress | None) -> list:
    """Per segment: (its subgraph, its nodes, replay ids, phases); the same selection on the same
    trace is computed once."""
    from engine.graph import select, selection_from_dict

    prepared = []
    memo: dict = {}
    for si, seg in enumerate(spec.segments):
        report(progress, 0.3 + 0.1 * si / len(spec.segments), f"selecting segment {si}")
        trace = traces[seg.source]
        memo_key = (id(trace), json.dumps(seg.selection, sort_keys=True, default=str))
        if memo_key not in memo:
            try:
                sub = select(trace, selection_from_dict(seg.selection))
            except TraceError as e:
                raise TraceError(f"segments[{si}]: {e.problem}", paths[seg.source]) from None
            if not sub.replay_ids:
                raise TraceError(f"segments[{si}]: selection has no replayable operators", paths[seg.source])
            memo[memo_key] = (sub, *_segment_nodes(trace, sub))
        prepared.append(memo[memo_key])
    return prepared


def _emit_segments(
    spec: BenchmarkSpec, traces: list[Trace], prepared: list, ctx: ComposeContext, progress: Progress | None
) -> tuple[list[dict], list[int], list[dict]]:
    """Rank 0's nodes (root, then each segment's repeats under their label), its replay ids and
    the per-segment meta; a repeat reads the previous repeat's outputs where they chain."""
    ids = _Ids(max(_max_tensor_id(t) for t in traces) + 1)
    nodes: list[dict] = [root_node()]
    replay: list[int] = []
    seg_meta = []
    canon_maps: dict = {}
    for si, seg in enumerate(spec.segments):
        report(progress, 0.4 + 0.2 * si / len(spec.segments), f"segment {si}")
        trace = traces[seg.source]
        sub, seg_nodes, seg_replay, seg_phases = prepared[si]
        ctx.phases.update(((seg.source, i), ph) for i, ph in seg_phases.items())
        pairs = {}
        if seg.repeat > 1:
            from engine.compose.transforms.scale import param_storages

            phase = dict(zip(trace.ops["id"].astype(int), trace.ops["phase"].astype(str)))
            pairs = _chain_pairs(sub, phase, param_storages(trace))
        canon = canon_maps.setdefault((seg.source, "t"), _canon(ids, seg.source))
        canon_s = canon_maps.setdefault((seg.source, "s"), _canon(ids, seg.source))
        prev_out: dict = {}
        first_rep_node = ids.node + 1
        for rep in range(seg.repeat):
            label = label_node(
                ids.next_node(),
                ROOT_ID,
                f"[compose|segment {si}|{seg.label or 'segment'}|repeat {rep + 1}/{seg.repeat}]",
            )
            chain_sub = {e: prev_out[o] for e, o in pairs.items() if o in prev_out} if rep > 0 else {}
            chain_sid = {e[1]: v[0][1] for e, v in chain_sub.items()}
            r = _Repeat(
                segment=si,
                source=seg.source,
                index=rep,
                label_id=label["id"],
                chain_sub=chain_sub,
                chain_sid=chain_sid,
                out_watch=set(pairs.values()),
            )
            out = _emit_repeat(seg_nodes, seg_replay, ids, canon, canon_s, r)
            prev_out = {o: r.seen_out[o] for o in pairs.values() if o in r.seen_out}
            nodes.append(label)
            nodes.extend(out)
            replay.extend(r.replay_ids)
        seg_meta.append(
            {
                "index": si,
                "label": seg.label,
                "source": seg.source,
                "repeat": seg.repeat,
                "ops": len(seg_nodes),
                "replay_ops": len(seg_replay),
                "chained_inputs": len(pairs),
                "external_inputs": len(sub.external_inputs),
                "node_ids": [first_rep_node, ids.node],
            }
        )
    return nodes, replay, seg_meta


def _note_synthesized(spec: BenchmarkSpec, traces: list[Trace], paths: list, meta: dict) -> None:
    """Sources whose ET was synthesized from Kineto are said in the output, and refuse the knobs
    that need every tensor's producer."""
    from engine.compose.synth import SynthReport

    synth = {k: t.meta["synthesized"] for k, t in enumerate(traces) if t.meta.get("synthesized")}
    if not synth:
        return
    meta["synthesized"] = synth
    meta["warnings"].extend(f"sources[{k}]: {r['path']}: " + SynthReport.from_dict(r).line() for k, r in synth.items())
    knob = "sharding" if spec.sharding is not None else "batch scaling" if spec.batch_scale != 1.0 else None
    if knob is not None:  # both follow the batch from the inputs through every op's tensors
        raise TraceError(
            f"{knob} needs the whole tensor flow (every tensor's producer), which a Kineto-only source "
            "does not record: its ET is synthesized and most of its tensors are fresh inputs",
            paths[next(iter(synth))],
        )


def _transform(bench: Benchmark, traces: list[Trace], paths: list, progress: Progress | None) -> None:
    """The spec's transforms in order: batch scale, dtype, sharding (which makes the ranks)."""
    from engine.compose.transforms.dtype import change_dtype
    from engine.compose.transforms.scale import scale_batch

    spec, meta, ctx = bench.spec, bench.meta, bench.context
    if spec.batch_scale != 1.0 or spec.sharding is not None or spec.batch_size is not None:
        from engine.compose.transforms.scale import infer_batch

        meta["batch_size"] = spec.batch_size or infer_batch(
            traces[spec.segments[0].source], paths[spec.segments[0].source]
        )
    # dp applies batch_scale / degree in one step; embedding sharding scales its tables' bags and
    # lookups (it keeps only the lookups, and a TBE's global batch is no dim of the dense part)
    if spec.batch_scale != 1.0 and not (spec.sharding is not None and spec.sharding.scales_batch):
        report(progress, 0.65, f"scaling batch x{spec.batch_scale:g}")
        scale_batch(bench, 0, spec.batch_scale, meta["batch_size"])
    if spec.dtype is not None:
        from engine.compose.meta_check import propagate
        from engine.compose.transforms.dtype import _failures

        # ops that already fail on meta tensors with the recorded dtypes are not the change's fault
        base = propagate(bench.ranks[0], bench.replay_ids[0], mutate=False, strict=False)
        ctx.dtype_baseline_failures = _failures(base)
        change_dtype(bench, 0, spec.dtype)
    if spec.sharding is not None:
        report(progress, 0.8, f"sharding ({spec.sharding.kind.value})")
        from engine.compose.shard import apply_sharding

        apply_sharding(bench, traces, paths, scaled(progress, 0.8, 1.0))


def _canon(ids: _Ids, source: int) -> dict:
    """Source 0 keeps its tensor ids; later sources get a fresh namespace (ids never collide)."""
    if source == 0:
        return {}
    return _FreshMap(ids)


class _FreshMap(dict):
    def __init__(self, ids: _Ids):
        super().__init__()
        self._ids = ids

    def setdefault(self, key, default=None):  # the default is ignored: a fresh id is made
        if key not in self:
            self[key] = self._ids.fresh()
        return self[key]


__all__ = ["ORIGIN_KEY", "Benchmark", "compose"]
