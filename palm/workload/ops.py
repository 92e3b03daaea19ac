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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


# --------------------------------------------------------------------------------------------
# Generic operators (paper Table III): Linear, Conv2d, Pool
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Linear(Op):
    """``Y = X W^T`` over ``tokens`` rows per sample (paper Table III: B, M=out, N=tokens, K=in).

    With ``tp > 1`` the output features are split (column parallel) and the output is
    all-gathered in the forward pass; the input gradient is all-reduced in the backward pass.
    """

    in_features: int
    out_features: int
    tokens: int = 1
    bias: bool = True

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        return (Gemm(batch * self.tokens, self.out_features // tp, self.in_features),)

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        return 2.0 * batch * self.tokens * self.out_features / tp * act_bytes if self.bias else 0.0

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        return float(batch * self.tokens * self.in_features * act_bytes)

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        return (Collective("all-gather", batch * self.tokens * self.out_features * act_bytes),)

    def backward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        return (Collective("all-reduce", batch * self.tokens * self.in_features * act_bytes),)

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.tokens * self.out_features * act_bytes)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.tokens * self.in_features * act_bytes)


def _out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


@dataclass(frozen=True)
class Conv2d(Op):
    """2-D convolution as an implicit GEMM (``m = B*Ho*Wo``, ``n = out_channels``,
    ``k = in_channels*kernel^2``), optionally followed by batch norm and ReLU, whose traffic is
    charged as vector bytes. ``tp`` splits the output channels like :class:`Linear`.

    ``groups = g`` (grouped convolution, Krizhevsky et al. 2012; depthwise when
    ``g = in_channels = out_channels``, MobileNet, Howard et al. 2017 sec. 3.1): the channels
    fall into ``g`` groups, each output channel seeing only the ``in_channels / g`` inputs of
    its group, so the weights are ``(in_channels / g) x out_channels x kernel^2`` and the
    products are ``g`` independent GEMMs of ``m = B*Ho*Wo``, ``n = out_channels / g``,
    ``k = (in_channels / g)*kernel^2``: ``2 B Ho Wo out_channels in_channels kernel^2 / g``
    FLOPs, ``g`` times fewer than the dense convolution (PyTorch ``nn.Conv2d(groups=g)``).
    ``tp`` then splits whole groups (``g / tp`` per device when ``tp`` divides ``g``) or each
    group's output channels (when ``g`` divides ``tp``)."""

    in_channels: int
    out_channels: int
    in_hw: tuple[int, int]
    kernel: int
    stride: int = 1
    padding: int = 0
    bias: bool = False
    norm_act: bool = True
    groups: int = 1

    @property
    def out_hw(self) -> tuple[int, int]:
        h, w = self.in_hw
        return (
            _out_size(h, self.kernel, self.stride, self.padding),
            _out_size(w, self.kernel, self.stride, self.padding),
        )

    @property
    def params(self) -> int:
        weights = self.in_channels // self.groups * self.out_channels * self.kernel * self.kernel
        extra = self.out_channels if self.bias else 0
        if self.norm_act:
            extra += 2 * self.out_channels  # batch-norm scale and shift
        return weights + extra

    def _out_elems(self, batch: int) -> int:
        ho, wo = self.out_hw
        return batch * ho * wo * self.out_channels

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        ho, wo = self.out_hw
        g = self.groups
        k = self.in_channels // g * self.kernel * self.kernel
        if g == 1:
            return (Gemm(batch * ho * wo, self.out_channels // tp, k),)
        per_device = g // tp if g % tp == 0 else 1  # whole groups, or a share of one
        return (Gemm(batch * ho * wo, self.out_channels // tp // per_device, k, per_device),)

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        # batch norm (read, write) then ReLU (read, write) on the output
        return 4.0 * self._out_elems(batch) / tp * act_bytes if self.norm_act else 0.0

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        h, w = self.in_hw
        stored = float(batch * h * w * self.in_channels * act_bytes)
        if self.norm_act:
            stored += 2 * self._out_elems(batch) / tp * act_bytes  # BN input and ReLU output
        return float(stored)

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        return (Collective("all-gather", self._out_elems(batch) * act_bytes),)

    def backward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        h, w = self.in_hw
        grad = batch * h * w * self.in_channels * act_bytes
        if self.groups % tp == 0 and self.groups > 1:
            # whole groups per device: each input-gradient channel comes from one device
            return (Collective("all-gather", grad),)
        return (Collective("all-reduce", grad),)

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(self._out_elems(batch) * act_bytes)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        h, w = self.in_hw
        return float(batch * h * w * self.in_channels * act_bytes)


@dataclass(frozen=True)
class Pool(Op):
    """Max / average pooling (``kernel = 0`` means global pooling). No parameters, no GEMM."""

    channels: int
    in_hw: tuple[int, int]
    kernel: int
    stride: int = 1
    padding: int = 0
    kind: Literal["max", "avg"] = "max"

    @property
    def out_hw(self) -> tuple[int, int]:
        if self.kernel == 0:
            return (1, 1)
        h, w = self.in_hw
        return (
            _out_size(h, self.kernel, self.stride, self.padding),
            _out_size(w, self.kernel, self.stride, self.padding),
        )

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        h, w = self.in_hw
        ho, wo = self.out_hw
        return float(batch * self.channels * (h * w + ho * wo)) / tp * act_bytes

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        h, w = self.in_hw
        return float(batch * self.channels * h * w) / tp * act_bytes

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        ho, wo = self.out_hw
        return float(batch * self.channels * ho * wo * act_bytes)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        h, w = self.in_hw
        return float(batch * self.channels * h * w * act_bytes)


# --------------------------------------------------------------------------------------------
# Transformer operators (Megatron-LM tensor parallelism)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerLayer(Op):
    """One pre-norm decoder/encoder layer: attention (with grouped-query attention when
    ``kv_heads < heads``) and an MLP (GELU with two matrices, or a gated MLP with three:
    SwiGLU, or GeGLU as in Gemma). ``head_dim`` is the width of a head (0: ``hidden / heads``).

    Forward FLOPs per sample with ``ffn = 4h`` and ``kv_heads = heads``: ``24 s h^2 + 4 s^2 h``
    (Narayanan et al., SC21, sec. 5.1), counting the full ``s x s`` score matrix.
    Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019): two all-reduces of ``b s h``
    per forward and per backward pass, or with sequence parallelism a reduce-scatter plus an
    all-gather each (Korthikanti et al. 2022, sec. 4.2.2).

    ``attention = "flash"`` prices the core attention as one FlashAttention call
    (:class:`FusedAttention`) instead of two batched products and the score-matrix traffic of
    softmax and dropout (``"unfused"``, Megatron-LM 2021). ``cp > 1``: this device holds
    ``seq_len`` tokens of a ``cp * seq_len`` sequence (context parallelism) and attends to all
    of them; its K and V go round the CP ring (:meth:`cp_collectives`).
    """

    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    seq_len: int
    mlp: Literal["gelu", "swiglu", "geglu", "clamped-swiglu"] = "gelu"
    bias: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    dropout: bool = True
    attention: Literal["flash", "unfused"] = "unfused"
    causal: bool = True
    cp: int = 1
    head_dim: int = 0
    #: biases on the query, key and value projections alone (Qwen2's attention); ``bias``
    #: puts biases on every projection
    qkv_bias: bool = False

    def __post_init__(self) -> None:
        # head_dim = 0 means hidden / heads; models such as Gemma and Qwen3 set it apart, so
        # that the query width heads x head_dim differs from hidden
        if self.head_dim == 0 and self.heads > 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    @property
    def q_dim(self) -> int:
        """Width of the queries (and of the attention output): ``heads x head_dim``."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def _mlp_in_mats(self) -> int:
        return 1 if self.mlp == "gelu" else 2

    @property
    def params(self) -> int:
        h, f, kv, q = self.hidden, self.ffn_hidden, self.kv_dim, self.q_dim
        attn = h * (q + 2 * kv) + q * h
        mlp = (self._mlp_in_mats + 1) * h * f
        if self.bias:
            attn += (q + 2 * kv) + h
            mlp += self._mlp_in_mats * f + h
        elif self.qkv_bias:
            attn += q + 2 * kv  # column-parallel: split over TP with their weights
        norms = 2 * (2 * h if self.norm == "layernorm" else h)
        return attn + mlp + norms

    def params_per_device(self, *, tp: int) -> float:
        # norms (and row-parallel biases) are replicated; everything else is split by tp
        h = self.hidden
        replicated = 2 * (2 * h if self.norm == "layernorm" else h)
        if self.bias:
            replicated += 2 * h
        return (self.params - replicated) / tp + replicated

    @property
    def context_len(self) -> int:
        """Keys each query attends to: the whole sequence, ``cp * seq_len``."""
        return self.seq_len * self.cp

    def _attention_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        if self.attention == "flash":
            return ()
        s, kv, d = self.seq_len, self.context_len, self.head_dim
        heads = batch * self.heads // tp
        # Q K^T, then scores @ V; in BF16 even under FP8 training
        return (Gemm(s, kv, d, heads, fp8=False), Gemm(s, d, kv, heads, fp8=False))

    def fused_attention(self, *, batch: int, tp: int, act_bytes: float) -> FusedAttention | None:
        if self.attention != "flash":
            return None
        s, kv, d, p = self.seq_len, self.context_len, self.head_dim, act_bytes
        heads = batch * self.heads / tp
        kv_heads = batch * max(self.kv_heads / tp, 1.0)
        mask = 0.5 if self.causal else 1.0
        flops = 4.0 * s * kv * d * heads * mask
        q_o = s * d * heads * p  # one of Q, O, dQ, dO
        k_v = s * d * kv_heads * p  # one of the local K, V, dK, dV
        lse = 4.0 * s * heads
        merge_f, merge_b = cp_merge_bytes(cp=self.cp, q_bytes=q_o, o_bytes=q_o, kv_bytes=2 * k_v)
        return FusedAttention(
            forward_flops=flops,
            score_elements=s * kv * heads * mask,
            forward_bytes=2 * q_o + 2 * k_v + lse,  # read Q, K, V; write O, LSE
            backward_bytes=3 * q_o + 2 * k_v + lse + q_o + 2 * k_v,  # read Q,O,dO,K,V,LSE; write
            forward_merge_bytes=merge_f,
            backward_merge_bytes=merge_b,
            seq_len=s,
            kv_len=kv,
            head_dim=d,
            batch_heads=heads,
            causal=self.causal,
        )

    def cp_collectives(self, *, batch: int, tp: int, act_bytes: float) -> tuple[Collective, ...]:
        """K/V exchange of context parallelism for one forward pass: each rank's K and V
        blocks visit every rank of the CP ring, an all-gather of the whole sequence's local K
        and V heads (``2 b s_full d kv_heads / tp`` elements); the backward pass moves K, V and
        their gradients, twice as much (Megatron-Core ``AttnFuncWithCPAndKVP2P``)."""
        if self.cp <= 1:
            return ()
        kv_heads = max(self.kv_heads / tp, 1.0)
        nbytes = 2.0 * batch * self.context_len * self.head_dim * kv_heads * act_bytes
        return (Collective("all-gather", nbytes, group="cp"),)

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        t = batch * self.seq_len
        h, f = self.hidden, self.ffn_hidden
        qkv = Gemm(t, (self.q_dim + 2 * self.kv_dim) // tp, h)
        proj = Gemm(t, h, self.q_dim // tp)
        up = Gemm(t, self._mlp_in_mats * f // tp, h)
        down = Gemm(t, h, f // tp)
        return (qkv, *self._attention_gemms(batch=batch, tp=tp), proj, up, down)

    def recompute_gemms(self, *, batch: int, tp: int, recompute: RecomputeMode) -> tuple[Gemm, ...]:
        if recompute == "full":
            return self.forward_gemms(batch=batch, tp=tp)
        if recompute == "selective":  # only the core attention is recomputed
            return self._attention_gemms(batch=batch, tp=tp)
        return ()

    def early_stop_recompute_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        """Early-stopping full recompute of one layer (:meth:`Op.early_stop_recompute_gemms`):
        the MLP down-projection saves its input (the activation output) before it runs, and
        its output feeds only the residual add, which saves nothing; so recomputation stops
        before it and re-runs every forward product but that last one (``2 b s h f / t`` of
        the layer's ``2 b s h (2 h_qkv + 2 h + (m + 1) f) / t`` linear FLOPs)."""
        return self.forward_gemms(batch=batch, tp=tp)[:-1]

    def _score_vector_bytes(self, *, batch: int, tp: int, act_bytes: float) -> float:
        if self.attention == "flash":
            return 0.0  # softmax and dropout run inside the fused kernel, on chip
        p = act_bytes
        scores = batch * self.heads / tp * self.seq_len * self.context_len
        if self.dropout:
            return scores * (2 * p + (2 * p + 1))  # softmax r/w, dropout r/w + mask
        return scores * 2 * p

    def recompute_vector_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        if recompute == "full":
            return self.forward_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=act_bytes)
        if recompute == "selective":
            return self._score_vector_bytes(batch=batch, tp=tp, act_bytes=act_bytes)
        return 0.0

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        p = act_bytes
        t = batch * self.seq_len
        h, f = self.hidden, self.ffn_hidden
        seq_shard = tp if sp else 1
        norms = 2 * 2 * t * h * p / seq_shard  # two norms, read + write
        if self.dropout:
            residual = 2 * (3 * p + 1) * t * h / seq_shard  # bias-dropout-add: 2 in, 1 out, mask
        else:
            residual = 2 * 3 * p * t * h / seq_shard
        attn = self._score_vector_bytes(batch=batch, tp=tp, act_bytes=act_bytes)
        act = (self._mlp_in_mats + 1) * t * f / tp * p
        return float(norms + residual + attn + act)

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        """Activation memory of one layer for one micro-batch on one device.

        Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
        Models", sec. 4: ``s b h (34 + 5 a s / h)`` bytes without parallelism for 16-bit
        activations with dropout; ``s b h (10 + 24/t + 5 a s / (h t))`` with tensor
        parallelism; everything divided by ``t`` with sequence parallelism; the ``5 a s / h``
        term dropped under selective recompute; ``2 s b h`` (the layer input) under full
        recompute. Written here term by term so that other precisions, GQA, SwiGLU and
        dropout-free models follow from the same accounting.
        """
        p = act_bytes
        s, h, f = self.seq_len, self.hidden, self.ffn_hidden
        sbh = float(s * batch * h)
        seq_shard = tp if sp else 1
        if recompute == "full":
            return p * sbh / seq_shard
        mask = 1 if self.dropout else 0
        # replicated across TP unless sequence parallel: both norm inputs, QKV input,
        # the two dropout masks after attention and MLP, the MLP input
        replicated = sbh * (2 * p + p + mask + p + mask)
        # split across TP: Q, K, V, projection input, MLP activations
        q_share, kv_share = self.q_dim / h, self.kv_dim / h
        sharded = sbh * p * (q_share + 2 * kv_share + q_share)
        sharded += s * batch * f * p * (self._mlp_in_mats + 1)
        quadratic = 0.0
        if self.attention == "flash":  # only the fp32 log-sum-exp per head and query
            quadratic = float(batch * self.heads * s * 4)
        elif recompute == "none":
            per_score = p + (p + mask if self.dropout else 0)  # softmax out, dropout out + mask
            quadratic = float(batch * self.heads * s * self.context_len * per_score)
        return replicated / seq_shard + (sharded + quadratic) / tp

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        nbytes = float(batch * self.seq_len * self.hidden * act_bytes)
        if sp:
            return (
                Collective("all-gather", nbytes),
                Collective("reduce-scatter", nbytes),
                Collective("all-gather", nbytes),
                Collective("reduce-scatter", nbytes),
            )
        return (Collective("all-reduce", nbytes), Collective("all-reduce", nbytes))

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.seq_len * self.hidden * act_bytes)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.seq_len * self.hidden * act_bytes)


@dataclass(frozen=True)
class Embedding(Op):
    """Token embedding (vocabulary-parallel under TP, one all-reduce of ``b s h`` in the
    forward pass as in Megatron-LM) plus learned position embeddings when asked."""

    vocab: int
    hidden: int
    seq_len: int
    learned_positions: bool = True
    dropout: bool = True

    @property
    def params(self) -> int:
        return self.vocab * self.hidden + (
            self.seq_len * self.hidden if self.learned_positions else 0
        )

    def params_per_device(self, *, tp: int) -> float:
        pos = self.seq_len * self.hidden if self.learned_positions else 0
        return self.vocab * self.hidden / tp + pos

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        t = batch * self.seq_len * self.hidden
        return float(3 * t * act_bytes)  # gather rows, add positions, write

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        if not self.dropout:
            return 0.0
        # Korthikanti et al. 2022 sec. 4.3: embedding dropout mask, s b h / t with SP
        return float(batch * self.seq_len * self.hidden) / (tp if sp else 1)

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        nbytes = float(batch * self.seq_len * self.hidden * act_bytes)
        return (Collective("reduce-scatter" if sp else "all-reduce", nbytes),)

    def backward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        return ()

    def recompute_gemms(self, *, batch: int, tp: int, recompute: RecomputeMode) -> tuple[Gemm, ...]:
        return ()

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.seq_len * self.hidden * act_bytes)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.seq_len * 4)  # int32 token ids


@dataclass(frozen=True)
class Logits(Op):
    """Final norm, output projection onto the (vocabulary-parallel) vocabulary and the
    cross-entropy loss. With ``tied`` the projection reuses the embedding matrix and adds no
    parameters here. Never recomputed (SC21 eq. (3) counts it three times, not four)."""

    vocab: int
    hidden: int
    seq_len: int
    tied: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"

    @property
    def params(self) -> int:
        norm = 2 * self.hidden if self.norm == "layernorm" else self.hidden
        return norm + (0 if self.tied else self.vocab * self.hidden)

    def params_per_device(self, *, tp: int) -> float:
        norm = 2 * self.hidden if self.norm == "layernorm" else self.hidden
        return norm + (0 if self.tied else self.vocab * self.hidden / tp)

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        # the output layer stays in BF16 under Transformer Engine's FP8 recipe
        return (Gemm(batch * self.seq_len, self.vocab // tp, self.hidden, fp8=False),)

    def recompute_gemms(self, *, batch: int, tp: int, recompute: RecomputeMode) -> tuple[Gemm, ...]:
        return ()

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        t = batch * self.seq_len
        norm = 2 * t * self.hidden * act_bytes / (tp if sp else 1)
        # cross-entropy in fp32 over the local vocabulary shard: read logits, exp, write
        return float(norm + 3 * 4 * t * self.vocab / tp)

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        # Korthikanti et al. 2022 sec. 4.3: final norm input (2sbh), projection input (2sbh),
        # fp32 logits for the cross-entropy (4 s b v / t)
        t = batch * self.seq_len
        seq_shard = tp if sp else 1
        return float(2 * t * self.hidden * act_bytes / seq_shard + 4 * t * self.vocab / tp)

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        t = batch * self.seq_len
        coll: list[Collective] = []
        if sp:
            coll.append(Collective("all-gather", float(t * self.hidden * act_bytes)))
        # vocabulary-parallel cross-entropy: max, sum-exp and target logit, fp32 per token
        coll.extend(Collective("all-reduce", 4.0 * t) for _ in range(3))
        return tuple(coll)

    def backward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        nbytes = float(batch * self.seq_len * self.hidden * act_bytes)
        return (Collective("reduce-scatter" if sp else "all-reduce", nbytes),)

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return 4.0 * batch  # the loss

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.seq_len * self.hidden * act_bytes)
