"""Communication hidden behind compute: FSDP / ZeRO-3 prefetch and context-parallel rings.

**FSDP / ZeRO-3** (Rajbhandari et al. 2020, "ZeRO", sec. 5.3 and 7; PyTorch FSDP, Zhao et
al. 2023, sec. 3.3 "backward / forward prefetching"; FSDP2 ``fully_shard`` with implicit
prefetching; DeepSpeed ``stage3_prefetch_bucket_size``). Each layer's weights are sharded
over the data-parallel group and all-gathered before use. The gather of layer ``i + 1`` is
issued when layer ``i`` starts computing (prefetch one layer ahead), on a separate stream, so
with per-layer gather times ``g_i`` and compute times ``c_i`` a pass exposes

    E = max(0, g_1 - c_0) + sum_{i=2..L} max(0, g_i - c_{i-1}),

where ``c_0`` is the compute before the first layer of the pass (the embedding in a forward
pass, nothing in a chunk that starts cold). How far ahead a framework prefetches bounds what
hides (``training.zero3_prefetch``, :func:`prefetch_exposed_s`): PyTorch FSDP's
``BackwardPrefetch`` / ``forward_prefetch`` and FSDP2's implicit prefetching issue one layer
ahead (the formula above); FSDP2's ``set_modules_to_forward_prefetch`` goes deeper (gathers
issued ``k`` layers ahead, run one after another on their stream, each layer computing once
its own is done); DeepSpeed ZeRO-3 before 0.6 synchronised the device before every parameter
all-gather (``torch.cuda.synchronize()`` in ``_allgather_param``,
``deepspeed/runtime/zero/partition_parameters.py`` @v0.3.13 to v0.5.10; from v0.6.0 the
fetch goes through ``all_gather_coalesced``), so no collective ran beside compute: every
gather and reduce-scatter is exposed. In the backward pass the gather of layer ``i - 1``
and the reduce-scatter of layer ``i + 1``'s gradients share the links while layer ``i``
computes, so ``g`` above becomes ``g + r``, and the last reduce-scatter (of the first layer)
has nothing left to hide behind. PyTorch FSDP's ``SHARD_GRAD_OP`` (``ShardingStrategy`` in
``torch/distributed/fsdp/api.py`` @0aafd810: it "unshards before the forward, does not
reshard them after the forward, and only reshards them after the backward computation")
gathers as above in the forward pass and keeps the weights, so its backward pass has
``g = 0``: ``r`` alone.

A hidden collective is not free: NCCL's kernels take streaming multiprocessors (one thread
block per channel) and HBM bandwidth from the products they overlap (the DeepSeek-V3 report,
sec. 3.2.2, caps its communication kernels at 20 of the H800's 132 SMs for this reason;
Pati et al. 2024, "T3", ASPLOS, measure the slowdown of GEMMs run beside collectives). With
``kappa = overlap_interference`` (hardware, fitted per GPU generation) each second of FSDP
collective hidden behind compute costs ``kappa`` seconds of it:

    E' = E + kappa (G - E),     G = the pass's collective time (gathers; + reduce-scatters)

**Context parallelism** (Megatron-Core ``context_parallel_size``; Liu et al. 2023, "Ring
Attention"): each of ``cp`` ranks keeps ``1/cp`` of every sequence; K and V blocks travel
round the CP ring in ``cp - 1`` steps, each step's transfer overlapped with the attention of
the block already held. Exposed per pass: ``max(0, T_ring - T_attention)`` (the attention
compute bounds what can be hidden), and in the backward pass K, V and their gradients travel
(twice the bytes).

**Tensor-parallel communication overlap** (``parallelism.tp_comm_overlap``; Megatron-Core
``--tp-comm-overlap`` with Transformer Engine userbuffers; Wang et al. 2023, "Overlap
Communication with Dependent Computation via Decomposition", ASPLOS): the sequence-parallel
all-gather before the QKV and FC1 products and the reduce-scatter after the projection and
FC2 are cut into chunks pipelined with the pieces of those products, so a pass exposes
``max(0, T_tp - T_linear)`` (the backward pass pairs them with the data- and weight-gradient
products, twice the forward FLOPs).

**Expert-parallel all-to-all overlap** (``parallelism.moe_a2a_overlap``; Megatron-Core
``--overlap-moe-expert-parallel-comm`` with ``--delay-wgrad-compute``, "batch-level
overlapping to hide EP-A2A communication", MCore v0.14; the DualPipe idea of the DeepSeek-V3
report sec. 3.2.1): in the 1F1B steady state the forward pass of one micro-batch and the
backward pass of another are interleaved layer by layer, each one's dispatch and combine
running under the other's attention and expert products. A chunk's forward and backward
passes expose ``max(0, T_a2a - T_compute)`` of their all-to-alls together.

**The distributed optimizer's weight all-gather** (``overlap_param_gather``; Megatron-Core
``distributed_data_parallel.py`` and ``param_and_grad_buffer.py`` @44151194, the Megatron-LM of
Megatron-Bridge 26.04): the updated weights are gathered in buckets of
``B = max(4e7, 1e6 x dp)`` parameters, cut over each buffer's parameters in backward order
(the dense weights over the data-parallel group, the experts' over the expert-data-parallel
group, each buffer its own chain). Only one bucket of a chain is in flight: the forward
pre-hook of a module waits, parameter by parameter, on each bucket its parameters lie in and
only then dispatches the next bucket (``finish_param_sync``), and the first bucket is
dispatched at its first wait. A module larger than a bucket (a large tensor-parallel linear;
the grouped GEMM of all local experts, which is one module, ``TEGroupedMLP.linear_fc1`` /
``linear_fc2``) therefore waits on its second and later buckets back to back, with nothing
computing in between. Walking the modules in forward order with ``c_before`` (the compute
since the previous module of the chain), their parameters and their own compute, each wait
exposes ``max(0, t_done - t)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from palm.cost.collectives import RingStep, collective_time
from palm.cost.compute import DeviceRates, OpTimes, attention_time
from palm.workload.ops import Collective, Embedding, Logits, Op, TransformerLayer

__all__ = [
    "prefetch_exposed_s",
    "ring_exposed_s",
    "tp_overlap_exposed_s",
    "ep_overlap_exposed_s",
    "fsdp_exposed_s",
    "cp_exposed_s",
    "param_gather_chain_exposed_s",
    "parameter_tensors",
]


def prefetch_exposed_s(
    comm_s: Sequence[float],
    compute_s: Sequence[float],
    *,
    lead_compute_s: float = 0.0,
    depth: int = 1,
) -> float:
    """Communication time not hidden when item ``i``'s transfer is issued as item
    ``i - depth`` starts computing (the first ``depth`` at the pass's start, under
    ``lead_compute_s``), transfers run one after another on their stream and an item computes
    once its transfer is done. ``depth = 1``: item ``i``'s transfer overlaps item ``i - 1``'s
    compute, ``E = sum max(0, g_i - c_{i-1})``; ``depth = 0``: on demand, nothing hidden."""
    if len(comm_s) != len(compute_s):
        raise ValueError("one transfer per computed item")
    if depth <= 0:
        return float(sum(comm_s))
    exposed = 0.0
    if depth == 1:  # the closed form of the walk below
        previous = lead_compute_s
        for g, c in zip(comm_s, compute_s, strict=True):
            exposed += max(0.0, g - previous)
            previous = c
        return exposed
    starts: list[float] = []
    t, comm_free = lead_compute_s, 0.0  # when the previous item's compute ends; the stream
    for j, (g, c) in enumerate(zip(comm_s, compute_s, strict=True)):
        issued = starts[j - depth] if j >= depth else 0.0
        comm_free = max(comm_free, issued) + g
        start = max(t, comm_free)
        exposed += start - t
        starts.append(start)
        t = start + c
    return exposed


def ring_exposed_s(*, ring_s: float, attention_s: float) -> float:
    """Context-parallel K/V ring time left after overlapping it with the attention."""
    return max(0.0, ring_s - attention_s)


def tp_overlap_exposed_s(*, comm_s: float, gemm_s: float) -> float:
    """TP collectives not hidden by the linear products they are pipelined with."""
    return max(0.0, comm_s - gemm_s)


def ep_overlap_exposed_s(*, comm_s: float, compute_s: float) -> float:
    """Expert-parallel all-to-all time of a chunk's two passes left after overlapping it with
    their compute (another micro-batch's, module docstring)."""
    return max(0.0, comm_s - compute_s)


def fsdp_exposed_s(
    ops: Sequence[Op],
    times: Sequence[OpTimes],
    *,
    tp: int,
    weight_bytes: float,
    n: int,
    step: RingStep,
    interference: float = 0.0,
    backward_gathers: bool = True,
    prefetch: int = 1,
    tensors: Sequence[int] | None = None,
) -> tuple[float, float]:
    """Exposed ZeRO-3 / FSDP time of a chunk's forward and backward pass for one micro-batch:
    per operator an all-gather of its 16-bit weights over the ``n`` data ranks and, in the
    backward pass, a reduce-scatter of its gradients in fp32 (FSDP2's and Composer's default
    ``reduce_dtype``) sharing the links with the next gather; the last reduce-scatter is not
    hidden; ``interference`` of the hidden rest is added (module docstring).
    ``backward_gathers = False`` is FSDP ``SHARD_GRAD_OP``: the weights gathered in the forward
    pass are kept through the backward pass, which only reduce-scatters. ``prefetch`` is how
    many operators ahead a gather is issued (:func:`prefetch_exposed_s`): 1 for PyTorch FSDP
    and FSDP2, 0 for DeepSpeed ZeRO-3 before 0.6, whose every parameter all-gather first
    synchronises the device, so nothing runs beside it (the reduce-scatters in flight
    included). ``tensors``: the collectives each operator's gather takes, one per parameter
    tensor (:func:`parameter_tensors`, DeepSpeed ZeRO-3 before 0.6); ``None``: one per
    operator. Each extra collective pays the ring's ``(n - 1)`` step latencies again."""
    params = [op.params_per_device(tp=tp) for op in ops]
    counts = [1] * len(ops) if tensors is None else [max(1, k) for k in tensors]
    gathers = [
        collective_time(Collective("all-gather", x * weight_bytes), n=n, step=step)
        + (k - 1) * max(0, n - 1) * step.latency_s * (x > 0)
        for x, k in zip(params, counts, strict=True)
    ]
    scatters = [
        collective_time(Collective("reduce-scatter", x * 4.0), n=n, step=step) for x in params
    ]
    forward = prefetch_exposed_s(gathers, [t.forward_s for t in times], depth=prefetch)
    g_back, r_back = (gathers if backward_gathers else [0.0] * len(gathers))[::-1], scatters[::-1]
    b_back = [t.backward_s + t.recompute_s for t in times][::-1]
    comm = [g + (r_back[k - 1] if k else 0.0) for k, g in enumerate(g_back)]
    backward = prefetch_exposed_s(comm, b_back, depth=prefetch) + r_back[-1]
    hidden_f = max(0.0, sum(gathers) - forward)
    hidden_b = max(0.0, sum(g_back) + sum(scatters) - backward)
    return forward + interference * hidden_f, backward + interference * hidden_b


def parameter_tensors(op: Op) -> int:
    """How many parameter tensors ``op`` holds, each gathered by a collective of its own when a
    framework gathers parameter by parameter (DeepSpeed ZeRO-3 before 0.6: ``_all_gather``
    loops ``_allgather_param`` over a module's parameters,
    ``deepspeed/runtime/zero/partition_parameters.py`` @v0.3.13). A transformer layer: the
    QKV, output, and MLP matrices (two, or three gated), a bias each with ``bias``, and two
    norms (weight, and bias for layer norm); an embedding: the token table and the learned
    positions; the logits: the final norm and an untied projection; another operator: its
    weight and bias."""
    if isinstance(op, TransformerLayer):
        matrices = 2 + (3 if op.mlp in ("swiglu", "geglu", "clamped-swiglu") else 2)
        norms = 2 * (2 if op.norm == "layernorm" else 1)
        return matrices * (2 if op.bias else 1) + norms
    if isinstance(op, Embedding):
        return 1 + (1 if op.learned_positions else 0)
    if isinstance(op, Logits):
        return (2 if op.norm == "layernorm" else 1) + (0 if op.tied else 1)
    return 1 + (1 if getattr(op, "bias", False) else 0)


def cp_exposed_s(
    ops: Sequence[Op],
    *,
    batch: int,
    tp: int,
    rates: DeviceRates,
    training: bool,
    n: int,
    step: RingStep,
) -> tuple[float, float]:
    """Exposed context-parallel K/V ring time of a chunk, forward and backward: each layer's
    ring (twice the bytes backward) against its attention kernel."""
    p = rates.elem_bytes
    forward = backward = 0.0
    for op in ops:
        if not isinstance(op, TransformerLayer):
            continue
        fused = op.fused_attention(batch=batch, tp=tp, act_bytes=p)
        att_f = att_b = 0.0
        if fused is not None:
            exps = fused.score_elements
            att_f = attention_time(
                fused.forward_flops, fused.forward_bytes, rates, exponentials=exps
            )
            att_b = attention_time(
                fused.backward_flops + fused.recompute_flops,
                fused.backward_bytes,
                rates,
                exponentials=exps,
            )
        for x in op.cp_collectives(batch=batch, tp=tp, act_bytes=p):
            t = collective_time(x, n=n, step=step)
            forward += ring_exposed_s(ring_s=t, attention_s=att_f)
            if training:
                backward += ring_exposed_s(ring_s=2 * t, attention_s=att_b)
    return forward, backward


def param_gather_chain_exposed_s(
    modules: Sequence[tuple[float, float, float]],
    *,
    bucket_params: float,
    seconds_per_param: float,
) -> float:
    """Exposed time of one chain of weight all-gathers waited in forward pre-hooks (module
    docstring). ``modules``: ``(compute before it, parameters, its own compute)`` per module in
    forward order; the buckets hold ``bucket_params`` each counted from the chain's end (its
    first parameter in backward order), the first one in forward order the remainder; a bucket
    of ``n`` parameters gathers in ``n x seconds_per_param``."""
    total = sum(p for _, p, _ in modules)
    if total <= 0 or bucket_params <= 0 or seconds_per_param <= 0:
        return 0.0
    last = math.ceil(total / bucket_params) - 1  # bucket ids, forward order: last .. 0

    def gather(bucket: int) -> float:
        size = total - last * bucket_params if bucket == last else bucket_params
        return size * seconds_per_param

    def bucket_at(x: float) -> int:
        """The bucket of the parameter at index ``x`` (forward order)."""
        return max(0, min(last, int((total - x - 0.5) // bucket_params)))

    t = exposed = start = 0.0
    in_flight: tuple[int, float] | None = None  # (bucket, when its gather ends)
    waited = last + 1
    for before, params, compute in modules:
        t += before
        if params > 0:
            for b in range(bucket_at(start), bucket_at(start + params - 1) - 1, -1):
                if b >= waited:
                    continue
                done = in_flight[1] if in_flight and in_flight[0] == b else t + gather(b)
                exposed += max(0.0, done - t)
                t = max(t, done)
                waited = b
                in_flight = (b - 1, t + gather(b - 1)) if b > 0 else None
        start += params
        t += compute
    return exposed
