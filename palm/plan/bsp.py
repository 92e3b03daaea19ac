"""Chunks and stages under bulk-synchronous execution (``hardware.execution =
"bulk-synchronous"``; docs/model.md sec. 7e): the Graphcore IPU's model (Graphcore, "IPU
Programmer's Guide", sec. "Bulk synchronous parallel execution": a superstep is a compute
phase, a sync, then an exchange phase; Jia et al. 2019, "Dissecting the Graphcore IPU
architecture via microbenchmarking", sec. 1 and 6: tiles compute on their own memory only and
exchange data between compute phases).

Nothing overlaps a pass's compute: its operators' compute, the exchange of operands shared
inside a memory domain (the NoC multicast) and the streams from remote (streaming) memory run
one after the other, ``forward_compute_s = compute + multicast + stream``, where the overlapped
model (:mod:`palm.plan.chunks`) takes ``max(compute, multicast)`` and then the larger of that
and the stream; the tensor-parallel collectives and hand-offs already follow the compute. The
data-parallel gradient reduction runs as one exchange after the last backward pass
(``dp_buckets = 1``, as ``overlap_grad_reduce = false``). The options that would hide an
exchange behind compute are refused (:mod:`palm.cost.execution`). So the iteration is never
shorter than the overlapped one of the same plan, and still monotone in every bandwidth."""

from __future__ import annotations

import dataclasses

from palm.hardware.spec import Mesh2DHardware
from palm.plan.chunks import OpPricer
from palm.plan.context import PlanContext
from palm.plan.types import ChunkCost, StageCost

__all__ = ["is_bulk_synchronous", "bsp_chunk", "bsp_stage"]


def is_bulk_synchronous(ctx: PlanContext) -> bool:
    """Whether ``ctx``'s mesh runs bulk-synchronously."""
    hw = ctx.config.hardware
    return isinstance(hw, Mesh2DHardware) and hw.bulk_synchronous


def bsp_chunk(ctx: PlanContext, ch: ChunkCost, *, priced: OpPricer) -> ChunkCost:
    """``ch`` with each pass's compute, multicast and stream in sequence (module docstring)."""
    times = [priced(op) for op in ctx.ops(ch.index)]
    compute_f = sum(t.forward_s for t in times)
    compute_b = sum(t.backward_s for t in times)
    return dataclasses.replace(
        ch,
        forward_compute_s=compute_f + ch.multicast_forward_s + ch.stream_forward_s,
        backward_compute_s=(
            compute_b + ch.multicast_backward_s + ch.stream_backward_s
            if ctx.training
            else ch.backward_compute_s
        ),
    )


def bsp_stage(stage: StageCost) -> StageCost:
    """``stage`` with its gradient reduction in one exchange after the last backward pass."""
    return dataclasses.replace(stage, dp_buckets=min(stage.dp_buckets, 1))
