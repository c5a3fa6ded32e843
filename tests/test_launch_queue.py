"""A GPU-bound step whose only host-side sign is a blocking `cudaLaunchKernel` (issue 30).

Users' traces have what the shared ones lack: a step where the GPU is busy almost all along and
the host's launches block for a free slot in the launch queue (ResNet-50 on a V100: launches up
to 2 ms). The truth here is the queue's physics (`engine.testing.launch_queue`, plain event
arithmetic sharing no code with the simulator) played forward on the machine with its kernels or
its host sped up. Was (main before this change): a launch counted as waiting only when it lasted
10x its name's median, and on a GPU-bound step most launches wait, so the median *is* the wait:
GPU 2x predicted +36 % to +92 % over the truth on four of these five machines, and a slower host
slowed the GPU-bound step as much.
"""

from __future__ import annotations

import gzip
import json

import pytest

from engine.testing.launch_queue import QueueMachine, queue_trace

MACHINES = {
    # every launch waits ~100 µs once the 64-deep queue is full (the issue's V100 shape)
    "gpu_bound": QueueMachine(),
    # barely GPU-bound: each launch waits a few µs, under any timer-noise threshold
    "barely_gpu_bound": QueueMachine(kernel_us=40.0),
    # a 16-deep queue, 95 % of the launches wait: their median is the wait itself
    "shallow_queue": QueueMachine(kernel_us=200.0, depth=16),
    # the host wakes 30 µs after the slot frees (a polling driver)
    "slow_wake": QueueMachine(kernel_us=60.0, depth=8, wake_us=30.0),
    # GPU-bound, but the queue (1024) never fills: the host ends at the synchronize
    "deep_queue": QueueMachine(kernel_us=30.0, depth=1024, ops=1200),
    # the same on ROCm: hipLaunchKernel, hipDeviceSynchronize
    "gpu_bound_hip": QueueMachine(runtime="hip"),
    # two streams run concurrently, the queue counts both: slots free out of launch order
    "two_streams": QueueMachine(kernel_us=240.0, streams=2),
    # host-bound: the GPU idles between short kernels
    "host_bound": QueueMachine(kernel_us=10.0),
}
WHATIFS = {
    "gpu_2x": ({"category": "gpu", "factor": 2}, {"gpu": 2.0}),
    "gpu_half": ({"category": "gpu", "factor": 0.5}, {"gpu": 0.5}),
    "host_2x": ({"category": "cpu", "factor": 2}, {"host": 2.0}),
    "host_half": ({"category": "cpu", "factor": 0.5}, {"host": 0.5}),
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """`traces(name)`: (loaded trace, its physics truth, the unchanged simulation), once each."""
    from engine.simulate import simulate
    from engine.trace import load

    out = tmp_path_factory.mktemp("queue")
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            doc, truth = queue_trace(MACHINES[name])
            p = out / f"{name}_kineto.json.gz"
            with gzip.open(p, "wt") as fh:
                json.dump(doc, fh)
            tr = load(p)
            cache[name] = (tr, truth, simulate(tr))
        return cache[name]

    return get


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.slow
def test_the_unchanged_trace_reproduces(name, traces):
    _, truth, base = traces(name)
    assert base.predicted_iteration_ms == pytest.approx(truth.mean_step_ms, rel=0.005)


@pytest.mark.parametrize("name", [n for n in MACHINES if n != "host_bound"])
def test_the_path_of_a_gpu_bound_step_runs_through_its_kernels(name, traces):
    """The GPU busy >= 95 % of the step (the physics' count): the path's compute is >= 90 %."""
    _, truth, base = traces(name)
    busy = sum(truth.busy_us) / sum(truth.step_us)
    assert busy >= 0.95, busy
    kinds = base.critical_path.to_json()["by_kind"]
    assert kinds["compute"] >= 0.9 * base.predicted_iteration_ms, kinds


@pytest.mark.parametrize("whatif", WHATIFS)
@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.slow
def test_a_faster_or_slower_gpu_or_host_lands_on_the_physics(name, whatif, traces):
    """Within 2 % of the same machine played forward with that speed-up. One exception, with
    its reason: a host-bound trace never shows the device's gap between back-to-back kernels
    (the simulator assumes 3 µs, the physics has 1.5), so a host 2x that makes that step
    GPU-bound in places lands within 5 %."""
    from engine.simulate import simulate

    tr, _, _ = traces(name)
    edit, faster = WHATIFS[whatif]
    _, truth = queue_trace(MACHINES[name].faster(**faster))
    got = simulate(tr, {"version": 1, "edits": [{"kind": "speedup", **edit}]}).predicted_iteration_ms
    tol = 0.05 if (name, whatif) == ("host_bound", "host_2x") else 0.02
    print(f"{name} {whatif}: predicted {got:.3f} ms, physics {truth.mean_step_ms:.3f} ms")
    assert got == pytest.approx(truth.mean_step_ms, rel=tol)
