"""The operator interface and its cost records: :class:`Op` (the questions every operator
answers, :mod:`palm.workload.ops`), the matrix multiplies (:class:`Gemm`), fused attention
kernels (:class:`FusedAttention`, with context parallelism's merge traffic
:func:`cp_merge_bytes`) and tensor-parallel collectives (:class:`Collective`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Gemm", "FusedAttention", "cp_merge_bytes", "Collective", "Op", "RecomputeMode"]


RecomputeMode = Literal["none", "selective", "full"]


@dataclass(frozen=True)
class Gemm:
    """``count`` independent products ``C[m, n] = A[m, k] @ B[k, n]``. ``fp8`` says whether
    the product may run in FP8 when training asks for it: Transformer Engine runs the linear
    layers (``te.Linear``, ``LayerNormLinear``, ``LayerNormMLP``) in FP8 and keeps the core
    attention, the router, embeddings and the output logits in BF16 (NVIDIA Transformer
    Engine docs, "Using FP8 with Transformer Engine"; Micikevicius et al. 2022, "FP8 Formats
    for Deep Learning", sec. 4). ``grouped`` marks the products of one grouped GEMM (the experts of
    a mixture-of-experts layer run as one kernel over many small problems), which run at the
    hardware's ``grouped_gemm_efficiency`` on top of the shape rule
    (:func:`palm.cost.compute.gemm_efficiency`)."""

    m: int
    n: int
    k: int
    count: int = 1
    fp8: bool = True
    grouped: bool = False

    @property
    def flops(self) -> float:
        """Multiply-adds counted as two FLOPs each."""
        return 2.0 * self.m * self.n * self.k * self.count

    def operand_elements(self) -> float:
        """Elements read and written once: A, B and C (the roofline's minimum traffic)."""
        return float(self.m * self.k + self.k * self.n + self.m * self.n) * self.count


@dataclass(frozen=True)
class FusedAttention:
    """One fused (FlashAttention) attention call of one device for one micro-batch.

    FLOPs (Dao et al. 2022, "FlashAttention", sec. 3.1 and appendix B; Dao 2023,
    "FlashAttention-2", sec. 3): the forward pass runs ``Q K^T`` and ``P V``, ``4 s_q s_kv d``
    FLOPs per head, half of it under a causal mask (blocks above the diagonal are skipped;
    with context parallelism Megatron-Core's load-balanced chunks keep each rank at ``1/cp``
    of the causal total). The backward pass recomputes ``S = Q K^T`` and ``P`` from the saved
    log-sum-exp instead of storing them, then runs ``dV = P^T dO``, ``dP = dO V^T``,
    ``dQ = dS K``, ``dK = dS^T Q``: 2.5 times the forward FLOPs, of which 0.5 is recompute.

    HBM bytes: the ``s x s`` scores are never written. Forward reads Q, K, V and writes O and
    the fp32 log-sum-exp; backward reads Q, K, V, O, dO and the log-sum-exp and writes dQ,
    dK, dV (Dao 2022 Thm. 2 bounds re-reads of K and V from SRAM; a head's K and V, e.g.
    4 MB at s = 8192, d = 128, stay in the 40-60 MB L2 of A100/H100/B200 between blocks, so
    HBM sees each tensor once)."""

    forward_flops: float
    forward_bytes: float
    backward_bytes: float
    #: elements of the score matrix computed, each one exponential of the softmax forward
    #: and one more backward (``P = exp(S - LSE)`` recomputed)
    score_elements: float = 0.0
    #: context parallelism: HBM bytes of the memory-bound kernels around the per-step
    #: attention calls (:func:`cp_merge_bytes`), which run outside the attention kernels
    forward_merge_bytes: float = 0.0
    backward_merge_bytes: float = 0.0
    #: the call's shape, for the kernel models of :mod:`palm.cost.gpu_attention`: query
    #: rows and keys per sequence, head dimension, query heads on this device times the
    #: micro-batch, and the mask (0: shape not given)
    seq_len: int = 0
    kv_len: int = 0
    head_dim: int = 0
    batch_heads: float = 0.0
    causal: bool = False

    @property
    def backward_flops(self) -> float:
        """dQ, dK, dV products: twice the forward."""
        return 2.0 * self.forward_flops

    @property
    def recompute_flops(self) -> float:
        """``Q K^T`` recomputed in the backward pass."""
        return 0.5 * self.forward_flops


def cp_merge_bytes(
    *, cp: int, q_bytes: float, o_bytes: float, kv_bytes: float
) -> tuple[float, float]:
    """HBM bytes, forward and backward, of the bookkeeping kernels of ring attention on the
    busiest rank of a ``cp``-way context-parallel group, one layer and micro-batch.

    Transformer Engine's ``AttnFuncWithCPAndKVP2P`` (``transformer_engine/pytorch/attention.py``
    @ v2.0-v2.2, ``.../dot_product_attention/context_parallel.py`` from v2.3; Megatron-Core's
    ``--context-parallel-size`` with the default ``p2p`` communication) runs one attention call
    per ring step, each writing its own partial output and log-sum-exp, and merges them in
    separate element-wise kernels; the p2p exchange overlaps only the attention calls. On the
    causal load-balanced layout the last rank's every step covers all its local queries, and
    its kernels, with ``O``, ``Q`` and ``KV`` the bytes of the local output, query and
    (K and V together) key-value tensors in 16 bits:

    * forward: K and V are concatenated into the send buffer (read + write ``KV``); the first
      partial output initialises the output (read + write ``O``) and each of the other
      ``cp - 1`` is rescaled by its log-sum-exp and added (one fused kernel: read the partial,
      read and write the output, ``3 O``): ``F = (3 cp - 1) O + 2 KV``;
    * backward: K and V are copied into the ring buffer (``2 KV``); each step's ``dQ`` is
      copied (first step, ``2 Q``) or added (``3 Q``) into the accumulator; each step's
      ``dK, dV`` are added to the gradient travelling round the ring: the first step copies
      half of them (``KV``), the ``cp - 2`` middle ones add half (``1.5 KV``), the diagonal
      step adds the whole (``3 KV``): ``B = (3 cp - 1) Q + (1.5 cp + 3) KV``.

    ``cp <= 1``: no ring, ``(0, 0)``. TE 2.0 / 2.1 zero-fill the output and correct all ``cp``
    partials (``2 O`` more forward); the fp32 log-sum-exp work (``s a`` elements per step) is
    left out.
    """
    if cp <= 1:
        return 0.0, 0.0
    forward = (3 * cp - 1) * o_bytes + 2 * kv_bytes
    backward = (3 * cp - 1) * q_bytes + (1.5 * cp + 3) * kv_bytes
    return forward, backward


@dataclass(frozen=True)
class Collective:
    """A collective over a parallel group; ``nbytes`` is the full buffer each member holds.
    ``group`` is ``"tp"`` (tensor-parallel group), ``"dp"`` (data-parallel group) or a split
    group of :mod:`palm.workload.opsplit` (``"2x2x2x2:3"``)."""

    kind: Literal["all-reduce", "reduce-scatter", "all-gather", "all-to-all", "broadcast", "reduce"]
    nbytes: float
    group: str = "tp"


@dataclass(frozen=True)
class Op:
    """Base of all operators. Subclasses are frozen dataclasses with shapes per sample."""

    name: str

    @property
    def params(self) -> int:
        """Trainable parameters of the whole (unsharded) operator."""
        return 0

    def params_per_device(self, *, tp: int) -> float:
        """Parameters one member of a ``tp``-way tensor-parallel group holds."""
        return self.params / tp

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        return ()

    def fused_attention(self, *, batch: int, tp: int, act_bytes: float) -> FusedAttention | None:
        """The FlashAttention call of this operator, if it has one."""
        return None

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        return 0.0

    def backward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        """Memory traffic of the backward pass's element-wise work: by default twice the
        forward's (each element-wise operator reads its saved input and the incoming gradient
        and writes the outgoing gradient)."""
        return 2.0 * self.forward_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=act_bytes)

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        return 0.0

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        return ()

    def backward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        """By default the backward pass mirrors the forward collectives."""
        return self.forward_collectives(batch=batch, tp=tp, sp=sp, act_bytes=act_bytes)

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return 0.0

    def update_collectives(self, *, tp: int, dp: int, grad_bytes: float) -> tuple[Collective, ...]:
        """Gradient reduction before the update: by default the data-parallel all-reduce of
        every parameter the device holds (docs/model.md; Rajbhandari et al. 2020, sec. 5)."""
        nbytes = self.params_per_device(tp=tp) * grad_bytes
        if dp <= 1 or nbytes <= 0:
            return ()
        return (Collective("all-reduce", nbytes, group="dp"),)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        """Bytes of the activation this operator reads (one micro-batch, unsharded)."""
        return 0.0

    def recompute_gemms(self, *, batch: int, tp: int, recompute: RecomputeMode) -> tuple[Gemm, ...]:
        """Matrix multiplies re-run in the backward pass to rebuild dropped activations."""
        if recompute == "full":
            return self.forward_gemms(batch=batch, tp=tp)
        return ()

    def early_stop_recompute_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        """Products that full recompute re-runs under PyTorch's non-reentrant
        ``torch.utils.checkpoint`` with early stop (the default since PyTorch 2.1,
        ``set_checkpoint_early_stop``): recomputation stops once the last tensor the backward
        pass needs has been rebuilt, so trailing products whose outputs nothing saves are not
        re-run. The generic operator keeps all of them (``recompute_gemms(..., "full")``)."""
        return self.recompute_gemms(batch=batch, tp=tp, recompute="full")

    def recompute_vector_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        """Vector traffic re-run in the backward pass by recompute."""
        if recompute == "full" and self.recompute_gemms(batch=batch, tp=tp, recompute=recompute):
            return self.forward_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=act_bytes)
        return 0.0

    def forward_flops(self, *, batch: int, tp: int = 1) -> float:
        """Matrix-multiply FLOPs of one forward pass on one device (fused attention included)."""
        flops = sum(g.flops for g in self.forward_gemms(batch=batch, tp=tp))
        fused = self.fused_attention(batch=batch, tp=tp, act_bytes=2)
        return flops + (fused.forward_flops if fused is not None else 0.0)
