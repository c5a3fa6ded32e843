"""Multi-rank sample workloads (CPU, gloo): what production training looks like to the replayer.

Built inside an initialized process group (one process per rank, see engine.capture.distributed):

  ddp       an MLP under DistributedDataParallel: gradients all-reduced in buckets during the
            backward (c10d::allreduce_ on gloo), overlapping the remaining backward compute.
  dlrm_a2a  DLRM with its embedding tables *sharded across ranks* (rank r owns tables r, r+W, ..):
            each rank pools its tables over the global batch, `all_to_all_single` sends every
            rank the pooled rows of its local batch (and the gradients back in the backward),
            the dense MLPs are data-parallel under DDP (all_reduce).
  dlrm_tbe  the same model with each rank's tables in one FBGEMM table-batched embedding
            (`SplitTableBatchedEmbeddingBagsCodegen`, CPU, exact SGD fused into the backward):
            the production DLRM kernel path. Needs the `dlrm` extra (fbgemm-gpu-cpu).

Why these shapes: a step is a few tens of ms on one thread per rank, split between compute and
communication, so a replay that drops or serializes communication is visibly wrong.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine.capture.models import SEED, DLRMConfig, MLPConfig, SampleStep, mlp_stack

DIST_SAMPLES = ("ddp", "dlrm_a2a", "dlrm_tbe")
FBGEMM_PACKAGE = "fbgemm-gpu-cpu==1.8.0"


@dataclass(kw_only=True, slots=True)
class DDPConfig(MLPConfig):
    """The MLP sample's model, smaller, wrapped in DistributedDataParallel."""

    widths: tuple[int, ...] = (256, 512, 512, 512)
    classes: int = 256
    bucket_cap_mb: float = 1.0


@dataclass(kw_only=True, slots=True)
class DistDLRMConfig(DLRMConfig):
    """The DLRM sample's model with a smaller per-rank batch and smaller tables (sharded across ranks)."""

    batch: int = 256  # per rank
    table_rows: tuple[int, ...] = (20_000, 10_000, 5_000, 2_000)


class _Dense(nn.Module):
    tri: torch.Tensor  # a registered buffer
    """Bottom MLP, pairwise-dot interaction, top MLP (the data-parallel half of DLRM)."""

    def __init__(self, c: DistDLRMConfig):
        super().__init__()
        n = len(c.table_rows) + 1
        self.bottom = mlp_stack([c.dense_features, *c.bottom, c.embedding_dim], last_act=True)
        self.register_buffer("tri", torch.tril_indices(n, n, offset=-1), persistent=False)
        self.top = mlp_stack([c.embedding_dim + n * (n - 1) // 2, *c.top, 1], last_act=False)

    def forward(self, dense: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        feats = torch.cat([x.unsqueeze(1), emb], dim=1)
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.tri[0], self.tri[1]]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


class ShardedDLRM(nn.Module):
    """Model-parallel embeddings + all_to_all + data-parallel dense part."""

    def __init__(self, c: DistDLRMConfig, rank: int, world: int, tbe: bool):
        super().__init__()
        self.c, self.rank, self.world = c, rank, world
        self.local = [t for t in range(len(c.table_rows)) if t % world == rank]
        if not self.local:
            raise ValueError(f"rank {rank} owns no table: {len(c.table_rows)} tables over {world} ranks")
        self.tbe = tbe
        if tbe:
            self.emb = _tbe([c.table_rows[t] for t in self.local], c.embedding_dim, c.lr)
        else:
            self.emb = nn.ModuleList(nn.EmbeddingBag(c.table_rows[t], c.embedding_dim, mode="sum") for t in self.local)
        self.dense = nn.parallel.DistributedDataParallel(_Dense(c))

    def pooled(self, indices, offsets) -> torch.Tensor:
        """[world*batch, n_local*dim]: this rank's tables over the global batch."""
        if self.tbe:
            return self.emb(indices, offsets)
        return torch.cat([t(i, o) for t, i, o in zip(self.emb, indices, offsets)], dim=1)

    def forward(self, dense: torch.Tensor, indices, offsets) -> torch.Tensor:
        from torch.distributed.nn.functional import all_to_all_single

        c, w = self.c, self.world
        local = self.pooled(indices, offsets)
        recv = all_to_all_single(torch.empty_like(local), local.contiguous())
        # chunk j of `recv` holds rank j's tables for this rank's batch rows
        n_local = [len([t for t in range(len(c.table_rows)) if t % w == j]) for j in range(w)]
        parts = torch.split(recv.view(w, c.batch, -1), 1, dim=0)
        emb = torch.cat([p.view(c.batch, n, c.embedding_dim) for p, n in zip(parts, n_local)], dim=1)
        return self.dense(dense, emb)


def _tbe(rows: list[int], dim: int, lr: float):
    try:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    except ImportError as exc:
        from engine.errors import TraceError

        raise TraceError(f"sample dlrm_tbe needs FBGEMM: pip install {FBGEMM_PACKAGE} ({exc})") from None
    return SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(n, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for n in rows],
        optimizer=EmbOptimType.EXACT_SGD,
        learning_rate=lr,
    )


def build_dist(name: str, rank: int, world: int, device: str = "cpu") -> tuple[SampleStep, dict[str, Any]]:
    """(step_fn, config) of multi-rank sample `name` for `rank` of `world` (group initialized).

    `device`: where ddp's model and batch live ("cuda" under NCCL: its collectives take device
    tensors only, so a CPU model under an NCCL group fails at its first all-reduce). The DLRM
    samples are CPU-only (their sharded tables and FBGEMM's CPU kernels)."""
    torch.manual_seed(SEED)  # identical replicas of the data-parallel weights on every rank
    g = torch.Generator().manual_seed(SEED + 1000 * (rank + 1))  # each rank its own batch
    c: Any  # one config/model type per sample below
    model: Any
    if name == "ddp":
        c = DDPConfig()
        body = mlp_stack([*c.widths, c.classes], last_act=False).to(device)
        model = nn.parallel.DistributedDataParallel(body, bucket_cap_mb=c.bucket_cap_mb)
        x = torch.randn(c.batch, c.widths[0], generator=g).to(device)
        y = torch.randint(0, c.classes, (c.batch,), generator=g).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=c.lr, momentum=0.9, foreach=True)
        step = SampleStep("ddp", model, opt, (x,), y, F.cross_entropy)
        return step, {"model": name, "world_size": world, **asdict(c)}
    if name in ("dlrm_a2a", "dlrm_tbe"):
        if not str(device).startswith("cpu"):
            from engine.errors import TraceError

            raise TraceError(f"multi-rank sample {name} runs on CPU only, not {device!r}")
        c = DistDLRMConfig()
        tbe = name == "dlrm_tbe"
        model = ShardedDLRM(c, rank, world, tbe)
        gb = world * c.batch  # every rank pools its tables over the global batch
        idx, offs = [], []
        for t in model.local:
            lengths = torch.randint(1, 2 * c.pooling, (gb,), generator=g)
            offs.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
            idx.append(torch.randint(0, c.table_rows[t], (int(lengths.sum()),), generator=g))
        if tbe:
            # TBE input: indices of all local tables concatenated, offsets over (table, sample)
            lens = [torch.diff(torch.cat([o, torch.tensor([len(i)])])) for i, o in zip(idx, offs)]
            indices = torch.cat(idx)
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cat(lens).cumsum(0)])
            sparse: tuple = (indices, offsets)
        else:
            sparse = (tuple(idx), tuple(offs))
        dense = torch.randn(c.batch, c.dense_features, generator=g)
        y = torch.randint(0, 2, (c.batch,), generator=g).float()
        params = [p for p in model.parameters() if p.requires_grad]
        if tbe:  # the TBE updates its tables inside its backward (fused optimizer)
            params = list(model.dense.parameters())
        opt = torch.optim.SGD(params, lr=c.lr, foreach=True)
        step = SampleStep(name, model, opt, (dense, *sparse), y, F.binary_cross_entropy_with_logits)
        cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(c).items()}
        return step, {"model": name, "world_size": world, "local_tables": model.local, **cfg}
    from engine.errors import TraceError

    raise TraceError(f"unknown multi-rank sample {name!r}; choose one of {list(DIST_SAMPLES)}")
