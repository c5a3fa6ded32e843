"""Capture a workload as the "original": step times, metrics, ET and Kineto (see api.py)."""

from engine.capture.api import CaptureResult, CaptureSession, capture, capture_sample
from engine.capture.distributed import capture_distributed
from engine.capture.meta import read_meta

__all__ = ["CaptureResult", "CaptureSession", "capture", "capture_distributed", "capture_sample", "read_meta"]
