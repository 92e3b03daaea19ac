"""Turning per-stage timings into a :class:`~palm.result.Result`; shared by the engines."""

from __future__ import annotations

from collections.abc import Sequence

from palm.plan import Plan
from palm.result import LinkResult, MemoryResult, OperatorResult, Result, StageResult

__all__ = ["assemble_result", "dp_exposed_time", "hand_off_bytes"]


def hand_off_bytes(plan: Plan) -> tuple[list[float], list[float]]:
    """Bytes each stage sends to and receives from its neighbours in one iteration, by the
    plan (every micro-batch's activation forward and, in training, its gradient back)."""
    par = plan.config.parallelism
    group = par.tp * par.data_ranks
    m = plan.micro_batches
    sent = [0.0] * par.pp
    received = [0.0] * par.pp
    for ch in plan.chunks[:-1]:
        nxt = (ch.index + 1) % par.pp
        volume = m * group * ch.send_bytes
        sent[ch.stage] += volume
        received[nxt] += volume
        if plan.training:
            sent[nxt] += volume
            received[ch.stage] += volume
    return sent, received


def cfg_recompute_auto(plan: Plan) -> bool:
    return plan.training and plan.config.training.recompute == "auto"


def dp_exposed_time(*, allreduce_s: float, buckets: int, last_backward_s: float) -> float:
    """Data-parallel gradient all-reduce time left after the last micro-batch's backward.

    Gradients are reduced in ``buckets`` equal buckets (PyTorch DDP, Li et al. 2020, sec. 3.2.3),
    bucket ``k`` becoming ready ``(k+1)/buckets`` of the way through the last backward pass and
    the buckets reduced one after another on the ring. If a bucket reduces faster than it is
    produced only the last bucket is exposed; otherwise the reduction runs back to back from
    the first bucket on: ``max(T/n, T - B (n-1)/n)``.
    """
    if allreduce_s <= 0 or buckets <= 0:
        return 0.0
    per = allreduce_s / buckets
    return max(per, allreduce_s - last_backward_s * (buckets - 1) / buckets)


def assemble_result(
    plan: Plan,
    *,
    engine: str,
    pipeline_busy_s: Sequence[float],
    dp_exposed_s: Sequence[float],
    iteration_time_s: float,
    bubble_s: Sequence[float],
    sent_bytes: Sequence[float],
    received_bytes: Sequence[float],
    events: int | None,
    wall_s: float,
    links: tuple[LinkResult, ...] | None = None,
    dram: tuple[float, ...] | None = None,
    notes: tuple[str, ...] = (),
) -> Result:
    if cfg_recompute_auto(plan):
        fits = max((st.memory.total_bytes for st in plan.stages), default=0.0) <= (
            plan.memory_capacity_bytes
        )
        notes = (
            *notes,
            f"recompute auto: {plan.recompute} (the least that fits in memory)"
            if fits
            else f"recompute auto: {plan.recompute}, and even that does not fit in memory",
        )
    cfg = plan.config
    m = plan.micro_batches
    devices = plan.devices
    peak = plan.rates.peak_flops
    t = iteration_time_s
    # FLOPs per device per iteration; every device of a stage does the same work
    model_flops = sum(m * (c.forward_flops + c.backward_flops) for c in plan.chunks)
    hw_flops = sum(
        m * (c.forward_flops + c.backward_flops + c.recompute_flops) for c in plan.chunks
    )
    per_stage_devices = cfg.parallelism.tp * cfg.parallelism.data_ranks
    model_tflops = model_flops * per_stage_devices / devices / t / 1e12
    hw_tflops = hw_flops * per_stage_devices / devices / t / 1e12
    stages = []
    for st, busy, exposed, bub, sent, received in zip(
        plan.stages,
        pipeline_busy_s,
        dp_exposed_s,
        bubble_s,
        sent_bytes,
        received_bytes,
        strict=True,
    ):
        total_busy = busy + exposed + st.optimizer_s
        stages.append(
            StageResult(
                stage=st.stage,
                layers=sum(c.layers for c in st.chunks),
                forward_s=st.forward_s,
                backward_s=st.backward_s,
                busy_s=total_busy,
                idle_s=max(0.0, t - total_busy),
                bubble_s=bub,
                busy_fraction=min(1.0, total_busy / t) if t > 0 else 0.0,
                memory_bytes=st.memory.total_bytes,
                dp_allreduce_s=st.dp_allreduce_s,
                dp_exposed_s=exposed,
                optimizer_s=st.optimizer_s,
                sent_bytes=sent,
                received_bytes=received,
            )
        )
    worst = max(plan.stages, key=lambda s: s.memory.total_bytes)
    peak_mem = worst.memory.total_bytes
    capacity = plan.memory_capacity_bytes
    samples = plan.samples_per_iteration
    tokens = plan.workload.tokens_per_sample
    return Result(
        throughput_samples_per_s=samples / t,
        iteration_time_s=t,
        model_tflops_per_device=model_tflops if plan.training else hw_tflops,
        hardware_tflops_per_device=hw_tflops,
        mfu=(model_tflops if plan.training else hw_tflops) * 1e12 / peak,
        bubble_fraction=sum(bubble_s) / (len(bubble_s) * t) if t > 0 else 0.0,
        peak_memory_bytes=peak_mem,
        memory_capacity_bytes=capacity,
        fits_memory=peak_mem <= capacity,
        memory_overflow_bytes=max(0.0, peak_mem - capacity),
        engine=engine,
        events_simulated=events,
        sim_wall_s=wall_s,
        devices=devices,
        micro_batches=m,
        sample_unit=plan.workload.sample_unit,
        tokens_per_s=samples * tokens / t if plan.workload.transformer else None,
        memory=MemoryResult(
            weights_bytes=worst.memory.weights_bytes,
            gradients_bytes=worst.memory.gradients_bytes,
            optimizer_bytes=worst.memory.optimizer_bytes,
            activations_bytes=worst.memory.activations_bytes,
        ),
        stages=tuple(stages),
        links=links,
        dram_channel_utilisation=dram,
        operators=_operators(plan),
        notes=notes,
    )


def _operators(plan: Plan) -> tuple[OperatorResult, ...] | None:
    if not plan.sram:
        return None
    return tuple(
        OperatorResult(
            stage=s,
            name=a.name,
            strategy=a.strategy,
            dram_forward_bytes=a.forward_bytes,
            dram_backward_bytes=a.backward_bytes,
            dram_update_bytes=a.update_bytes,
        )
        for s, allocs in enumerate(plan.sram)
        for _, a in allocs
    )
