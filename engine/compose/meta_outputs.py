"""The outputs side of meta propagation (engine.compose.meta_check.propagate): binding an op's
meta outputs to its recorded tensors, `out=` arguments, and ops without a meta run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine.compose.meta_run import meta_dtype, meta_tensor
from engine.compose.nodes import get_slot, is_defined, slot_type, tensor_slots
from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.compose.meta_state import MetaWalk

_AUX_OUTPUT_OPS = frozenset(("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"))


def _scaled(got: int, rec: int, s: float) -> bool:
    """Is `got` the recorded size `rec` scaled by `s`? A size that is no multiple of 1/s (a
    variable-length lookup's indices halved for DP 2: 20821 -> 10410) rounds either way."""
    exact = rec * s
    return abs(got - exact) < 1e-9 or (exact != int(exact) and abs(got - exact) < 1.0)


def bind_outputs(run: MetaWalk, node, res, outs, out) -> None:
    """Bind the op's meta outputs to their recorded tensors: check (or, with `mutate`, rewrite)
    each output's shape against its recording scaled by the batch dims."""
    base = node["name"].split("::", 1)[-1].split(".", 1)[0]
    single = len(res.overload._schema.returns) == 1
    r = (out,) if single else tuple(out) if isinstance(out, (tuple, list)) else (out,)
    for arg, sub in tensor_slots(outs):
        v = get_slot(outs, "values", arg, sub)
        if not is_defined(v):
            continue
        pos = res.out_map[arg] if res.out_map is not None and arg < len(res.out_map) else arg
        t = r[pos] if 0 <= pos < len(r) else None
        if sub is not None:
            t = t[sub] if isinstance(t, (list, tuple)) and sub < len(t) else None
        rec = list(get_slot(outs, "shapes", arg, sub) or [])
        key = (v[0], v[1])
        if key in run.shapes and (run.is_replay or key not in run.from_replay):
            run.from_replay.update([key] if run.is_replay else [])
            run.bind_shape(
                outs,
                arg,
                sub,
                key,
                rec,
                t.dtype if isinstance(t, torch.Tensor) else meta_dtype(slot_type(outs, arg, sub)),
            )
            continue
        if not run.is_replay and (key in run.from_replay or run.made_by_ancestor(key, node["id"])):
            hit = run.env[key][0]
            if run.mutate and list(hit.shape) != rec:
                run._write(outs, arg, sub, hit)
            continue
        if run.is_replay:
            run.from_replay.add(key)
        run.maker[key] = node["id"]
        run.maker_name[key] = node["name"]
        if not isinstance(t, torch.Tensor):
            run.put((v[0], v[1]), meta_tensor(rec, None, meta_dtype(slot_type(outs, arg, sub))), rec)
            continue
        got = list(t.shape)
        if got != rec and (rec == [0] or got == [0] or (arg > 0 and base in _AUX_OUTPUT_OPS)):
            # CPU fast paths return empty aux outputs (embedding_bag offset2bag, max_indices)
            # where the meta kernel sizes them, and vice versa: keep the recorded aux tensor
            t = meta_tensor(run.value_rule(rec, node) if run.s != 1.0 else rec, None, t.dtype)
            got = list(t.shape)
            if run.mutate and got != rec:
                run._write(outs, arg, sub, t)
            run.put((v[0], v[1]), t, rec)
            continue
        if got != rec:
            ok = len(got) == len(rec) and all(
                g == d
                or (run.s != 1.0 and _scaled(g, d, run.s))
                or (run.s != 1.0 and any(abs((g - d) - b * (run.s - 1)) < 1e-9 for b in run.S))  # B-1 -> sB-1
                for g, d in zip(got, rec)
            )
            if not ok:
                msg = f"node {node['id']} ({node['name']}): output {arg} recorded {rec}, meta {got}"
                if run.s != 1.0:
                    raise TraceError(f"{run.label} breaks shape at {msg}")
                run.report.mismatches.append(msg)
            else:
                run.S.update(d for g, d in zip(got, rec) if g != d and _scaled(g, d, run.s))
                run.rounded.update(
                    (d, g) for g, d in zip(got, rec) if g != d and _scaled(g, d, run.s) and d * run.s != int(d * run.s)
                )
                if run.mutate:
                    run._write(outs, arg, sub, t)
        run.put((v[0], v[1]), t, rec)


def sync_out_args(run: MetaWalk, ins: dict, outs: dict) -> None:
    """An `out=` (or in-place) argument has the shape the op gave its output: a guess made when
    it was read (a DDP gradient bucket view is no batch tensor) must not stay in the node."""
    out_keys = {(v[0], v[1]) for v in (get_slot(outs, "values", a, s) for a, s in tensor_slots(outs)) if is_defined(v)}
    for arg, sub in tensor_slots(ins):
        v = get_slot(ins, "values", arg, sub)
        hit = run.env.get((v[0], v[1])) if is_defined(v) and (v[0], v[1]) in out_keys else None
        if hit is not None and list(hit[0].shape) != list(get_slot(ins, "shapes", arg, sub) or []):
            run._write(ins, arg, sub, hit[0])


def keep_recorded(run: MetaWalk, node, outs, why: str, count: bool = True) -> None:
    """No meta run: outputs keep recorded shapes, with batch-carrying dims scaled."""
    if count and any(True for _ in tensor_slots(outs)):
        run.report.unchecked.append(why)
    run.is_replay = count
    for arg, sub in tensor_slots(outs):
        v = get_slot(outs, "values", arg, sub)
        if not is_defined(v):
            continue
        rec = list(get_slot(outs, "shapes", arg, sub) or [])
        key = (v[0], v[1])
        if not run.is_replay and key in run.from_replay:
            continue
        if run.is_replay:
            run.from_replay.add(key)
        if key in run.shapes:
            run.bind_shape(outs, arg, sub, key, rec, meta_dtype(slot_type(outs, arg, sub)))
            continue
        shp = run.value_rule(rec, node) if run.s != 1.0 else rec
        t = meta_tensor(shp, None, meta_dtype(slot_type(outs, arg, sub)))
        if run.mutate and shp != rec:
            run._write(outs, arg, sub, t)
        run.put((v[0], v[1]), t, rec)


__all__ = ["bind_outputs", "keep_recorded", "sync_out_args"]
