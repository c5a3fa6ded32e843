"""The fleet simulator: hundreds of ranks from a trace store, in memory linear in the ranks.

Public API:
    simulate_fleet(store, spec=None, scheduler=None, progress=None) -> FleetResult
    is_store(path) -> bool

Why a separate path from engine.simulate.simulate: that one builds one task graph from one
pandas table of every rank's events and solves it lane by lane; at 512 ranks x 200k events it
needs ~54 GB. Here each rank is built alone (fan-out over ranks, engine.fanout), reduced to
numpy arrays (program.py), its collectives matched across ranks in vectorised form
(engine.simulate.collectives.match_groups) and all ranks solved between collective barriers
(solve.py). Torch-free; Dask is imported only when a cluster is used.
"""

from engine.simulate.fleet.api import FleetResult, is_store, simulate_fleet

__all__ = ["FleetResult", "is_store", "simulate_fleet"]
