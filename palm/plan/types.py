"""The priced plan every engine consumes: one :class:`ChunkCost` per model chunk, one
:class:`StageCost` per pipeline rank, and the :class:`Plan` holding them with the profiles of
every flow (see :mod:`palm.plan`)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from palm.cost.compute import DeviceRates
from palm.cost.memory import MemoryBreakdown
from palm.cost.sram import SramAllocation
from palm.network.dram import DramAccess
from palm.network.loads import Profile
from palm.network.placement import Placement
from palm.strategy import SimConfig
from palm.workload.model import Workload

__all__ = ["ChunkCost", "StageCost", "Plan"]


@dataclass(frozen=True)
class ChunkCost:
    """One model chunk on one device, for one micro-batch (seconds, FLOPs, bytes).

    ``multicast_*``: the NoC multicast of operands shared inside a memory domain
    (:mod:`palm.plan.products`): bytes each device receives beyond its DRAM reads, and their
    time on the group rings (one all-gather per group,
    :func:`palm.plan.chunks.multicast_collectives`).
    The multicast runs under the pass's compute (the operands of the next block arrive while
    the current one is multiplied), so ``forward_compute_s`` is the larger of the compute and
    the forward multicast, and ``backward_compute_s + recompute_s`` of theirs and the backward
    multicast; engines price it through these (the links it loads are not yet shared with other
    flows).
    """

    index: int
    stage: int
    first_op: int
    last_op: int
    layers: int
    forward_compute_s: float
    backward_compute_s: float
    recompute_s: float
    tp_forward_s: float
    tp_backward_s: float
    recv_forward_s: float
    recv_backward_s: float
    zero3_gather_s: float
    stream_forward_s: float
    stream_backward_s: float
    fetch_s: float
    forward_flops: float
    backward_flops: float
    recompute_flops: float
    tp_bytes_forward: float
    tp_bytes_backward: float
    tp_sent_forward: float
    tp_sent_backward: float
    stream_bytes_forward: float
    stream_bytes_backward: float
    fetch_bytes: float
    send_bytes: float
    send_s: float
    grad_send_s: float
    multicast_forward_s: float = 0.0
    multicast_backward_s: float = 0.0
    multicast_bytes_forward: float = 0.0
    multicast_bytes_backward: float = 0.0
    zero3_backward_s: float = 0.0
    #: weight streaming (:mod:`palm.plan.streaming`): bytes of the pass on the mesh's link to
    #: its external memory (weights in; in the backward pass also gradients out)
    external_bytes_forward: float = 0.0
    external_bytes_backward: float = 0.0
    #: what the host-memory copies of an activation offload leave exposed, per pass
    #: (:func:`palm.plan.chunks.offload_s`): the compute stream waits for them
    offload_forward_s: float = 0.0
    offload_backward_s: float = 0.0

    @property
    def forward_busy_s(self) -> float:
        """Compute (or the weight stream it waits on) of one forward pass, and the offload's
        copies it waits for."""
        return max(self.forward_compute_s, self.stream_forward_s) + self.offload_forward_s

    @property
    def backward_busy_s(self) -> float:
        return (
            max(self.backward_compute_s + self.recompute_s, self.stream_backward_s)
            + self.offload_backward_s
        )

    @property
    def forward_comm_s(self) -> float:
        """Collectives on the critical path of one forward pass."""
        return self.tp_forward_s + self.recv_forward_s + self.zero3_gather_s

    @property
    def backward_comm_s(self) -> float:
        return self.tp_backward_s + self.recv_backward_s + self.zero3_backward_s

    @property
    def forward_s(self) -> float:
        return self.fetch_s + self.forward_busy_s + self.forward_comm_s

    @property
    def backward_s(self) -> float:
        return self.backward_busy_s + self.backward_comm_s


@dataclass(frozen=True)
class StageCost:
    """One pipeline rank: its chunks, memory and end-of-iteration work."""

    stage: int
    chunks: tuple[ChunkCost, ...]
    params_per_device: float
    memory: MemoryBreakdown
    in_flight_microbatches: float
    dp_grad_bytes: float
    dp_allreduce_s: float
    dp_buckets: int
    optimizer_s: float
    optimizer_in_dram: bool = False
    optimizer_bytes: float = 0.0
    #: ZeRO 1 / 2: the weight all-gather after the optimizer step, moved out of
    #: ``dp_allreduce_s`` (then the gradient reduce-scatter alone), and what of it is exposed
    #: after the step: all of it, or with ``overlap_param_gather`` what the next iteration's
    #: first forward pass leaves (:mod:`palm.plan.stages`)
    dp_param_gather_s: float = 0.0
    param_gather_exposed_s: float = 0.0

    @property
    def forward_s(self) -> float:
        return sum(c.forward_s for c in self.chunks)

    @property
    def backward_s(self) -> float:
        return sum(c.backward_s for c in self.chunks)


@dataclass(frozen=True)
class Plan:
    config: SimConfig
    workload: Workload
    placement: Placement
    rates: DeviceRates
    micro_batches: int
    stages: tuple[StageCost, ...]
    chunks: tuple[ChunkCost, ...]
    training: bool
    recompute: str
    tp_profiles: tuple[Profile, ...]
    dp_profiles: tuple[Profile, ...]
    send_profiles: tuple[Profile, ...]
    grad_profiles: tuple[Profile, ...]
    dram: tuple[DramAccess, ...] | None
    sram: tuple[tuple[tuple[int, SramAllocation], ...], ...] = ()
    #: what the event engine derives from the plan alone (its resources, flows and routes,
    #: :func:`palm.engines.event.engine.run_event`), built by the plan's first run and read by
    #: later ones; neither compared nor carried over by ``dataclasses.replace``
    engine_tables: dict[Hashable, Any] = field(
        init=False, default_factory=dict, compare=False, repr=False
    )

    @property
    def devices(self) -> int:
        return self.config.parallelism.devices

    @property
    def samples_per_iteration(self) -> int:
        return self.config.training.global_batch

    @property
    def memory_capacity_bytes(self) -> float:
        return self.config.hardware.device_memory_bytes
