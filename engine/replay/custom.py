"""Custom rebuilders for library ops the generic dispatcher cannot replay faithfully (stub)."""

from __future__ import annotations


class CustomOps:
    def __init__(self, seed: int = 0):
        self.seed = seed

    def handles(self, name: str) -> bool:
        return False

    def prepare(self, op_id, name, schema, ins, outs, device):
        raise NotImplementedError
