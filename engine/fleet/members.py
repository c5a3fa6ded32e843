"""A suite's picks composed into benchmarks: one step each, its provenance, ranks trimmed to this machine.

Per pick (a signature row: a trace file, or a folder of rank files):
  sources   per rank, the file compose reads: the capture's ET when one lies beside the Kineto
            file (`<name>_et.json.gz` for `<name>_kineto.json.gz`), else the Kineto file itself,
            whose ET compose synthesizes (engine.compose.synth; Kineto-only jobs);
  step      the `ProfilerStep#N` of median duration in the Kineto file (the step the signature's
            `step_ms` stands for), selected as `{"module": "ProfilerStep#N"}`; a source without
            that step takes its first step, a trace without step spans the whole trace (said so);
  ranks     the ranks the job's files hold, in rank order, trimmed (each trim with its reason) to
            `max_ranks` (default: this machine's CPU count, one replay process per rank) and then
            to what the distributed launcher's memory check admits (engine.replay.budget: every
            rank's measured process baseline + planned peak, which must fit at once);
  refused   a pick that cannot be composed (GPU activity only, no shapes, no replayable op in its
            step...) is listed with its one-line reason, never dropped.
Every member's folder is an exported benchmark (engine.compose.export) that `mystique replay`
runs; the suite's manifest (engine.fleet.suite.manifest) lists it with its weight.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import TraceError
from engine.progress import Progress, report

_KINETO_SUFFIX = re.compile(r"_kineto(\.json(?:\.gz)?)$")


@dataclass(kw_only=True, slots=True)
class RankSource:
    """One recorded rank of a pick: the file compose reads and the Kineto file it came from."""

    rank: int
    source: str
    kineto: str | None


def _partner_et(kineto: Path) -> Path | None:
    m = _KINETO_SUFFIX.search(kineto.name)
    if not m:
        return None
    for ext in (".json.gz", ".json"):
        p = kineto.with_name(kineto.name[: m.start()] + "_et" + ext)
        if p.is_file():
            return p
    return None


def rank_sources(path: str) -> list[RankSource]:
    """The recorded ranks of a pick's path (module doc), in rank order."""
    from engine.trace.layout import resolve

    inputs = resolve(path)
    out = []
    for k, r in enumerate(inputs.ranks):
        files = [Path(f) for f in r.files]
        et = next((f for f in files if re.search(r"_et\.json", f.name)), None)
        kin = next((f for f in files if f is not et), None)
        if et is None and kin is not None:
            et = _partner_et(kin)
        src = et or kin
        if src is None:
            continue
        rank = r.rank
        if rank is None and kin is not None:  # one file: the rank its distributedInfo records
            import engine.trace as T

            rank = next(iter(T.load(kin).meta.get("ranks") or []), None)
        out.append(
            RankSource(rank=int(rank) if rank is not None else k, source=str(src), kineto=str(kin) if kin else None)
        )
    return sorted(out, key=lambda s: s.rank)


def _is_step(names: list[str]) -> list[bool]:
    """Which names are steps, by the one step model (engine.trace.steps)."""
    import pandas as pd

    from engine.trace.steps import step_mask

    return [bool(x) for x in step_mask(pd.Series(names, dtype=object))] if names else []


def _step_number(name: str) -> tuple[int, str]:
    """A step's number (`...#N`) for ordering; names without one sort after, by name."""
    tail = name.rsplit("#", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 62, name)


def median_step(kineto: str | None) -> tuple[str | None, float | None, int]:
    """(name, duration in ms, steps in the file) of the median-duration `ProfilerStep#N` span."""
    if kineto is None:
        return None, None, 0
    import engine.trace as T
    from engine.trace.steps import measured_iterations

    its = measured_iterations(T.load(kineto))
    its = [i for i, ok in zip(its, _is_step([str(i.get("name", "")) for i in its])) if ok]
    if not its:
        return None, None, 0
    by = sorted(its, key=lambda i: (float(i["dur_us"]), float(i["ts_us"])))
    mid = by[(len(by) - 1) // 2] if len(by) % 2 else by[len(by) // 2]  # the upper median: a real span
    return str(mid["name"]), float(mid["dur_us"]) / 1000.0, len(its)


@dataclass(kw_only=True, slots=True)
class Member:
    """One pick's outcome: its benchmark folder (None when refused), provenance and trims."""

    job: str
    path: str
    weight: float
    benchmark: str | None = None
    refused: str | None = None
    step: str | None = None
    step_ms: float | None = None
    ranks_recorded: int = 0
    world_size: int | None = None
    ranks_kept: list[int] = field(default_factory=list)
    trims: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


def _step_in(trace, step: str | None) -> tuple[str | None, str]:
    """The step to select in a loaded source and how it was chosen."""
    uniq = [str(n) for n in trace.ops["name"].astype(str).unique()] if len(trace.ops) else []
    names = [n for n, ok in zip(uniq, _is_step(uniq)) if ok]
    if step is not None and step in names:
        return step, "the median step of the recorded Kineto trace"
    if names:
        first = sorted(names, key=_step_number)[0]
        return first, "the source's first step (its Kineto median step is not in it)"
    return None, "the whole trace (no ProfilerStep span recorded)"


def _compose_rank(rs: RankSource, step: str | None, name: str):
    """(Benchmark, provenance) of one step of one recorded rank; TraceError when it cannot be composed."""
    import engine.trace as T
    from engine.compose import compose
    from engine.compose.spec import BenchmarkSpec, Segment

    trace = T.load(rs.source)
    if not trace.has_et and trace.has_kineto:
        from engine.compose.synth import load_synthesized

        trace = load_synthesized(rs.source)
    chosen, how = _step_in(trace, step)
    spec = BenchmarkSpec(
        sources=(os.path.abspath(rs.source),),
        segments=(Segment(selection={"module": chosen} if chosen else {}, label=chosen or "whole trace"),),
        name=name,
        warmup=1,
        iters=5,
    )
    bench = compose(spec)
    prov: dict[str, Any] = {
        "rank": rs.rank,
        "source": os.path.abspath(rs.source),
        "kineto": os.path.abspath(rs.kineto) if rs.kineto else None,
        "selection": spec.segments[0].selection,
        "step": chosen,
        "step_choice": how,
        "replay_ops": len(bench.replay_ids[0]),
    }
    if trace.meta.get("synthesized"):
        from engine.compose.synth import SynthReport

        prov["synthesized"] = SynthReport.from_dict(trace.meta["synthesized"]).line()
    return bench, prov


def _merge(benches: list, ranks: list[int]):
    """One benchmark whose rank k is the k-th composed rank (recorded ranks renumbered 0..n-1)."""
    from engine.compose.benchmark import Benchmark

    first = benches[0]
    if len(benches) == 1:
        return first
    return Benchmark(
        spec=first.spec,
        ranks={k: b.ranks[0] for k, b in enumerate(benches)},
        replay_ids={k: b.replay_ids[0] for k, b in enumerate(benches)},
        meta={**first.meta, "recorded_ranks": ranks},
        context=first.context,
    )


def _memory_fit(folder: Path, n: int, available_bytes: int | None) -> tuple[int, str | None]:
    """How many of the exported ranks the launcher's memory check admits, and the reason when fewer."""
    import engine.trace as T
    from engine.compose.marker import rank_files
    from engine.replay import ReplayConfig
    from engine.replay.budget import world_budget

    files = [str(f) for _, f in sorted(rank_files(folder).items())]
    trace = T.load(*files)
    ranks = sorted(set(trace.ops["rank"].astype(int).tolist()))
    b = world_budget(trace, files, {r: r for r in ranks}, ReplayConfig(profile=False))
    room = b.available_bytes if available_bytes is None else int(available_bytes)
    worst = max(b.per_rank_bytes.values(), default=1)
    fit = int(room // max(worst, 1))
    if b.total_bytes <= room:
        return n, None
    gib = lambda x: f"{x / 2**30:.1f} GiB"  # noqa: E731
    return min(fit, n), (
        f"memory: {n} ranks need about {gib(b.total_bytes)} at once (up to {gib(worst)} per rank) and this "
        f"machine leaves {gib(room)}; ranks cannot run in waves, so {fit} fit"
    )


def compose_member(
    row: dict[str, Any],
    weight: float,
    out: Path,
    *,
    max_ranks: int | None = None,
    available_bytes: int | None = None,
) -> Member:
    """Compose one pick (a signature row) into the benchmark folder `out` (module doc)."""
    from engine.compose import export

    m = Member(job=str(row["job"]), path=str(row["path"]), weight=float(weight))
    ws = row.get("world_size")
    m.world_size = int(ws) if ws is not None and ws == ws else None
    try:
        sources = rank_sources(m.path)
        if not sources:
            raise TraceError("no trace file to compose", m.path)
        m.ranks_recorded = len(sources)
        step, step_ms, n_steps = median_step(sources[0].kineto)
        m.step_ms = step_ms
        if m.world_size and m.world_size > len(sources):
            m.trims.append(
                f"recorded world size {m.world_size}: the job's files hold {len(sources)} rank(s) "
                f"({', '.join(str(s.rank) for s in sources)}), so only those are composed"
            )
        cap = max_ranks if max_ranks is not None else (os.cpu_count() or 1)
        keep = sources
        if len(keep) > cap:
            m.trims.append(
                f"cpu: this machine runs one replay process per rank on {cap} core(s): "
                f"{len(keep)} ranks trimmed to {cap}"
            )
            keep = keep[:cap]
        benches, provs = [], []
        for rs in keep:
            b, p = _compose_rank(rs, step, re.sub(r"[^A-Za-z0-9_.-]+", "_", m.job)[:120] or "member")
            benches.append(b)
            provs.append(p)
        m.step = provs[0]["step"]
        if m.step is None or m.step != step:
            m.step_ms = None  # the recorded duration belongs to another span
        bench = _merge(benches, [rs.rank for rs in keep])
        export(bench, out)
        if len(keep) > 1:
            fit, why = _memory_fit(out, len(keep), available_bytes)
            if why is not None:
                if fit < 1:
                    raise TraceError(f"{why}: not even one rank fits")
                m.trims.append(why)
                keep, benches, provs = keep[:fit], benches[:fit], provs[:fit]
                export(_merge(benches, [rs.rank for rs in keep]), out)
        m.ranks_kept = [rs.rank for rs in keep]
        m.benchmark = str(out)
        m.provenance = {"steps_recorded": n_steps, "ranks": provs}
    except TraceError as exc:
        m.refused = str(exc)
    return m


def compose_suite(
    sigs,
    picks: list[int],
    weights: list[float],
    out: Path,
    *,
    max_ranks: int | None = None,
    available_bytes: int | None = None,
    progress: Progress | None = None,
) -> list[Member]:
    """Every pick composed under `out/members/<k>_<job>` (refused picks keep their reason)."""
    members = []
    for k, (i, w) in enumerate(zip(picks, weights, strict=True)):
        row = sigs.iloc[i].to_dict()
        report(progress, k / max(len(picks), 1), f"composing {row['job']} ({k + 1}/{len(picks)})")
        folder = out / "members" / f"{k}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', str(row['job']))[:80]}"
        m = compose_member(row, w, folder, max_ranks=max_ranks, available_bytes=available_bytes)
        if m.benchmark is not None:  # relative: the suite folder moves as one
            m.benchmark = os.path.relpath(m.benchmark, out)
        members.append(m)
    report(progress, 1.0, "composed")
    return members


__all__ = ["Member", "RankSource", "compose_member", "compose_suite", "median_step", "rank_sources"]
