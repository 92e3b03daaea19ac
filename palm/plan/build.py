"""The steps of :func:`build_plan`, in order (each a function of its own module):

1. :func:`~palm.plan.context.plan_context`: validate, build the workload, partition the chain;
2. :func:`~palm.plan.rings.stage_rings`: the TP and DP rings of every stage;
3. :func:`~palm.plan.traffic.stage_dram`: how each stage of a mesh reaches DRAM;
4. :func:`~palm.plan.handoffs.hand_offs`: the flows between neighbouring chunks;
5. :func:`~palm.plan.memory.recompute_mode`: parameters, memory, ``recompute = "auto"``;
6. :func:`~palm.plan.traffic.sram_allocations`: what stays in SRAM (Algorithm 1) and the DRAM
   and multicast bytes of every product (mesh, :mod:`palm.plan.products`);
7. :func:`~palm.plan.chunks.chunk_cost` per chunk (under weight streaming
   :func:`~palm.plan.streaming.streamed_chunk` adds the waits on the external link, under
   bulk-synchronous execution :mod:`palm.plan.bsp` serialises each pass's phases) and
   :func:`~palm.plan.stages.stage_cost` per stage.
"""

from __future__ import annotations

from palm.network.memo import shared_geometry
from palm.plan.bsp import bsp_chunk, bsp_stage, is_bulk_synchronous
from palm.plan.chunks import OpPricer, chunk_cost
from palm.plan.context import PlanContext, plan_context
from palm.plan.handoffs import hand_offs
from palm.plan.memory import recompute_mode, stage_memory, stage_params
from palm.plan.rings import stage_rings
from palm.plan.stages import stage_cost
from palm.plan.streaming import streamed_chunk, streams_weights
from palm.plan.traffic import chunk_traffic, sram_allocations, stage_dram
from palm.plan.types import Plan
from palm.strategy import SimConfig

__all__ = ["build_plan"]


def build_plan(
    config: SimConfig, *, with_links: bool = False, context: PlanContext | None = None
) -> Plan:
    """Price ``config`` (validated again here, so hand-built configs are checked too).

    ``with_links`` keeps the per-link loads of every flow (needed by the event engine's
    per-link mode); without it only each flow's profile is kept. ``context``: the
    :func:`~palm.plan.context.plan_context` of ``config`` already built (e.g. by a memory
    check), with the same ``with_links``.
    """
    ctx = plan_context(config, with_links=with_links) if context is None else context
    if ctx.config is not config or ctx.with_links != with_links:
        raise ValueError("context was built for another configuration or link mode")
    with shared_geometry():  # the plan's own block, unless inside a study's
        return _priced(ctx)


def _priced(ctx: PlanContext) -> Plan:
    config = ctx.config
    pp = config.parallelism.pp
    rings = stage_rings(ctx)
    dram = stage_dram(ctx)
    hands = hand_offs(ctx)
    params = stage_params(ctx)
    recompute = recompute_mode(ctx, params)
    sram = sram_allocations(ctx, recompute)
    priced = OpPricer(ctx, recompute)
    chunks = tuple(
        chunk_cost(
            ctx,
            c,
            recompute=recompute,
            priced=priced,
            rings=rings,
            hands=hands,
            traffic=chunk_traffic(ctx, c, sram=sram, dram=dram),
        )
        for c in range(ctx.n_chunks)
    )
    if streams_weights(ctx):  # each pass waits on the external link (docs/model.md sec. 7d)
        chunks = tuple(streamed_chunk(ctx, ch, priced=priced) for ch in chunks)
    bsp = is_bulk_synchronous(ctx)
    if bsp:  # compute, then exchange: nothing overlaps (docs/model.md sec. 7e)
        chunks = tuple(bsp_chunk(ctx, ch, priced=priced) for ch in chunks)
    stages = tuple(
        stage_cost(
            ctx,
            s,
            chunks=[ch for ch in chunks if ch.stage == s],
            params=params[s],
            memory=stage_memory(ctx, s, recompute, params=params[s]),
            rings=rings,
            allocations=sram.allocations[s],
            dram=dram,
        )
        for s in range(pp)
    )
    if bsp:
        stages = tuple(bsp_stage(st) for st in stages)
    return Plan(
        config=config,
        workload=ctx.workload,
        placement=ctx.placement,
        rates=ctx.rates,
        micro_batches=ctx.micro_batches,
        stages=stages,
        chunks=chunks,
        training=ctx.training,
        recompute=recompute,
        tp_profiles=rings.tp,
        dp_profiles=rings.dp,
        send_profiles=hands.send_profiles,
        grad_profiles=hands.grad_profiles,
        dram=dram,
        sram=tuple(tuple(sorted(a.items())) for a in sram.allocations) if ctx.mesh else (),
    )
