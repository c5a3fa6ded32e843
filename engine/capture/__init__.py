"""Capture a workload as the "original": step times, metrics, ET and Kineto (see api.py)."""

from engine.capture.api import CaptureResult, CaptureSession, capture, read_meta

__all__ = ["CaptureResult", "CaptureSession", "capture", "read_meta"]
