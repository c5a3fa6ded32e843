"""Trace analyses: pure pandas/numpy on `Trace.events`, torch-free and without plotting;
`engine.figures` draws their tables. The analyses that walk the simulator's scheduled task graph
(the critical path, stragglers) live beside it, in engine/simulate.

One module per analysis (as HTA's analyzers):
  steps          ProfilerStep spans (the windows every analysis measures)
  breakdown      `TimeBreakdown`: compute / communication / exposed communication / idle per rank
                 and step (the one breakdown every page shows)
  selftime       exclusive (self) time, time by name/category, kernel and operator tables
"""
