"""Linking an ET with the Kineto trace of the same run (per rank).

ET op <-> Kineto host op ("cpu_op" / "user_annotation" events):
* method "rf_id": ET `rf_id` == Kineto `args["Record function id"]` (PyTorch >= 2.1 traces).
  The id is unique for the whole run, so a Kineto trace spanning many iterations still links
  to the one iteration the ET captured.
* method "external_id" (older traces without "Record function id"): ET `rf_id` and Kineto
  `External id` are two counters started at different moments, and Kineto numbers each
  thread's ops in buffer order, so `External id = rf_id + offset` holds with one offset per
  *block* (a run of consecutive rf_ids on one ET thread), not globally. For each block the
  offset is voted by same-name pairs and the one matching most names wins; ties go to the
  offset nearest the previous block's (same iteration), then to the smallest. A pair links
  only when the names are equal. Unmatched ops are re-blocked and re-voted (3 rounds), then
  the gaps between matches are filled by aligning name sequences (engine.trace.align).
  A warning in `meta["warnings"]` says this method was used.

Eligible ops (the denominator of `link_rate`): ET nodes with `rf_id >= 0` other than the
profiler's own "[pytorch|profiler|execution_*|process/thread]" roots and the observer's
"## process_group:init ##" node (a metadata record of the process-group config written when the
observer starts; no profiler ever records a Kineto event for it). `link_rate` =
linked eligible ops / eligible ops.

`meta["link"]` = {"link_rate", "linked", "et_ops", "method" ("rf_id" | "external_id" | "none"),
"gpu_events" (kernel + memcpy + memset events), "gpu_events_linked" (those attributed to an ET op),
"name_mismatch" (only when rf_ids matched ops of other names)}.

GPU work: kernels / memcpy / memset -> their runtime launch (cudaLaunchKernel, hipLaunchKernel,
cudaMemcpyAsync, ...) by `correlation`; the launch -> the innermost host op enclosing it in
time on the same pid/tid (External id when no host op encloses it). `gpu_dur_us` of an ET op
is the GPU time launched under it or any descendant; `events.op_id` names the ET node of each
host op, launch and GPU event (the innermost linked enclosing op).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from engine.trace.align import fill_gaps
from engine.trace.columns import isin, where
from engine.trace.vocab import GPU_CATS as _GPU_CATS
from engine.trace.vocab import RUNTIME_CATS as _RUNTIME_CATS

_HOST_CATS = ("cpu_op", "user_annotation")


def _name_codes(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes of two name columns in one shared vocabulary."""
    uni = pd.Index(pd.unique(np.concatenate([np.asarray(a.astype(str)), np.asarray(b.astype(str))])))
    return uni.get_indexer(a.astype(str)), uni.get_indexer(b.astype(str))


PG_INIT_NAME = "## process_group:init ##"


def _not_an_op(name: str) -> bool:
    return name.startswith("[pytorch|profiler|") or name == PG_INIT_NAME


def eligible_mask(ops: pd.DataFrame) -> np.ndarray:
    root = where(ops["name"], _not_an_op)
    return (ops["rf_id"].to_numpy() >= 0) & ~root


def _by_rf(et_rf: np.ndarray, k_rf: np.ndarray) -> np.ndarray:
    """Row in the Kineto host table for each ET op by exact id (first occurrence), -1 if none."""
    idx = pd.Index(k_rf)
    if not idx.is_unique:
        keep = ~idx.duplicated(keep="first")
        pos = np.flatnonzero(keep)
        found = pd.Index(k_rf[keep]).get_indexer(et_rf)
        return np.where(found >= 0, pos[np.maximum(found, 0)], -1)
    return idx.get_indexer(et_rf)


def _by_offsets(
    rf: np.ndarray, tid: np.ndarray, et_name: np.ndarray, k_ext: np.ndarray, k_name: np.ndarray
) -> np.ndarray:
    """Block-offset alignment of ET rf_ids to Kineto External ids (see module docstring)."""
    n = len(rf)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(k_ext) == 0:
        return out
    k_index = pd.Index(k_ext)
    if not k_index.is_unique:
        keep = ~k_index.duplicated(keep="first")
        k_ext, k_name = k_ext[keep], k_name[keep]
        k_pos_all = np.flatnonzero(keep)
        k_index = pd.Index(k_ext)
    else:
        k_pos_all = np.arange(len(k_ext))
    kord = np.argsort(k_name, kind="stable")
    ks, ks_ext = k_name[kord], k_ext[kord]
    freq = np.bincount(k_name, minlength=int(max(k_name.max(), et_name.max())) + 1)

    def votes(sample: np.ndarray) -> np.ndarray:
        """The 8 most frequent (ext - rf) differences over same-name pairs (rare names first)."""
        f = freq[et_name[sample]]
        rare = (f > 0) & (f <= 64)
        sel = sample[rare] if rare.sum() >= 3 else sample[f > 0][:50]
        if len(sel) == 0:
            return np.empty(0, dtype=np.int64)
        lo = np.searchsorted(ks, et_name[sel], "left")
        cnt = np.searchsorted(ks, et_name[sel], "right") - lo
        total = int(cnt.sum())
        kidx = np.repeat(lo, cnt) + (np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        diffs = ks_ext[kidx] - np.repeat(rf[sel], cnt)
        vals, counts = np.unique(diffs, return_counts=True)
        return vals[np.argsort(-counts, kind="stable")[:8]]

    order = np.argsort(rf, kind="stable")
    used = np.zeros(len(k_ext), dtype=bool)
    prev_off = None
    for _round in range(3):
        todo = order[out[order] < 0]
        if len(todo) == 0:
            break
        t = tid[todo]
        starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
        ends = np.r_[starts[1:], len(todo)]
        progressed = False
        for s, e in zip(starts, ends):
            blk = todo[s:e]
            sample = blk if len(blk) <= 400 else blk[np.linspace(0, len(blk) - 1, 400).astype(int)]
            cands = votes(sample)
            if len(cands) == 0:
                continue
            best: tuple | None = None
            for off in cands:
                pos = k_index.get_indexer(rf[blk] + off)
                ok = pos >= 0
                ok[ok] = (k_name[pos[ok]] == et_name[blk][ok]) & ~used[pos[ok]]
                m = int(ok.sum())
                key = (m, -abs(off - prev_off) if prev_off is not None else 0, -abs(off))
                if best is None or key > best[0]:
                    best = (key, off, pos, ok)
            assert best is not None  # cands is never empty
            (m, _, _), off, pos, ok = best
            if m < min(3, len(blk)) or (m * 4 < len(blk) and m < 8):
                continue
            out[blk[ok]] = k_pos_all[pos[ok]]
            used[pos[ok]] = True
            prev_off = int(off)
            progressed = True
        if not progressed:
            break
    return out


def enclosing(host_ts, host_end, host_key, q_ts, q_key) -> np.ndarray:
    """Innermost host interval (same key) containing each query time; -1 if none."""
    nh = len(host_ts)
    out = np.full(len(q_ts), -1, dtype=np.int64)
    if nh == 0 or len(q_ts) == 0:
        return out
    # Sort by (key, start, -end) so a parent precedes its children.
    order = np.lexsort((-host_end, host_ts, host_key))
    hs, he, hk = host_ts[order], host_end[order], host_key[order]
    # Parent of each interval in the nesting forest (stack walk per key; one Python pass).
    parent = np.full(nh, -1, dtype=np.int64)
    stack: list[int] = []
    cur_key = None
    he_l, hs_l, hk_l = he.tolist(), hs.tolist(), hk.tolist()
    for i in range(nh):
        if hk_l[i] != cur_key:
            stack.clear()
            cur_key = hk_l[i]
        while stack and he_l[stack[-1]] < hs_l[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    # Last interval starting at or before t with the same key, then climb until it contains t.
    _keys_u, kinv = np.unique(np.r_[hk, q_key], return_inverse=True)
    hki, qki = kinv[:nh], kinv[nh:]
    # Combined integer sort key (key index, time rank): exact, unlike key * big + time in float64
    # (epoch-microsecond timestamps near 1e15 leave no room for a key multiplier).
    times, trank = np.unique(np.r_[hs, q_ts], return_inverse=True)
    width = np.int64(len(times) + 1)
    hcomb = hki.astype(np.int64) * width + trank[:nh]
    qcomb = qki.astype(np.int64) * width + trank[nh:]
    j = np.searchsorted(hcomb, qcomb, side="right") - 1
    valid = j >= 0
    valid[valid] = hki[j[valid]] == qki[valid]
    j = np.where(valid, j, -1)
    for _ in range(256):
        bad = (j >= 0) & (he[np.maximum(j, 0)] < q_ts)
        if not bad.any():
            break
        j[bad] = parent[j[bad]]
    out = np.where(j >= 0, order[np.maximum(j, 0)], -1)
    return out


def link(ops: pd.DataFrame, events: pd.DataFrame, warnings_out: list[str]) -> tuple[dict, np.ndarray]:
    """Fill ops.k_ts_us/k_dur_us/gpu_dur_us in place; return (meta["link"], events op_id array)."""
    n_ops, n_ev = len(ops), len(events)
    k_ts = np.full(n_ops, np.nan)
    k_dur = np.full(n_ops, np.nan)
    gpu = np.full(n_ops, np.nan)
    ev_op = np.full(n_ev, -1, dtype=np.int64)
    elig = eligible_mask(ops) if n_ops else np.zeros(0, bool)
    info: dict[str, Any] = {
        "link_rate": 0.0,
        "linked": 0,
        "et_ops": int(elig.sum()),
        "method": "none",
        "gpu_events_linked": 0,
        "gpu_events": 0,
    }
    if n_ops == 0 or n_ev == 0:
        ops["k_ts_us"], ops["k_dur_us"], ops["gpu_dur_us"] = k_ts, k_dur, gpu
        return info, ev_op
    host = isin(events["cat"], _HOST_CATS)
    linked_ev, methods = _link_host_ops(ops, events, elig, host, info, warnings_out)
    linked = linked_ev >= 0
    ts = events["ts_us"].to_numpy()
    dur = events["dur_us"].to_numpy()
    k_ts[linked] = ts[linked_ev[linked]]
    k_dur[linked] = dur[linked_ev[linked]]
    ev_op_direct = np.full(n_ev, -1, dtype=np.int64)  # op row of each linked host event
    ev_op_direct[linked_ev[linked]] = np.flatnonzero(linked)
    g = np.flatnonzero(isin(events["cat"], _GPU_CATS))
    ev_op_row = _op_row_of_events(events, host, g, ev_op_direct)
    gl = g[ev_op_row[g] >= 0]
    info["gpu_events"], info["gpu_events_linked"] = len(g), len(gl)
    if methods:
        gpu = _inclusive_gpu_us(ops, np.bincount(ev_op_row[gl], weights=dur[gl], minlength=n_ops)[:n_ops], linked)
    ops["k_ts_us"], ops["k_dur_us"], ops["gpu_dur_us"] = k_ts, k_dur, gpu
    ids = ops["id"].to_numpy()
    ev_op = np.where(ev_op_row >= 0, ids[np.maximum(ev_op_row, 0)], -1)
    n_linked = int((linked & elig).sum())
    if info["et_ops"] and n_linked < 0.5 * info["et_ops"]:
        warnings_out.append(
            f"only {n_linked} of {info['et_ops']} ET ops found their Kineto op: the ET and "
            "Kineto files may come from different runs or programs"
        )
    info.update(
        linked=n_linked,
        link_rate=round(n_linked / info["et_ops"], 6) if info["et_ops"] else 0.0,
        method="+".join(sorted(methods)) or "none",
    )
    return info, ev_op


def _link_host_ops(
    ops: pd.DataFrame, events: pd.DataFrame, elig: np.ndarray, host: np.ndarray, info: dict, warnings_out: list[str]
) -> tuple[np.ndarray, set[str]]:
    """Each eligible ET op's host event row (-1: none), rank by rank: by record-function id where
    the Kineto file has them, else by External id with per-thread-block offsets; and the methods
    used. An id shared by ops of different names links nothing (counted in `info`)."""
    methods: set[str] = set()
    mismatched = 0
    linked_ev = np.full(len(ops), -1, dtype=np.int64)  # event row linked to each op
    ev_rank = events["rank"].to_numpy()
    op_rank = ops["rank"].to_numpy()
    for r in np.unique(op_rank):
        o_rows = np.flatnonzero((op_rank == r) & elig)
        h_rows = np.flatnonzero(host & (ev_rank == r))
        if len(o_rows) == 0 or len(h_rows) == 0:
            continue
        k_rf = events["rf_id"].to_numpy(dtype=np.int64, na_value=-1)[h_rows]
        rf = ops["rf_id"].to_numpy()[o_rows]
        if len(np.unique(k_rf[k_rf >= 0])) > 1:  # one value for every op (TraceLens' 0s) is no id
            pos = _by_rf(rf, k_rf)
            # Same id, different name: the files are not from the same run; never link those.
            et_codes, k_codes = _name_codes(ops["name"].iloc[o_rows], events["name"].iloc[h_rows])
            hit = pos >= 0
            bad = hit.copy()
            bad[hit] = et_codes[hit] != k_codes[pos[hit]]
            if bad.any():
                pos[bad] = -1
                mismatched += int(bad.sum())
            methods.add("rf_id")
        else:
            et_codes, k_codes = _name_codes(ops["name"].iloc[o_rows], events["name"].iloc[h_rows])
            k_ext = events["external_id"].to_numpy(dtype=np.int64, na_value=-1)[h_rows]
            et_tid = ops["tid"].to_numpy()[o_rows]
            pos = _by_offsets(rf, et_tid, et_codes, k_ext, k_codes)
            k_tid = events["tid"].cat.codes.to_numpy()[h_rows]
            pos = fill_gaps(rf, et_tid, et_codes, pos, k_ext, k_tid, k_codes)
            methods.add("external_id")
        ok = pos >= 0
        linked_ev[o_rows[ok]] = h_rows[pos[ok]]
    if mismatched:
        info["name_mismatch"] = mismatched
        warnings_out.append(
            f"{mismatched} ET ops share a record-function id with a Kineto op of another name and were left unlinked"
        )
    if "external_id" in methods:
        warnings_out.append(
            "Kineto trace has no 'Record function id': ET ops linked by 'External id' "
            "with per-thread-block offsets and equal names (approximate)"
        )
    return linked_ev, methods


def _op_row_of_events(events: pd.DataFrame, host: np.ndarray, g: np.ndarray, ev_op_direct: np.ndarray) -> np.ndarray:
    """The op row each event belongs to (-1: none): a host event to the innermost enclosing
    linked host event (itself included), a runtime launch to the linked op around it (else the
    one of its External id), a GPU event (rows `g`) to its launch by correlation id."""
    ts = events["ts_us"].to_numpy()
    end = ts + events["dur_us"].to_numpy()
    ev_rank = events["rank"].to_numpy()
    h_all = np.flatnonzero(host)
    pid_codes = events["pid"].cat.codes.to_numpy().astype(np.int64)
    tid_codes = events["tid"].cat.codes.to_numpy().astype(np.int64)
    key = (ev_rank.astype(np.int64) << 40) + (pid_codes << 20) + tid_codes
    lh = h_all[ev_op_direct[h_all] >= 0]
    enc_h = enclosing(ts[lh], end[lh], key[lh], ts[h_all], key[h_all])
    # (no linked host event at all: nothing encloses anything; indexing lh would fail)
    op_of_host = (
        np.where(enc_h >= 0, ev_op_direct[lh[np.maximum(enc_h, 0)]], -1) if len(lh) else np.full(len(h_all), -1)
    )
    ev_op_row = np.full(len(events), -1, dtype=np.int64)
    ev_op_row[h_all] = op_of_host
    ev_op_row[lh] = ev_op_direct[lh]
    # Runtime launches and GPU activity by correlation.
    rt = np.flatnonzero(isin(events["cat"], _RUNTIME_CATS))
    enc_rt = enclosing(ts[lh], end[lh], key[lh], ts[rt], key[rt])
    ev_op_row[rt] = np.where(enc_rt >= 0, ev_op_direct[lh[np.maximum(enc_rt, 0)]], -1) if len(lh) else -1
    ext = events["external_id"].to_numpy(dtype=np.int64, na_value=-1)
    loose = rt[(ev_op_row[rt] < 0) & (ext[rt] >= 0)]
    if len(loose) and len(lh):  # launches outside any linked op's time span: same External id
        lk = (ev_rank[lh].astype(np.int64) << 40) + ext[lh]
        first = ~pd.Index(lk).duplicated()
        found = pd.Index(lk[first]).get_indexer((ev_rank[loose].astype(np.int64) << 40) + ext[loose])
        ok = found >= 0
        ev_op_row[loose[ok]] = ev_op_direct[lh[first][found[ok]]]
    corr = events["correlation"].to_numpy(dtype=np.int64, na_value=-1)
    if len(g) and len(rt):
        rt_c = (ev_rank[rt].astype(np.int64) << 40) + corr[rt]
        rt_ok = corr[rt] >= 0
        idx = pd.Index(rt_c[rt_ok])
        keep = ~idx.duplicated()
        lut = pd.Index(rt_c[rt_ok][keep])
        rt_rows = rt[rt_ok][keep]
        found = lut.get_indexer((ev_rank[g].astype(np.int64) << 40) + corr[g])
        hit = (found >= 0) & (corr[g] >= 0)
        ev_op_row[g[hit]] = ev_op_row[rt_rows[found[hit]]]
    return ev_op_row


def _inclusive_gpu_us(ops: pd.DataFrame, direct: np.ndarray, linked: np.ndarray) -> np.ndarray:
    """GPU time per op: its own kernels' (`direct`), then inclusive over its ET descendants
    (bottom-up by depth); NaN where neither the op nor a descendant was linked."""
    has = np.zeros(len(ops), dtype=bool)
    has[linked] = True
    incl = direct.copy()
    ppos = pd.Index(ops["rank"].to_numpy().astype(np.int64) << 40 | ops["id"].to_numpy()).get_indexer(
        ops["rank"].to_numpy().astype(np.int64) << 40 | ops["parent"].to_numpy()
    )
    ppos[ops["parent"].to_numpy() < 0] = -1
    depth = ops["depth"].to_numpy()
    order = np.argsort(-depth, kind="stable")
    bounds = np.flatnonzero(np.diff(depth[order])) + 1
    for level in np.split(order, bounds):
        level = level[ppos[level] >= 0]
        np.add.at(incl, ppos[level], incl[level])
        np.logical_or.at(has, ppos[level], has[level])
    return np.where(has, incl, np.nan)
