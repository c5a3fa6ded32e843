"""Training-phase and module labels for every ET node.

The loader calls `annotate_phases` on every load, so it is vectorized (pointer doubling over
parent links, see `_tree`) and imports neither networkx nor torch.

Phase rules (the strongest marker on the path from the root to the node, self included, wins;
strength order backward > optimizer > forward):

* backward markers: nodes named ``autograd::engine::evaluate_function: ...``, nodes recorded
  with RecordScope ``scope == 1`` (BACKWARD_FUNCTION, e.g. ``AddmmBackward0``), and labels
  (annotations) whose name contains the word "backward" (``## backward ##``). Every op on an
  *autograd thread* is backward too: a (rank, tid) that runs backward markers and has neither
  a ProfilerStep nor a forward label (the autograd engine's device threads; DDP reducer hooks
  such as ``torch.distributed.ddp.reducer::copy_bucket_to_grad`` run there outside any
  ``evaluate_function`` node).
  Note: user labels win. param's ResNet labels the loss computation ``## backward ##``, so
  its ``aten::cross_entropy_loss`` is "backward" there.
* optimizer markers: ``Optimizer.step#...`` and ``Optimizer.zero_grad#...`` record_function
  labels, and labels containing the word "optimizer" or "zero_grad". zero_grad counts as
  optimizer: it is issued through the optimizer API and belongs to the parameter-update step,
  not to the model's forward pass (Mystique groups it the same way).
* forward markers: ``ProfilerStep#N``, labels containing the word "forward" (``## forward ##``,
  ``DistributedDataParallel.forward``, param's ``[...|forward]``), and ``nn.Module: X`` labels.
* no marker on the path: ops (non-labels) are "forward" -- the main thread of a training loop
  captured without ProfilerStep (param_linear) runs the forward pass outside any label -- except
  ops after the rank's last backward/optimizer op (by node id), which are "other" (the work
  after the last iteration: logging, checkpoints). Labels without any marker (e.g.
  ``## process_group:init ##``) and the profiler's own ``[pytorch|profiler|...]`` roots are
  "other".

Module rules: the module of a node is the innermost enclosing label (self included; labels
without children scope nothing and are ignored) that names a module: ``nn.Module: X``, record_function labels such as ``## layer1 ##``,
``DistributedDataParallel.forward``, param's ``[param|...]`` labels. Not modules: profiler roots,
``ProfilerStep#N``, ``Optimizer.*`` labels and pure phase labels (``## forward ##``,
``## backward ##``, ``## optimizer ##``...). Backward ops have no module label around them, so
they inherit the module of the forward op that created their autograd node: the nearest
``scope == 1`` ancestor's ``seq_id`` equals the forward op's ``seq_id`` (the
``evaluate_function`` wrapper takes its ``scope == 1`` child's). "" when none applies.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from engine.trace.columns import Distinct
from engine.trace.model import PHASES
from engine.trace.steps import step_mask
from engine.trace.tree import nearest_marked, parent_positions
from engine.trace.vocab import STEP_PREFIX

# Bump when the rules below change: parse caches that store phase/module must include it in
# their key (or recompute: annotate_phases takes ~5 ms on 14k nodes).
RULES_VERSION = 2

_BACKWARD_FN = "autograd::engine::evaluate_function:"
_WORD = r"(?<![A-Za-z0-9]){}(?![A-Za-z0-9])"
_RE_BACKWARD = re.compile(_WORD.format("backward"), re.IGNORECASE)
_RE_OPTIMIZER = re.compile(_WORD.format("(?:optimizer|zero_grad)"), re.IGNORECASE)
_RE_FORWARD = re.compile(_WORD.format("forward"), re.IGNORECASE)
_PHASE_WORDS = {
    "forward",
    "backward",
    "optimizer",
    "zero_grad",
    "step",
    "optimizer_step",
    "optimizer.step",
    "loss",
    "train_step",
    "iteration",
}
_RE_LABEL = re.compile(r"^(?:## .* ##|\[.*\]|nn\.Module: |" + re.escape(STEP_PREFIX) + r"|Optimizer\.)")


def _is_label(ops: pd.DataFrame, names: Distinct) -> np.ndarray:
    """Annotations: loader category "annotation", or record_function-style names without ':'."""
    label = names.where(lambda s: _RE_LABEL.match(s) is not None)
    if "category" in ops.columns:
        cat = ops["category"]
        if isinstance(cat.dtype, pd.CategoricalDtype):
            cats = list(cat.cat.categories)
            codes = cat.cat.codes.to_numpy()
            label |= (codes == cats.index("annotation")) if "annotation" in cats else False
        else:
            label |= cat.to_numpy(dtype=object) == "annotation"
    if "scope" in ops.columns:
        label |= (ops["scope"].to_numpy() == 7) & names.where(lambda s: ":" not in s)
    return label


def _is_module_label(name: str) -> bool:
    if name.startswith(("[pytorch|profiler|", STEP_PREFIX, "Optimizer.")):
        return False
    core = name.strip("# ").strip().lower()
    return bool(core) and core not in _PHASE_WORDS


def annotate_phases(ops: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(phase, module) Series aligned with `ops.index`; both categorical. Rules: module docstring."""
    n = len(ops)
    if n == 0:
        empty = pd.Series(pd.Categorical([], categories=PHASES), index=ops.index, name="phase")
        return empty, pd.Series(pd.Categorical([]), index=ops.index, name="module")
    names = Distinct(ops["name"])
    parent = parent_positions(ops)
    label = _is_label(ops, names)
    scope = ops["scope"].to_numpy(dtype=np.int64, na_value=-1) if "scope" in ops.columns else np.full(n, -1)
    profiler_root = names.where(lambda s: s.startswith("[pytorch|profiler|"))
    step = step_mask(names)  # ET ops are all host rows

    bw_mark = names.where(lambda s: s.startswith(_BACKWARD_FN)) | (scope == 1)
    bw_mark |= label & names.where(lambda s: _RE_BACKWARD.search(s) is not None)
    opt_mark = names.where(lambda s: s.startswith(("Optimizer.step#", "Optimizer.zero_grad#")))
    opt_mark |= label & names.where(lambda s: _RE_OPTIMIZER.search(s) is not None)
    fw_label = label & names.where(lambda s: _RE_FORWARD.search(s) is not None or s.startswith("nn.Module: "))
    fw_mark = step | fw_label
    bw_mark &= ~profiler_root
    opt_mark &= ~profiler_root
    fw_mark &= ~profiler_root

    in_bw = nearest_marked(parent, bw_mark) >= 0
    in_opt = nearest_marked(parent, opt_mark) >= 0
    in_fw = nearest_marked(parent, fw_mark) >= 0

    # Autograd threads: run backward markers but no ProfilerStep / forward label.
    ranks = ops["rank"].to_numpy(dtype=np.int64, na_value=0) if "rank" in ops.columns else np.zeros(n, np.int64)
    tids = ops["tid"].to_numpy(dtype=np.int64, na_value=-1) if "tid" in ops.columns else np.zeros(n, np.int64)
    tkey = ranks * (1 << 40) + tids
    _, tinv = np.unique(tkey, return_inverse=True)
    bw_t = np.bincount(tinv, weights=bw_mark) > 0
    fw_t = np.bincount(tinv, weights=fw_mark) > 0
    on_ag_thread = (bw_t & ~fw_t)[tinv]

    # Ops after the rank's last backward/optimizer op are "other" when nothing marks them.
    ids = ops["id"].to_numpy(dtype=np.int64)
    bo = in_bw | in_opt
    _, rinv = np.unique(ranks, return_inverse=True)
    last = np.full(rinv.max() + 1, -1, dtype=np.int64)
    np.maximum.at(last, rinv[bo], ids[bo])
    last_bo = last[rinv]
    after_last = (last_bo >= 0) & (ids > last_bo)

    phase_code = np.full(n, 3, dtype=np.int8)  # PHASES index: forward 0, backward 1, optimizer 2, other 3
    unmarked = ~(in_bw | in_opt | in_fw)
    phase_code[unmarked & ~label & ~profiler_root & ~after_last] = 0
    phase_code[in_fw] = 0
    phase_code[in_opt] = 2
    phase_code[in_bw | (on_ag_thread & ~profiler_root)] = 1
    phase_code[profiler_root] = 3
    phase = pd.Series(pd.Categorical.from_codes(phase_code, categories=list(PHASES)), index=ops.index, name="phase")

    module = _modules(ops, names, parent, label, scope, phase_code == 1, ranks)
    return phase, pd.Series(module, index=ops.index, name="module")


def _modules(ops, names: Distinct, parent, label, scope, is_bw, ranks) -> pd.Categorical:
    """Module label per row as a Categorical over the distinct names (codes, no string copies)."""
    has_child = np.zeros(len(parent), dtype=bool)
    has_child[parent[parent >= 0]] = True
    mod_mark = label & has_child & names.where(_is_module_label)  # a childless label scopes nothing
    near = nearest_marked(parent, mod_mark)
    none = len(names.values)  # code for ""
    code = np.where(near >= 0, names.codes[np.maximum(near, 0)], none).astype(np.int64)
    if "seq_id" in ops.columns:
        # Backward ops: module of the forward op sharing the nearest BACKWARD_FUNCTION's seq_id.
        seq = ops["seq_id"].to_numpy(dtype=np.int64, na_value=-1)
        need = is_bw & (code == none)
        fw_rows = (~is_bw) & (seq >= 0) & (code != none)
        if need.any() and fw_rows.any():
            bw_fn = nearest_marked(parent, scope == 1)
            idx = np.flatnonzero(need & (bw_fn >= 0))
            anc = bw_fn[idx]
            fw_keys = ranks[fw_rows] * (1 << 40) + seq[fw_rows]
            keys, first = np.unique(fw_keys, return_index=True)  # first forward op per seq_id
            fw_code = code[fw_rows][first]
            want = ranks[anc] * (1 << 40) + seq[anc]
            pos = np.searchsorted(keys, want)
            ok = (pos < len(keys)) & (seq[anc] >= 0)
            ok[ok] = keys[pos[ok]] == want[ok]
            code[idx[ok]] = fw_code[pos[ok]]
        # the evaluate_function wrapper takes the module of its BACKWARD_FUNCTION child
        kid = np.flatnonzero((scope == 1) & (parent >= 0))
        wrap = parent[kid]
        take = is_bw[wrap] & (code[wrap] == none) & (code[kid] != none)
        code[wrap[take]] = code[kid[take]]
    used, inv = np.unique(code, return_inverse=True)
    cats = [names.values[c] if c < none else "" for c in used]
    if len(set(cats)) != len(cats):  # "" may also be a real name; merge duplicates
        return pd.Categorical(np.asarray(cats, dtype=object)[inv])
    return pd.Categorical.from_codes(inv.astype(np.int32), categories=cats)


__all__ = ["RULES_VERSION", "annotate_phases"]
