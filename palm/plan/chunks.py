"""One :class:`~palm.plan.types.ChunkCost` per model chunk: the compute of its operators
(:mod:`palm.cost.compute`, identical operators priced once), the collectives each pass runs on
its stage's rings, its DRAM streams and its hand-offs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from palm.cost.collectives import RingStep, bytes_sent_per_member, collective_time
from palm.cost.compute import OpTimes, gemm_time, linear_gemm_time, op_times
from palm.cost.offload import offload_exposed_s, offloaded_layers
from palm.cost.overlap import (
    cp_exposed_s,
    ep_overlap_exposed_s,
    fsdp_exposed_s,
    parameter_tensors,
    tp_overlap_exposed_s,
)
from palm.plan.context import PlanContext, unnamed
from palm.plan.handoffs import HandOffs
from palm.plan.rings import StageRings
from palm.plan.traffic import ChunkTraffic
from palm.plan.types import ChunkCost
from palm.workload.ops import Collective, Op, RecomputeMode, TransformerLayer

__all__ = [
    "OpPricer",
    "accumulation_s",
    "async_hidden_s",
    "chunk_collectives",
    "chunk_cost",
    "multicast_collectives",
    "offload_s",
]


@dataclass(frozen=True)
class OpPricer:
    """Per-device times and FLOPs of one micro-batch of an operator; operators equal but for
    their name are priced once."""

    ctx: PlanContext
    recompute: RecomputeMode
    _cache: dict[tuple[object, ...], OpTimes] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __call__(self, op: Op) -> OpTimes:
        key = (type(op), *unnamed(op))
        if key not in self._cache:
            ctx = self.ctx
            self._cache[key] = op_times(
                op,
                batch=ctx.micro_batch,
                tp=ctx.tp,
                sp=ctx.sp,
                recompute=self.recompute,
                rates=ctx.rates,
                training=ctx.training,
                early_stop=ctx.recompute_early_stop,
            )
        return self._cache[key]


def chunk_collectives(
    ctx: PlanContext, c: int, *, recompute: RecomputeMode, hands: HandOffs
) -> tuple[list[Collective], list[Collective]]:
    """The tensor-parallel collectives of chunk ``c``'s forward and backward passes (the
    backward one includes the forward ones a full recompute repeats); those a mesh hand-off
    takes over are left out."""
    b, tp, sp, p = ctx.micro_batch, ctx.tp, ctx.sp, ctx.act_bytes
    ops = ctx.ops(c)
    f_coll = [x for op in ops for x in op.forward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)]
    if hands.partial_out[c]:
        f_coll.pop()  # the last layer's output all-reduce happens in the hand-off
    b_coll: list[Collective] = []
    if ctx.training:
        b_coll = [
            x for op in ops for x in op.backward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
        ]
        if hands.partial_in[c]:
            b_coll.pop(0)  # the first layer's input-gradient all-reduce, likewise
        if recompute == "full":
            b_coll += [
                x
                for op in ops
                if op.recompute_gemms(batch=b, tp=tp, recompute="full")
                for x in op.forward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
            ]
    return f_coll, b_coll


def chunk_cost(
    ctx: PlanContext,
    c: int,
    *,
    recompute: RecomputeMode,
    priced: OpPricer,
    rings: StageRings,
    hands: HandOffs,
    traffic: ChunkTraffic,
) -> ChunkCost:
    """Price chunk ``c`` for one micro-batch on one device."""
    par = ctx.config.parallelism
    b, tp, p, training = ctx.micro_batch, ctx.tp, ctx.act_bytes, ctx.training
    stage = ctx.stage_of(c)
    lo, hi = ctx.ranges[c]
    ops = ctx.ops(c)
    times = [priced(op) for op in ops]
    f_coll, b_coll = chunk_collectives(ctx, c, recompute=recompute, hands=hands)
    zero3, zero3_back = _zero3_s(ctx, ops, times, rings.dp[stage])
    cp_f = cp_b = 0.0
    if par.cp > 1:  # the K/V ring against the attention it overlaps
        cp_ring, cp_n = rings.group(stage, "cp")
        cp_f, cp_b = cp_exposed_s(
            ops, batch=b, tp=tp, rates=ctx.rates, training=training, n=cp_n, step=cp_ring
        )
    full_out = ops[-1].output_bytes(batch=b, act_bytes=p)
    send_bytes = full_out / tp if c + 1 < ctx.n_chunks else 0.0  # Megatron scatter/gather
    prev_out = ctx.ops(c - 1)[-1].output_bytes(batch=b, act_bytes=p) if c else 0.0
    recv_f, recv_b = _regather_s(ctx, c, rings.tp[stage], prev_out=prev_out, full_out=full_out)
    # the multicast of shared operands runs under the pass's compute (double-buffered), so a
    # pass takes at least its time on the group rings; see ChunkCost
    multicast_f = rings.time(multicast_collectives(traffic.multicast_forward, stage, rings), stage)
    multicast_b = rings.time(multicast_collectives(traffic.multicast_backward, stage, rings), stage)
    compute_f = sum(t.forward_s for t in times)
    compute_b = sum(t.backward_s for t in times) + accumulation_s(ctx, ops)
    recompute_s = sum(t.recompute_s for t in times)
    comm_f, comm_b = _comm_exposed(
        ctx, rings, stage, ops, f_coll, b_coll, compute_s=compute_f + compute_b + recompute_s
    )
    offload_f, offload_b = offload_s(ctx, ops, times, recompute=recompute)
    gathered_f = bytes_sent_per_member(Collective("all-gather", prev_out), n=tp) if recv_f else 0.0
    gathered_b = bytes_sent_per_member(Collective("all-gather", full_out), n=tp) if recv_b else 0.0
    return ChunkCost(
        index=c,
        stage=stage,
        first_op=lo,
        last_op=hi - 1,
        layers=sum(1 for op in ops if isinstance(op, TransformerLayer)),
        forward_compute_s=max(compute_f, multicast_f),
        backward_compute_s=max(compute_b, multicast_b - recompute_s),
        recompute_s=recompute_s,
        tp_forward_s=comm_f + cp_f,
        tp_backward_s=comm_b + cp_b,
        recv_forward_s=recv_f,
        recv_backward_s=recv_b,
        zero3_gather_s=zero3,
        zero3_backward_s=zero3_back,
        stream_forward_s=traffic.forward_s,
        stream_backward_s=traffic.backward_s,
        fetch_s=traffic.fetch_s,
        forward_flops=sum(t.forward_flops for t in times),
        backward_flops=sum(t.backward_flops for t in times),
        recompute_flops=sum(t.recompute_flops for t in times),
        tp_bytes_forward=sum(x.nbytes for x in f_coll),
        tp_bytes_backward=sum(x.nbytes for x in b_coll),
        tp_sent_forward=rings.sent_bytes(f_coll, stage) + gathered_f,
        tp_sent_backward=rings.sent_bytes(b_coll, stage) + gathered_b,
        stream_bytes_forward=traffic.forward_bytes,
        stream_bytes_backward=traffic.backward_bytes,
        fetch_bytes=traffic.fetch_bytes,
        send_bytes=send_bytes,
        send_s=hands.send_s(c, send_bytes),
        grad_send_s=hands.send_s(c, send_bytes, backward=True) if training else 0.0,
        multicast_forward_s=multicast_f,
        multicast_backward_s=multicast_b,
        multicast_bytes_forward=sum(x for _, x in traffic.multicast_forward),
        multicast_bytes_backward=sum(x for _, x in traffic.multicast_backward),
        offload_forward_s=offload_f,
        offload_backward_s=offload_b,
    )


def _zero3_s(
    ctx: PlanContext, ops: Sequence[Op], times: Sequence[OpTimes], step: RingStep
) -> tuple[float, float]:
    """The exposed ZeRO-3 / FSDP parameter gathers of a chunk's forward and backward passes
    (prefetched, overlapped: :func:`~palm.cost.overlap.fsdp_exposed_s`), on the stage's
    data-parallel ring ``step``; none without per-layer sharding."""
    if not (ctx.training and ctx.per_layer_sharding and ctx.ranks > 1):
        return 0.0, 0.0
    training = ctx.config.training
    return fsdp_exposed_s(
        ops,
        times,
        tp=ctx.tp,
        weight_bytes=ctx.states.weights,
        n=ctx.ranks,
        step=step,
        interference=getattr(ctx.config.hardware, "overlap_interference", 0.0),
        backward_gathers=ctx.zero >= 3,  # SHARD_GRAD_OP keeps the forward's weights
        prefetch=training.zero3_prefetch,
        tensors=[parameter_tensors(op) for op in ops] if training.zero3_gather_per_tensor else None,
    )


def _regather_s(
    ctx: PlanContext, c: int, step: RingStep, *, prev_out: float, full_out: float
) -> tuple[float, float]:
    """Seconds of the tensor-parallel all-gather of chunk ``c``'s received hand-off (forward:
    the previous chunk's output; backward: the gradient of its own). Megatron's scatter/gather
    of the hand-off (SC21 sec. 4.1): each TP rank sends 1/tp of it and the receivers all-gather
    it; a mesh broadcasts instead. Under sequence parallelism the tensor is already split by
    sequence, so each rank sends and keeps its own part and nothing is gathered (Megatron-LM
    p2p_communication.py: ``scatter_gather_tensors_in_pipeline and not
    args.sequence_parallel``; the received shape is ``seq_length / tp``)."""
    tp = ctx.tp
    if tp == 1 or ctx.mesh or ctx.sp:
        return 0.0, 0.0
    recv_f = collective_time(Collective("all-gather", prev_out), n=tp, step=step) if c else 0.0
    recv_b = 0.0
    if ctx.training and c + 1 < ctx.n_chunks:
        recv_b = collective_time(Collective("all-gather", full_out), n=tp, step=step)
    return recv_f, recv_b


def offload_s(
    ctx: PlanContext, ops: Sequence[Op], times: Sequence[OpTimes], *, recompute: RecomputeMode
) -> tuple[float, float]:
    """Exposed seconds of a chunk's activation offload, forward and backward
    (``training.activation_offload``; :func:`palm.cost.offload.offload_exposed_s`, with one
    layer's compute as the window each copy hides behind)."""
    fraction = ctx.config.training.activation_offload
    layers = [(op, t) for op, t in zip(ops, times, strict=True) if isinstance(op, TransformerLayer)]
    if fraction <= 0 or not ctx.training or not layers:
        return 0.0, 0.0
    b, tp, sp, p = ctx.micro_batch, ctx.tp, ctx.sp, ctx.act_bytes
    n = len(layers)
    return offload_exposed_s(
        layers=n,
        offloaded=offloaded_layers(layers=n, fraction=fraction),
        layer_bytes=sum(
            op.activation_bytes(batch=b, tp=tp, sp=sp, act_bytes=p, recompute=recompute)
            for op, _ in layers
        )
        / n,
        host_Bps=getattr(ctx.config.hardware, "host_link_gbps", 0.0) * 1e9,
        forward_layer_s=sum(t.forward_s for _, t in layers) / n,
        backward_layer_s=sum(t.backward_s + t.recompute_s for _, t in layers) / n,
    )


def accumulation_s(ctx: PlanContext, ops: Sequence[Op]) -> float:
    """Time one micro-batch's backward pass spends adding the chunk's weight gradients into
    the accumulation buffer when that add is a kernel of its own
    (``training.grad_accumulation_fusion = false``): Megatron-LM's local DDP registers a hook
    per parameter that runs ``param.main_grad.add_(param.grad.data)`` after every
    micro-batch's backward pass (``megatron/model/distributed.py`` ``_make_param_hook``
    @v2.5), which reads the fresh 16-bit gradient and reads and writes the buffer, at HBM
    bandwidth. The buffer is fp32 with ``bf16`` (Megatron-LM accumulates and all-reduces in
    fp32 then) and 16-bit otherwise (the SC21 runs' ``--fp16`` without
    ``--accumulate-allreduce-grads-in-fp32``). From 2022 Megatron fuses the add into the
    weight-gradient GEMM's epilogue (``--gradient-accumulation-fusion``, on by default from
    83b1e42f30, 2022-02-13), where its bytes ride under the compute-bound product: no pass."""
    tr = ctx.config.training
    if not ctx.training or tr.grad_accumulation_fusion or ctx.mesh:
        return 0.0
    params = sum(op.params_per_device(tp=ctx.tp) for op in ops)
    buffer = 4.0 if tr.precision == "bf16" else ctx.states.gradients
    return params * (ctx.states.gradients + 2.0 * buffer) / ctx.rates.local_bandwidth_Bps


def multicast_collectives(
    per_group: tuple[tuple[str, float], ...], stage: int, rings: StageRings
) -> list[Collective]:
    """The multicast of shared operands as one all-gather per group: an all-gather over ``n``
    members sends ``(n - 1) / n`` of its buffer from each, so a buffer of ``x n / (n - 1)``
    delivers the ``x`` bytes each device receives, in ``x / bw + (n - 1) lat``."""
    out = []
    for group, x in per_group:
        n = rings.group(stage, group)[1]
        if n > 1 and x > 0:
            out.append(Collective("all-gather", x * n / (n - 1), group=group))
    return out


#: the expert groups of a MoE layer: their dispatch / combine is not pipelined with the
#: linear products by ``tp_comm_overlap`` (Transformer Engine's userbuffers overlap only the
#: sequence-parallel all-gather and reduce-scatter of TP)
_EXPERT_GROUPS = ("ep", "etp")


def _comm_exposed(
    ctx: PlanContext,
    rings: StageRings,
    stage: int,
    ops: Sequence[Op],
    f_coll: list[Collective],
    b_coll: list[Collective],
    *,
    compute_s: float,
) -> tuple[float, float]:
    """Collectives of the forward and backward pass left on the critical path: the TP ones
    as :func:`_tp_exposed` prices them; the expert-parallel ones in full or, with
    ``moe_a2a_overlap``, what the compute of the chunk's passes cannot hide
    (:func:`~palm.cost.overlap.ep_overlap_exposed_s`), charged to the backward pass."""

    def split(colls: list[Collective]) -> tuple[list[Collective], list[Collective]]:
        expert = [x for x in colls if x.group in _EXPERT_GROUPS]
        return [x for x in colls if x.group not in _EXPERT_GROUPS], expert

    tp_f, ep_f = split(f_coll)
    tp_b, ep_b = split(b_coll)
    out_f = _tp_exposed(ctx, rings.time(tp_f, stage), ops, backward=False)
    out_b = _tp_exposed(ctx, rings.time(tp_b, stage), ops, backward=True)
    if ctx.config.parallelism.tp_async_backward and not ctx.config.parallelism.tp_comm_overlap:
        out_b -= async_hidden_s(ctx, rings, stage, ops)
    ep_f_s, ep_b_s = rings.time(ep_f, stage), rings.time(ep_b, stage)
    if ctx.config.parallelism.moe_a2a_overlap:
        return out_f, out_b + ep_overlap_exposed_s(comm_s=ep_f_s + ep_b_s, compute_s=compute_s)
    return out_f + ep_f_s, out_b + ep_b_s


def async_hidden_s(ctx: PlanContext, rings: StageRings, stage: int, ops: Sequence[Op]) -> float:
    """TP time of a backward pass hidden by Megatron's asynchronous tensor-parallel
    communication (``parallelism.tp_async_backward``; ``--async-tensor-model-parallel-
    allreduce``, Megatron-LM from 2021-09, b462d2545d, and Megatron-Core's
    ``LinearWithGradAccumulationAndAsyncCommunication``): a column-parallel linear (QKV, FC1)
    launches the collective of its input gradient (an all-reduce, or with sequence
    parallelism a reduce-scatter, its re-gathered input overlapping the data-gradient
    product) and computes its weight gradient meanwhile. Of a layer's backward collectives,
    mirrors of the forward ones, those of the column-parallel linears are half; each layer
    hides ``min(half its backward collectives, its column-parallel weight-gradient
    products)`` (each product as long as its forward one). The collectives a full
    recompute repeats are synchronous."""
    b, tp, sp, p = ctx.micro_batch, ctx.tp, ctx.sp, ctx.act_bytes
    if tp <= 1 or not ctx.training:
        return 0.0
    hidden = 0.0
    for op in ops:
        if not isinstance(op, TransformerLayer):
            continue
        own = [
            x
            for x in op.backward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
            if x.group not in _EXPERT_GROUPS
        ]
        column = [
            g for g in op.forward_gemms(batch=b, tp=tp) if g.fp8 and g.n != op.hidden
        ]  # QKV, FC1 (and the gate): their output is the sharded dimension
        wgrad = sum(gemm_time(g, ctx.rates) for g in column)
        hidden += min(rings.time(own, stage) / 2, wgrad)
    return hidden


def _tp_exposed(ctx: PlanContext, total_s: float, ops: Sequence[Op], *, backward: bool) -> float:
    """TP collectives left on the critical path: all of them, or with ``tp_comm_overlap`` what
    the linear products they are pipelined with cannot hide (:mod:`palm.cost.overlap`)."""
    tp = ctx.tp
    if not (ctx.config.parallelism.tp_comm_overlap and tp > 1 and total_s > 0):
        return total_s
    hidden = sum(linear_gemm_time(op, batch=ctx.micro_batch, tp=tp, rates=ctx.rates) for op in ops)
    return tp_overlap_exposed_s(comm_s=total_s, gemm_s=hidden * (2 if backward else 1))
