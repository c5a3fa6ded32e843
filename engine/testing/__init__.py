"""Test inputs the project makes itself (no real traces needed): see `gpu_kineto`."""

from engine.testing.gpu_kineto import GpuTruth, gpuify, write_gpu_run

__all__ = ["GpuTruth", "gpuify", "write_gpu_run"]
