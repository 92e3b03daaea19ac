"""What a search space needs to know about the fixed part of a study."""

from __future__ import annotations

from dataclasses import dataclass

from palm.hardware.spec import Mesh2DHardware
from palm.strategy import SimConfig
from palm.workload.model import Workload, build_workload

__all__ = ["SpaceContext"]


@dataclass(frozen=True)
class SpaceContext:
    """The study's base configuration and the facts derived from it that bound the space."""

    base: SimConfig
    workload: Workload

    @classmethod
    def of(cls, base: SimConfig) -> SpaceContext:
        return cls(base=base, workload=build_workload(base.model))

    @property
    def devices(self) -> int:
        """Devices the plan must use: the cores of a mesh, else the base plan's GPU count."""
        hw = self.base.hardware
        if isinstance(hw, Mesh2DHardware):
            return hw.device_count
        return hw.gpus or self.base.parallelism.devices

    @property
    def mesh(self) -> bool:
        return isinstance(self.base.hardware, Mesh2DHardware)

    @property
    def global_batch(self) -> int:
        return self.base.training.global_batch

    @property
    def blocks(self) -> int:
        """Units a pipeline may be cut between (layers of a transformer, else operators)."""
        return self.workload.blocks

    def tp_allowed(self, tp: int) -> bool:
        m = self.base.model
        if not m.is_transformer:
            return True
        kv = m.kv_heads or m.heads
        return m.heads % tp == 0 and m.ffn_hidden % tp == 0 and (kv % tp == 0 or tp % kv == 0)
