"""Utilization sampling (CPU via psutil, GPU via NVML when available)."""
from engine.metrics.sampler import CPU_COLUMNS, GPU_COLUMNS, MetricsSampler, summarize

__all__ = ["MetricsSampler", "summarize", "CPU_COLUMNS", "GPU_COLUMNS"]
