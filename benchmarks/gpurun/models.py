"""What the GPU run builds beyond the bundled samples: its sizes, a model with every GEMM done
twice (the ground truth of "GEMMs 2x slower"), and a step overlapping a side stream with compute.

Sizes (`SIZES`): on CUDA each sample step takes roughly 10-40 ms on an H100 (fp32), large enough
that the GPU, not the Python launch loop, sets the step time; `--quick` (CPU) sizes finish a
capture in about a second on one thread. The batch of each is a number no other dimension of the
model has (nor, for the transformer, batch x seq): the simulator's batch edit scales the
dimensions equal to it, so a batch equal to a width would scale that width too.
"""

from __future__ import annotations

from typing import Any

import torch

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "full": {
        "mlp": {"batch": 1536, "widths": [2048, 4096, 4096, 4096], "classes": 1024},
        "transformer": {"batch": 6, "seq": 512, "vocab": 8192, "d_model": 1024, "heads": 16, "layers": 4},
        "resnet_tv": {"batch": 64, "image": 224},
    },
    "quick": {
        "mlp": {"batch": 24, "widths": [64, 128, 128], "classes": 32},
        "transformer": {"batch": 3, "seq": 32, "vocab": 320, "d_model": 64, "heads": 4, "layers": 2},
        "resnet_tv": {"batch": 2, "image": 32},
    },
}
# GPU-bound against host-bound: one MLP, a small and a large batch (same widths)
BOUND = {
    "full": {"widths": [1024, 1024, 1024, 1024], "classes": 1024, "small": 16, "large": 16384},
    "quick": {"widths": [64, 64, 64], "classes": 16, "small": 4, "large": 4096},
}
# the streams sample: GEMM chains of `n` x `n` on the main and on a side stream
STREAMS = {"full": {"n": 2048, "chain": 16}, "quick": {"n": 64, "chain": 4}}


class _TwiceLinear(torch.autograd.Function):
    """nn.Linear's three GEMMs (forward addmm, grad-input mm, grad-weight mm), each run twice."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        torch.addmm(b, x, w.t())  # the repeat: the same GEMM, its result dropped
        return torch.addmm(b, x, w.t())

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g.mm(w)
        gx = g.mm(w)
        g.t().mm(x)
        gw = g.t().mm(x)
        return gx, gw, g.sum(0)


def repeat_gemms(step: Any) -> Any:
    """`step` (a sample step) with every nn.Linear doing each of its GEMMs twice: same weights,
    optimizer and outputs; twice the matrix work."""
    for mod in step.model.modules():
        if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
            mod.forward = lambda x, m=mod: _TwiceLinear.apply(x, m.weight, m.bias)
    return step


class StreamsStep:
    """A GEMM chain on the current stream while another runs on a side stream; the main stream
    waits for the side one at the end (the recorded cudaStreamWaitEvent the replay must keep)."""

    def __init__(self, device: str, n: int, chain: int):
        g = torch.Generator().manual_seed(0)
        scale = n**-0.5
        self.a, self.b, self.c, self.d = ((torch.randn(n, n, generator=g) * scale).to(device) for _ in range(4))
        self.chain = chain
        self.side = torch.cuda.Stream() if str(device).startswith("cuda") else None
        self.model = None

    def __call__(self) -> torch.Tensor:
        main = torch.cuda.current_stream() if self.side is not None else None
        if self.side is not None:
            self.side.wait_stream(main)
            with torch.cuda.stream(self.side):
                y = self.c
                for _ in range(self.chain):
                    y = torch.mm(y, self.d)
        x = self.a
        for _ in range(self.chain):
            x = torch.mm(x, self.b)
        if self.side is None:
            return x
        main.wait_stream(self.side)
        return x + y
