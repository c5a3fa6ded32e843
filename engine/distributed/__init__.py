"""Multi-process runs: one process per rank over torch.distributed (see launch.py)."""

from engine.distributed.launch import LaunchResult, RankFailed, free_port, init_from_env, launch

__all__ = ["LaunchResult", "RankFailed", "free_port", "init_from_env", "launch"]
