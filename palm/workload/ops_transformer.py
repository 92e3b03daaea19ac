"""Transformer operators under Megatron-LM tensor parallelism: :class:`TransformerLayer`
(attention and MLP, dense or mixture of experts), :class:`Embedding` and :class:`Logits`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from palm.workload.ops_base import (
    Collective,
    FusedAttention,
    Gemm,
    Op,
    RecomputeMode,
    cp_merge_bytes,
)

__all__ = ["TransformerLayer", "Embedding", "Logits"]


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
