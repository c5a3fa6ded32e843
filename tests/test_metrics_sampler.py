"""MetricsSampler: real samples of this process while it burns CPU, JSON round trip."""

from __future__ import annotations

import math
import time

import orjson
import pytest

from engine.metrics import CPU_COLUMNS, GPU_COLUMNS, MetricsSampler


def _burn(seconds: float) -> int:
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += sum(i * i for i in range(200))
    return n


@pytest.mark.alone  # CPU utilisation of this process: another test on the other core skews it
def test_samples_while_busy_are_plausible():
    # Busy until 12 ticks were taken (the machine is shared, so ticks may come late), at most 10 s.
    with MetricsSampler(interval_s=0.01) as m:
        deadline = time.perf_counter() + 10.0
        while len(m.samples) < 12 and time.perf_counter() < deadline:
            _burn(0.05)
    df = m.samples
    assert list(df.columns) == ["t_s", *CPU_COLUMNS]  # no GPU columns on a CPU device
    assert len(df) >= 12, len(df)
    assert df["t_s"].is_monotonic_increasing
    assert 0.1 < df["t_s"].iloc[-1] < 10.5
    # one busy Python thread: well above idle on average, never absurd
    assert df["cpu_util_pct"].mean() > 30, df["cpu_util_pct"].describe()
    assert df["cpu_util_pct"].max() <= 100 * 64
    assert df["sys_cpu_util_pct"].between(0, 100).all()
    assert (df["rss_mb"] > 10).all()
    s = m.summary()
    assert set(s) == set(CPU_COLUMNS)
    assert s["rss_mb"]["max"] >= s["rss_mb"]["mean"] > 10


def test_json_round_trip_keeps_samples():
    with MetricsSampler(interval_s=0.01) as m:
        _burn(0.1)
    text = m.to_json()
    obj = orjson.loads(text)
    assert obj["interval_s"] == 0.01 and set(obj["samples"]) == {"t_s", *CPU_COLUMNS}
    back = MetricsSampler.from_json(text)
    assert len(back.samples) == len(m.samples)
    assert math.isclose(back.samples["rss_mb"].sum(), m.samples["rss_mb"].sum(), rel_tol=1e-4)
    assert back.summary()["cpu_util_pct"]["max"] == pytest.approx(m.summary()["cpu_util_pct"]["max"], abs=1e-3)


def test_cuda_device_without_nvml_gpu_keeps_cpu_metrics():
    """On a machine without a usable GPU, asking for cuda must not fail: gpu_* are dropped."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present; see the gpu-marked test")
    with MetricsSampler(interval_s=0.01, device="cuda:0") as m:
        _burn(0.05)
    assert m.gpu_error  # the reason is recorded, not swallowed
    assert not set(GPU_COLUMNS) & set(m.samples.columns)


@pytest.mark.gpu
def test_gpu_columns_on_cuda():
    import torch

    x = torch.randn(4096, 4096, device="cuda")
    with MetricsSampler(interval_s=0.01, device="cuda:0") as m:
        for _ in range(50):
            x = x @ x
            x = x / x.norm()
        torch.cuda.synchronize()
    df = m.samples
    assert set(GPU_COLUMNS) <= set(df.columns), m.gpu_error
    assert (df["gpu_mem_mb"] > 0).all() and df["gpu_clock_mhz"].max() > 100
    assert df["gpu_sm_util_pct"].max() > 0


def test_bad_interval_rejected():
    with pytest.raises(ValueError):
        MetricsSampler(interval_s=0)


def test_background_load_is_machine_busy_minus_own_process():
    import pandas as pd

    from engine.metrics import background_load_cores

    # 2 cores: machine 100% busy while this process used one full core -> 1 other core busy
    df = pd.DataFrame(
        {
            "t_s": [0.1, 0.2, 0.3],
            "cpu_util_pct": [100.0, 100.0, 100.0],
            "sys_cpu_util_pct": [100.0, 100.0, 50.0],
            "rss_mb": [1.0] * 3,
        }
    )
    assert background_load_cores(df, cpu_count=2) == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    # never negative (sampling jitter can make the process look busier than the machine)
    df2 = df.assign(sys_cpu_util_pct=[10.0, 10.0, 10.0])
    assert background_load_cores(df2, cpu_count=2) == 0.0
    assert math.isnan(background_load_cores(pd.DataFrame(), cpu_count=2))
