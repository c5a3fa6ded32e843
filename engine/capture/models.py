"""Four sample training workloads standing for the paper's workload classes.

Why these shapes: the replay engine must reproduce a captured step time within a few percent,
so each step is dominated by a moderate number of large operators (GEMMs, convolutions,
embedding-bag lookups) rather than many tiny ones whose cost is Python/dispatcher overhead.
Sizes target roughly 30-80 ms per training step on one intra-op thread of a shared 2-core
CPU (the CLI captures with `--threads 1`: with 2 OpenMP threads on 2 busy cores a step can
take 10x longer whenever another process runs, which ruins the timing the replay must match).

Every step is forward + backward + optimizer step, wrapped in the conventional
"## forward ##" / "## backward ##" / "## optimizer ##" record_function labels (as in PARAM's
benchmarks) so the phase of every operator is recoverable from the trace.

    step_fn, config = build("mlp", "cpu")
    step_fn()            # one training step; step_fn.model is the nn.Module
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

SEED = 0
C = TypeVar("C", bound="_SampleConfig")


class SampleStep:
    """One training step of a sample model (callable). Holds model, optimizer and fixed inputs."""

    def __init__(
        self,
        name: str,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        inputs: tuple,
        target: torch.Tensor,
        loss_fn: Callable,
    ):
        self.name = name
        self.model = model
        self.optimizer = optimizer
        self.inputs = inputs
        self.target = target
        self.loss_fn = loss_fn

    def __call__(self) -> torch.Tensor:
        rf = torch.profiler.record_function
        with rf("## forward ##"):
            out = self.model(*self.inputs)
            loss = self.loss_fn(out, self.target)
        with rf("## backward ##"):
            loss.backward()
        with rf("## optimizer ##"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


@dataclass(kw_only=True, slots=True)
class _SampleConfig:
    """Base of the sample configs: every `int` field (sizes, counts) must be a positive int, every
    `float` (learning rate, bucket size) a positive number, and every `tuple[int, ...]` field
    (layer widths, table sizes) a non-empty tuple of positive ints.

    A zero or negative size would build a model whose captured step is empty or fails deep in
    torch; checking the annotation keeps a new field from being left out of the check, and a value
    typed on the command line (`mystique capture mlp --set batch=0`) is refused by the same rule.
    """

    def __post_init__(self) -> None:
        for f in fields(self):
            rule = _FIELD_RULES.get(str(f.type))
            v = getattr(self, f.name)
            if rule is not None and not rule[0](v):
                raise ValueError(f"{type(self).__name__}.{f.name} must be {rule[1]}, got {v!r}")


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


# annotation (as written: this module postpones annotations) -> (test, what it asks for)
_FIELD_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (_positive_int, "a positive int"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "a positive number"),
    "tuple[int, ...]": (
        lambda v: isinstance(v, tuple) and bool(v) and all(map(_positive_int, v)),
        "a non-empty list of positive ints",
    ),
}


# --------------------------------------------------------------------------------------------
# MLP
@dataclass(kw_only=True, slots=True)
class MLPConfig(_SampleConfig):
    """`widths`: the input features, then each hidden layer's width (layer sizes as DLRM's MLPs)."""

    batch: int = 256
    widths: tuple[int, ...] = (512, 1024, 1024, 1024)
    classes: int = 512
    lr: float = 0.01


class MLP(nn.Module):
    def __init__(self, c: MLPConfig):
        super().__init__()
        w = c.widths
        self.body = nn.Sequential(*[m for i in range(len(w) - 1) for m in (nn.Linear(w[i], w[i + 1]), nn.ReLU())])
        self.head = nn.Linear(w[-1], c.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def _build_mlp(device: torch.device, c: MLPConfig) -> SampleStep:
    g = _gen()
    model = MLP(c)
    return _classifier_step("mlp", device, model, torch.randn(c.batch, c.widths[0], generator=g), c, g)


# --------------------------------------------------------------------------------------------
# CNN (ResNet-style basic blocks)
@dataclass(kw_only=True, slots=True)
class CNNConfig(_SampleConfig):
    """`stage_widths`: the channels of each stage (the stem has the first stage's), as torchvision's ResNet."""

    batch: int = 10
    image: int = 32
    stage_widths: tuple[int, ...] = (32, 64, 128)
    blocks_per_stage: int = 1
    classes: int = 10
    lr: float = 0.05


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))


class ResNetSmall(nn.Module):
    def __init__(self, c: CNNConfig):
        super().__init__()
        cin = c.stage_widths[0]
        self.stem = nn.Sequential(nn.Conv2d(3, cin, 3, 1, 1, bias=False), nn.BatchNorm2d(cin), nn.ReLU())
        blocks = []
        for s, cout in enumerate(c.stage_widths):
            for b in range(c.blocks_per_stage):
                blocks.append(BasicBlock(cin, cout, 2 if (b == 0 and s > 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, c.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _build_cnn(device: torch.device, c: CNNConfig) -> SampleStep:
    g = _gen()
    model = ResNetSmall(c)
    return _classifier_step("cnn", device, model, torch.randn(c.batch, 3, c.image, c.image, generator=g), c, g)


def _classifier_step(
    name: str, device: torch.device, model: nn.Module, x: torch.Tensor, c: MLPConfig | CNNConfig, g: torch.Generator
) -> SampleStep:
    """The MLP and CNN samples' shared tail: class labels, SGD with momentum, cross-entropy.

    The model is built (global RNG) before `x` and the labels are drawn from `g`, in that
    order, so the samples' weights and inputs stay what the committed sample traces were
    captured with.
    """
    y = torch.randint(0, c.classes, (c.batch,), generator=g)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=c.lr, momentum=0.9, foreach=True)
    return SampleStep(name, model, opt, (x.to(device),), y.to(device), F.cross_entropy)


# --------------------------------------------------------------------------------------------
# Transformer (GPT-style decoder)
@dataclass(kw_only=True, slots=True)
class TransformerConfig(_SampleConfig):
    batch: int = 3
    seq: int = 128
    vocab: int = 2048
    d_model: int = 256
    heads: int = 4
    layers: int = 2
    mlp_ratio: int = 4
    lr: float = 3e-4

    def __post_init__(self) -> None:
        _SampleConfig.__post_init__(self)
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")


class CausalSelfAttention(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.heads = c.heads
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class DecoderBlock(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.d_model)
        self.attn = CausalSelfAttention(c)
        self.ln2 = nn.LayerNorm(c.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(c.d_model, c.mlp_ratio * c.d_model), nn.GELU(), nn.Linear(c.mlp_ratio * c.d_model, c.d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    positions: torch.Tensor  # a registered buffer

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.tok = nn.Embedding(c.vocab, c.d_model)
        self.pos = nn.Embedding(c.seq, c.d_model)
        self.blocks = nn.Sequential(*[DecoderBlock(c) for _ in range(c.layers)])
        self.ln_f = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab, bias=False)
        self.register_buffer("positions", torch.arange(c.seq), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(self.positions[: idx.shape[1]])
        logits = self.lm_head(self.ln_f(self.blocks(x)))
        return logits.flatten(0, 1)


def _build_transformer(device: torch.device, c: TransformerConfig) -> SampleStep:
    g = _gen()
    model = GPT(c).to(device)
    idx = torch.randint(0, c.vocab, (c.batch, c.seq), generator=g).to(device)
    y = torch.randint(0, c.vocab, (c.batch * c.seq,), generator=g).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=c.lr, foreach=True)
    return SampleStep("transformer", model, opt, (idx,), y, F.cross_entropy)


# --------------------------------------------------------------------------------------------
# DLRM-style recommendation model
@dataclass(kw_only=True, slots=True)
class DLRMConfig(_SampleConfig):
    batch: int = 1024
    dense_features: int = 13
    table_rows: tuple[int, ...] = (100_000, 40_000, 10_000, 2_000)
    embedding_dim: int = 64
    pooling: int = 20
    bottom: tuple[int, ...] = (512, 256)
    top: tuple[int, ...] = (512, 256)
    lr: float = 0.05


def mlp_stack(dims: list[int], last_act: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    tri: torch.Tensor  # a registered buffer

    def __init__(self, c: DLRMConfig):
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, c.embedding_dim, mode="sum") for n in c.table_rows)
        self.bottom = mlp_stack([c.dense_features, *c.bottom, c.embedding_dim], last_act=True)
        n = len(c.table_rows) + 1
        self.register_buffer("tri", torch.tril_indices(n, n, offset=-1), persistent=False)
        self.top = mlp_stack([c.embedding_dim + n * (n - 1) // 2, *c.top, 1], last_act=False)

    def forward(
        self, dense: torch.Tensor, indices: tuple[torch.Tensor, ...], offsets: tuple[torch.Tensor, ...]
    ) -> torch.Tensor:
        x = self.bottom(dense)
        feats = torch.stack([x] + [t(i, o) for t, i, o in zip(self.tables, indices, offsets)], dim=1)
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.tri[0], self.tri[1]]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


def _build_dlrm(device: torch.device, c: DLRMConfig) -> SampleStep:
    g = _gen()
    model = DLRM(c).to(device)
    dense = torch.randn(c.batch, c.dense_features, generator=g).to(device)
    indices, offsets = [], []
    for rows in c.table_rows:
        # variable pooling per sample (1 .. 2*pooling-1), as in real sparse features
        lengths = torch.randint(1, 2 * c.pooling, (c.batch,), generator=g)
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]).to(device))
        indices.append(torch.randint(0, rows, (int(lengths.sum()),), generator=g).to(device))
    y = torch.randint(0, 2, (c.batch,), generator=g).float().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=c.lr, foreach=True)
    return SampleStep(
        "dlrm", model, opt, (dense, tuple(indices), tuple(offsets)), y, F.binary_cross_entropy_with_logits
    )


# --------------------------------------------------------------------------------------------
SAMPLE_MODELS: dict[str, tuple[type[_SampleConfig], Callable]] = {
    "mlp": (MLPConfig, _build_mlp),
    "cnn": (CNNConfig, _build_cnn),
    "transformer": (TransformerConfig, _build_transformer),
    "dlrm": (DLRMConfig, _build_dlrm),
}


def build(name: str, device: str | torch.device = "cpu", **overrides: Any) -> tuple[SampleStep, dict]:
    """(step_fn, config_dict) for sample model `name`; `overrides` replace config fields."""
    if name not in SAMPLE_MODELS:
        from engine.errors import TraceError

        raise TraceError(f"unknown sample model {name!r}; choose one of {sorted(SAMPLE_MODELS)}")
    cfg_cls, builder = SAMPLE_MODELS[name]
    cfg = make_config(name, cfg_cls, overrides)
    torch.manual_seed(SEED)
    step = builder(torch.device(device), cfg)
    config = {"model": name, **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}}
    return step, config


def check_fields(name: str, overrides: dict[str, Any], known: list[str]) -> None:
    """A `TraceError` naming the first override that sample `name` has no field for, and its fields."""
    from engine.errors import TraceError

    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise TraceError(f"sample {name} has no config field {unknown[0]!r}; its fields: {', '.join(known)}")


def make_config(name: str, cfg_cls: type[C], overrides: dict[str, Any]) -> C:
    """`cfg_cls` with `overrides` replacing its defaults (lists, as JSON gives them, become tuples).
    A field the config lacks or a value its rules refuse is a `TraceError` naming the sample."""
    from engine.errors import TraceError

    check_fields(name, overrides, [f.name for f in fields(cfg_cls)])
    try:
        return cfg_cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()})
    except (TypeError, ValueError) as exc:
        raise TraceError(f"sample {name}: {exc}") from None


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)
