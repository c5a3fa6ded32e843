"""Performance model and what-if simulator (torch-free: imports only numpy, pandas and engine.trace).

Public API:
    simulate(trace, spec=None, config=None, progress=None) -> SimResult
    WhatIfSpec.parse(dict | json | path)  (engine.simulate.whatif)
    build_graph(events, config) -> TaskGraph; solve(graph) -> Schedule
    export_kineto(events, path)

The cost model's microbenchmark fit (engine/simulate/calibrate.py) imports torch lazily and is
never imported from here.
"""

from engine.simulate.api import simulate
from engine.simulate.config import SimConfig
from engine.simulate.graph import build_graph
from engine.simulate.result import SimResult, export_kineto
from engine.simulate.schedule import DependencyCycleError, Schedule, solve
from engine.simulate.taskgraph import EdgeKind, TaskGraph

__all__ = [
    "DependencyCycleError",
    "EdgeKind",
    "Schedule",
    "SimConfig",
    "SimResult",
    "TaskGraph",
    "build_graph",
    "export_kineto",
    "simulate",
    "solve",
]
