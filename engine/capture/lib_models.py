"""Sample workloads built from real model libraries (random weights, no downloads, CPU).

Why: our own sample modules never exercised what real libraries do (GPT-2's `Conv1D` is an
`addmm`, torchvision's ResNet has BatchNorm in every block, HF models pass batch-1 tensors
around with the hidden size as the largest dim), so transforms that worked on our samples
failed on real models. These builders make small configurations so the traces stay a few
hundred KB compressed:

  gpt2_hf    `transformers.GPT2LMHeadModel` from a `GPT2Config` (2 layers, 256 hidden, seq 256,
             vocab 2000, batch 1: the batch-1 case batch inference must get right; the vocab is
             not 1024 = the MLP width, which TP's shape inference cannot tell apart)
  resnet_tv  `torchvision.models.resnet18(num_classes=10)` on 4 x 3 x 96 x 96 images

The sizes are picked so that the work per op, not the fixed cost per op, dominates a step: a
batch x2 composition must take about twice the replay time, and at seq 64 / hidden 128 (GPT-2)
or 2 x 64 x 64 images (ResNet, whose 11M-parameter weight gradients and SGD update do not
depend on the batch) the per-op overheads held it to 1.4-1.5x (benchmarks/lib_compositions.py).
The trace size depends on the op count only, so bigger shapes cost capture time, not bytes.

torchvision note: PyPI's torchvision 0.28.0 (the release paired with torch 2.13) is a CUDA
build whose C extension needs libc10_cuda.so, so beside the CPU torch wheel its custom ops
(nms, roi_align, ...) cannot load and `import torchvision` fails registering their fake
kernels ("operator torchvision::nms does not exist"). ResNet uses none of those ops: the
builder skips only the fake-kernel registrations of `torchvision::` ops while importing, and the
model code that runs is torchvision's own, unchanged.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from engine.capture.models import SEED, SampleStep, check_fields
from engine.errors import TraceError

LIB_SAMPLES = ("gpt2_hf", "resnet_tv")


def import_torchvision():
    """`import torchvision`, tolerating a C extension that cannot load (module docstring)."""
    import torch.library as L

    orig = L.register_fake

    def tolerant(op, *args, **kwargs):
        if isinstance(op, str) and op.startswith("torchvision::") and not args and "func" not in kwargs:
            try:
                torch._C._dispatch_find_schema_or_throw(op.replace("::", "::", 1), "")
            except RuntimeError:
                return lambda fn: fn  # the op's kernel library did not load: nothing to register
        return orig(op, *args, **kwargs)

    L.register_fake = tolerant
    try:  # importlib: an optional dependency, absent on most machines (and without type stubs)
        torchvision = importlib.import_module("torchvision")
    except ImportError as exc:
        raise TraceError(f"sample resnet_tv needs torchvision (pip install 'mystique-studio[models]'): {exc}") from None
    finally:
        L.register_fake = orig
    return torchvision


def _lm_loss(out, target):
    logits = out.logits if hasattr(out, "logits") else out
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def build_gpt2(
    device: torch.device,
    *,
    layers: int = 2,
    hidden: int = 256,
    heads: int = 4,
    seq: int = 256,
    vocab: int = 2000,
    batch: int = 1,
) -> tuple[SampleStep, dict]:
    try:  # transformers imports torchvision when it is installed: import it tolerantly first
        import_torchvision()
    except TraceError:
        pass
    try:
        transformers = importlib.import_module("transformers")
        GPT2Config, GPT2LMHeadModel = transformers.GPT2Config, transformers.GPT2LMHeadModel
    except ImportError as exc:
        raise TraceError(f"sample gpt2_hf needs transformers (pip install 'mystique-studio[models]'): {exc}") from None
    no_dropout = dict.fromkeys(("attn_pdrop", "embd_pdrop", "resid_pdrop"), 0.0)  # a deterministic step
    cfg = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=seq, vocab_size=vocab, **no_dropout)
    cfg._attn_implementation = "eager"  # the plain matmul/softmax path: portable ops in the ET
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(cfg).to(device).train()
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, vocab, (batch, seq), generator=g).to(device)
    target = torch.randint(0, vocab, (batch, seq), generator=g).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    class _Wrap(torch.nn.Module):  # logits only: the loss is computed by the step
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(input_ids=x, use_cache=False, return_dict=True).logits

    step = SampleStep("gpt2_hf", _Wrap(model), opt, (ids,), target, _lm_loss)

    return step, {
        "model": "gpt2_hf",
        "library": f"transformers {transformers.__version__}",
        "n_layer": layers,
        "n_embd": hidden,
        "n_head": heads,
        "seq": seq,
        "vocab_size": vocab,
        "batch": batch,
    }


def build_resnet(
    device: torch.device, *, batch: int = 4, image: int = 96, classes: int = 10
) -> tuple[SampleStep, dict]:
    tv = import_torchvision()
    torch.manual_seed(SEED)
    model = tv.models.resnet18(num_classes=classes).to(device).train()
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(batch, 3, image, image, generator=g).to(device)
    target = torch.randint(0, classes, (batch,), generator=g).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    step = SampleStep("resnet_tv", model, opt, (x,), target, F.cross_entropy)
    return step, {
        "model": "resnet_tv",
        "library": f"torchvision {tv.__version__}",
        "arch": "resnet18",
        "batch": batch,
        "image": image,
        "classes": classes,
    }


def build(name: str, device: str | torch.device = "cpu", **overrides: Any) -> tuple[SampleStep, dict]:
    """(step_fn, config) of library sample `name`; `overrides` replace its keyword sizes (each a
    positive int), checked here so that a bad one is a `TraceError`, not a failure inside the library."""
    builder = _BUILDERS.get(name)
    if builder is None:
        raise TraceError(f"unknown library sample {name!r}; choose one of {', '.join(LIB_SAMPLES)}")
    check_fields(
        name, overrides, [p.name for p in inspect.signature(builder).parameters.values() if p.kind is p.KEYWORD_ONLY]
    )
    for key, v in overrides.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise TraceError(f"sample {name}: {key} must be a positive int, got {v!r}")
    return builder(torch.device(device), **overrides)


_BUILDERS: dict[str, Callable[..., tuple[SampleStep, dict]]] = {"gpt2_hf": build_gpt2, "resnet_tv": build_resnet}


__all__ = ["LIB_SAMPLES", "build", "import_torchvision"]
