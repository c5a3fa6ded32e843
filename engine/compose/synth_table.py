"""`python -m engine.compose.synth_table KINETO...`: the synthesis coverage table of Kineto files.

Per file: cpu_ops (counted by the synthesis, = the file's cpu_op events), synthesized nodes,
skipped by reason, and the share of the replay set a one-iteration CPU replay ran. The replay
runs only when the plan's memory estimate (engine.replay.memory, the replay's own estimator)
is under `--cap-gib` (eagerly, else with lazy allocation) and the plan has at most `--max-ops`
ops (production shapes on a 2-core CPU take minutes per thousand); otherwise the row says how much it would need, nothing is allocated.
A file that cannot be synthesized prints its one-line reason.
"""

from __future__ import annotations

import argparse
import sys

from engine.errors import TraceError


def row(path: str, cap_bytes: int, max_ops: int = 2000) -> str:
    from engine.compose.synth import load_synthesized
    from engine.replay import ReplayConfig, ReplaySession

    try:
        trace = load_synthesized(path)
    except TraceError as exc:
        return f"| {path} | refused: {exc.problem} | | | |"
    rep = trace.meta["synthesized"]
    skipped = "; ".join(f"{n} {r}" for r, n in sorted(rep["skipped"].items(), key=lambda kv: -kv[1])) or "none"
    session = ReplaySession(trace, config=ReplayConfig(warmup=0, iters=1, profile=False))
    eager, lazy = session.est_initial.eager_peak_bytes, session.est_initial.lazy_peak_bytes
    how = ""
    if eager > cap_bytes and lazy <= cap_bytes:  # inputs made per use and dropped after their last
        session = ReplaySession(trace, config=ReplayConfig(warmup=0, iters=1, profile=False, lazy=True))
        how = ", lazy"
    steps = len(session.plan.steps)
    if steps > max_ops:
        replayed = (
            f"not run: {steps} ops to replay (cap {max_ops}); needs {eager / 2**30:.1f} GiB, {lazy / 2**30:.1f} lazily"
        )
    elif min(eager, lazy) > cap_bytes:
        replayed = f"not run: needs {eager / 2**30:.1f} GiB, {lazy / 2**30:.1f} lazily (cap {cap_bytes / 2**30:.1f})"
    else:
        with session:
            session.run_iteration()
            cov = session.finish().coverage
        by = "; ".join(f"{n} {r}" for r, n in cov["by_reason"].items())
        replayed = f"{cov['replayed']}/{cov['selected']} ({cov['replayed'] / max(cov['selected'], 1):.1%}{how})"
        replayed += f": {by}" if by else ""
    return f"| {path} | {rep['cpu_ops']} | {rep['synthesized']} ({rep['rate']:.1%}) | {skipped} | {replayed} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kineto", nargs="+")
    ap.add_argument("--cap-gib", type=float, default=1.0, help="replay only under this planned peak (default 1)")
    ap.add_argument(
        "--max-ops", type=int, default=2000, help="replay only plans of at most this many ops (default 2000)"
    )
    args = ap.parse_args(argv)
    print("| trace | cpu_ops | synthesized | skipped by reason | CPU replay (replayed/selected) |")
    print("| --- | ---: | ---: | --- | --- |")
    for p in args.kineto:
        print(row(p, int(args.cap_gib * 2**30), args.max_ops), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
