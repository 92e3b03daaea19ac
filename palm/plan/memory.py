"""Device memory of each stage: its parameters, the activations its in-flight micro-batches
stash (:mod:`palm.cost.memory`), and the ``recompute = "auto"`` rule that picks the least
recompute that fits (paper sec. IV-A: recompute only when memory forces it)."""

from __future__ import annotations

import dataclasses

from palm.cost.memory import MemoryBreakdown, in_flight_microbatches, stage_extra_weight_bytes
from palm.cost.offload import offload_memory_bytes, offloaded_layers
from palm.hardware.spec import Mesh2DHardware
from palm.plan.context import PlanContext
from palm.workload.moe import expert_params_per_device
from palm.workload.ops import RecomputeMode, TransformerLayer

__all__ = ["stage_params", "stage_expert_params", "stage_memory", "recompute_mode"]


def stage_params(ctx: PlanContext) -> list[float]:
    """Parameters per device of every stage (all of its chunks)."""
    out = [0.0] * ctx.config.parallelism.pp
    for c in range(ctx.n_chunks):
        out[ctx.stage_of(c)] += sum(op.params_per_device(tp=ctx.tp) for op in ctx.ops(c))
    return out


def stage_expert_params(ctx: PlanContext, s: int) -> float:
    """Of the parameters per device of stage ``s``, the experts' (sharded by ZeRO over the
    expert-data-parallel group instead of ``dp x cp``; :mod:`palm.workload.moe`)."""
    return sum(expert_params_per_device(ctx.ops(c)) for c in ctx.chunks_of(s))


def stage_memory(
    ctx: PlanContext, s: int, mode: RecomputeMode, *, params: float
) -> tuple[MemoryBreakdown, float]:
    """Memory of stage ``s`` under recompute ``mode``, and its in-flight micro-batches."""
    par = ctx.config.parallelism
    b, tp, sp, p = ctx.micro_batch, ctx.tp, ctx.sp, ctx.act_bytes
    act = 0.0
    for c in ctx.chunks_of(s):
        ops = ctx.ops(c)
        if ctx.training:
            act += sum(
                op.activation_bytes(batch=b, tp=tp, sp=sp, act_bytes=p, recompute=mode)
                for op in ops
            )
        else:
            act = max(act, max(op.output_bytes(batch=b, act_bytes=p) for op in ops) * 2)
    in_flight = in_flight_microbatches(
        parallelism=par, stage=s, micro_batches=ctx.micro_batches, training=ctx.training
    )
    freed, buffers = _offloaded_bytes(ctx, s, mode, in_flight=in_flight)
    extra = 0.0
    if ctx.training:  # FSDP gather buffers, FP8 weight copies
        extra = stage_extra_weight_bytes(
            [op for c in ctx.chunks_of(s) for op in ctx.ops(c)],
            tp=tp,
            weight_bytes=ctx.states.weights,
            zero=ctx.zero,
            ranks=ctx.ranks,
            fp8=ctx.rates.fp8_casts,
            gathered_layers=ctx.config.training.zero3_prefetch + 1,
        )
    experts = stage_expert_params(ctx, s)
    hw = ctx.config.hardware
    if isinstance(hw, Mesh2DHardware) and hw.weight_streaming:
        # the model state is off the mesh; weights are used as they stream past (docs/model.md
        # sec. 7d): SRAM holds the activations
        params, experts, extra = 0.0, 0.0, 0.0
    memory = MemoryBreakdown.for_stage(
        params=params - experts,
        states=ctx.states,
        zero=ctx.zero,
        dp=ctx.ranks,
        activation_bytes_per_microbatch=act - freed / in_flight if in_flight else act,
        in_flight=in_flight,
        extra_weights_bytes=extra,
    )
    if buffers:
        memory = dataclasses.replace(memory, activations_bytes=memory.activations_bytes + buffers)
    if experts:
        moe = MemoryBreakdown.for_stage(
            params=experts,
            states=ctx.states,
            zero=ctx.zero,
            dp=par.expert_dp,
            activation_bytes_per_microbatch=0.0,
            in_flight=0.0,
        )
        memory = MemoryBreakdown(
            *(getattr(memory, f.name) + getattr(moe, f.name) for f in dataclasses.fields(moe))
        )
    return memory, in_flight


def _offloaded_bytes(
    ctx: PlanContext, s: int, mode: RecomputeMode, *, in_flight: float
) -> tuple[float, float]:
    """Activation offload (``training.activation_offload``; :mod:`palm.cost.offload`): the
    bytes stage ``s`` no longer holds over its in-flight micro-batches, and its copy buffers
    (the largest chunk's)."""
    fraction = ctx.config.training.activation_offload
    if fraction <= 0 or not ctx.training:
        return 0.0, 0.0
    b, tp, sp, p = ctx.micro_batch, ctx.tp, ctx.sp, ctx.act_bytes
    freed = buffers = 0.0
    for c in ctx.chunks_of(s):
        layers = [op for op in ctx.ops(c) if isinstance(op, TransformerLayer)]
        if not layers:
            continue
        each = sum(
            op.activation_bytes(batch=b, tp=tp, sp=sp, act_bytes=p, recompute=mode) for op in layers
        ) / len(layers)
        gone, held = offload_memory_bytes(
            offloaded=offloaded_layers(layers=len(layers), fraction=fraction),
            layer_bytes=each,
            in_flight=in_flight,
        )
        freed += gone
        buffers = max(buffers, held)
    return freed, buffers


def recompute_mode(ctx: PlanContext, params: list[float]) -> RecomputeMode:
    """The recompute mode asked for; ``"auto"``: the least that fits every stage's memory
    (``"none"``, then ``"selective"``, else ``"full"``). Inference never recomputes."""
    asked = ctx.config.training.recompute if ctx.training else "none"
    if asked != "auto":
        return asked
    capacity = ctx.config.hardware.device_memory_bytes
    pp = ctx.config.parallelism.pp
    mode: RecomputeMode
    for mode in ("none", "selective"):
        if all(
            stage_memory(ctx, s, mode, params=params[s])[0].total_bytes <= capacity
            for s in range(pp)
        ):
            return mode
    return "full"
