"""SRAM allocation and DRAM traffic of a mesh stage (paper Algorithm 1, sec. IV-C,
:mod:`palm.cost.sram`): what stays in each core's SRAM, the DRAM bytes each pass streams per
micro-batch, and the stage's :class:`~palm.network.dram.DramAccess` that prices them."""

from __future__ import annotations

from dataclasses import dataclass

from palm.cost.memory import StateBytes
from palm.cost.sram import OpFootprint, SramAllocation, allocate_sram
from palm.hardware.spec import Mesh2DHardware
from palm.network.dram import DramAccess, dram_access
from palm.network.loads import dram_channel_cores
from palm.plan.context import PlanContext
from palm.workload.ops import Op, TransformerLayer

__all__ = ["ChunkTraffic", "stage_dram", "sram_allocations", "chunk_traffic"]


@dataclass(frozen=True)
class ChunkTraffic:
    """DRAM bytes per device of one chunk and one micro-batch, and their seconds on the stage's
    DRAM access (zero on a cluster)."""

    forward_bytes: float = 0.0
    backward_bytes: float = 0.0
    forward_s: float = 0.0
    backward_s: float = 0.0
    fetch_bytes: float = 0.0
    fetch_s: float = 0.0


def stage_dram(ctx: PlanContext) -> tuple[DramAccess, ...] | None:
    """How each stage's cores reach DRAM (mesh only, :mod:`palm.network.dram`)."""
    hw = ctx.config.hardware
    if not ctx.mesh:
        return None
    assert isinstance(hw, Mesh2DHardware)
    channels_at = dram_channel_cores(hw)
    return tuple(
        dram_access(hw, ctx.regions[s], channels_at, with_links=ctx.with_links)
        for s in range(ctx.config.parallelism.pp)
    )


def sram_allocations(ctx: PlanContext, recompute: str) -> list[dict[int, SramAllocation]]:
    """Algorithm 1 per stage (mesh): op index -> allocation; empty dicts on a cluster."""
    tr, par = ctx.config.training, ctx.config.parallelism
    allocations: list[dict[int, SramAllocation]] = [{} for _ in range(par.pp)]
    if not ctx.mesh:
        return allocations
    per_param = 28.0 if tr.optimizer == "adam" else 12.0
    for s in range(par.pp):
        indices = [i for c in ctx.chunks_of(s) for i in range(*ctx.ranges[c])]
        feet = [
            _footprint(
                ctx.workload.ops[i],
                batch=ctx.micro_batch,
                tp=ctx.tp,
                sp=ctx.sp,
                act_bytes=ctx.act_bytes,
                states=ctx.states,
                training=ctx.training,
            )
            for i in indices
        ]
        allocs = allocate_sram(
            feet,
            sram_bytes=ctx.rates.sram_bytes,
            training=ctx.training,
            full_recompute=recompute == "full",
            update_bytes_per_weight_byte=per_param
            / max(ctx.states.weights, 1e-30)
            / (par.dp if tr.zero >= 1 else 1),
        )
        allocations[s] = dict(zip(indices, allocs, strict=True))
    return allocations


def chunk_traffic(
    ctx: PlanContext,
    c: int,
    *,
    allocations: list[dict[int, SramAllocation]],
    dram: tuple[DramAccess, ...] | None,
) -> ChunkTraffic:
    """The DRAM traffic of chunk ``c`` (Algorithm 1's allocation), streamed alongside each
    pass; the first chunk also fetches its input (token ids as int32, or 8-bit pixels)."""
    if dram is None:
        return ChunkTraffic()
    stage = ctx.stage_of(c)
    lo, hi = ctx.ranges[c]
    chunk_allocs = [allocations[stage][i] for i in range(lo, hi)]
    bytes_f = sum(a.forward_bytes for a in chunk_allocs)
    bytes_b = sum(a.backward_bytes for a in chunk_allocs)
    fetch = fetch_bytes = 0.0
    if c == 0:
        w = ctx.workload
        sample = w.tokens_per_sample * 4 if w.transformer else 3 * 224**2
        fetch_bytes = ctx.micro_batch * sample / (ctx.tp * ctx.config.parallelism.dp)
        fetch = dram[stage].time(fetch_bytes)
    return ChunkTraffic(
        forward_bytes=bytes_f,
        backward_bytes=bytes_b,
        forward_s=dram[stage].time(bytes_f),
        backward_s=dram[stage].time(bytes_b),
        fetch_bytes=fetch_bytes,
        fetch_s=fetch,
    )


def _footprint(
    op: Op, *, batch: int, tp: int, sp: bool, act_bytes: float, states: StateBytes, training: bool
) -> OpFootprint:
    """Per-device sizes of ``op`` for Algorithm 1."""
    params = op.params_per_device(tp=tp)
    seq_split = tp if (sp and isinstance(op, TransformerLayer)) else 1
    out_split = seq_split if isinstance(op, TransformerLayer) else tp
    return OpFootprint(
        name=op.name,
        weights=params * states.weights,
        states=params * (states.gradients + states.optimizer) if training else 0.0,
        inputs=op.input_bytes(batch=batch, act_bytes=act_bytes) / seq_split,
        outputs=op.output_bytes(batch=batch, act_bytes=act_bytes) / out_split,
    )
