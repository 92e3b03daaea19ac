"""Operators of a workload graph and their per-micro-batch costs.

Every operator answers the same questions for a micro-batch of ``batch`` samples split over a
tensor-parallel group of ``tp`` devices (Megatron-style for transformers, output-feature split for
the others):

* ``forward_gemms``: the matrix multiplies one device runs in the forward pass (their shapes
  drive the shape-dependent efficiency of :mod:`palm.cost.compute`);
* ``forward_vector_bytes``: the memory traffic of the operators that are not matrix multiplies
  (norms, softmax, dropout, activation functions, residual adds, pooling), which run at memory
  bandwidth;
* ``activation_bytes``: what one device keeps from the forward pass for the backward pass, by
  recompute mode;
* ``forward_collectives``: the tensor-parallel collectives of one forward pass;
* ``output_bytes``: what is handed to the next operator (and so to the next pipeline stage).

Only matrix multiplies count as FLOPs: this is the convention of Megatron SC21 eq. (3) and of
model FLOPs utilisation, and the vector work is charged as memory traffic instead.

The operators live by family: the interface and its cost records in
:mod:`palm.workload.ops_base`, the generic graph operators in :mod:`palm.workload.ops_graph`,
the transformer operators in :mod:`palm.workload.ops_transformer`; this module gathers them.
"""

from __future__ import annotations

from palm.workload.ops_base import (
    Collective,
    FusedAttention,
    Gemm,
    Op,
    RecomputeMode,
    cp_merge_bytes,
)
from palm.workload.ops_graph import Conv2d, Linear, Pool
from palm.workload.ops_transformer import Embedding, Logits, TransformerLayer

__all__ = [
    "Gemm",
    "FusedAttention",
    "cp_merge_bytes",
    "Collective",
    "Op",
    "Linear",
    "Conv2d",
    "Pool",
    "TransformerLayer",
    "Embedding",
    "Logits",
    "RecomputeMode",
]
