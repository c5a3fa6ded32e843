"""Task selectors for edits: named categories through a registry, plus a name regex."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from engine.simulate.collectives import comm_mask
from engine.simulate.taskgraph import TaskGraph
from engine.trace import columns as _cols
from engine.trace.vocab import is_comm
from engine.user_regex import compile_user

GEMM_RX = re.compile(
    r"gemm|cutlass|xmma|cublas|matmul|aten::(addmm|mm|bmm|baddbmm|linear|matmul|conv|convolution|_convolution|cudnn_conv|mkldnn_conv)",
    re.IGNORECASE,
)


def _names_match(g: TaskGraph, rx: re.Pattern) -> np.ndarray:
    return _cols.where(g.tasks["name"], lambda s: bool(rx.search(s)))


def _gpu(g: TaskGraph) -> np.ndarray:
    return g.tasks["gpu"].to_numpy()


SELECTORS: dict[str, Callable[[TaskGraph], np.ndarray]] = {
    "gpu": _gpu,
    "kernel": lambda g: _cols.isin(g.tasks["cat"], ("kernel",)),
    "memcpy": lambda g: _cols.isin(g.tasks["cat"], ("gpu_memcpy", "gpu_memset")),
    "gemm": lambda g: _names_match(g, GEMM_RX) & ~comm_mask(g),
    "communication": lambda g: comm_mask(g) | (~_gpu(g) & g.text("name").where(is_comm)),
    # everything but communication: GPU work on GPU ranks, host work on CPU-only ranks
    "compute": lambda g: _work(g) & ~SELECTORS["communication"](g),
    "cpu": lambda g: ~_gpu(g),
    "all": lambda g: np.ones(g.n_tasks, bool),
}


def _work(g: TaskGraph) -> np.ndarray:
    """GPU tasks, and host tasks of ranks without GPU work."""
    gpu = _gpu(g)
    rank = g.tasks["rank"].to_numpy()
    return gpu | ~np.isin(rank, np.unique(rank[gpu]))


def select(g: TaskGraph, category: str | None, name: str | None, rank: int | None = None) -> np.ndarray:
    mask = np.ones(g.n_tasks, bool) if rank is None else g.tasks["rank"].to_numpy() == rank
    if category is not None:
        mask &= SELECTORS[category](g)
    if name is not None:
        mask &= compile_user(name, "name").mask(g.tasks["name"])
    return mask
