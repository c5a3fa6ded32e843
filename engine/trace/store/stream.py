"""Streaming a Kineto document: bytes in bounded blocks -> lists of `traceEvents` items + the rest.

Why not a whole-document parse: `orjson.loads` of a 1 GB trace holds the text and every event as
Python objects at once (7.4 GB peak RSS at 4.3M events, issue 22). Here the document is read in
blocks of `BLOCK` bytes; a vectorised scan (numpy) finds where each top-level item of the
`traceEvents` array ends, and each run of complete items is decoded by msgspec on its own, so
memory holds one block and its events, whatever the file's size. Everything outside
`traceEvents` (the "skeleton": `distributedInfo`, `deviceProperties`, `schemaVersion`...) is
kept as text with the array emptied, and decoded at the end; it is small in every real trace and
capped at `MAX_SKELETON` bytes. benchmarks/ingest_parsers.py measured this against ijson's C
backend and pysimdjson (results in benchmarks/results/ingest_parsers.json).

Hostile input keeps today's guarantees (engine.trace.safe_io): the file must be a regular file
under the size limit; gzip streams are inflated block by block under the same output limit and
decompressed:compressed ratio cap; nesting deeper than `MAX_DEPTH` is refused (orjson's own
limit on whole documents is 1024; real traces nest 4-6 deep); tarballs go through safe_io's
member rules (read in memory: a tar member is streamed from the in-memory bytes).
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np

from engine.errors import TraceError
from engine.trace import dupkeys, safe_io

BLOCK = 8 << 20  # bytes of JSON decoded at a time: ~60k events, ~100 MB of Python objects at most
MAX_DEPTH = 256
MAX_SKELETON = 64 << 20  # bytes of the document outside traceEvents
_KEY = b'"traceEvents"'
_OPEN = np.zeros(256, np.int8)
_OPEN[ord("{")] = _OPEN[ord("[")] = 1
_OPEN[ord("}")] = _OPEN[ord("]")] = -1
_VALUE = re.compile(rb"[^ \t\r\n:]")
MAX_ITEM = 256 << 20  # one event's JSON text (the largest real one is a few KiB)
_CLASS = np.zeros(256, np.uint8)  # 1: quote, 2: backslash, 3: bracket
_CLASS[34], _CLASS[92] = 1, 2
_CLASS[[123, 125, 91, 93]] = 3
_TABLE = _CLASS.tobytes()
_DECODER = msgspec.json.Decoder()


def iter_blocks(path: Path, limit: int | None = None) -> Iterator[bytes]:
    """The file's decompressed bytes in blocks of about `BLOCK` (gzip inflated on the fly)."""
    limit = safe_io.max_bytes() if limit is None else limit
    safe_io.check_regular_file(path, limit)
    try:
        fh = open(path, "rb")  # noqa: SIM115 -- closed in the finally below (a generator)
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path) from None
    try:
        first = fh.read(BLOCK)
        if first[:2] == b"\x1f\x8b":
            yield from _gunzip_blocks(first, fh, os.fspath(path), limit)
        else:
            while first:
                yield first
                first = fh.read(BLOCK)
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path) from None
    finally:
        fh.close()


def _gunzip_blocks(first: bytes, fh, path: str, limit: int) -> Iterator[bytes]:
    """Multi-member gzip inflated block by block with safe_io's output limit and ratio cap."""
    max_ratio = safe_io.max_gzip_ratio()
    total = used = 0  # bytes out, compressed bytes consumed
    d = zlib.decompressobj(wbits=47)
    buf = first
    while True:
        if not buf:
            buf = fh.read(BLOCK)
            if not buf:
                break
        try:
            out = d.decompress(buf, BLOCK)
        except zlib.error as exc:
            raise TraceError(f"corrupt gzip stream ({exc})", path) from None
        tail = d.unused_data if d.eof else d.unconsumed_tail
        used += len(buf) - len(tail)
        buf = tail
        total += len(out)
        if total > limit:
            raise TraceError(f"decompressed size exceeds the limit of {limit:,} bytes (MYSTIQUE_MAX_BYTES)", path)
        if total > safe_io._RATIO_FLOOR and total > max_ratio * max(used, 1):
            raise TraceError(
                f"refused a gzip bomb: {used:,} bytes inflated to over {total:,} (ratio above {max_ratio}:1; "
                "set MYSTIQUE_MAX_GZIP_RATIO to raise it)",
                path,
            )
        if out:
            yield out
        if d.eof:
            if not buf:
                buf = fh.read(BLOCK)
            if not buf.strip(b"\x00") and not fh.read(1):
                return
            if buf[:2] != b"\x1f\x8b":
                raise TraceError("unexpected bytes after the gzip stream", path)
            d = zlib.decompressobj(wbits=47)
    rest = d.flush()
    if rest:
        yield rest
    if not d.eof:
        raise TraceError("truncated gzip stream", path)


class _Block:
    """One block's scan: unescaped quote positions, structural bracket positions, their bytes and
    the depth after each bracket; `depth0`/`in_str0`: the state before the block."""

    __slots__ = ("bpos", "byte", "depth", "depth0", "in_str0", "qpos")

    def __init__(self, qpos, bpos, byte, depth, depth0: int, in_str0: bool):
        self.qpos, self.bpos, self.byte, self.depth, self.depth0, self.in_str0 = (
            qpos,
            bpos,
            byte,
            depth,
            depth0,
            in_str0,
        )

    def opening(self, pos: int) -> bool:
        """Whether byte `pos` is a quote that opens a string."""
        k = int(np.searchsorted(self.qpos, pos))
        return k < len(self.qpos) and int(self.qpos[k]) == pos and (k + self.in_str0) % 2 == 0

    def depth_at(self, pos: int) -> int:
        k = int(np.searchsorted(self.bpos, pos, side="right"))
        return int(self.depth[k - 1]) if k else self.depth0


class NotKineto(TraceError):
    """A well-formed document that is no Kineto trace (an ET beside the Kineto files)."""


class KinetoScanner:
    """Feeds blocks of one JSON document; `feed` returns the lists of `traceEvents` items that the
    block completed, `finish` the decoded skeleton (the document with an empty `traceEvents`)."""

    def __init__(self, path: str, typed: msgspec.json.Decoder | None = None):
        self.path = path
        self.typed = typed  # decodes a run of items into typed Structs; None: plain Python objects
        self.depth = 0  # nesting depth before the next byte
        self.in_str = False
        self.escape = False  # the previous block ended on an odd run of backslashes inside a string
        self.state = 0  # 0: before the key, 3: after the key, 1: inside the array, 2: after it
        self.skeleton = bytearray()
        self.carry = b""  # array text after the last complete item
        self.found = False
        self.hold = b""  # state 0: the last bytes of a block, which may begin the key
        self.started = False  # a non-blank byte has been seen
        self.wrapped = False  # the array form: the document is the events list itself
        self.checked = False  # the array form's first items were seen to be trace events

    def _scan(self, block: bytes) -> _Block:
        """Where a block's unescaped quotes and structural brackets are, and the depth after each
        bracket, carrying the string and depth state across blocks.

        Why positions rather than per-byte masks: a cumulative sum over every byte of an 8 MiB
        block cost ~0.4 s; brackets and quotes are a few percent of the bytes."""
        in_str = self.in_str
        b = np.frombuffer(block, np.uint8)
        cls = np.frombuffer(block.translate(_TABLE), np.uint8)  # bytes.translate: ~5x faster than np.take
        idx = np.flatnonzero(cls)  # quotes, backslashes, brackets
        kind = cls[idx]
        qpos = idx[kind == 1]
        if self.escape and len(qpos) and qpos[0] == 0:
            qpos = qpos[1:]
        if len(qpos) and (kind == 2).any():  # a quote after an odd run of backslashes is escaped
            prev = qpos[qpos > 0]
            esc = prev[b[prev - 1] == 92].tolist()
            drop = []
            for q in esc:  # rare: one short loop per quote preceded by a backslash
                k = q - 1
                while k >= 0 and b[k] == 92:
                    k -= 1
                if (q - 1 - k + (1 if k < 0 and self.escape else 0)) % 2 == 1:
                    drop.append(q)
            if drop:
                qpos = np.setdiff1d(qpos, np.asarray(drop, dtype=qpos.dtype), assume_unique=True)
        cand = idx[kind == 3]
        # a bracket is structural when an even number of quotes (plus the carried state) precede it
        bpos = cand[(np.searchsorted(qpos, cand) + in_str) % 2 == 0]
        step = _OPEN[b[bpos]]
        depth = np.cumsum(step, dtype=np.int64) + self.depth
        if len(depth):
            if int(depth.max()) > MAX_DEPTH:
                raise TraceError(f"JSON nested deeper than {MAX_DEPTH} levels", self.path)
            if int(depth.min()) < 0:
                raise TraceError("not valid JSON (unbalanced brackets)", self.path)
        blk = _Block(qpos, bpos, b[bpos], depth, self.depth, in_str)
        self.in_str = bool((len(qpos) + in_str) % 2)
        k = len(b) - 1
        while k >= 0 and b[k] == 92:
            k -= 1
        self.escape = self.in_str and (len(b) - 1 - k) % 2 == 1
        if len(depth):
            self.depth = int(depth[-1])
        return blk

    def feed(self, block: bytes) -> list[list]:
        """The lists of traceEvents items that this block completes (decoded).

        The Trace Event Format's array form (a top-level `[` as the 2020-21 profiler wrote it) is
        read as `{"traceEvents": [...]}`: the scanner is fed that prefix, and `finish` the `}`."""
        if not self.started:
            body = block[3:] if block[:3] == b"\xef\xbb\xbf" else block
            first = body.lstrip(b" \t\r\n")
            if not first:
                return []
            self.started = True
            if first[:1] == b"[":
                self.wrapped = True
                block = b'{"traceEvents":' + first
        out = self._feed(block)
        if self.wrapped and out and not self.checked:
            self._check_events(out[0])
        return out

    def _check_events(self, items: list) -> None:
        """The array form is a trace only when its items are trace events (objects with a `ph`)."""
        head = items[:16]
        ok = bool(head) and all(
            (isinstance(e, dict) and "ph" in e) or (not isinstance(e, dict) and getattr(e, "ph", "") != "")
            for e in head
        )
        if not ok:
            raise NotKineto(
                "not an execution trace or Kineto trace: a top-level JSON list whose items are no trace events (no 'ph')",
                self.path,
            )
        self.checked = True

    def _feed(self, block: bytes) -> list[list]:
        out: list[list] = []
        skip = 0
        if self.state == 0:
            block = self.hold + block
            keep = len(_KEY) - 1  # the key may straddle two blocks: its tail waits for the next one
            head, self.hold = (block[:-keep], block[-keep:]) if len(block) > keep else (b"", block)
            if not head:
                return out
            blk = self._scan(head)
            pos = block.find(_KEY)
            while 0 <= pos < len(head) and not (blk.opening(pos) and blk.depth_at(pos) == 1):
                pos = block.find(_KEY, pos + 1)
            if not 0 <= pos < len(head):
                self._skeleton(head)
                return out
            # rescan from the key with the state before it: depth 1, outside any string
            self.depth, self.in_str, self.escape = 1, False, False
            self._skeleton(block[:pos])
            block, self.hold, self.state, skip = block[pos:], b"", 3, len(_KEY)
        if not block:
            return out
        start = 0
        if self.state == 3:  # after the key: the array's '[' is the first byte past blanks and ':'
            m = _VALUE.search(block, skip)
            if m is None:
                self._skeleton(block)
                self._scan(block)
                return out
            lb = m.start()
            if block[lb] != 91:
                raise TraceError("'traceEvents' is not a list", self.path)
            self._skeleton(block[: lb + 1])
            self._scan(block[: lb + 1])
            self.found, self.state, start = True, 1, lb + 1
            block = block[start:]
            start = 0
            if not block:
                return out
        blk = self._scan(block)
        if self.state == 1:
            # the array ends at the structural ']' that brings depth back to 1
            ends = blk.bpos[(blk.depth == 1) & (blk.byte == 93)]
            if len(ends):
                cut = stop = int(ends[0])
            else:  # complete items end where depth returns to 2 on a structural '}' (objects)
                closers = blk.bpos[(blk.depth == 2) & (blk.byte == 125)]
                cut = int(closers[-1]) + 1 if len(closers) else -1
                stop = len(block)
            if cut < 0:  # no item ends in this block
                self.carry += block
                chunk = b""
            else:
                chunk = self.carry + block[:cut]
                self.carry = b"" if len(ends) else block[cut:]
            if len(self.carry) > MAX_ITEM:
                raise TraceError(f"a traceEvents item is over {MAX_ITEM >> 20} MiB of JSON", self.path)
            if chunk.strip(b", \t\r\n"):
                out.append(self._decode(chunk))
            if not len(ends):
                return out
            self.state, start = 2, stop
        self._skeleton(block[start:])
        return out

    def _skeleton(self, part: bytes) -> None:
        self.skeleton += part
        if len(self.skeleton) > MAX_SKELETON:
            if not self.found:
                raise NotKineto(
                    f"not a Kineto trace: no 'traceEvents' in the first {MAX_SKELETON >> 20} MiB", self.path
                )
            raise TraceError(f"members outside 'traceEvents' exceed {MAX_SKELETON >> 20} MiB", self.path)

    def _decode(self, chunk: bytes) -> list:
        text = b"[" + chunk.strip(b", \t\r\n") + b"]"
        if self.typed is not None:
            try:
                return self.typed.decode(text)
            except msgspec.DecodeError:  # an unexpected type (or bad JSON): plain objects, or the error
                pass
        try:
            return _DECODER.decode(text)
        except msgspec.DecodeError as exc:
            if b"NaN" in text or b"Infinity" in text:  # profilers write these; the loader accepts them
                try:
                    return json.loads(text)
                except ValueError:
                    pass
            raise TraceError(f"not valid JSON in traceEvents ({str(exc)[:120]})", self.path) from None

    def finish(self) -> dict:
        """The decoded skeleton; a TraceError when the document is truncated or no Kineto trace."""
        if self.wrapped:
            self.wrapped = False
            self._feed(b"}")
            if not self.checked:
                raise NotKineto("not a Kineto trace: an empty top-level JSON list", self.path)
        if self.hold:
            hold, self.hold = self.hold, b""
            self._scan(hold)
            self._skeleton(hold)
        if self.state in (1, 3):
            raise TraceError("truncated JSON: 'traceEvents' never ends", self.path)
        if self.depth != 0 or self.in_str:
            raise TraceError("truncated JSON document", self.path)
        data = bytes(self.skeleton)
        if data[:3] == b"\xef\xbb\xbf":
            data = data[3:]
        try:
            doc = _DECODER.decode(data)
        except msgspec.DecodeError:
            try:
                doc = json.loads(data)
            except (ValueError, RecursionError) as exc:
                raise TraceError(f"not valid JSON ({str(exc)[:120]})", self.path) from None
        if not isinstance(doc, dict) or not self.found:
            raise NotKineto("not a Kineto trace (no top-level 'traceEvents')", self.path)
        if (dup := dupkeys.duplicate_top_level_key(data)) is not None:  # the loader refuses it too
            raise TraceError(dupkeys.message(dup), self.path)
        return doc


def scan(blocks, path: str, typed: msgspec.json.Decoder | None = None) -> Iterator[list | dict]:
    """Lists of traceEvents items of a document given as blocks, then (last) its skeleton dict.

    `typed`: a msgspec decoder of a list of Structs, tried first on each run of items; a run it
    rejects comes as plain Python objects (dicts), so the caller tells them apart by type."""
    sc = KinetoScanner(path, typed)
    for block in blocks:
        yield from sc.feed(block)
    yield sc.finish()
