"""Sections of benchmarks/simulate.py (issue 12's simulator figures), one module per concern:
common (paths, loading, captures, order-statistic CIs), reproduction (reproduction, speed,
data-parallel), whatif (what-if vs fresh captures, cost model), sharding (plan ranking)."""
