"""Mixture-of-experts decoder layer (and multi-head latent attention), per micro-batch.

A :class:`MoELayer` is a :class:`~palm.workload.ops.TransformerLayer` whose MLP is replaced by
``experts`` routed experts of width ``moe_ffn_hidden`` of which each token uses ``top_k``
(Shazeer et al. 2017; GShard, Lepikhin et al. 2021; Switch Transformer, Fedus et al. 2022), plus
``shared_experts`` experts of the same width that every token uses (DeepSeekMoE, Dai et al. 2024;
DeepSeek-V3 report, sec. 2.1.2), computed as one dense MLP of ``shared_experts x moe_ffn_hidden``.
With ``kv_lora_rank > 0`` the attention is DeepSeek's multi-head latent attention (MLA,
DeepSeek-V2 report sec. 2.1, DeepSeek-V3 report sec. 2.1.1); a layer with ``experts = 0`` is then
a dense MLA layer (DeepSeek-V3's first ``dense_layers``).

One MoE layer on one device, with ``T`` tokens entering it (``b s / tp``: Megatron-Core requires
sequence parallelism with MoE and TP), runs, as Megatron-Core's all-to-all token dispatcher does
(Megatron-Core MoE docs, "MoE parallel folding"):

1. router: ``T x h @ h x E`` logits, softmax and top-k (fp32);
2. permute: each token copied to its ``k`` experts, ``D = rho T k`` rows;
3. dispatch: all-to-all over the ``ep`` expert-parallel group, ``D h`` bytes-elements per member;
4. with ``etp > 1``: all-gather over the expert-tensor-parallel group, ``N = etp D`` rows;
5. grouped GEMM: ``E / ep`` local experts, each ``N / (E/ep)`` rows through the expert MLP whose
   width is split ``etp`` ways (``2`` or ``3`` matrices as the dense MLP);
6. reduce-scatter over ``etp``, combine all-to-all over ``ep``, unpermute and weighted sum.

``rho`` is the load factor of the busiest device: the capacity factor ``c`` when experts have a
fixed capacity (GShard sec. 3.2, Switch sec. 2.2: expert buffers of ``c T k / E`` tokens, padded,
overflow dropped) and otherwise (dropless, Megatron-Core's default) the documented load
imbalance ``max / mean`` routed tokens per device (``1.0`` = perfectly balanced, what the
NeMo / Megatron-Bridge MoE benchmarks force). The step waits for the busiest device, so ``rho``
scales its expert GEMMs and its all-to-all bytes.

Expert weights are split over ``ep x etp`` devices; their gradients are all-reduced over the
expert-data-parallel group of ``edp = tp x dp / (ep x etp)`` devices (Megatron-Core's layout
``etp-ep-edp-pp`` over the same ranks as ``tp-dp-pp``); every other weight as in a dense layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from palm.workload.ops import (
    Collective,
    FusedAttention,
    Gemm,
    Op,
    RecomputeMode,
    TransformerLayer,
    cp_merge_bytes,
)

__all__ = ["MoELayer", "with_expert_layout", "expert_params_per_device"]


@dataclass(frozen=True)
class MoELayer(TransformerLayer):
    """A decoder layer with routed (and shared) experts and optionally MLA attention.

    ``ffn_hidden`` is the width of a dense MLP the layer also has (0 for a MoE layer; DeepSeek's
    dense MLA layers set it with ``experts = 0``). ``ep`` and ``etp`` are filled in by the plan
    from ``[parallelism]``. MLA: ``head_dim`` is the query/key head width (``qk_nope + qk_rope``),
    ``v_head_dim`` the value head width, ``qk_rope_head_dim`` the decoupled rotary part shared by
    all heads, ``q_lora_rank`` (0 = queries straight from the hidden state) and ``kv_lora_rank``
    the widths of the compressed latents. ``prob_bytes`` is the width of the routing
    probabilities the experts receive (0: the activations'; 4 under the flex dispatcher, whose
    DeepEP / HybridEP kernels take fp32 probabilities), set by the plan.
    """

    experts: int = 0
    top_k: int = 0
    moe_ffn_hidden: int = 0
    shared_experts: int = 0
    capacity_factor: float = 0.0
    load_imbalance: float = 1.0
    ep: int = 1
    etp: int = 1
    prob_bytes: float = 0.0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    # ---------------------------------------------------------------------------- parameters

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def _norms(self) -> int:
        return 2 * (2 * self.hidden if self.norm == "layernorm" else self.hidden)

    def _mlp_params(self, width: int) -> int:
        """One (gated or plain) MLP of ``width``, with its biases if the model has them."""
        mats = self._mlp_in_mats
        return (mats + 1) * self.hidden * width + ((mats * width + self.hidden) if self.bias else 0)

    @property
    def _mla_down_params(self) -> int:
        """MLA down-projections and latent norms: replicated over TP (Megatron-Core)."""
        h, ql, kvl = self.hidden, self.q_lora_rank, self.kv_lora_rank
        q = h * ql + ql if ql else 0
        return q + h * (kvl + self.qk_rope_head_dim) + kvl

    @property
    def attention_params(self) -> int:
        h, heads = self.hidden, self.heads
        if not self.mla:
            q, kv = self.q_dim, self.kv_dim
            biases = (q + 2 * kv + h) if self.bias else (q + 2 * kv) if self.qkv_bias else 0
            return h * (q + 2 * kv) + q * h + biases
        ql, kvl, v = self.q_lora_rank, self.kv_lora_rank, self.v_head_dim
        nope = self.head_dim - self.qk_rope_head_dim
        q_up = (ql or h) * heads * self.head_dim
        kv_up = kvl * heads * (nope + v)
        return self._mla_down_params + q_up + kv_up + heads * v * h

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @property
    def expert_params(self) -> int:
        """Routed-expert weights of the whole layer (split over ``ep x etp`` devices)."""
        return self.experts * self._mlp_params(self.moe_ffn_hidden)

    @property
    def _dense_mlp_params(self) -> int:
        shared = self._mlp_params(self.shared_experts * self.moe_ffn_hidden)
        dense = self._mlp_params(self.ffn_hidden) if self.ffn_hidden else 0
        return (shared if self.shared_experts else 0) + dense

    @property
    def params(self) -> int:
        return (
            self.attention_params
            + self._norms
            + self._dense_mlp_params
            + self.router_params
            + self.expert_params
        )

    @property
    def active_params(self) -> int:
        """Parameters one token uses: ``top_k`` of the routed experts."""
        used = self.top_k * self._mlp_params(self.moe_ffn_hidden) if self.experts else 0
        return self.params - self.expert_params + used

    def expert_params_per_device(self) -> float:
        return self.expert_params / (self.ep * self.etp)

    def params_per_device(self, *, tp: int) -> float:
        # replicated over TP: norms, row-parallel biases, the router, MLA down-projections
        replicated = self._norms + self.router_params + (self._mla_down_params if self.mla else 0)
        if self.bias:
            replicated += self.hidden * (1 + (1 if self._dense_mlp_params else 0))
        split = self.params - self.expert_params - replicated
        return split / tp + replicated + self.expert_params_per_device()

    # ---------------------------------------------------------------------------- token counts

    def tokens_in(self, *, batch: int, tp: int) -> float:
        """Tokens entering the router on one device: the sequence-parallel shard."""
        return batch * self.seq_len / tp

    def _load(self) -> float:
        return self.capacity_factor if self.capacity_factor > 0 else self.load_imbalance

    def dispatched_tokens(self, *, batch: int, tp: int) -> float:
        """Rows ``D = rho T k`` the busiest device sends to (and receives from) the EP group."""
        return self._load() * self.tokens_in(batch=batch, tp=tp) * self.top_k

    def expert_tokens(self, *, batch: int, tp: int) -> float:
        """Rows ``N = etp D`` the local experts of the busiest device process."""
        return self.etp * self.dispatched_tokens(batch=batch, tp=tp)

    # ---------------------------------------------------------------------------- products

    def _attention_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        if not self.mla or self.attention == "flash":
            return super()._attention_gemms(batch=batch, tp=tp)
        # MLA: Q K^T over heads of d_nope + d_rope, P V over heads of d_v; BF16 under FP8
        s, kv, heads = self.seq_len, self.context_len, batch * self.heads // tp
        return (
            Gemm(s, kv, self.head_dim, heads, fp8=False),
            Gemm(s, self.v_head_dim, kv, heads, fp8=False),
        )

    def fused_attention(self, *, batch: int, tp: int, act_bytes: float) -> FusedAttention | None:
        """FlashAttention; under MLA ``Q K^T`` runs over heads of ``d_nope + d_rope`` and
        ``P V`` over heads of ``d_v`` (``2 s s_kv (d_qk + d_v)`` FLOPs per head), and K and V
        are per-head (the latent is expanded before the kernel, as in training)."""
        fused = super().fused_attention(batch=batch, tp=tp, act_bytes=act_bytes)
        if fused is None or not self.mla:
            return fused
        s, kv, p = self.seq_len, self.context_len, act_bytes
        heads = batch * self.heads / tp
        dqk, dv = self.head_dim, self.v_head_dim
        mask = 0.5 if self.causal else 1.0
        q = s * dqk * heads * p  # Q or dQ
        k = s * dqk * heads * p  # the local K or dK
        v = s * dv * heads * p  # V, O, dO, dV
        lse = 4.0 * s * heads
        merge_f, merge_b = cp_merge_bytes(cp=self.cp, q_bytes=q, o_bytes=v, kv_bytes=k + v)
        return FusedAttention(
            forward_flops=2.0 * s * kv * (dqk + dv) * heads * mask,
            score_elements=s * kv * heads * mask,
            forward_bytes=q + k + v + v + lse,  # read Q, K, V; write O, LSE
            backward_bytes=q + k + 3 * v + lse + q + k + v,  # read Q,K,V,O,dO,LSE; write dQ,dK,dV
            forward_merge_bytes=merge_f,
            backward_merge_bytes=merge_b,
        )

    def _mla_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        t, h, heads = batch * self.seq_len, self.hidden, self.heads // tp
        ql, kvl, v = self.q_lora_rank, self.kv_lora_rank, self.v_head_dim
        nope = self.head_dim - self.qk_rope_head_dim
        q: tuple[Gemm, ...] = (Gemm(t, heads * self.head_dim, h),)
        if ql:
            q = (Gemm(t, ql, h), Gemm(t, heads * self.head_dim, ql))
        kv = (Gemm(t, kvl + self.qk_rope_head_dim, h), Gemm(t, heads * (nope + v), kvl))
        out = Gemm(t, h, heads * v)
        return (*q, *kv, *self._attention_gemms(batch=batch, tp=tp), out)

    def _mlp_gemms(self, tokens: int, width: int, tp: int) -> tuple[Gemm, ...]:
        if width <= 0:
            return ()
        return (
            Gemm(tokens, self._mlp_in_mats * width // tp, self.hidden),
            Gemm(tokens, self.hidden, width // tp),
        )

    def moe_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        """Router, shared experts and the two grouped GEMMs of the routed experts."""
        if not self.experts:
            return ()
        h = self.hidden
        local = self.experts // self.ep
        rows = math.ceil(self.expert_tokens(batch=batch, tp=tp) / local)
        width = self.moe_ffn_hidden // self.etp
        # the router stays in BF16 under FP8 training (Transformer Engine runs linear layers only)
        router = Gemm(math.ceil(self.tokens_in(batch=batch, tp=tp)), self.experts, h, fp8=False)
        shared = self._mlp_gemms(
            batch * self.seq_len, self.shared_experts * self.moe_ffn_hidden, tp
        )
        # one local expert is one ordinary product per projection (Megatron-Core's grouped
        # MLP then runs a single GEMM); the grouped-GEMM loss applies to two or more
        grouped = local > 1
        up = Gemm(rows, self._mlp_in_mats * width, h, local, grouped=grouped)
        down = Gemm(rows, h, width, local, grouped=grouped)
        return (router, *shared, up, down)

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        if self.mla:
            attn = self._mla_gemms(batch=batch, tp=tp)
            attn += self._mlp_gemms(batch * self.seq_len, self.ffn_hidden, tp)
        else:  # the dense layer's products; those of an absent dense MLP are empty
            attn = tuple(g for g in super().forward_gemms(batch=batch, tp=tp) if g.flops > 0)
        return attn + self.moe_gemms(batch=batch, tp=tp)

    # ---------------------------------------------------------------------------- memory traffic

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        base = super().forward_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=act_bytes)
        if not self.experts:
            return base
        p, h = act_bytes, self.hidden
        t_in = self.tokens_in(batch=batch, tp=tp)
        d = self.dispatched_tokens(batch=batch, tp=tp)
        n = self.expert_tokens(batch=batch, tp=tp)
        router = 3 * 4 * t_in * self.experts  # fp32 logits: write, softmax read/write, top-k
        permute = 2 * (t_in + d) * h * p  # permute (read T, write D) and unpermute-combine
        act = (self._mlp_in_mats + 1) * n * self.moe_ffn_hidden / self.etp * p
        shared_w = self.shared_experts * self.moe_ffn_hidden
        shared = (self._mlp_in_mats + 1) * batch * self.seq_len * shared_w / tp * p
        unfused, _ = self.unfused_expert_bytes(batch=batch, tp=tp, act_bytes=act_bytes)
        return base + router + permute + act + shared + unfused

    def unfused_expert_bytes(self, *, batch: int, tp: int, act_bytes: float) -> tuple[float, float]:
        """Forward and backward memory traffic of the routed experts' element-wise passes
        that Megatron-Core's grouped MLP (``TEGroupedMLP``) runs outside fused kernels, on the
        busiest device (``N`` expert rows, intermediate width ``F = moe_ffn_hidden / etp``,
        ``p`` bytes per element):

        * ``clamped-swiglu`` (gpt-oss): the gate half is clamped from above and the linear
          half on both sides and the two are concatenated before the fused gated kernel
          (``weighted_bias_quick_geglu_impl``), forward ``(2 + 2 + 4) N F p``; backward, each
          clamp's gradient reads its saved input and the incoming gradient and writes its own
          (``2 x 3 N F p``) and the split's gradient concatenates the two (``4 N F p``):
          ``8 N F p`` forward, ``10 N F p`` backward beyond the fused kernel's ``3 N F p``;
        * ``bias``: the second projection's bias is added after the grouped GEMM, scaled by
          each row's routing probability, expert by expert (``_apply_bias``), in the wider of
          the activation and probability types (``q`` bytes): ``b p`` written, added to the
          GEMM output (read ``p + q``, write ``q``), the experts' pieces concatenated (read,
          write ``q``) and, if ``q > p``, cast back (read ``q``, write ``p``): ``6 N h p``
          forward with 16-bit probabilities; backward, the bias and probability gradients
          are two products of the incoming gradient, each written and read back for its
          reduction (``2 x 3 N h q``), plus, if ``q > p``, the casts of the incoming
          gradient up and of the GEMM output's gradient down (``2 (p + q) N h``).

        Sources: Megatron-Core ``megatron/core/transformer/moe/experts.py`` and
        ``megatron/core/fusions/fused_bias_geglu.py`` at 92c8482e (Megatron-Bridge 25.11) and
        d7288711 (26.04), unchanged between them."""
        if not self.experts:
            return 0.0, 0.0
        n, p = self.expert_tokens(batch=batch, tp=tp), act_bytes
        forward = backward = 0.0
        if self.mlp == "clamped-swiglu":
            inner = n * self.moe_ffn_hidden / self.etp * p
            forward += 8 * inner
            backward += 10 * inner
        if self.bias:
            rows = n * self.hidden
            q = max(p, self.prob_bytes)
            cast = p + q if q > p else 0.0
            forward += rows * (q + (p + 2 * q) + 2 * q + cast)
            backward += rows * (2 * 3 * q + 2 * cast)
        return forward, backward

    def backward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        """Twice the forward traffic (the default rule), except the routed experts' unfused
        passes, priced as they run (:meth:`unfused_expert_bytes`)."""
        fwd = self.forward_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=act_bytes)
        unfused_f, unfused_b = self.unfused_expert_bytes(batch=batch, tp=tp, act_bytes=act_bytes)
        return 2.0 * (fwd - unfused_f) + unfused_b

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        """The dense layer's activations (Korthikanti et al. 2022, with the MLP width that the
        layer has) plus what the experts keep for the backward pass: router probabilities
        (fp32), the received dispatch buffer (expert input), the expert MLP's intermediate
        activations, the expert output before the combine; the shared experts' activations;
        MLA's latents; with ``clamped-swiglu`` the clamped copy of the intermediate activation
        that the fused gated kernel keeps beside the GEMM output the clamps keep. Full
        recompute keeps only the layer input."""
        base = super().activation_bytes(
            batch=batch, tp=tp, sp=sp, act_bytes=act_bytes, recompute=recompute
        )
        if recompute == "full":
            return base
        p, h, t = act_bytes, self.hidden, batch * self.seq_len
        extra = 0.0
        if self.mla:
            extra += t * (self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim) * p
        if self.experts:
            n = self.expert_tokens(batch=batch, tp=tp)
            extra += 4.0 * self.tokens_in(batch=batch, tp=tp) * self.experts
            extra += 2 * n * h * p
            extra += (self._mlp_in_mats + 1) * n * self.moe_ffn_hidden / self.etp * p
            if self.mlp == "clamped-swiglu":  # the clamped, concatenated copy of the input
                extra += 2 * n * self.moe_ffn_hidden / self.etp * p
            shared_w = self.shared_experts * self.moe_ffn_hidden
            extra += (self._mlp_in_mats + 1) * t * shared_w / tp * p
        return base + extra

    # ---------------------------------------------------------------------------- collectives

    def moe_collectives(self, *, batch: int, tp: int, act_bytes: float) -> tuple[Collective, ...]:
        """Dispatch and combine: an all-to-all over ``ep`` of ``D h`` elements each way, and
        with ``etp > 1`` an all-gather and a reduce-scatter of ``N h`` over ``etp``."""
        if not self.experts:
            return ()
        p, h = act_bytes, self.hidden
        a2a = self.dispatched_tokens(batch=batch, tp=tp) * h * p
        gathered = self.expert_tokens(batch=batch, tp=tp) * h * p
        out: list[Collective] = []
        if self.ep > 1:
            out.append(Collective("all-to-all", a2a, group="ep"))
        if self.etp > 1:
            out += [
                Collective("all-gather", gathered, group="etp"),
                Collective("reduce-scatter", gathered, group="etp"),
            ]
        if self.ep > 1:
            out.append(Collective("all-to-all", a2a, group="ep"))
        return tuple(out)

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        dense = super().forward_collectives(batch=batch, tp=tp, sp=sp, act_bytes=act_bytes)
        if tp > 1 and not self.ffn_hidden and not self.shared_experts:
            # no dense MLP: the routed experts read the sequence-parallel shard directly, so
            # the MLP's all-gather / reduce-scatter pair (the last two) is not run
            dense = dense[:-2]
        return dense + self.moe_collectives(batch=batch, tp=tp, act_bytes=act_bytes)

    def update_collectives(self, *, tp: int, dp: int, grad_bytes: float) -> tuple[Collective, ...]:
        """Dense weights: all-reduce over ``dp``; expert weights: over the expert-data-parallel
        group of ``tp x dp / (ep x etp)`` devices (Megatron-Core)."""
        experts = self.expert_params_per_device()
        dense = (self.params_per_device(tp=tp) - experts) * grad_bytes
        edp = tp * dp // (self.ep * self.etp)
        out: list[Collective] = []
        if dp > 1 and dense > 0:
            out.append(Collective("all-reduce", dense, group="dp"))
        if edp > 1 and experts > 0:
            out.append(Collective("all-reduce", experts * grad_bytes, group="edp"))
        return tuple(out)


def with_expert_layout(
    ops: tuple[Op, ...], *, ep: int, etp: int, prob_bytes: float = 0.0
) -> tuple[Op, ...]:
    """``ops`` with the expert-parallel degrees of ``[parallelism]`` set on every MoE layer,
    and the width of the routing probabilities its dispatcher hands the experts."""
    return tuple(
        replace(op, ep=ep, etp=etp, prob_bytes=prob_bytes)
        if isinstance(op, MoELayer) and op.experts
        else op
        for op in ops
    )


def expert_params_per_device(ops: Sequence[Op]) -> float:
    """Expert weights among ``ops`` that one device holds (sharded over ``ep x etp``)."""
    return sum(op.expert_params_per_device() for op in ops if isinstance(op, MoELayer))
