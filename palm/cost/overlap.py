"""Communication hidden behind compute: FSDP / ZeRO-3 prefetch and context-parallel rings.

**FSDP / ZeRO-3** (Rajbhandari et al. 2020, "ZeRO", sec. 5.3 and 7; PyTorch FSDP, Zhao et
al. 2023, sec. 3.3 "backward / forward prefetching"; FSDP2 ``fully_shard`` with implicit
prefetching; DeepSpeed ``stage3_prefetch_bucket_size``). Each layer's weights are sharded
over the data-parallel group and all-gathered before use. The gather of layer ``i + 1`` is
issued when layer ``i`` starts computing (prefetch one layer ahead), on a separate stream, so
with per-layer gather times ``g_i`` and compute times ``c_i`` a pass exposes

    E = max(0, g_1 - c_0) + sum_{i=2..L} max(0, g_i - c_{i-1}),

where ``c_0`` is the compute before the first layer of the pass (the embedding in a forward
pass, nothing in a chunk that starts cold). In the backward pass the gather of layer ``i - 1``
and the reduce-scatter of layer ``i + 1``'s gradients share the links while layer ``i``
computes, so ``g`` above becomes ``g + r``, and the last reduce-scatter (of the first layer)
has nothing left to hide behind.

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
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["prefetch_exposed_s", "ring_exposed_s", "tp_overlap_exposed_s"]


def prefetch_exposed_s(
    comm_s: Sequence[float], compute_s: Sequence[float], *, lead_compute_s: float = 0.0
) -> float:
    """Communication time not hidden when item ``i``'s transfer overlaps item ``i - 1``'s
    compute (the first transfer overlaps ``lead_compute_s``)."""
    if len(comm_s) != len(compute_s):
        raise ValueError("one transfer per computed item")
    exposed = 0.0
    previous = lead_compute_s
    for g, c in zip(comm_s, compute_s, strict=True):
        exposed += max(0.0, g - previous)
        previous = c
    return exposed


def ring_exposed_s(*, ring_s: float, attention_s: float) -> float:
    """Context-parallel K/V ring time left after overlapping it with the attention."""
    return max(0.0, ring_s - attention_s)


def tp_overlap_exposed_s(*, comm_s: float, gemm_s: float) -> float:
    """TP collectives not hidden by the linear products they are pipelined with."""
    return max(0.0, comm_s - gemm_s)
