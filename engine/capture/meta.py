"""Finding and reading the capture meta (`<name>_meta.json`) that belongs to trace files.

The rules live in engine.trace.layout (the one answer to "what is this path?"), below capture,
replay and compare, which all ask it; this module keeps the capture package's names for them.
"""

from __future__ import annotations

from engine.trace.layout import is_capture, load_meta, meta_file, meta_for, read_meta

__all__ = ["is_capture", "load_meta", "meta_file", "meta_for", "read_meta"]
