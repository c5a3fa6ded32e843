"""The steps of the GPU run (benchmarks/gpu_run.py): sizes and extra models (models.py), the
measurements (steps.py), the bounded output folder (output.py)."""
