"""Closed-form engine: iteration time from the shared cost model, without contention.

Training (paper Eq. 1 generalised to unequal stages, plus hand-offs, data-parallel reduction
and optimizer step): with ``m`` micro-batches, per-micro-batch stage times ``F_s + B_s`` and
hand-off times ``c_s``,

* GPipe and 1F1B: ``T_pipe = (m - 1) max_s (F_s + B_s) + sum_s (F_s + B_s) + 2 sum_s c_s``;
* interleaved 1F1B with ``v`` chunks per device (Narayanan et al. SC21 sec. 2.2.2): the fill
  and drain shrink to one chunk per stage, ``T_pipe = m max_s (F_s + B_s)
  + (p - 1) max_chunk (F + B) + 2 sum_s c_s``.

Stage ``s`` runs its last backward ``sum_{j<s} (B_j / v + c_j)`` before stage 0 does; the
iteration ends when the last stage has finished its exposed gradient all-reduce
(:func:`~palm.engines._common.dp_exposed_time`; under ZeRO 1-2 the reduce-scatter half), its
optimizer step and, under ZeRO 1-2, the exposed all-gather of the updated weights
(``StageCost.param_gather_exposed_s``, :mod:`palm.plan.stages`).

Inference (paper sec. V-A3) is the steady state of a full pipeline without fill and drain:
one micro-batch leaves every ``max_s F_s`` seconds.

On a mesh every stage prices its DRAM reads as if it had the channels to itself; the stages
share them, so neither time may fall below the DRAM floor, the bytes all stages move over
the channels' total bandwidth (:func:`dram_floor_s`): per micro-batch for inference, per
iteration for training. The event engine reaches it by simulating the sharing.
"""

from __future__ import annotations

import time

from palm.engines._common import assemble_result, dp_exposed_time, hand_off_bytes
from palm.hardware.spec import Mesh2DHardware
from palm.plan import Plan
from palm.result import Result

__all__ = ["dram_floor_s", "run_analytical"]


def run_analytical(plan: Plan) -> Result:
    start = time.perf_counter()
    par = plan.config.parallelism
    m, p, v = plan.micro_batches, par.pp, par.chunks
    stages = plan.stages
    work = [s.forward_s + s.backward_s for s in stages]
    hand_offs = [c.send_s + c.grad_send_s for c in plan.chunks]
    if not plan.training:
        period = max(s.forward_s + (s.chunks[-1].send_s if p > 1 else 0.0) for s in stages)
        period = max(period, dram_floor_s(plan, micro_batches=1))
        t = m * period
        busy = [m * s.forward_s for s in stages]
        ends = [t] * p
        exposed = [0.0] * p
        bubble = [0.0] * p
    else:
        if v == 1:
            t_pipe = (m - 1) * max(work) + sum(work) + sum(hand_offs)
        else:
            chunk_work = max(c.forward_s + c.backward_s for c in plan.chunks)
            t_pipe = m * max(work) + (p - 1) * chunk_work + sum(hand_offs[: p - 1])
        ends = []
        lag = 0.0
        for st in stages:
            ends.append(t_pipe - lag)
            lag += st.chunks[0].backward_s + st.chunks[0].grad_send_s
        exposed = [
            dp_exposed_time(
                allreduce_s=st.dp_allreduce_s,
                buckets=st.dp_buckets,
                last_backward_s=st.chunks[0].backward_s,
            )
            for st in stages
        ]
        # ZeRO 1 / 2: the weight all-gather follows the optimizer step (exposed in full, or
        # what the first forward pass leaves of it with overlap_param_gather)
        exposed = [x + st.param_gather_exposed_s for x, st in zip(exposed, stages, strict=True)]
        t = max(e + x + st.optimizer_s for e, x, st in zip(ends, exposed, stages, strict=True))
        t = max(t, dram_floor_s(plan, micro_batches=m))
        busy = [m * w for w in work]
        bubble = [max(0.0, e - b) for e, b in zip(ends, busy, strict=True)]
    wall = time.perf_counter() - start
    sent, received = hand_off_bytes(plan)
    return assemble_result(
        plan,
        engine="analytical",
        pipeline_busy_s=busy,
        dp_exposed_s=exposed,
        iteration_time_s=t,
        bubble_s=bubble,
        sent_bytes=sent,
        received_bytes=received,
        events=0,
        wall_s=wall,
    )


def dram_floor_s(plan: Plan, *, micro_batches: int) -> float:
    """Seconds the mesh's DRAM channels need, at their full bandwidth together, for the bytes
    every core of every stage moves in ``micro_batches`` micro-batches (weight and activation
    streams, the input fetch) plus, for a whole training iteration, the optimizer step's
    reads; 0 on a GPU cluster. Per-stage DRAM times assume a stage has the channels to
    itself (interleaved placement), so this is a floor any schedule obeys."""
    if plan.dram is None:
        return 0.0
    per_micro_batch = optimizer = 0.0
    for ch in plan.chunks:
        cores = plan.dram[ch.stage].cores
        moved = ch.stream_bytes_forward + ch.fetch_bytes
        if plan.training:
            moved += ch.stream_bytes_backward
        per_micro_batch += moved * cores
    if plan.training and micro_batches == plan.micro_batches:
        optimizer = sum(
            st.optimizer_bytes * plan.dram[st.stage].cores
            for st in plan.stages
            if st.optimizer_in_dram
        )
    hw = plan.config.hardware
    assert isinstance(hw, Mesh2DHardware)
    total_Bps = plan.dram[0].channel_bandwidth_Bps * hw.dram_channels
    return (micro_batches * per_micro_batch + optimizer) / total_Bps
