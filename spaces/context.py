"""What a search space needs to know about the fixed part of a study."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from palm.hardware.spec import Mesh2DHardware
from palm.strategy import SimConfig
from palm.workload.model import Workload, build_workload

__all__ = ["SpaceContext"]

T = TypeVar("T")


@dataclass(frozen=True)
class SpaceContext:
    """The study's base configuration and the facts derived from it that bound the space."""

    base: SimConfig
    workload: Workload
    _memo: dict[Any, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def memo(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` once per context and ``key`` (facts every trial of a study reuses)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[no-any-return]

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
