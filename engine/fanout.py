"""One fan-out seam over ranks: `map_ranks(fn, items, scheduler=None, progress=None)` (issue 22).

Why Dask (`dask.distributed`) and not a home-made process pool: the same code runs serially, on
a `LocalCluster` sized to this machine, or on a cluster behind a `tcp://HOST:PORT` scheduler
address, with progress, cancellation and worker memory limits handled by a well-kept engine.
Every mode calls `fn` once per item and returns the results in item order, so a caller's
result does not depend on where it ran (tests/test_fanout.py checks the trace store with all
three). `fn` and the items must pickle (module-level functions, paths); on a cluster the workers
must see the same files (a shared filesystem) and import the same `engine`.

Schedulers (`--scheduler` on the CLI, default from MYSTIQUE_SCHEDULER, else "local"):
    "serial"          in this process, one item after the other;
    "local"           a LocalCluster of processes, one single-threaded worker per core (at most
                      one per item), each limited to an equal share of the available memory;
    "tcp://HOST:PORT" an existing `dask scheduler` (its workers do the work); `tls://HOST:PORT`
                      only when Dask's TLS configuration is given (distributed.comm.tls.ca-file
                      and a client certificate, e.g. DASK_DISTRIBUTED__COMM__TLS__CA_FILE).
One item runs serially under "local": starting workers costs more than it saves.

Connecting is bounded as a whole (issue 31): the client's start-up, Dask's handshake included,
runs on a helper thread under one deadline (CONNECT_TIMEOUT_S, or MYSTIQUE_DASK_CONNECT_S), so an address where something
listens but does not speak Dask is refused in seconds (it hung past 120 s), and any failure
there (a TLS address without TLS settings was a traceback) is one line naming the address.

Cancellation: an exception in the caller (KeyboardInterrupt, or a progress callback raising)
closes the client, which cancels the futures not yet run; a task's exception is re-raised here.
Dask is imported only when a cluster is used, so replay, capture and simulate never import it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from engine import envvars
from engine.errors import TraceError
from engine.progress import Progress, report

ENV = "MYSTIQUE_SCHEDULER"
SERIAL = "serial"
LOCAL = "local"
_ADDRESS = re.compile(r"^(tcp|tls)://[^\s:/]+:\d{1,5}$")
CONNECT_TIMEOUT_S = 10  # the default; MYSTIQUE_DASK_CONNECT_S sets another (connect_timeout_s)
CONNECT_ENV = "MYSTIQUE_DASK_CONNECT_S"


def connect_timeout_s() -> int:
    """The connect deadline in whole seconds: MYSTIQUE_DASK_CONNECT_S (1-600), else
    CONNECT_TIMEOUT_S; TraceError (one line) for any other value, never a silent clamp."""
    raw = envvars.get(CONNECT_ENV)
    if raw is None:
        return CONNECT_TIMEOUT_S
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= 600:
        raise TraceError(f"{CONNECT_ENV} must be whole seconds from 1 to 600, got {raw!r}")
    return value


def resolve(scheduler: str | None) -> str:
    """The scheduler to use: the argument, else MYSTIQUE_SCHEDULER, else "local"; TraceError
    (one line) for anything that is not serial, local or a tcp://HOST:PORT address."""
    value = (scheduler if scheduler is not None else envvars.get(ENV) or "").strip() or LOCAL
    where = "--scheduler" if scheduler is not None else ENV
    if value in (SERIAL, LOCAL) or (_ADDRESS.match(value) and value.startswith("tcp://")):
        return value
    if _ADDRESS.match(value):  # tls://
        if not _tls_configured():
            raise TraceError(
                f"bad {where} {value!r}: tls:// needs Dask's TLS settings (distributed.comm.tls.ca-file and "
                "distributed.comm.tls.client.cert, e.g. DASK_DISTRIBUTED__COMM__TLS__CA_FILE); else use tcp://HOST:PORT"
            )
        return value
    raise TraceError(f"bad {where} {value!r}: expected serial, local or tcp://HOST:PORT")


def _tls_configured() -> bool:
    try:
        import dask.config
    except ImportError:
        return False
    get = dask.config.get
    return bool(get("distributed.comm.tls.ca-file", None) and get("distributed.comm.tls.client.cert", None))


def _probe(address: str) -> None:
    """TraceError at once when nothing listens at `address` (a refused or unroutable TCP connect):
    Dask's Client retries a refused connection until its timeout, so a mistyped port cost
    CONNECT_TIMEOUT_S before its one-line error. A listener that is not a scheduler is left to the
    handshake's deadline (`_connect`)."""
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError:
        return
    if not host or port is None:
        return
    try:
        socket.create_connection((host, port), timeout=connect_timeout_s()).close()
    except OSError as exc:
        why = " ".join((exc.strerror or str(exc) or type(exc).__name__).split()).lower()
        raise TraceError(f"cannot reach the Dask scheduler at {address}: {why}") from None


def _connect(address: str):
    """A Client of the scheduler at `address`, its whole start-up under one deadline
    (`connect_timeout_s`); TraceError (one line) when it fails or does not finish in time. A start-up
    still running at the deadline is left to its daemon thread, which closes what it gets."""
    import threading

    from distributed import Client

    deadline = connect_timeout_s()
    _probe(address)

    box: dict = {}
    done = threading.Event()
    gave_up = threading.Event()

    def start() -> None:
        try:
            client = Client(address, timeout=deadline)
        except BaseException as exc:  # noqa: BLE001  # handed to the caller
            box["error"] = exc
        else:
            if gave_up.is_set():
                client.close()
            box["client"] = client
        finally:
            done.set()

    threading.Thread(target=start, name="mystique-dask-connect", daemon=True).start()
    if not done.wait(deadline + 2):
        gave_up.set()
        raise TraceError(
            f"cannot reach the Dask scheduler at {address}: no Dask handshake within {deadline} s "
            f"(something else listens there? a slower link: set {CONNECT_ENV})"
        )
    if "client" in box:
        return box["client"]
    exc = box["error"]
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    msg = " ".join(str(exc).split())[:200] or type(exc).__name__
    raise TraceError(f"cannot reach the Dask scheduler at {address}: {msg}")


def local_cluster_size(n_items: int) -> tuple[int, int]:
    """(workers, memory limit per worker in bytes): one worker per core (at most one per item),
    sharing the memory available now (cgroup-blind psutil figure, at least 256 MiB each)."""
    import psutil

    cores = os.cpu_count() or 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    n = max(1, min(cores, n_items))
    return n, max(256 << 20, psutil.virtual_memory().available // n)


def local_cluster(n_workers: int, memory_limit: int | str = "auto"):
    """A LocalCluster of `n_workers` single-threaded worker processes on 127.0.0.1, quiet.

    Why not Dask's defaults as they are: its nannies set MALLOC_TRIM_THRESHOLD_=65536 in every
    worker, which fixes glibc's trim threshold and made store ingestion ~20 % slower here
    (2.1-2.4 s against 2.6-2.8 s for 6 ranks, serial, same machine); the one-thread BLAS/OpenMP
    settings are kept (one worker per core must not oversubscribe the cores)."""
    import dask
    from distributed import LocalCluster

    one = {"OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1, "OPENBLAS_NUM_THREADS": 1}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": one}):
        return LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=":0",  # a free port: never collide with a running dashboard
            host="127.0.0.1",
            silence_logs=50,
        )


def map_ranks(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    scheduler: str | None = None,
    progress: Progress | None = None,
) -> list[Any]:
    """[fn(item) for item in items], run on `scheduler` (see the module doc); results in item order."""
    mode = resolve(scheduler)
    items = list(items)
    if mode == SERIAL or (mode == LOCAL and len(items) <= 1):
        out = []
        for i, item in enumerate(items):
            report(progress, i / max(1, len(items)), f"rank task {i + 1}/{len(items)}")
            out.append(fn(item))
        report(progress, 1.0, f"{len(items)} rank tasks done")
        return out
    return _on_dask(fn, items, mode, progress)


def _on_dask(fn, items: list, mode: str, progress: Progress | None) -> list:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise TraceError(f"scheduler {mode!r} needs dask (pip install 'dask[distributed]'), or use serial") from None
    cluster = None
    if mode == LOCAL:
        cluster = local_cluster(*local_cluster_size(len(items)))
        client = Client(cluster)
    else:
        client = _connect(mode)
    try:
        futures = client.map(fn, items, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        out: list[Any] = [None] * len(items)
        report(progress, 0.0, f"{len(items)} rank tasks on {mode}")
        for done, fut in enumerate(as_completed(futures), 1):
            out[index[fut.key]] = fut.result()  # re-raises a task's exception (a TraceError stays one)
            report(progress, done / len(items), f"rank task {done}/{len(items)} done")
        return out
    finally:
        # Closing the client cancels what has not run (cancellation, or an error in one task)
        client.close()
        if cluster is not None:
            cluster.close()
