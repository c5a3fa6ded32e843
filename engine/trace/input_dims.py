"""Each cpu_op's recorded input shapes ("Input Dims"), read back from a Kineto trace's files.

Why: a trace recorded with `record_shapes=True` carries every cpu_op's input shapes in
`args["Input Dims"]` (the 2021 profiler's legacy `Operator` events: `args["Input dims"]`). The
events table does not keep those args (they would double its size), so this module reads them back
from the source files, matching each X event by its position in its file (`ev`, assigned in parse
order by engine.trace.kineto) and source (`src`). Readers: the what-if shape edits
(engine.simulate.whatif.kineto_shapes), the GEMM/attention table (engine.analysis.gemm), compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.trace.model import Trace

Shape = tuple[int, ...]


def _shape(d: Any) -> Shape:
    """One "Input Dims" entry: a flat list of ints is a tensor's shape; anything else (a scalar's
    [], a tensor list's nested lists) is an argument without one shape."""
    if isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in d):
        return tuple(d)
    return ()


def input_dims(trace: Trace) -> dict[tuple[int, int], list[Shape]]:
    """(source index, X-event index in its file) -> input shapes, for events that record them."""
    from engine.trace import safe_io
    from engine.trace.loader import _decode

    out: dict[tuple[int, int], list[Shape]] = {}
    limit = safe_io.max_bytes()
    for src, s in enumerate(trace.meta.get("sources") or []):
        if s.get("kind") != "kineto":
            continue
        path = str(s.get("path", ""))
        file = Path(path.split("!", 1)[0])
        try:
            raw = safe_io.read_raw(file, limit)
        except (TraceError, OSError):
            continue  # the file moved since loading: no shapes from it
        for blob in safe_io.expand(file, raw, limit):
            if blob.path != path or b'"Input Dims"' not in blob.data:
                continue  # another member, or recorded without shapes: no need to decode it
            doc = _decode(blob, typed=False)
            # the array form (a top-level list, the 2021 profiler) holds the events themselves
            evs = doc.get("traceEvents") if isinstance(doc, dict) else doc
            if not isinstance(evs, list):
                continue
            i = 0
            for e in evs:
                if type(e) is not dict or e.get("ph") != "X":
                    continue
                args = e.get("args")
                if type(args) is dict:
                    dims = args.get("Input Dims", args.get("Input dims"))  # legacy spelling: "Input dims"
                    if isinstance(dims, list) and dims:
                        out[(src, i)] = [_shape(d) for d in dims]
                i += 1
    return out


__all__ = ["Shape", "input_dims"]
