"""What is this path? One answer for every command and page: `resolve(*paths) -> Inputs`.

Why one home: a capture folder, an exported (composed) benchmark folder, a multi-rank capture,
rank files given together, a `*_meta.json`, or a bare ET/Kineto file used to be told apart in six
places (the replay and simulate commands, the distributed launcher and its torchrun entry, the
compose marker check and the UI), each with its own globs, so the same folder could be one
benchmark to `replay` and another to the UI. The rules, once:

- an exported benchmark folder (`spec.json` + `rank_<r>.et.json[.gz]`): COMPOSED; it must carry
  its completion marker (`COMPLETE.json`, written last by export) matching the files on disk;
- a folder with several `*_rank<r>_et.json*` (a multi-rank capture): RANKS, each rank with its
  `*_rank<r>_kineto.json*` and capture meta;
- a capture folder (one `*_et.json*`), or a capture's `*_meta.json`: CAPTURE;
- a folder of Kineto traces without an ET: TRACE (the Kineto files);
- trace files: TRACE (one file, an ET with its `<name>_kineto.json.gz` sibling) or, given
  several, the files as given (RANKS when their names carry distinct rank numbers).

Capture meta rules (`meta_file`, `meta_for`, `read_meta`) live here too: they are the same
question asked of a trace file. Nothing here loads a trace or needs torch.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from engine import jsonio
from engine.errors import TraceError

# ---------------------------------------------------------------------------------- capture meta
# 1. a `*_meta.json` path is its own meta;
# 2. a capture folder holds exactly one `*_meta.json`;
# 3. a trace file `<name>_et.json[.gz]` / `<name>_kineto.json[.gz]` (ranks: `<name>_rank<r>_...`)
#    has `<name>_meta.json` beside it;
# 4. `loose=True` also accepts the only `*_meta.json` (or a `meta.json`) in the trace's folder.

_TRACE_NAME = re.compile(r"_(?:et|kineto)\.json(?:\.gz|\.tar\.gz)?$")


def meta_file(path: str | os.PathLike, *, loose: bool = True) -> Path | None:
    """The capture meta of a trace file or capture folder (rules above)."""
    p = Path(str(path).split("!", 1)[0])  # "file.tar.gz!member" names a tarball member
    if p.name.endswith("_meta.json"):
        return p if p.is_file() else None
    if p.is_dir():
        metas = sorted(p.glob("*_meta.json"))
        return metas[0] if len(metas) == 1 else None
    m = _TRACE_NAME.search(p.name)
    if m:
        sibling = p.with_name(p.name[: m.start()] + "_meta.json")
        if sibling.is_file():
            return sibling
    if not loose:
        return None
    metas = sorted(p.parent.glob("*_meta.json"))
    if len(metas) == 1:
        return metas[0]
    plain = p.parent / "meta.json"
    return plain if plain.is_file() else None


def load_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object of a meta file; TraceError naming the file when it is not one."""
    p = Path(path)
    try:
        meta = jsonio.loads(p.read_bytes())
    except (OSError, jsonio.JSONDecodeError) as exc:
        raise TraceError(f"cannot read capture metadata: {exc}", p) from None
    if not isinstance(meta, dict):
        raise TraceError("capture metadata is not a JSON object", p)
    return meta


def meta_for(*paths: str | os.PathLike, loose: bool = True) -> dict[str, Any] | None:
    """The one capture meta the given trace paths share, or None (none found, or several)."""
    found = {f for f in (meta_file(p, loose=loose) for p in paths) if f is not None}
    return load_meta(found.pop()) if len(found) == 1 else None


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """A mystique capture meta (a `*_meta.json` or a capture folder holding exactly one), with
    `et_path`, `kineto_path` and `meta_path` resolved; TraceError when it is not one."""
    p = Path(path)
    if p.is_dir():
        metas = sorted(p.glob("*_meta.json"))
        if len(metas) != 1:
            raise TraceError(f"expected exactly one *_meta.json in the folder, found {len(metas)}", p)
        p = metas[0]
    meta = load_meta(p)
    if "step_ms" not in meta or "files" not in meta:
        raise TraceError("not a mystique capture meta file (no step_ms/files)", p)
    meta["et_path"] = str(p.parent / meta["files"]["et"])
    meta["kineto_path"] = str(p.parent / meta["files"]["kineto"])
    meta["meta_path"] = str(p)
    return meta


def is_capture(path: str | os.PathLike) -> bool:
    """True for a `*_meta.json` file or a folder holding exactly one (what `read_meta` reads)."""
    p = Path(path)
    return (p.is_file() and p.name.endswith("_meta.json")) or (p.is_dir() and meta_file(p) is not None)


# ------------------------------------------------------------------------ exported benchmarks
# Completion marker of an exported benchmark folder (`COMPLETE.json`, written last by
# engine.compose.export): the world size, each rank file's size and content hash, and the
# content hashes of the source traces. A folder is replayed only when the marker is there and
# the rank files on disk are exactly the ones it lists (as many as its world size). The world size
# comes from the marker alone: reading it from spec.json would need compose's sharding registry.

MARKER = "COMPLETE.json"
SPEC = "spec.json"
_RANK_FILE = re.compile(r"^rank_(\d+)\.et\.json(\.gz)?$")


def file_sha256(path: str | os.PathLike) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def rank_files(folder: Path) -> dict[int, Path]:
    """{rank: file} of the `rank_<r>.et.json[.gz]` files of an exported benchmark folder."""
    out = {}
    for f in Path(folder).iterdir():
        m = _RANK_FILE.match(f.name)
        if m and f.is_file():
            out[int(m.group(1))] = f
    return out


def is_composed(folder: str | os.PathLike) -> bool:
    """An exported benchmark folder: its spec and at least one rank file (complete or not)."""
    p = Path(folder)
    return p.is_dir() and (p / SPEC).is_file() and any(p.glob("rank_*.et.json*"))


def _read_spec(folder: Path) -> dict | None:
    try:
        spec = jsonio.loads((folder / SPEC).read_bytes())
    except (OSError, jsonio.JSONDecodeError):
        return None
    return spec if isinstance(spec, dict) else None


def check_folder(folder: str | os.PathLike) -> dict:
    """The marker of a complete exported benchmark; a one-line TraceError when incomplete."""
    p = Path(folder)
    on_disk = rank_files(p)
    mk = p / MARKER
    if not mk.is_file():
        raise TraceError(
            f"incomplete benchmark folder: no {MARKER} (compose was interrupted or is still running); "
            f"{len(on_disk)} rank file(s) on disk; compose it again",
            p,
        )
    try:
        doc = jsonio.loads(mk.read_bytes())
    except (OSError, jsonio.JSONDecodeError) as exc:
        raise TraceError(f"unreadable completion marker: {exc}".splitlines()[0], mk) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ranks"), dict):
        raise TraceError("completion marker is not a benchmark marker", mk)
    listed = {int(r) for r in doc["ranks"]}
    world = doc.get("world_size")
    if world != len(listed):  # the world size comes from the marker alone (export writes both)
        raise TraceError(f"completion marker says {world} ranks but lists {len(listed)} rank file(s)", mk)
    if set(on_disk) != listed:
        missing = sorted(listed - set(on_disk))
        extra = sorted(set(on_disk) - listed)
        raise TraceError(
            f"benchmark folder does not match its completion marker: {len(on_disk)} rank file(s) on disk, "
            f"{len(listed)} expected"
            + (f"; missing ranks {missing[:8]}" if missing else "")
            + (f"; unexpected ranks {extra[:8]}" if extra else ""),
            p,
        )
    for r, f in on_disk.items():
        size = doc["ranks"][str(r)].get("bytes")
        if size is not None and f.stat().st_size != size:
            raise TraceError(f"rank {r} file changed after compose ({f.stat().st_size} bytes, marker says {size})", f)
    return doc


def _spec_meta(folder: Path, spec: dict | None) -> dict:
    """Thread count of the capture a composed benchmark came from (its first source's meta)."""
    if spec is None:
        raise TraceError("benchmark spec is not valid JSON", folder / SPEC)
    for src in (spec.get("sources") or [])[:1]:
        src_path = Path(str(src))
        if not src_path.is_absolute():
            src_path = folder / src_path
        meta = (meta_for(src_path) or {}) if src_path.is_file() else {}
        if isinstance(meta.get("num_threads"), int):
            return {"num_threads": meta["num_threads"]}
    return {}


# ------------------------------------------------------------------------------------- resolve


class InputKind(Enum):
    TRACE = "trace"  # trace file(s) given directly (ET and/or Kineto)
    CAPTURE = "capture"  # a capture folder or its *_meta.json: one rank's ET + Kineto + meta
    RANKS = "ranks"  # a multi-rank capture folder: per-rank ET + Kineto + meta
    COMPOSED = "composed"  # an exported benchmark folder: spec.json + rank_<r>.et.json + COMPLETE.json


@dataclass(frozen=True, kw_only=True, slots=True)
class RankInputs:
    """One recorded rank's files (rank None: a single-rank trace that names no rank)."""

    rank: int | None
    files: tuple[Path, ...]  # ET first, then Kineto (what engine.trace.load takes)
    meta: dict = field(default_factory=dict)  # its capture meta ({} when none)
    name: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Inputs:
    """What a path (or paths) given by a user is. `ranks` in rank order; `meta` the capture meta
    they share ({} when none; for COMPOSED the source capture's thread count); `spec` the
    composed benchmark's spec.json (None for traces); `marker` its completion marker."""

    kind: InputKind
    ranks: tuple[RankInputs, ...]
    meta: dict = field(default_factory=dict)
    spec: dict | None = None
    marker: dict | None = None
    name: str = ""
    folder: Path | None = None

    @property
    def files(self) -> list[Path]:
        """Every file, rank by rank (each rank's ET before its Kineto): what engine.trace.load takes."""
        return [f for r in self.ranks for f in r.files]

    @property
    def rank_numbers(self) -> list[int]:
        return [r.rank for r in self.ranks if r.rank is not None]

    @property
    def multi_rank(self) -> bool:
        return len(self.ranks) > 1

    def rank(self, r: int) -> RankInputs:
        for x in self.ranks:
            if x.rank == r:
                return x
        what = "exported benchmark" if self.kind is InputKind.COMPOSED else "input"
        raise TraceError(f"{what} has no rank {r}", self.folder or self.ranks[0].files[0])


_ET_NAME = re.compile(r"^(?P<name>.+?)(_et)?\.json(\.gz|\.tar\.gz)?$")
# A rank number in a file name: "rank3"/"Rank_3"/"rank-3" anywhere, else a trailing "_3.json"
# ("worker_3.pt.trace.json.gz"). One rule for the loader (the rank a file loads as) and for
# resolve (the rank it groups a file under), so the two never disagree.
_RANK_IN_NAME = (
    re.compile(r"rank[_\-]?(\d{1,5})", re.IGNORECASE),
    re.compile(r"[_\-](\d{1,5})(?:\.pt)?(?:\.trace)?\.json(?:\.gz)?$", re.IGNORECASE),
)


def rank_in_name(path: str | os.PathLike) -> int | None:
    """The rank a file's name carries (rules above; an archive member "a.tar.gz!x" by its member)."""
    base = os.path.basename(str(path).split("!")[-1])
    for rx in _RANK_IN_NAME:
        m = rx.search(base)
        if m:
            return int(m.group(1))
    return None


def _is_kineto(p: Path) -> bool:
    return "_kineto.json" in p.name


def name_of(path: Path) -> str:
    """A display name: an ET file's stem without `_et`, a folder's name."""
    m = _ET_NAME.match(path.name)
    return (m.group("name") if m else path.stem) if path.is_file() else path.name


def _one_trace(et: Path, kineto: Path | None, rank: int | None = None) -> RankInputs:
    files = [et]
    if kineto is None and not _is_kineto(et):
        sibling = et.parent / f"{name_of(et)}_kineto.json.gz"
        kineto = sibling if sibling.is_file() else None
    if kineto is not None:
        files.append(kineto)
    return RankInputs(rank=rank, files=tuple(files), meta=meta_for(et) or {}, name=name_of(et))


def _composed(p: Path) -> Inputs:
    marker = check_folder(p)  # an interrupted compose is not replayed as a complete benchmark
    spec = _read_spec(p)
    meta = _spec_meta(p, spec)
    ranks = tuple(
        RankInputs(rank=r, files=(f,), meta=meta, name=f"{p.name}_rank{r}") for r, f in sorted(rank_files(p).items())
    )
    return Inputs(kind=InputKind.COMPOSED, ranks=ranks, meta=meta, spec=spec, marker=marker, name=p.name, folder=p)


def _folder(p: Path) -> Inputs:
    if is_composed(p):
        return _composed(p)
    ets = sorted(p.glob("*_et.json*"))
    kinetos = sorted(p.glob("*_kineto.json*"))
    if len(ets) > 1 and all(rank_in_name(f) is not None for f in ets):
        by_rank = {rank_in_name(k): k for k in kinetos}
        ranks = tuple(
            RankInputs(
                rank=rank_in_name(f),
                files=(f, *([by_rank[rank_in_name(f)]] if rank_in_name(f) in by_rank else [])),
                meta=meta_for(f, loose=False) or {},
                name=name_of(f),
            )
            for f in ets
        )
        name = name_of(ets[0]).split("_rank")[0]
        return Inputs(kind=InputKind.RANKS, ranks=ranks, meta=meta_for(*ets) or {}, name=name, folder=p)
    if len(ets) == 1:
        k = kinetos[0] if len(kinetos) == 1 else None
        r = _one_trace(ets[0], k)
        return Inputs(kind=InputKind.CAPTURE, ranks=(r,), meta=r.meta, name=r.name, folder=p)
    if not ets and kinetos:
        ranks = tuple(RankInputs(rank=rank_in_name(k), files=(k,), name=name_of(k)) for k in kinetos)
        return Inputs(kind=InputKind.TRACE, ranks=ranks, meta=meta_for(p) or {}, name=p.name, folder=p)
    if not ets:  # no file named as ours: a job folder (subfolders) or traces named otherwise
        files = _folder_traces(p)
        if files:
            return _with_folder(resolve(*files), p)
    raise TraceError(f"folder holds {len(ets)} '*_et.json*' files; give one ET file", p)


def _folder_traces(p: Path) -> list[Path]:
    """The trace files of a folder, or of its subfolders when it has none (safe_io.list_files);
    [] when there are none."""
    from engine.trace.safe_io import list_files

    try:
        return list_files(p)
    except TraceError:
        return []


def _with_folder(inputs: Inputs, folder: Path) -> Inputs:
    return replace(inputs, folder=folder, name=inputs.name or folder.name)


def _sniff_et(p: Path) -> bool:
    """An execution trace (ET) by name (`*_et.json*`) or by its first bytes (`"nodes"` before any
    `"traceEvents"`); Kineto otherwise. Only orders a rank's files: the loader reads each."""
    if "_et." in p.name or p.name.endswith(".et.json") or p.name.endswith(".et.json.gz"):
        return True
    import gzip

    try:
        with gzip.open(p) if p.name.endswith(".gz") else p.open("rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError):
        return False
    nodes, events = head.find(b'"nodes"'), head.find(b'"traceEvents"')
    return nodes >= 0 and (events < 0 or nodes < events)


def resolve(*paths: str | os.PathLike, kineto: str | os.PathLike | None = None) -> Inputs:
    """What the given path(s) are (module docstring); TraceError naming the path when it is
    none of them. `kineto`: a Kineto file to pair with a single ET file."""
    if not paths:
        raise TraceError("no trace given")
    ps = [Path(p) for p in paths]
    for p in ps:
        if not p.exists():
            raise TraceError("no such file or folder", p)
    k = None
    if kineto is not None:
        k = Path(kineto)
        if not k.is_file():
            raise TraceError("no such Kineto file", k)
    if len(ps) == 1:
        p = ps[0]
        if p.is_dir():
            return _folder(p)
        if p.name.endswith("_meta.json"):
            meta = read_meta(p)
            files = tuple(Path(meta[x]) for x in ("et_path", "kineto_path") if Path(meta[x]).is_file())
            r = RankInputs(rank=meta.get("rank"), files=files, meta=meta, name=name_of(files[0]) if files else p.stem)
            return Inputs(kind=InputKind.CAPTURE, ranks=(r,), meta=meta, name=r.name, folder=p.parent)
        r = _one_trace(p, k)
        return Inputs(kind=InputKind.TRACE, ranks=(r,), meta=r.meta, name=r.name)
    if any(p.is_dir() for p in ps):  # folders given together (an ET folder and a Kineto folder)
        every: list[Path] = []
        for p in ps:
            if p.is_dir() and is_composed(p):
                raise TraceError("an exported benchmark folder is given alone, not with other traces", p)
            more = _folder_traces(p) if p.is_dir() else [p]
            if not more:
                raise TraceError("folder holds no trace (nor do its subfolders)", p)
            every += more
        return resolve(*every)
    groups: dict[int | None, list[Path]] = {}  # the files of each rank, in the order given
    for p in ps:
        groups.setdefault(rank_in_name(p), []).append(p)
    ranks = tuple(
        RankInputs(
            rank=r,
            files=tuple(sorted(fs, key=lambda f: not _sniff_et(f))) if len(fs) > 1 else tuple(fs),  # ET first
            meta=meta_for(*fs, loose=False) or {},
            name=name_of(fs[0]),
        )
        for r, fs in groups.items()
    )
    kind = InputKind.RANKS if len([r for r in groups if r is not None]) > 1 else InputKind.TRACE
    # rank files of an exported benchmark are named by their folder
    name = ps[0].parent.name if _RANK_FILE.match(ps[0].name) else name_of(ps[0]).split("_rank")[0]
    return Inputs(kind=kind, ranks=ranks, meta=meta_for(*ps) or {}, name=name)


def rank_medians(inputs: Inputs) -> dict[int, float]:
    """{rank: unprofiled median step ms} from the ranks' capture metas ({} when none)."""
    return {
        int(r.meta["rank"]): float(r.meta["median_ms"])
        for r in inputs.ranks
        if isinstance(r.meta.get("rank"), int) and r.meta.get("median_ms")
    }


__all__ = [
    "MARKER",
    "InputKind",
    "Inputs",
    "RankInputs",
    "check_folder",
    "file_sha256",
    "is_capture",
    "is_composed",
    "load_meta",
    "meta_file",
    "meta_for",
    "name_of",
    "rank_files",
    "rank_in_name",
    "rank_medians",
    "read_meta",
    "resolve",
]
