"""SRAM allocation and DRAM traffic of a mesh stage: what stays in each core's SRAM (paper
Algorithm 1, sec. IV-C, :mod:`palm.cost.sram`), the DRAM bytes each pass streams per
micro-batch, the NoC multicast of shared operands, and the stage's
:class:`~palm.network.dram.DramAccess` that prices the DRAM bytes.

``hardware.sram_model = "blocked"`` (default) keeps Algorithm 1's decision of what stays resident
and prices every matrix product of every pass on its memory domain (:mod:`palm.plan.products`,
:mod:`palm.cost.blocking`); ``"algorithm1"`` keeps the paper's per-operator bytes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from palm.cost.memory import StateBytes
from palm.cost.sram import OpFootprint, SramAllocation, allocate_sram
from palm.hardware.spec import Mesh2DHardware
from palm.network.dram import DramAccess, dram_accesses
from palm.network.loads import dram_channel_cores
from palm.network.memo import remember
from palm.plan.context import PlanContext, unnamed
from palm.plan.products import PassTraffic, op_products, pass_traffic
from palm.workload.ops import Op, RecomputeMode, TransformerLayer

__all__ = [
    "ChunkTraffic",
    "StageSram",
    "stage_dram",
    "sram_allocations",
    "chunk_traffic",
]

# operand kinds Algorithm 1's stage-level strategy keeps in SRAM (palm.plan.products)
_RESIDENT: dict[str, frozenset[str]] = {
    "activation-stream": frozenset({"w", "g"}),
    "weight-stream": frozenset({"x"}),
    "weight-stationary": frozenset(),
    "input-stationary": frozenset(),
}


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
    multicast_forward: tuple[tuple[str, float], ...] = ()
    multicast_backward: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class StageSram:
    """Per stage, op index -> its SRAM allocation (strategy and DRAM bytes per device) and
    op index -> the NoC multicast bytes per device of its forward and backward passes, by
    group (``"tp"``, ``"dp"``)."""

    allocations: list[dict[int, SramAllocation]]
    multicast: list[dict[int, tuple[PassTraffic, PassTraffic]]]


def stage_dram(ctx: PlanContext) -> tuple[DramAccess, ...] | None:
    """How each stage's cores reach DRAM (mesh only, :mod:`palm.network.dram`); none under
    weight streaming, where the model state is off the mesh and the activations in SRAM
    (:mod:`palm.plan.streaming`)."""
    hw = ctx.config.hardware
    if not ctx.mesh:
        return None
    assert isinstance(hw, Mesh2DHardware)
    if hw.weight_streaming:
        return None
    return dram_accesses(hw, ctx.regions, dram_channel_cores(hw), with_links=ctx.with_links)


def sram_allocations(ctx: PlanContext, recompute: RecomputeMode) -> StageSram:
    """Algorithm 1 per stage (mesh), re-priced per product under ``sram_model = "blocked"``;
    empty on a cluster."""
    tr, par = ctx.config.training, ctx.config.parallelism
    out = StageSram([{} for _ in range(par.pp)], [{} for _ in range(par.pp)])
    hw = ctx.config.hardware
    if not isinstance(hw, Mesh2DHardware):
        return out
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
            / (par.dp if tr.zero_stage >= 1 else 1),
        )
        out.allocations[s] = dict(zip(indices, allocs, strict=True))
        if hw.sram_model == "blocked":
            for i, alloc in zip(indices, allocs, strict=True):
                priced = _remembered_blocked(
                    ctx, ctx.workload.ops[i], alloc, recompute, memory_domain(ctx, s)
                )
                if priced is not None:
                    out.allocations[s][i], out.multicast[s][i] = priced
    return out


def memory_domain(ctx: PlanContext, stage: int) -> tuple[int, str]:
    """How many of ``stage``'s data ranks share one read of the weights (run in lockstep,
    :mod:`palm.plan.products`), and the group whose ring multicasts them: all of them on the
    ``"dp"`` ring, except on a mesh whose tiles are chips with their own DRAM
    (``dram_placement = "per-tile"``), where chips share no memory: each chip reads its own
    copy for the ranks on it. The ranks of a stage spread over ``k`` chips in equal
    contiguous blocks share in blocks of ``ranks / k``, multicast on the split ring
    ``"k x ranks/k x tp:1"`` inside each chip; any other spread shares nothing (each rank
    reads its own weights, an upper bound)."""
    ranks = ctx.ranks
    hw = ctx.config.hardware
    if not (isinstance(hw, Mesh2DHardware) and hw.dram_placement == "per-tile") or ranks == 1:
        return ranks, "dp"
    cr, cc = hw.cores_per_tile
    cores = ctx.array(stage)  # [data rank, TP rank, (row, col)]
    tile = (cores[..., 0] // cr) * hw.tiles[1] + cores[..., 1] // cc
    counts = {len(np.unique(tile[:, t])) for t in range(tile.shape[1])}
    k = counts.pop() if len(counts) == 1 else 0  # chips under each TP rank's data ranks
    if k == 1:
        return ranks, "dp"
    blocks = tile.reshape(k, ranks // k, -1) if k and ranks % k == 0 else None
    if blocks is None or not (blocks == blocks[:, :1, :]).all():
        return 1, "dp"
    return ranks // k, f"{k}x{ranks // k}x{ctx.tp}:1"


def _remembered_blocked(
    ctx: PlanContext,
    op: Op,
    alloc: SramAllocation,
    recompute: RecomputeMode,
    domain: tuple[int, str],
) -> tuple[SramAllocation, tuple[PassTraffic, PassTraffic]] | None:
    """:func:`_blocked`, remembered inside :func:`palm.network.memo.shared_geometry` by
    every input it reads but names (the layers of a model are the same operator under other
    names, with the same allocation): the allocation returned bears ``alloc``'s name."""

    def key() -> tuple[object, ...]:
        return (
            "blocked",
            type(op),
            unnamed(op),
            unnamed(alloc),
            recompute,
            ctx.micro_batch,
            ctx.tp,
            ctx.ranks,
            domain,
            ctx.training,
            ctx.micro_batches > 1,
            ctx.act_bytes,
            ctx.states.weights,
            ctx.rates.sram_bytes,
        )

    priced = remember(key, lambda: _blocked(ctx, op, alloc, recompute, domain))
    if priced is None or priced[0].name == alloc.name:
        return priced
    return dataclasses.replace(priced[0], name=alloc.name), priced[1]


def _blocked(
    ctx: PlanContext,
    op: Op,
    alloc: SramAllocation,
    recompute: RecomputeMode,
    domain: tuple[int, str] | None = None,
) -> tuple[SramAllocation, tuple[PassTraffic, PassTraffic]] | None:
    """``alloc`` with the DRAM bytes of ``op``'s products (None: nothing to re-price, i.e.
    everything on chip or an operator without matrix products)."""
    if alloc.strategy == "on-chip":
        return None
    share, group = domain if domain is not None else (ctx.ranks, "dp")
    fwd, bwd = op_products(
        dataclasses.replace(op, name=""),
        batch=ctx.micro_batch,
        tp=ctx.tp,
        dp=share,  # the data ranks (dp x cp) run in lockstep on the same weights
        recompute=recompute,
        training=ctx.training,
        accumulate=ctx.micro_batches > 1,
    )
    fused = op.fused_attention(batch=ctx.micro_batch, tp=ctx.tp, act_bytes=ctx.act_bytes)
    if not fwd and fused is None:
        return None
    resident = _RESIDENT[alloc.strategy]
    f, b = (
        pass_traffic(
            products,
            resident_kinds=resident,
            act_bytes=float(ctx.act_bytes),
            weight_bytes=float(ctx.states.weights),
            sram_bytes=ctx.rates.sram_bytes,
        )
        for products in (fwd, bwd)
    )
    if fused is not None and "x" not in resident:
        # FlashAttention (model.attention = "flash"): Q, K, V in, O out, no scores; its
        # backward reads them and dO and writes dQ, dK, dV; a full recompute runs it again
        f = f + PassTraffic(fused.forward_bytes)
        redo = fused.forward_bytes if recompute == "full" else 0.0
        b = b + PassTraffic(fused.backward_bytes + redo if ctx.training else 0.0)
    if group != "dp":  # the weights' multicast runs on each chip's own ring
        f, b = (_regroup(t, "dp", group) for t in (f, b))
    strategy = alloc.strategy if resident else "blocked"
    priced = dataclasses.replace(
        alloc, strategy=strategy, forward_bytes=f.dram_bytes, backward_bytes=b.dram_bytes
    )
    return priced, (f, b)


def _regroup(traffic: PassTraffic, old: str, new: str) -> PassTraffic:
    """``traffic`` with its multicast on group ``old`` moved to group ``new``."""
    moved = tuple(sorted((new if g == old else g, x) for g, x in traffic.multicast_bytes))
    return dataclasses.replace(traffic, multicast_bytes=moved)


def chunk_traffic(
    ctx: PlanContext,
    c: int,
    *,
    sram: StageSram,
    dram: tuple[DramAccess, ...] | None,
) -> ChunkTraffic:
    """The DRAM traffic of chunk ``c`` (its operators' allocations), streamed alongside each
    pass, and the multicast of its shared operands; the first chunk also fetches its input
    (token ids as int32, or 8-bit pixels)."""
    if dram is None:
        return ChunkTraffic()
    stage = ctx.stage_of(c)
    lo, hi = ctx.ranges[c]
    chunk_allocs = [sram.allocations[stage][i] for i in range(lo, hi)]
    bytes_f = sum(a.forward_bytes for a in chunk_allocs)
    bytes_b = sum(a.backward_bytes for a in chunk_allocs)
    fwd, bwd = PassTraffic(), PassTraffic()
    for i in range(lo, hi):
        if i in sram.multicast[stage]:
            f, b = sram.multicast[stage][i]
            fwd, bwd = fwd + f, bwd + b
    fetch = fetch_bytes = 0.0
    if c == 0:
        w = ctx.workload
        sample = w.tokens_per_sample * 4 if w.transformer else 3 * 224**2
        fetch_bytes = ctx.micro_batch * sample / (ctx.tp * ctx.ranks)
        fetch = dram[stage].time(fetch_bytes)
    return ChunkTraffic(
        forward_bytes=bytes_f,
        backward_bytes=bytes_b,
        forward_s=dram[stage].time(bytes_f),
        backward_s=dram[stage].time(bytes_b),
        fetch_bytes=fetch_bytes,
        fetch_s=fetch,
        multicast_forward=fwd.multicast_bytes,
        multicast_backward=bwd.multicast_bytes,
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
