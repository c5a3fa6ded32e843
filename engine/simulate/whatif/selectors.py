"""Task selectors for edits: named categories through a registry, plus a name regex.

GPU tasks are classified by the one kernel classifier (`engine.trace.kernels`, every vendor);
host tasks match by operator name (`HOST_GEMM_RX`): on a CPU-only rank the op is the work."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from engine.simulate.collectives import comm_mask
from engine.simulate.taskgraph import TaskGraph
from engine.trace import columns as _cols
from engine.trace.kernels import MEMORY_BOUND, KernelClass, class_mask
from engine.trace.vocab import is_comm
from engine.user_regex import compile_user

HOST_GEMM_RX = re.compile(
    r"^aten::(addmm|mm|bmm|baddbmm|linear|matmul|_addmm_activation)$",
    re.IGNORECASE,
)
HOST_CONV_RX = re.compile(
    r"^aten::(conv\w*|_convolution\w*|cudnn_conv\w*|mkldnn_conv\w*|miopen_conv\w*)$", re.IGNORECASE
)
HOST_ATTENTION_RX = re.compile(
    r"^aten::(_?scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*)$", re.IGNORECASE
)


def _names_match(g: TaskGraph, rx: re.Pattern) -> np.ndarray:
    return _cols.where(g.tasks["name"], lambda s: bool(rx.search(s)))


def _gpu(g: TaskGraph) -> np.ndarray:
    return g.tasks["gpu"].to_numpy()


def _kernels(*classes: KernelClass) -> Callable[[TaskGraph], np.ndarray]:
    return lambda g: _gpu(g) & class_mask(g.tasks, classes)


def _cpu_rank_ops(rx: re.Pattern) -> Callable[[TaskGraph], np.ndarray]:
    """Host ops matching `rx` on ranks without GPU work (there the op itself is the work)."""
    return lambda g: (
        ~_gpu(g)
        & _names_match(g, rx)
        & ~np.isin(g.tasks["rank"].to_numpy(), np.unique(g.tasks["rank"].to_numpy()[_gpu(g)]))
    )


SELECTORS: dict[str, Callable[[TaskGraph], np.ndarray]] = {
    "gpu": _gpu,
    "kernel": lambda g: _cols.isin(g.tasks["cat"], ("kernel",)),
    "memcpy": lambda g: _cols.isin(g.tasks["cat"], ("gpu_memcpy", "gpu_memset")),
    "gemm": lambda g: _kernels(KernelClass.GEMM)(g) | _cpu_rank_ops(HOST_GEMM_RX)(g),
    "conv": lambda g: _kernels(KernelClass.CONV)(g) | _cpu_rank_ops(HOST_CONV_RX)(g),
    "attention": lambda g: _kernels(KernelClass.ATTENTION)(g) | _cpu_rank_ops(HOST_ATTENTION_RX)(g),
    "memory_bound": _kernels(*MEMORY_BOUND),
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
