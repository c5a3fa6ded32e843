"""Capture a workload as the "original": step times, metrics, ET and Kineto (see api.py)."""

from engine.capture.api import CaptureResult, CaptureSession, capture, read_meta
from engine.capture.distributed import capture_distributed

__all__ = ["CaptureResult", "CaptureSession", "capture", "capture_distributed", "read_meta"]
