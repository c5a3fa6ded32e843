"""Which rank the launcher blames when one rank is killed and gloo aborts its peer.

Seen in a fresh-clone `make test` (tests/test_replay_distributed.py::
test_killed_rank_brings_the_run_down_and_leaves_nothing): rank 1 was SIGKILLed, rank 0's gloo
pair saw the reset and aborted (SIGABRT, signal 6), and the launcher named rank 0, the first
signal death it found. The stderr below is rank 0's real last line from that run.
"""

from __future__ import annotations

import subprocess
import sys

from engine.distributed.launch import _culprit, _is_victim

GLOO_ABORT = (
    "mystique-rank-error: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] "
    "Read error [127.0.0.1]:3713: Connection reset by peer. This is typically caused by a remote worker hanging "
    "or bugs in the application.\n"
)


def _exited(code_signal: int) -> subprocess.Popen:
    """A real child process that died of `code_signal` (its poll() is -signal)."""
    p = subprocess.Popen([sys.executable, "-c", f"import os, signal; os.kill(os.getpid(), {code_signal})"])
    p.wait()
    return p


def test_the_killed_rank_is_blamed_not_the_peer_that_gloo_aborted(tmp_path):
    procs = [_exited(6), _exited(9)]  # rank 0 aborted (SIGABRT), rank 1 killed (SIGKILL)
    errs = [tmp_path / "rank0.err", tmp_path / "rank1.err"]
    errs[0].write_text(GLOO_ABORT)
    errs[1].write_text("")  # SIGKILL: nothing written
    failed = _culprit(procs, errs, [0, 1])
    assert (failed.rank, failed.returncode) == (1, -9)
    assert not _is_victim(failed)


def test_an_abort_with_a_dropped_connection_is_a_victim(tmp_path):
    procs = [_exited(6)]
    err = tmp_path / "rank0.err"
    err.write_text(GLOO_ABORT)
    failed = _culprit(procs, [err], [0])
    assert failed.rank == 0 and _is_victim(failed)  # the launcher then waits for the cause
