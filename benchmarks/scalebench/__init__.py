"""Sections of benchmarks/scale.py, one module each: `run(quick, scratch) -> dict` with a
`summary` dict of the headline figures and the pass/fail of each issue-22 target."""
