"""Reading trace inputs defensively: files, gzip, tarballs and directories -> in-memory blobs.

Why a module of its own: every byte the engine parses comes from a user-supplied file that may
be truncated, hostile or simply huge. Everything here either returns bytes held in memory or
raises a one-line `TraceError` naming the file; nothing is ever extracted to disk, so a tarball
member named `/etc/passwd` or `../../x` cannot write anywhere (such members are refused anyway,
as are links and devices). Resource folders inside tarballs (e.g. `pt2_et_resources/*.py`,
generated Triton source) are recorded by name only and never imported or executed.

Size limits: a file larger than the limit is refused *before* it is read, and decompression
stops as soon as the output would exceed the limit. The limit is `$MYSTIQUE_MAX_BYTES` when
set, else a quarter of the memory available to this process (host, cgroup and rlimit, see
engine.sysinfo; parsed JSON takes several times its text size). Reads allocate what the file
holds, never the limit (a limit-sized buffer per read killed runs under `ulimit -v`).

Gzip bombs: real traces compress 8-35:1 (measured over every shared and sample trace), while
a bomb compresses ~1000:1. Decompression streams in 1 MiB steps and stops as soon as the output
is past `_RATIO_FLOOR` bytes and more than `max_gzip_ratio()` times the input consumed so far,
so a 2 GiB bomb is refused after inflating a few tens of MiB, whatever the size limit.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from engine import envvars
from engine.errors import TraceError

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
_RATIO_FLOOR = 32 << 20  # below this much output the ratio is not checked (tiny repetitive files)
_DEFAULT_MAX_RATIO = 128  # ~4x the most compressible real trace (33:1); zlib level 1 on a bomb gives ~230:1
_TRACE_SUFFIXES = (".json", ".json.gz")
_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")


@dataclass(slots=True)
class Blob:
    """One trace document: its display path (file, or `archive.tar.gz!member`) and JSON bytes."""

    path: str
    data: bytes
    sha256: str
    resources: dict[str, str] = field(default_factory=dict)


def max_bytes() -> int:
    """The per-file (compressed and decompressed) size limit in bytes."""
    if envvars.get("MYSTIQUE_MAX_BYTES"):
        return envvars.get_int("MYSTIQUE_MAX_BYTES", 0, 0)
    from engine.sysinfo import available_memory_bytes

    avail = available_memory_bytes()
    return 4 << 30 if avail is None else max(64 << 20, avail // 4)  # unknown platform: a fixed 4 GiB cap


def max_stream_bytes(out_dir: Path | None = None) -> int:
    """The per-file limit for inputs that are streamed (the trace store): memory does not grow
    with such a file, so its bound is the disk that receives the columnar copy (Parquet is at
    least 8x smaller than its JSON), not a share of RAM. An explicit MYSTIQUE_MAX_BYTES still
    applies to everything."""
    if envvars.get("MYSTIQUE_MAX_BYTES"):
        return max_bytes()
    import shutil

    probe = out_dir
    while probe is not None and not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe or Path.cwd()).free
    except OSError:
        return max_bytes()
    return max(max_bytes(), 8 * free)


def max_gzip_ratio() -> int:
    """Largest decompressed:compressed ratio accepted (`$MYSTIQUE_MAX_GZIP_RATIO`, default 128)."""
    return envvars.get_int("MYSTIQUE_MAX_GZIP_RATIO", _DEFAULT_MAX_RATIO, 1)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def check_regular_file(path: Path, limit: int) -> os.stat_result:
    """A trace input must be a non-empty regular file within `limit` bytes (no FIFO, device or
    folder: reading those hangs or never ends). One home for the whole-file reader and the
    streaming one (engine.trace.store.stream)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path) from None
    if not stat.S_ISREG(st.st_mode):
        raise TraceError("not a regular file", path)
    if st.st_size == 0:
        raise TraceError("empty file (0 bytes)", path)
    if st.st_size > limit:
        raise TraceError(
            f"file too large: {_human(st.st_size)} exceeds the limit of {_human(limit)} "
            "(set MYSTIQUE_MAX_BYTES to raise it)",
            path,
        )
    return st


def _read_file(path: Path, limit: int) -> bytes:
    st = check_regular_file(path, limit)
    try:
        with open(path, "rb") as fh:
            # read(n) allocates n bytes up front: ask for what the file holds (+1 to notice growth)
            data = fh.read(min(limit, st.st_size) + 1)
    except MemoryError:
        raise TraceError(f"not enough memory to read {_human(st.st_size)}", path) from None
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path) from None
    if len(data) > limit:
        raise TraceError(f"file too large: it grew past the limit of {_human(limit)} while being read", path)
    return data


_DEFLATE_MAX_RATIO = 1100  # deflate cannot expand more than 1032:1


def _gunzip_whole(data: bytes, limit: int) -> bytes | None:
    """The usual file, one gzip member and nothing after it, in one zlib call; None for anything
    else (the caller's streaming loop then decides, and owns every error message).

    Why: the streaming loop grows its output block by block and joins it at the end, which is
    ~3x slower than decompressing into one buffer sized from the trailer's ISIZE (28 vs 9 ms on
    a 13 MB ET). It is only taken when it cannot overrun the limit whatever the trailer says
    (deflate expands at most ~1032x), when no second member header appears, and when the output
    length matches the trailer, i.e. the member ended at the end of the file. zlib itself checks
    the member's CRC and refuses a truncated stream."""
    if len(data) < 18 or data[:3] != b"\x1f\x8b\x08" or _DEFLATE_MAX_RATIO * len(data) > limit:
        return None
    ratio_cap = max(_RATIO_FLOOR, max_gzip_ratio() * len(data))
    if data.find(b"\x1f\x8b\x08", 10) >= 0:  # maybe several members (or a chance match): stream
        return None
    isize = int.from_bytes(data[-4:], "little")
    if isize > ratio_cap:  # a bomb, or a lying trailer: the streaming loop decides and explains
        return None
    try:  # the trailer is untrusted: the output can never grow past the ratio cap here
        d = zlib.decompressobj(47)
        out = d.decompress(data, max(1, min(limit, ratio_cap) + 1))
    except (zlib.error, MemoryError):
        return None
    if not d.eof or d.unused_data or d.unconsumed_tail:
        return None
    return out if (len(out) & 0xFFFFFFFF) == isize and len(out) <= limit else None


def gunzip(data: bytes, path: str, limit: int) -> bytes:
    """Decompress (possibly multi-member) gzip data, refusing truncation and output over `limit`."""
    whole = _gunzip_whole(data, limit)
    if whole is not None:
        return whole
    out = []
    total = 0
    consumed_before = 0  # input bytes of earlier members
    max_ratio = max_gzip_ratio()
    buf = data
    while True:
        d = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, auto-detected
        pos = 0
        while pos < len(buf) or d.unconsumed_tail:
            src = d.unconsumed_tail or buf[pos : pos + _CHUNK]
            if not d.unconsumed_tail:
                pos += len(src)
            try:
                chunk = d.decompress(src, max(1, min(_CHUNK, limit + 1 - total)))
            except zlib.error as exc:
                raise TraceError(f"corrupt gzip stream ({exc})", path) from None
            total += len(chunk)
            if total > limit:
                raise TraceError(
                    f"decompressed size exceeds the limit of {_human(limit)} (set MYSTIQUE_MAX_BYTES to raise it)", path
                )
            consumed = consumed_before + pos - len(d.unconsumed_tail)
            if total > _RATIO_FLOOR and total > max_ratio * max(consumed, 1):
                raise TraceError(
                    f"refused a gzip bomb: {_human(consumed)} inflated to over {_human(total)} "
                    f"(ratio above {max_ratio}:1; traces compress under 40:1; "
                    "set MYSTIQUE_MAX_GZIP_RATIO to raise it)",
                    path,
                )
            out.append(chunk)
            if d.eof:
                break
        if not d.eof:
            raise TraceError("truncated gzip stream", path)
        rest = d.unused_data + buf[pos:]
        if not rest.strip(b"\x00"):
            break
        if rest[:2] != _GZIP_MAGIC:  # trailing garbage after a complete stream
            raise TraceError("unexpected bytes after the gzip stream", path)
        consumed_before += len(buf) - len(rest)
        buf = rest
    return b"".join(out)


def _is_tar(data: bytes) -> bool:
    return len(data) >= 262 and data[257:262] == b"ustar"


def _unsafe_member(name: str) -> str | None:
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute member path"
    parts = re.split(r"[\\/]+", name)
    if ".." in parts:
        return "member path escapes the archive ('..')"
    return None


def _read_tar(data: bytes, path: str, limit: int) -> list[Blob]:
    """Trace documents held by a tarball, read in memory; hostile members refuse the whole file."""
    try:
        tf = tarfile.open(fileobj=io.BytesIO(data), mode="r:")  # noqa: SIM115 -- in memory, no OS handle to close
        members = tf.getmembers()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise TraceError(f"corrupt tar archive ({exc})", path) from None
    for m in members:
        why = _unsafe_member(m.name)
        if why is None and (m.issym() or m.islnk()):
            why = "link member"
        if why is None and not (m.isfile() or m.isdir()):
            why = "device/special member"
        if why:
            raise TraceError(f"refused tar archive: {why} {m.name!r}", path)
    resources: dict[str, str] = {}
    blobs: list[Blob] = []
    total = 0
    for m in members:
        if not m.isfile():
            continue
        name = m.name.lstrip("./") if m.name.startswith("./") else m.name
        lower = name.lower()
        if not lower.endswith(_TRACE_SUFFIXES):
            resources[name] = "<never executed unless the user opts in>"
            continue
        total += m.size
        if m.size > limit or total > limit:
            raise TraceError(f"tar member {name!r} exceeds the size limit of {_human(limit)}", path)
        fh = tf.extractfile(m)
        if fh is None:  # pragma: no cover - isfile() members always have data
            continue
        raw = fh.read()
        if len(raw) != m.size:
            raise TraceError(f"truncated tar member {name!r}", path)
        member_path = f"{path}!{name}"
        if raw[:2] == _GZIP_MAGIC:
            raw = gunzip(raw, member_path, limit)
        blobs.append(Blob(member_path, raw, hashlib.sha256(raw).hexdigest()))
    if not blobs:
        raise TraceError("tar archive holds no .json/.json.gz trace", path)
    for b in blobs:
        b.resources = dict(resources)
    return blobs


# Files in a folder that are no trace: capture metadata, an exported benchmark's spec and marker.
_NOT_TRACES = ("_meta.json", "spec.json", "COMPLETE.json")


def _dir_traces(p: Path) -> list[Path]:
    return sorted(
        f
        for f in p.iterdir()
        if f.is_file()
        and not f.is_symlink()
        and f.name.lower().endswith(_TRACE_SUFFIXES + _TAR_SUFFIXES)
        and not f.name.endswith(_NOT_TRACES)
    )


def list_files(path: str | os.PathLike) -> list[Path]:
    """The files behind one user-supplied path: itself, or a directory's trace files (sorted).

    A capture folder's `<name>_meta.json` (engine.capture.meta) describes the traces beside it
    and is no trace itself: `info` on the folder failed on it while replay and compare, which
    read it as the capture's meta, accepted the folder. A folder with no trace of its own (a job
    folder, ETs and Kineto traces in two subfolders) gives its subfolders' traces."""
    p = Path(path)
    if p.is_dir():
        files = _dir_traces(p)
        if not files:  # a job folder: its traces in subfolders (ETs in one, Kineto in another)
            files = [
                f for d in sorted(x for x in p.iterdir() if x.is_dir() and not x.is_symlink()) for f in _dir_traces(d)
            ]
        if not files:
            raise TraceError("directory holds no .json, .json.gz or .tar.gz trace (nor do its subfolders)", p)
        return files
    if not p.exists():
        raise TraceError("no such file or directory", p)
    return [p]


MAX_SPEC_BYTES = 64 << 20  # a hand-written spec or settings file; the largest real one is a few KiB


def read_spec_bytes(path: str | os.PathLike, what: str = "spec", limit: int = MAX_SPEC_BYTES) -> bytes:
    """A small settings file (a compose spec, a what-if spec, compose limits) read defensively,
    the one home of that read: a FIFO or device would block `read()` forever (and /dev/zero
    reads without end), and a folder or an unreadable file raised a traceback, so the path must
    be a regular file (checked with stat before opening, and again on the open descriptor in
    case it was swapped), opened non-blocking, of at most `limit` bytes; errors name the file."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise TraceError(f"{what} file not found", p) from None
    except OSError as e:
        raise TraceError(f"cannot read the {what} file: {e.strerror or e}", p) from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(f"{what} path is a folder, not a JSON file", p)
    if not stat.S_ISREG(st.st_mode):
        raise TraceError(f"{what} path is not a regular file (a FIFO, socket or device)", p)
    if st.st_size > limit:
        raise TraceError(f"{what} file is {st.st_size:,} bytes, over the {limit:,}-byte limit", p)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO after the stat
                raise TraceError(f"{what} path is not a regular file", p)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(limit + 1)
        finally:
            os.close(fd)
    except OSError as e:
        raise TraceError(f"cannot read the {what} file: {e.strerror or e}", p) from None
    if len(data) > limit:
        raise TraceError(f"{what} file grew past the {limit:,}-byte limit while being read", p)
    return data


def read_raw(path: Path, limit: int | None = None) -> bytes:
    """The file's bytes as stored (still compressed), size-checked before reading."""
    return _read_file(path, max_bytes() if limit is None else limit)


def expand(path: Path, raw: bytes, limit: int | None = None, sha256: str | None = None) -> list[Blob]:
    """Decompress / unpack one file's raw bytes into its trace documents (`sha256`: the raw
    bytes' digest when the caller has it already)."""
    limit = max_bytes() if limit is None else limit
    disp = os.fspath(path)
    sha = sha256 or hashlib.sha256(raw).hexdigest()
    data = gunzip(raw, disp, limit) if raw[:2] == _GZIP_MAGIC else raw
    if _is_tar(data):
        return _read_tar(data, disp, limit)
    return [Blob(disp, data, sha)]
