"""Output folders: checked before the work, written atomically, one writer at a time.

Why: a replay or compose that runs for minutes and then fails to write its result loses the
whole run, and a failed re-run must never truncate the previous good result. So
  * `prepare(out)` checks the folder before any work: not a file, creatable, writable, with room
    for a probe write (read-only, unwritable, full or file-valued `--out` fail here, in one line);
  * `atomic_write(path, data)` writes a temporary sibling, fsyncs it and renames it over the
    target: readers see the old file or the new one, never half of one;
  * `atomic_folder(final)` does the same for a folder (the parse cache's entries, the trace
    store): filled under a temporary sibling, renamed into place on success, removed on failure;
  * `OutputLock(out)` takes an exclusive `flock` on the folder itself for the run (no lock file
    is left behind), so a second writer sharing `--out` is refused with the pid of the first;
    while held, a `RUNNING` marker
    (`.mystique-running.json`) says a run is under way. A run that ends (even with an error)
    removes it; a killed run leaves it behind and `stale_run(out)` reports it, so `compare`
    refuses a folder whose newest run never finished.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from engine.errors import TraceError

RUNNING_NAME = ".mystique-running.json"
_HELD: dict[str, int] = {}  # folders this process holds the lock of -> lock fd


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()  # what open() would give a new file (mkstemp makes 0600)


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if exc.errno in (errno.EROFS,):
        return "read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def prepare(out: str | os.PathLike) -> Path:
    """Create `out` if needed and prove it writable (a probe file is written, fsynced, removed)."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise TraceError("output path is a file, not a folder", p)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise TraceError("output path (or one of its parents) is a file, not a folder", p) from None
    except OSError as exc:
        raise TraceError(f"cannot create the output folder: {_why(exc)}", p) from None
    _through_temp(p, ".probe-", lambda fh: fh.write(b"x" * 4096), None, "cannot write in the output folder: {}", p)
    return p


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write `data` to `path` through a temporary sibling + fsync + rename; on failure the
    previous file is untouched and a one-line TraceError names the file."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    _through_temp(p.parent, f".{p.name}.", lambda fh: fh.write(raw), p, _KEPT, p)
    return p


@contextlib.contextmanager
def atomic_folder(final: str | os.PathLike, prefix: str = ".tmp-") -> Iterator[Path]:
    """A new temporary sibling folder of `final` to fill: on a clean exit it replaces `final`
    (an old one is removed first), on any exception it is removed and the exception propagates.
    An OSError (making the folder, the rename) propagates as is: callers word their own line."""
    dest = Path(final)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=dest.parent))
    try:
        yield tmp
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: str | os.PathLike, obj) -> Path:
    """`obj` as indented JSON at `path`, written atomically (parent folders made; numpy values
    and non-string keys serialize)."""
    from engine import jsonio

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    opts = jsonio.OPT_INDENT_2 | jsonio.OPT_SERIALIZE_NUMPY | jsonio.OPT_NON_STR_KEYS
    return atomic_write(p, jsonio.dumps(obj, option=opts, default=str))


def atomic_fill(path: str | os.PathLike, fill: Callable[[BinaryIO], object], failure: str | None = None) -> Path:
    """`atomic_write` for a writer that wants a file object (`fill(fh)`: Parquet, a stream);
    `failure` is the one-line message with a `{}` for the reason."""
    p = Path(path)
    _through_temp(p.parent, f".{p.name}.", fill, p, failure or _KEPT, p)
    return p


def atomic_copy(src: str | os.PathLike, dst: str | os.PathLike, transform=None) -> Path:
    """Stream `src` (optionally through `transform(src_fh, dst_fh)`) into `dst` atomically."""
    p = Path(dst)

    def fill(out: BinaryIO) -> None:
        with open(src, "rb") as inp:
            if transform is None:
                import shutil

                shutil.copyfileobj(inp, out)
            else:
                transform(inp, out)

    _through_temp(p.parent, f".{p.name}.", fill, p, _KEPT, p)
    return p


_KEPT = "cannot write: {} (any previous file is kept)"


def _through_temp(
    folder: Path, prefix: str, fill: Callable[[BinaryIO], object], dest: Path | None, failure: str, names: Path
) -> None:
    """Write a new temporary file in `folder` with `fill(fh)` and fsync it; then rename it onto
    `dest` (readers see the old file or the whole new one, never a part) or, with no `dest`,
    remove it (a probe that proves the folder writable). The temporary file never outlives a
    failure; an OSError becomes a one-line TraceError, `failure` with the reason, naming `names`."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp" if dest else "", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            if dest is not None:
                os.fchmod(fd, _MODE)
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if dest is not None:
            os.replace(tmp, dest)
            tmp = None
    except OSError as exc:
        raise TraceError(failure.format(_why(exc)), names) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def holds_lock(out: str | os.PathLike) -> bool:
    return _key(out) in _HELD


def _key(out) -> str:
    return os.path.realpath(os.fspath(out))


def _lock_owner(folder: Path) -> str:
    try:
        from engine import jsonio

        info = jsonio.loads((folder / RUNNING_NAME).read_bytes())
        return f"pid {info.get('pid')}, started {info.get('started')}"
    except Exception:  # noqa: BLE001 - best effort: the message is still clear without it
        return "another process"


class OutputLock:
    """Exclusive writer lock on an output folder (module docstring). Re-entrant in-process."""

    def __init__(self, out: str | os.PathLike, command: str = ""):
        self.out = Path(out)
        self.command = command
        self._fd = -1
        self._nested = False

    def __enter__(self) -> OutputLock:
        import fcntl

        prepare(self.out)
        key = _key(self.out)
        if key in _HELD:
            self._nested = True
            return self
        try:
            fd = os.open(self.out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as exc:
            raise TraceError(f"cannot open the output folder: {_why(exc)}", self.out) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise TraceError(
                f"another mystique run ({_lock_owner(self.out)}) is writing this folder; "
                "wait for it to finish or choose another output folder",
                self.out,
            ) from None
        self._fd = fd
        _HELD[key] = fd
        from engine import jsonio

        atomic_write(
            self.out / RUNNING_NAME,
            jsonio.dumps({"pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "command": self.command}),
        )
        return self

    def __exit__(self, *exc) -> None:
        if self._nested:
            return
        with contextlib.suppress(OSError):
            os.remove(self.out / RUNNING_NAME)
        _HELD.pop(_key(self.out), None)
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = -1


def stale_run(out: str | os.PathLike) -> str | None:
    """A description of a run in `out` that started and never finished (killed), else None.
    A run still in progress (lock held) is reported too: its results are not there yet."""
    import fcntl

    p = Path(out)
    marker = p / RUNNING_NAME
    if not marker.is_file():
        return None
    info = _lock_owner(p)
    if holds_lock(p):
        return None
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return f"a run ({info}) did not finish"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return f"a run ({info}) was interrupted before it finished"
    except OSError:
        return f"a run ({info}) is still writing this folder"
    finally:
        os.close(fd)


__all__ = ["OutputLock", "atomic_copy", "atomic_write", "holds_lock", "prepare", "stale_run"]
