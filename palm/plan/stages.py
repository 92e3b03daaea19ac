"""One :class:`~palm.plan.types.StageCost` per pipeline rank: its chunks, memory, and the
end-of-iteration work, i.e. the data-parallel gradient reduction (merged per group as DDP
buckets merge them) and the optimizer step (memory-bound; from DRAM on a mesh whose model state
is not in SRAM).

Under ZeRO 1-2 the gradient all-reduce of time ``T`` becomes a reduce-scatter and, after the
optimizer step, an all-gather of the updated weights, ``T/2`` each (ring collectives moving the
same bytes; Rajbhandari et al. 2020, sec. 7). The reduce-scatter overlaps the last backward
pass bucket by bucket (``dp_allreduce_s``); the all-gather cannot, since it needs the step's
result (``dp_param_gather_s``). Without ``overlap_param_gather`` it is exposed in full between
the step and the next forward pass (``param_gather_exposed_s = T/2``): Megatron-Core's
``DistributedOptimizer.step_with_ready_grads`` (``megatron/core/optimizer/distrib_optimizer.py``
@00119989) calls ``start_param_sync`` synchronously after the step unless
``overlap_param_gather``; DeepSpeed's ``DeepSpeedZeroOptimizer.step``
(``deepspeed/runtime/zero/stage_1_and_2.py`` @02aa38c3) runs ``all_gather_dp_groups`` after the
step, "ready for next round forward". With ``overlap_param_gather`` it is the bucket chain of
:func:`~palm.cost.overlap.param_gather_chain_exposed_s`, never more than ``T/2``. PyTorch FSDP
``SHARD_GRAD_OP`` (``fsdp = true`` with ``zero = 2``) leaves nothing here: it gathers per
layer in the forward passes and reduce-scatters per layer in the backward passes
(:func:`~palm.cost.overlap.fsdp_exposed_s`), as ZeRO-3 does."""

from __future__ import annotations

import math
from collections.abc import Sequence

from palm.cost.compute import DeviceRates, gemm_time
from palm.cost.memory import MemoryBreakdown
from palm.cost.overlap import param_gather_chain_exposed_s
from palm.cost.sram import SramAllocation
from palm.hardware.spec import Mesh2DHardware
from palm.network.dram import DramAccess
from palm.plan.context import PlanContext
from palm.plan.memory import stage_expert_params
from palm.plan.rings import StageRings
from palm.plan.types import ChunkCost, StageCost
from palm.strategy import SimConfig
from palm.workload.moe import MoELayer
from palm.workload.ops import Collective, Gemm, Op

__all__ = [
    "MAX_DP_BUCKETS",
    "stage_cost",
    "optimizer_time",
    "optimizer_bytes",
]


def _streams_weights(ctx: PlanContext) -> bool:
    hw = ctx.config.hardware
    return isinstance(hw, Mesh2DHardware) and hw.weight_streaming


#: most gradient buckets of a stage's DP reduction (docs/model.md, data parallelism)
MAX_DP_BUCKETS = 1024


def stage_cost(
    ctx: PlanContext,
    s: int,
    *,
    chunks: Sequence[ChunkCost],
    params: float,
    memory: tuple[MemoryBreakdown, float],
    rings: StageRings,
    allocations: dict[int, SramAllocation],
    dram: tuple[DramAccess, ...] | None,
) -> StageCost:
    """Stage ``s`` with its ``chunks``, ``params`` per device and ``(memory, in_flight)``."""
    par, training = ctx.config.parallelism, ctx.training
    states = ctx.states
    grad_bytes = params * states.gradients if training else 0.0
    dp_s, buckets, opt_s, in_dram = 0.0, 0, 0.0, False
    gather_s = gather_exposed = 0.0
    if training:
        # gradient reductions, merged per group as DDP buckets merge them. ZeRO >= 1: the
        # reduce-scatter of gradients and all-gather of updated weights move the same bytes
        # as one all-reduce (Rajbhandari et al. 2020, sec. 7; module docstring).
        per_group: dict[str, float] = {}
        # ZeRO-3 / FSDP (and FSDP SHARD_GRAD_OP) reduce-scatter gradients layer by layer in
        # every backward pass (the chunks' zero3_backward_s): nothing is left for the step's end
        for c in ctx.chunks_of(s) if not ctx.per_layer_sharding else ():
            for op in ctx.ops(c):
                for x in op.update_collectives(
                    tp=ctx.tp, dp=ctx.ranks, grad_bytes=states.gradients
                ):
                    per_group[x.group] = per_group.get(x.group, 0.0) + x.nbytes
        reduced = sum(per_group.values())
        if reduced > 0:
            dp_s = rings.time(
                [Collective("all-reduce", v, group=g) for g, v in sorted(per_group.items())], s
            )
            # capped: beyond MAX_DP_BUCKETS the exposed time max(T/n, T - B(n-1)/n)
            # moves by less than (T + B) / n, and the event engine simulates each bucket
            buckets = min(MAX_DP_BUCKETS, max(1, math.ceil(reduced / (par.dp_bucket_mib * 2**20))))
            if not par.overlap_grad_reduce:  # one piece after the last backward pass
                buckets = 1
        grad_bytes = reduced
        if ctx.zero in (1, 2) and dp_s > 0:
            # ZeRO 1 / 2: reduce-scatter then all-gather, half of the all-reduce time each.
            # The all-gather of updated weights needs the optimizer step, so it never overlaps
            # the last backward pass: after the step it runs exposed in full (Megatron-Core's
            # distributed optimizer, DeepSpeed ZeRO 1-2) or, with overlap_param_gather, as a
            # bucket chain in the next iteration's first forward pass
            gather_s = dp_s / 2
            dp_s -= gather_s
            gather_exposed = (
                _param_gather_exposed(
                    ctx, s, chunks=chunks, per_group=per_group, rings=rings, gather_s=gather_s
                )
                if par.overlap_param_gather
                else gather_s
            )
        in_dram = dram is not None and any(a.update_bytes > 0 for a in allocations.values())
        opt_s = _optimizer_s(ctx, s, params, dram=dram[s] if dram is not None and in_dram else None)
    return StageCost(
        stage=s,
        chunks=tuple(chunks),
        params_per_device=params,
        memory=memory[0],
        in_flight_microbatches=memory[1],
        dp_grad_bytes=grad_bytes,
        dp_allreduce_s=dp_s,
        dp_buckets=buckets,
        optimizer_s=opt_s,
        optimizer_in_dram=training and dram is not None and in_dram,
        optimizer_bytes=(
            sum(optimizer_bytes(n, ctx.config, shards=k) for n, k in _shards(ctx, s, params))
            if training
            else 0.0
        ),
        dp_param_gather_s=gather_s,
        param_gather_exposed_s=gather_exposed,
    )


def _optimizer_s(ctx: PlanContext, s: int, params: float, *, dram: DramAccess | None) -> float:
    """Seconds of stage ``s``'s optimizer step over its shards (its state in ``dram`` when
    given); none under weight streaming, whose step runs in the external memory service
    (:mod:`palm.plan.streaming`)."""
    if _streams_weights(ctx):
        return 0.0
    return sum(
        optimizer_time(n, ctx.config, ctx.rates, shards=k, dram=dram)
        for n, k in _shards(ctx, s, params)
    )


#: Megatron-Core's default DDP bucket: ``max(40M, 1M x dp)`` parameters
#: (``distributed_data_parallel.py`` @44151194: larger buckets keep big data-parallel rings
#: bandwidth-bound)
MEGATRON_BUCKET_PARAMS = 40e6
MEGATRON_BUCKET_PARAMS_PER_RANK = 1e6


def _param_gather_exposed(
    ctx: PlanContext,
    s: int,
    *,
    chunks: Sequence[ChunkCost],
    per_group: dict[str, float],
    rings: StageRings,
    gather_s: float,
) -> float:
    """Exposed weight all-gather of ``overlap_param_gather`` on stage ``s``, as Megatron-Core
    runs it: a chain of buckets per buffer (the dense weights over ``dp x cp``, the experts'
    over the expert-data-parallel group ``edp``), each bucket waited in the forward pre-hook
    of the module using it (:func:`~palm.cost.overlap.param_gather_chain_exposed_s`)."""
    expert_bytes = per_group.get("edp", 0.0)
    expert_params = stage_expert_params(ctx, s)
    expert_s = 0.0
    if expert_bytes > 0 and expert_params > 0:
        expert_s = rings.time([Collective("all-reduce", expert_bytes, group="edp")], s) / 2
    bucket = max(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK * ctx.ranks)
    exposed = 0.0
    for experts, seconds in ((False, max(0.0, gather_s - expert_s)), (True, expert_s)):
        modules = _gather_modules(ctx, chunks, experts=experts)
        params = sum(p for _, p, _ in modules)
        if seconds > 0 and params > 0:
            exposed += param_gather_chain_exposed_s(
                modules, bucket_params=bucket, seconds_per_param=seconds / params
            )
    return exposed


def _gather_modules(
    ctx: PlanContext, chunks: Sequence[ChunkCost], *, experts: bool
) -> list[tuple[float, float, float]]:
    """``(compute before, parameters, compute)`` of the modules of one gather chain over
    ``chunks`` in forward order: the experts' two grouped modules (``linear_fc1``,
    ``linear_fc2``) of every MoE layer, or the dense weights' modules (one per weight product,
    its share of the operator's dense parameters; an operator without one is one module). The
    rest of a chunk's forward pass is spread evenly before its operators' first modules (a chunk
    with none adds its forward pass before the next)."""
    out: list[tuple[float, float, float]] = []
    pending = 0.0
    for ch in chunks:
        per_op = [m for op in ctx.ops(ch.index) if (m := _op_modules(ctx, op, experts=experts))]
        if not per_op:
            pending += ch.forward_s
            continue
        own = sum(t for mods in per_op for _, t in mods)
        rest = max(0.0, ch.forward_s - own) / len(per_op)
        for mods in per_op:
            for i, (p, t) in enumerate(mods):
                out.append((pending + rest if i == 0 else 0.0, p, t))
                pending = 0.0
    return out


def _op_modules(ctx: PlanContext, op: Op, *, experts: bool) -> list[tuple[float, float]]:
    """``(parameters, forward compute)`` of ``op``'s modules in one gather chain."""
    b, tp, rates = ctx.micro_batch, ctx.tp, ctx.rates
    moe = isinstance(op, MoELayer) and op.experts > 0 and op.expert_params_per_device() > 0
    grouped: tuple[Gemm, ...] = ()
    if moe:
        assert isinstance(op, MoELayer)
        grouped = op.moe_gemms(batch=b, tp=tp)[-2:]
    if experts:
        if not moe:
            return []
        assert isinstance(op, MoELayer)
        up, down = grouped
        share = up.n / (up.n + down.k)  # fc1 holds m f_e of the (m + 1) f_e columns
        p = op.expert_params_per_device()
        return [(p * share, gemm_time(up, rates)), (p * (1 - share), gemm_time(down, rates))]
    dense = op.params_per_device(tp=tp) - (
        op.expert_params_per_device() if isinstance(op, MoELayer) else 0.0
    )
    if dense <= 0:
        return []
    weights = list(op.forward_gemms(batch=b, tp=tp))
    for g in (*grouped, *op.recompute_gemms(batch=b, tp=tp, recompute="selective")):
        if g in weights:  # the experts' products and the core attention hold no dense weight
            weights.remove(g)
    sizes = [float(g.k * g.n * g.count) for g in weights]
    if not weights or sum(sizes) <= 0:
        return [(dense, 0.0)]
    return [
        (dense * x / sum(sizes), gemm_time(g, rates)) for g, x in zip(weights, sizes, strict=True)
    ]


def _shards(ctx: PlanContext, s: int, params: float) -> tuple[tuple[float, int], ...]:
    """(parameters, ZeRO shards) of stage ``s``: dense weights over ``dp x cp``, expert weights
    over the expert-data-parallel group."""
    experts = stage_expert_params(ctx, s)
    if ctx.zero < 1:
        return ((params, 1),)
    return ((params - experts, ctx.ranks), (experts, ctx.config.parallelism.expert_dp))


def optimizer_time(
    params: float, config: SimConfig, rates: DeviceRates, *, shards: int, dram: DramAccess | None
) -> float:
    """Memory-bound optimizer step over the parameters this device updates: read gradient,
    master weight and states, write them back and the low-precision copy. Adam: 28 B per
    parameter either way (mixed: 2 + 12 read, 12 + 2 written; fp32: 16 read, 12 written); SGD:
    12 B (mixed: 2 + 4 read, 4 + 2 written; fp32: 8 read, 4 written). On a mesh whose model
    states do not fit in SRAM the traffic goes to DRAM."""
    nbytes = optimizer_bytes(params, config, shards=shards)
    if dram is not None:
        return dram.time(nbytes)
    return nbytes / rates.local_bandwidth_Bps


def optimizer_bytes(params: float, config: SimConfig, *, shards: int) -> float:
    per_param = 28.0 if config.training.optimizer == "adam" else 12.0
    return params / shards * per_param
