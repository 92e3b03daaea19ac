"""Time of one fused-attention kernel (FlashAttention-2, FlashAttention-3, cuDNN) from its
shape: work units over the SMs, each a loop over key blocks whose step costs its tensor-core
FLOPs plus the special-function time of its exponentials that the kernel does not hide.

FlashAttention parallelises the forward pass over (batch, head, block of ``block_q = 128``
query rows) and the backward pass over (batch, head, block of 128 key rows) (Dao 2023,
"FlashAttention-2", sec. 3.2; Shah et al. 2024, "FlashAttention-3", sec. 3.1). Each work unit
runs on one SM and visits ``L`` keys (queries, backward): ``L = s`` without a causal mask; with
one, query block ``i`` visits ``min(s, (i + 1) block_q)`` keys, on average
``block_q (B + 1) / 2`` for ``B = ceil(s / block_q)`` blocks (capped at ``s``); a
context-parallel rank's ``s`` queries over a ``kv``-key sequence see ``kv / 2`` keys each on
Megatron-Core's load-balanced causal layout. A unit then takes

    t_unit = (L + fill) * block_q * (f d / (peak / sm) + x / (exp / sm)) / eta

with ``f d`` the tensor FLOPs per score element (``4 d`` forward: ``Q K^T`` and ``P V``;
``10 d`` backward: ``Q K^T`` recomputed, ``dP``, ``dV``, ``dQ``, ``dK``; Dao 2023 sec. 4.1),
one exponential per score element on the special-function units (rate ``exp``, 16 per SM per
clock; CUDA C++ Programming Guide, "Arithmetic Instructions"), ``x`` the fraction of the
exponential time the kernel does *not* overlap with its products (0 for perfect ping-pong
overlap, FlashAttention-3 sec. 3.1-3.2; 1 for none), ``fill`` the unit's prologue and
epilogue (loading its Q block, writing O and the log-sum-exp) as extra keys, and ``eta`` the
fraction of the tensor-core rate the main loop sustains. Units run in waves of ``sm_count``
(:func:`palm.cost.gpu_gemm.waves`), and the kernel is never faster than its HBM traffic
(``Q, O`` per query and ``K, V`` per key forward; also ``dO, dQ`` and ``dK, dV`` backward):

    t = max(ceil(units / sm) * t_unit, bytes / hbm).

With ``x >= 0``, ``eta <= 1`` and at least ``units / sm`` waves, the time is never below the
FLOPs over the peak. ``eta``, ``x`` and ``fill`` are fitted per (architecture, kernel, pass)
on the kernels' published throughput (``palm/data/kernels.json``,
``benchmarks/calibrate_kernels.py``). FLOPs are counted as those papers count them:
``4 b s^2 h d`` forward (halved with a causal mask) and 2.5 times that backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from palm.cost.gpu_gemm import waves

__all__ = [
    "BLOCK_Q",
    "AttentionKernelConstants",
    "AttentionShape",
    "attention_flops",
    "attention_kernel_time",
]

#: rows of a work unit's query (forward) or key (backward) block: FlashAttention-2 and -3
#: both use 128 for head dimensions up to 128 (Dao 2023 sec. 3.3; Shah et al. 2024 sec. 4)
BLOCK_Q = 128

#: tensor FLOPs per score element and head-dimension unit, by pass (module docstring)
_FLOPS_PER_ELEMENT = {"forward": 4.0, "backward": 10.0}


@dataclass(frozen=True)
class AttentionShape:
    """One attention call on one GPU: ``heads`` is the heads on this device."""

    batch: int
    seq_len: int
    heads: int
    head_dim: int
    causal: bool
    direction: str = "forward"  # or "backward"
    #: keys per sequence (0: ``seq_len``); more under context parallelism, where a rank's
    #: ``seq_len`` queries attend to the whole ``kv_len`` sequence
    kv_len: int = 0

    @property
    def keys(self) -> int:
        return self.kv_len or self.seq_len


@dataclass(frozen=True)
class AttentionKernelConstants:
    """Fitted constants of one (architecture, kernel, pass) (module docstring)."""

    efficiency: float
    exposed_exp: float
    fill_keys: float


def attention_flops(shape: AttentionShape) -> float:
    """FLOPs as the FlashAttention papers count them (module docstring)."""
    fwd = 4.0 * shape.batch * shape.seq_len * shape.keys * shape.heads * shape.head_dim
    if shape.causal:
        fwd /= 2
    return fwd * (2.5 if shape.direction == "backward" else 1.0)


def _keys_per_unit(s: int, kv: int, causal: bool) -> float:
    if not causal:
        return float(kv)
    if kv > s:  # a context-parallel rank: its load-balanced chunks see half the keys
        return kv / 2.0
    blocks = -(-s // BLOCK_Q)
    return min(float(s), BLOCK_Q * (blocks + 1) / 2)


def attention_kernel_time(
    shape: AttentionShape,
    *,
    sm_count: int,
    peak_flops: float,
    exp_per_s: float,
    hbm_Bps: float,
    constants: AttentionKernelConstants,
    elem_bytes: float = 2.0,
) -> float:
    """Seconds of one fused attention kernel of ``shape`` (module docstring)."""
    s, d = shape.seq_len, shape.head_dim
    if s <= 0 or shape.batch <= 0 or shape.heads <= 0:
        return 0.0
    units = shape.batch * shape.heads * -(-s // BLOCK_Q)
    per_elem = _FLOPS_PER_ELEMENT[shape.direction] * d / (peak_flops / sm_count)
    if exp_per_s > 0:
        per_elem += constants.exposed_exp / (exp_per_s / sm_count)
    keys = _keys_per_unit(s, shape.keys, shape.causal) + constants.fill_keys
    t_unit = keys * BLOCK_Q * per_elem / constants.efficiency
    per_token = 4 if shape.direction == "backward" else 2  # Q, O (+ dO, dQ); K, V (+ dK, dV)
    nbytes = per_token * shape.batch * (s + shape.keys) * shape.heads * d * elem_bytes
    return max(waves(units, sm_count) * t_unit, nbytes / hbm_Bps)
