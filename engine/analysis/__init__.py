"""Trace analyses: pure pandas/numpy on `Trace.events` (and the simulator's task graph), torch-free
and without plotting; `engine.figures` draws their tables.

One module per analysis (as HTA's analyzers):
  steps          ProfilerStep spans (the windows every analysis measures)
  breakdown      `TimeBreakdown`: compute / communication / exposed communication / idle per rank
                 and step (the one breakdown every page shows)
  selftime       exclusive (self) time, time by name/category, kernel and operator tables
  critical_path  the longest path of the simulator's scheduled task graph, across ranks
  stragglers     which rank holds the others up, and why
"""
