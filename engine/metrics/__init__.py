"""Utilization sampling (CPU via psutil, GPU via NVML when available)."""

from engine.metrics.sampler import CPU_COLUMNS, GPU_COLUMNS, MetricsSampler, background_load_cores, summarize

__all__ = ["CPU_COLUMNS", "GPU_COLUMNS", "MetricsSampler", "background_load_cores", "summarize"]
