"""What a search space needs to know about the fixed part of a study."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from palm import feasibility
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
        """The model allows ``tp`` (:func:`palm.feasibility.tensor_parallel`)."""
        return feasibility.tensor_parallel(self.base.model, tp) is None

    def pp_allowed(self, tp: int, pp: int) -> bool:
        """``tp x pp`` divides the devices, ``pp`` fits the layers and the ``dp`` left divides
        the global batch (:mod:`palm.feasibility`)."""
        n = self.devices
        return (
            (n // tp) % pp == 0
            and feasibility.pipeline_depth(
                pp=pp, blocks=self.blocks, transformer=self.workload.transformer
            )
            is None
            and feasibility.batch_split(global_batch=self.global_batch, dp=n // (tp * pp)) is None
        )

    def cp_allowed(self, cp: int, ranks: int) -> bool:
        """Context parallelism may take ``cp`` of ``ranks`` data-parallel ranks: it divides
        them, leaves a ``dp`` that divides the global batch, and cuts the sequence as
        :func:`palm.feasibility.context_parallel` requires."""
        return (
            ranks % cp == 0
            and feasibility.batch_split(global_batch=self.global_batch, dp=ranks // cp) is None
            and feasibility.context_parallel(
                cp=cp,
                seq_len=self.base.model.seq_len,
                transformer=self.workload.transformer,
                mesh=self.mesh,
            )
            is None
        )
