"""Fleets of jobs: one signature per job, and a weighted suite of a few jobs that stands for them.

Mystique's premise is that benchmarks built from a fleet's own traces represent the fleet. This
package answers the two questions one trace at a time cannot:
  signature   where a job's step time goes (kernel classes, collectives by type, host overhead,
              idle), its dtype mix, step time, device and world size: one row per job, read
              from the trace store in bounded memory (signature.py)
  jobs        which jobs a folder holds (a file, or a folder of rank files), and ingesting them
              through the store with Dask (jobs.py)
  suite       N representative jobs with weights whose weighted signature matches the fleet's,
              with the distance and the error per class (suite.py)
  members     each pick composed into a benchmark: one step, its provenance, the ranks this
              machine can replay, each trim and refusal with its reason (members.py)
  replay      a suite folder's members replayed: the weighted fleet step time and each member's
              coverage (replay.py)
Torch-free at import (members and replay load torch when they run); scikit-learn (k-means) and SciPy (non-negative least squares) are imported lazily.
"""
