"""Chunks under weight streaming (``hardware.execution = "weight-streaming"``; docs/model.md
sec. 7d, :mod:`palm.cost.weight_streaming`): every pass waits for its operators' weights on
the external link, and the backward pass streams their gradients out.

The link carries, per operator and micro-batch, the weights one tensor-parallel group holds,
``params_per_device(tp) x tp x weight bytes`` (the data ranks receive one broadcast of them:
SwarmX broadcasts weights and reduces gradients, Hot Chips 33, 2021), in the forward pass and
again in the backward pass, and out the same count of gradient bytes in the backward pass. The
wait is folded into the chunk's compute (``forward_compute_s``, ``backward_compute_s``), which
both engines run as the pass's busy time; the mesh has no DRAM traffic in this mode
(:func:`palm.plan.traffic.stage_dram`)."""

from __future__ import annotations

import dataclasses

from palm.cost.weight_streaming import streamed_backward_s, streamed_forward_s
from palm.hardware.spec import Mesh2DHardware
from palm.plan.chunks import OpPricer
from palm.plan.context import PlanContext
from palm.plan.types import ChunkCost

__all__ = ["streams_weights", "streamed_chunk"]


def streams_weights(ctx: PlanContext) -> bool:
    """Whether ``ctx``'s mesh runs under weight streaming."""
    hw = ctx.config.hardware
    return isinstance(hw, Mesh2DHardware) and hw.weight_streaming


def streamed_chunk(ctx: PlanContext, ch: ChunkCost, *, priced: OpPricer) -> ChunkCost:
    """``ch`` with its passes waiting on the external link (module docstring)."""
    hw = ctx.config.hardware
    assert isinstance(hw, Mesh2DHardware)
    link_Bps = hw.external_memory_gbps * 1e9
    ops = ctx.ops(ch.index)
    times = [priced(op) for op in ops]
    weights = [op.params_per_device(tp=ctx.tp) * ctx.tp for op in ops]
    w_bytes = [p * ctx.states.weights for p in weights]
    g_bytes = [p * ctx.states.gradients for p in weights]
    forward = streamed_forward_s(
        compute_s=[t.forward_s for t in times], stream_s=[b / link_Bps for b in w_bytes]
    )
    if not ctx.training:
        return dataclasses.replace(
            ch,
            forward_compute_s=max(ch.forward_compute_s, forward),
            external_bytes_forward=sum(w_bytes),
        )
    backward = streamed_backward_s(
        compute_s=[t.backward_s + t.recompute_s for t in reversed(times)],
        stream_s=[b / link_Bps for b in reversed(w_bytes)],
        out_s=[b / link_Bps for b in reversed(g_bytes)],
    )
    return dataclasses.replace(
        ch,
        forward_compute_s=max(ch.forward_compute_s, forward),
        backward_compute_s=max(ch.backward_compute_s, backward - ch.recompute_s),
        external_bytes_forward=sum(w_bytes),
        external_bytes_backward=sum(w_bytes) + sum(g_bytes),
    )
