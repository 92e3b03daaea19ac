"""What a device of a given plan runs of each transformer operator: the attention kernel the
hardware uses and its share of the sequence under context parallelism.

``model.attention = "auto"`` means FlashAttention on a gpu-cluster (every current GPU
training stack uses a fused attention kernel: Megatron-Core / Transformer Engine's cuDNN
attention, PyTorch SDPA, flash-attn) and the unfused products on a mesh2d (the PALM paper's
setting). With ``cp`` context-parallel ranks every operator sees ``seq_len / cp`` tokens of
each sequence; attention still attends to all ``seq_len`` keys
(:attr:`~palm.workload.ops.TransformerLayer.context_len`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from palm.workload.model import Workload
from palm.workload.ops import Embedding, Logits, Op, TransformerLayer

__all__ = ["Kernel", "resolve_attention", "shard_workload"]

#: an attention kernel a device runs (``model.attention`` without ``auto``)
Kernel = Literal["flash", "unfused"]


def resolve_attention(attention: str, *, topology: str) -> Kernel:
    """The attention kernel in effect: ``auto`` is flash on a gpu-cluster, unfused on a mesh."""
    if attention == "auto":
        return "flash" if topology == "gpu-cluster" else "unfused"
    if attention == "flash":
        return "flash"
    if attention == "unfused":
        return "unfused"
    raise ValueError(f"unknown attention kernel {attention!r}")  # parse_config refuses it


def _shard(op: Op, *, attention: Kernel, cp: int, causal: bool) -> Op:
    if isinstance(op, TransformerLayer):
        return dataclasses.replace(
            op, attention=attention, cp=cp, seq_len=op.seq_len // cp, causal=causal
        )
    if isinstance(op, (Embedding, Logits)) and cp > 1:
        return dataclasses.replace(op, seq_len=op.seq_len // cp)
    return op


def shard_workload(workload: Workload, *, attention: Kernel, cp: int, causal: bool) -> Workload:
    """``workload`` as one context-parallel rank runs it with the given attention kernel.
    ``tokens_per_sample`` stays the full sequence (a sample is still one sequence)."""
    if not workload.transformer:
        return workload
    ops = tuple(_shard(op, attention=attention, cp=cp, causal=causal) for op in workload.ops)
    return dataclasses.replace(workload, ops=ops)
