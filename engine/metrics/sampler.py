"""Background sampling of process/system utilization while a workload runs.

Why a thread that mostly sleeps: the capture measures step times at the same moment the
metrics are sampled, so the sampler must not perturb them. Each tick does a handful of cheap
reads (psutil `cpu_percent(interval=None)` returns the utilization since the previous call
without blocking; NVML reads are driver queries) and then sleeps for `interval_s`.

Columns of `MetricsSampler.samples` (a DataFrame, one row per tick):
    t_s               seconds since the sampler started
    cpu_util_pct      this process's CPU utilization, % of ONE core (2 busy threads -> ~200)
    sys_cpu_util_pct  whole-machine CPU utilization, % of all cores (0-100)
    rss_mb            resident set size of this process, MiB
  on a CUDA device, when nvidia-ml-py (`pynvml`) imports and finds the GPU:
    gpu_sm_util_pct   NVML "GPU utilization" (% of time a kernel ran in the last sample period)
    gpu_mem_mb        device memory used, MiB
    gpu_power_w       board power draw, W
    gpu_clock_mhz     current SM clock, MHz

Nothing beyond pandas is needed to import this module. CPU figures come from psutil; without it
(a bare GPU image) `_StdlibCpu` reads the same three from the standard library and /proc, NaN
where the platform has no such file. `pynvml` is imported lazily and its absence or failure
simply drops the gpu_* columns (recorded in `gpu_error`).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd  # at run time where used: the CLI's parser imports this module

from engine import jsonio

CPU_COLUMNS = ("cpu_util_pct", "sys_cpu_util_pct", "rss_mb")
GPU_COLUMNS = ("gpu_sm_util_pct", "gpu_mem_mb", "gpu_power_w", "gpu_clock_mhz")
_MIB = 1024.0 * 1024.0


def _cuda_index(device: Any) -> int | None:
    """The CUDA ordinal of `device` ("cuda", "cuda:1", torch.device) or None for non-CUDA."""
    if device is None:
        return None
    text = str(device)
    if not text.startswith("cuda"):
        return None
    _, _, idx = text.partition(":")
    return int(idx) if idx.isdigit() else 0


class _PsutilCpu:
    """Process CPU %, machine CPU % and RSS through psutil (the "since last call" counters)."""

    def __init__(self):
        import psutil

        self._ps, self._proc = psutil, psutil.Process()

    def read(self) -> dict[str, float]:
        return {
            "cpu_util_pct": float(self._proc.cpu_percent(interval=None)),
            "sys_cpu_util_pct": float(self._ps.cpu_percent(interval=None)),
            "rss_mb": self._proc.memory_info().rss / _MIB,
        }


class _StdlibCpu:
    """The same three figures without psutil: process CPU time deltas, /proc/stat and
    /proc/self/statm (Linux); NaN for what the platform does not offer."""

    def __init__(self):
        import os

        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._last = (time.perf_counter(), time.process_time(), self._sys_times())

    @staticmethod
    def _sys_times() -> tuple[float, float] | None:
        try:
            with open("/proc/stat") as f:
                vals = [float(x) for x in f.readline().split()[1:]]
            return sum(vals), vals[3] + (vals[4] if len(vals) > 4 else 0.0)  # total, idle + iowait
        except (OSError, ValueError, IndexError):
            return None

    def read(self) -> dict[str, float]:
        wall, cpu, sys_t = time.perf_counter(), time.process_time(), self._sys_times()
        w0, c0, s0 = self._last
        self._last = (wall, cpu, sys_t)
        proc = 100.0 * (cpu - c0) / (wall - w0) if wall > w0 else math.nan
        if sys_t is not None and s0 is not None and sys_t[0] > s0[0]:
            busy = 100.0 * (1.0 - (sys_t[1] - s0[1]) / (sys_t[0] - s0[0]))
        else:
            busy = math.nan
        try:
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * self._page / _MIB
        except (OSError, ValueError, IndexError):
            rss = math.nan
        return {"cpu_util_pct": proc, "sys_cpu_util_pct": busy, "rss_mb": rss}


def _cpu_reader():
    try:
        return _PsutilCpu()
    except ImportError:
        return _StdlibCpu()


class _Nvml:
    """Thin NVML reader for one device; raises at construction when NVML is unusable."""

    def __init__(self, index: int):
        import pynvml  # optional dependency (nvidia-ml-py)

        self._nv = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.name = pynvml.nvmlDeviceGetName(self._handle)
        if isinstance(self.name, bytes):
            self.name = self.name.decode()

    def read(self) -> dict[str, float]:
        nv, h = self._nv, self._handle
        out: dict[str, float] = {}
        for col, fn in (
            ("gpu_sm_util_pct", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
            ("gpu_mem_mb", lambda: nv.nvmlDeviceGetMemoryInfo(h).used / _MIB),
            ("gpu_power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("gpu_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
        ):
            try:
                out[col] = fn()
            except nv.NVMLError:  # a counter this board does not expose -> NaN, keep sampling
                out[col] = math.nan
        return out

    def close(self) -> None:
        with contextlib.suppress(self._nv.NVMLError):  # already shut down by another NVML user
            self._nv.nvmlShutdown()


class MetricsSampler:
    """Context manager sampling utilization every `interval_s` seconds on a daemon thread.

    >>> with MetricsSampler(interval_s=0.02) as m:
    ...     work()
    >>> m.samples  # DataFrame, see module docstring
    """

    def __init__(self, interval_s: float = 0.02, device: Any = None):
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError(f"interval_s must be a positive number, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self.device = None if device is None else str(device)
        self.gpu_name: str | None = None
        self.gpu_error: str | None = None
        self._rows: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu = _cpu_reader()
        self._nvml: _Nvml | None = None
        self._t0 = 0.0
        self._frame: pd.DataFrame | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> MetricsSampler:
        if self._thread is not None:
            raise RuntimeError("MetricsSampler already started")
        index = _cuda_index(self.device)
        if index is not None:
            try:
                self._nvml = _Nvml(index)
                self.gpu_name = self._nvml.name
            except Exception as exc:  # noqa: BLE001 -- NVML missing/broken: CPU metrics only
                self._nvml = None
                self.gpu_error = f"{type(exc).__name__}: {exc}"
        # Prime the "since last call" counters so the first real sample is meaningful.
        self._cpu.read()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="mystique-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> MetricsSampler:
        if self._thread is None:
            return self
        self._stop.set()
        self._thread.join()
        self._sample()  # one closing sample covering the tail of the window
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        self._frame = None
        return self

    def __enter__(self) -> MetricsSampler:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        row = {"t_s": time.perf_counter() - self._t0, **self._cpu.read()}
        if self._nvml is not None:
            row.update(self._nvml.read())
        self._rows.append(row)

    @property
    def t0(self) -> float:
        """`time.perf_counter()` at start: t_s = perf_counter() - t0."""
        return self._t0

    # -- results -----------------------------------------------------------------------------
    @property
    def columns(self) -> list[str]:
        cols = ["t_s", *CPU_COLUMNS]
        if self._nvml is not None or (self._rows and "gpu_sm_util_pct" in self._rows[0]):
            cols += list(GPU_COLUMNS)
        return cols

    @property
    def samples(self) -> pd.DataFrame:
        if self._frame is None or len(self._frame) != len(self._rows):
            import pandas as pd

            self._frame = pd.DataFrame(list(self._rows), columns=self.columns, dtype="float64")
        return self._frame

    def summary(self) -> dict[str, dict[str, float]]:
        return summarize(self.samples)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: {"interval_s", "device", "gpu_name", "samples": {col: [...]}, "summary"}."""
        df = self.samples
        return {
            "interval_s": self.interval_s,
            "device": self.device,
            "gpu_name": self.gpu_name,
            "gpu_error": self.gpu_error,
            "samples": {c: [None if math.isnan(v) else round(float(v), 4) for v in df[c]] for c in df.columns},
            "summary": self.summary(),
            "background_load_cores": round(background_load_cores(self.samples), 4),
        }

    def to_json(self) -> str:
        return jsonio.dumps(self.to_dict()).decode()

    @classmethod
    def from_json(cls, data: str | bytes | dict) -> MetricsSampler:
        """A stopped sampler holding the stored samples (for metadata read back from disk)."""
        obj = jsonio.loads(data) if isinstance(data, (str, bytes)) else data
        m = cls(interval_s=obj.get("interval_s") or 0.02, device=obj.get("device"))
        m.gpu_name = obj.get("gpu_name")
        m.gpu_error = obj.get("gpu_error")
        cols = list(obj.get("samples", {}))
        n = len(obj["samples"][cols[0]]) if cols else 0
        m._rows = [
            {c: (math.nan if obj["samples"][c][i] is None else float(obj["samples"][c][i])) for c in cols}
            for i in range(n)
        ]
        import pandas as pd

        m._frame = pd.DataFrame(m._rows, columns=cols or ["t_s", *CPU_COLUMNS], dtype="float64")
        return m


def background_load_cores(samples: pd.DataFrame, cpu_count: int | None = None) -> float:
    """Mean number of cores other processes kept busy while sampling: machine-wide busy cores
    minus this process's. Why: on a shared machine this, not the workload, often explains a
    slow step; a capture or replay taken with background load > ~0.2 cores is suspect."""
    import os

    if samples.empty or not {"cpu_util_pct", "sys_cpu_util_pct"} <= set(samples.columns):
        return math.nan
    n = cpu_count or os.cpu_count() or 1
    other = (samples["sys_cpu_util_pct"] * n - samples["cpu_util_pct"]) / 100.0
    other = other.dropna().clip(lower=0.0)
    return float(other.mean()) if len(other) else math.nan


def summarize(samples: pd.DataFrame) -> dict[str, dict[str, float]]:
    """{metric: {"mean", "max"}} over every metric column (t_s excluded), NaN-skipping."""
    out: dict[str, dict[str, float]] = {}
    for col in samples.columns:
        if col == "t_s":
            continue
        s = samples[col].dropna()
        out[col] = {"mean": float(s.mean()) if len(s) else math.nan, "max": float(s.max()) if len(s) else math.nan}
    return out
