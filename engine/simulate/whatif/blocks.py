"""Find a model's repeated block stack (the layers a `layers` edit copies) without a module regex.

Why: a user with a production trace does not know its module naming. Kineto's `nn.Module`
annotations name instances `ClassName_N` (or, from our capture, the module path `h.N`); a
transformer's layers are the class with several instances that covers the most time while no
instance sits inside another (a `Linear_N` inside each `BertLayer_N` covers less; a `Sequential`
holding `Sequential`s nests). Without module annotations, user annotations (`record_function`)
named the same way are used. When none qualifies, the candidates seen are listed so the user can
pick one.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

_INDEXED = re.compile(r"^(?P<stem>.*?[._])(?P<i>\d+)$")
_MODULE = "nn.Module: "


def _groups(names: pd.Series, prefix: str) -> dict[str, list[int]]:
    """stem ('BertLayer_', 'blocks.') -> event rows whose name is stem + an index."""
    out: dict[str, list[int]] = {}
    for i, s in enumerate(names.to_numpy()):
        if prefix and not s.startswith(prefix):
            continue
        m = _INDEXED.match(s[len(prefix) :])
        if m:
            out.setdefault(m.group("stem"), []).append(i)
    return out


def _nested(ev: pd.DataFrame, rows: list[int]) -> bool:
    """Does any instance lie inside another one on the same thread?"""
    sub = ev.iloc[rows]
    keys = [c for c in ("rank", "tid") if c in sub]
    for _, g in sub.groupby(keys) if keys else [(None, sub)]:
        g = g.sort_values("ts_us")
        ends = (g["ts_us"] + g["dur_us"]).to_numpy(np.float64)
        starts = g["ts_us"].to_numpy(np.float64)
        if len(g) > 1 and (starts[1:] < np.maximum.accumulate(ends)[:-1] - 1e-6).any():
            return True
    return False


def find_block_stack(ev: pd.DataFrame) -> tuple[str | None, dict]:
    """(module regex for the `layers` edit, or None; a report of what was found and the candidates)."""
    names = ev["name"].astype(str)
    dur = ev["dur_us"].to_numpy(np.float64)
    cands: list[dict] = []
    for source, prefix, mask in (
        ("nn.Module", _MODULE, names.str.startswith(_MODULE).to_numpy()),
        ("user annotation", "", (ev["cat"].astype(str) == "user_annotation").to_numpy() if "cat" in ev else None),
    ):
        if mask is None or not mask.any():
            continue
        rows_all = np.flatnonzero(mask)
        groups = _groups(names.iloc[rows_all].reset_index(drop=True), prefix)
        for stem, local in groups.items():
            rows = [int(rows_all[j]) for j in local]
            instances = {names.iat[r] for r in rows}
            cands.append(
                {
                    "source": source,
                    "stem": stem,
                    "instances": len(instances),
                    "time_us": float(dur[rows].sum()),
                    "nested": _nested(ev, rows),
                    "regex": re.escape(stem) + r"\d+",
                }
            )
        ok = [c for c in cands if c["source"] == source and c["instances"] >= 2 and not c["nested"]]
        if ok:
            best = max(ok, key=lambda c: c["time_us"])
            return best["regex"], {"source": source, "module": best["regex"], "instances": best["instances"]}
    top = sorted(cands, key=lambda c: -c["time_us"])[:8]
    return None, {"candidates": [f"{c['stem']}N ({c['instances']} instance(s))" for c in top]}


__all__ = ["find_block_stack"]
