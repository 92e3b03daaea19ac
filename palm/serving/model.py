"""The served model on one device: its layers per pipeline stage, the weights each device
holds, and the KV cache each token leaves behind.

Layers come from the training workload (:func:`palm.workload.model.build_workload`), each
re-shaped for one token (``seq_len = 1``, FlashAttention-style attention, no dropout) so that
its products for ``T`` tokens are ``op.forward_gemms(batch=T, tp=tp)``.

**KV cache per token and layer** (what one token's keys and values occupy, unsharded):

* multi-head and grouped-query attention (Ainslie et al. 2023, "GQA"): ``2 x kv_heads x
  head_dim x b`` bytes (one key and one value vector per KV head);
* multi-head latent attention (DeepSeek-V2 report, sec. 2.1.2, "Low-Rank Key-Value Joint
  Compression"; DeepSeek-V3 report sec. 2.1.1): the compressed latent ``c_KV`` of
  ``kv_lora_rank`` values and the decoupled rotary key of ``qk_rope_head_dim`` values, shared
  by all heads: ``(kv_lora_rank + qk_rope_head_dim) x b`` bytes.

Under tensor parallelism a device keeps the KV heads it computes: ``kv_heads / tp`` of them, or
one when ``tp > kv_heads`` (each KV head then replicated ``tp / kv_heads`` times, Megatron-LM
and vLLM alike); MLA's latent is replicated on every tensor-parallel rank (vLLM, SGLang and
TensorRT-LLM keep the whole latent on each rank).

**Weights per device.** Attention weights and MLP (and expert) weights are stored in their own
formats (:mod:`palm.serving.spec`); norms, embeddings and the output layer stay 16-bit (the
vocabulary-parallel embedding and output layer split ``tp`` ways; quantisation recipes such as
NVIDIA ModelOpt's FP8 and NVFP4 and AWQ leave ``lm_head`` unquantised). Experts split over
``ep x etp`` devices (:class:`palm.workload.moe.MoELayer`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from palm.strategy import SimConfig
from palm.workload.model import build_workload
from palm.workload.moe import MoELayer, with_expert_layout
from palm.workload.ops import Embedding, Logits, TransformerLayer

__all__ = [
    "ServedModel",
    "served_model",
    "kv_bytes_per_token_layer",
    "kv_heads_per_device",
    "layer_weight_params",
    "stage_layer_counts",
]


@dataclass(frozen=True)
class ServedModel:
    """The layers of one served model as one device sees them.

    ``layers[i]`` is layer ``i`` re-shaped for one token; ``stages[s]`` the indices of the
    layers of pipeline stage ``s`` (the first stage also holds the embedding, the last the
    output layer)."""

    layers: tuple[TransformerLayer, ...]
    embedding: Embedding
    logits: Logits
    stages: tuple[tuple[int, ...], ...]
    tp: int
    ep: int
    etp: int


def stage_layer_counts(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage: as even as possible, the first stages one more when ``pp``
    does not divide ``layers`` (vLLM's and TensorRT-LLM's default partition)."""
    base, extra = divmod(layers, pp)
    return tuple(base + (1 if s < extra else 0) for s in range(pp))


def served_model(config: SimConfig) -> ServedModel:
    """The served model of ``config`` (a transformer, validated by :mod:`palm.config`)."""
    par = config.parallelism
    ops = build_workload(dataclasses.replace(config.model, seq_len=1)).ops
    etp = par.etp or (1 if par.ep > 1 else par.tp)
    ops = with_expert_layout(ops, ep=par.ep, etp=etp)
    emb, logits = ops[0], ops[-1]
    assert isinstance(emb, Embedding) and isinstance(logits, Logits)
    # layers of the same shape share one instance, so that a step prices each shape once
    shapes: dict[TransformerLayer, TransformerLayer] = {}
    layers = tuple(
        shapes.setdefault(shaped, shaped)
        for shaped in (
            dataclasses.replace(op, name="layer", attention="flash", dropout=False, seq_len=1)
            for op in ops[1:-1]
            if isinstance(op, TransformerLayer)
        )
    )
    counts = stage_layer_counts(len(layers), par.pp)
    starts = [sum(counts[:s]) for s in range(par.pp)]
    stages = tuple(tuple(range(starts[s], starts[s] + counts[s])) for s in range(par.pp))
    return ServedModel(
        layers=layers,
        embedding=emb,
        logits=logits,
        stages=stages,
        tp=par.tp,
        ep=par.ep,
        etp=etp,
    )


def kv_heads_per_device(op: TransformerLayer, tp: int) -> int:
    """KV heads one tensor-parallel rank keeps: ``kv_heads / tp``, at least one."""
    return max(op.kv_heads // tp, 1)


def is_mla(op: TransformerLayer) -> bool:
    return isinstance(op, MoELayer) and op.mla


def kv_bytes_per_token_layer(op: TransformerLayer, *, kv_bytes: float, tp: int = 1) -> float:
    """KV cache bytes of one token in one layer on one tensor-parallel rank (module docstring);
    ``tp = 1`` gives the unsharded figure."""
    if isinstance(op, MoELayer) and op.mla:
        return (op.kv_lora_rank + op.qk_rope_head_dim) * kv_bytes
    return 2.0 * kv_heads_per_device(op, tp) * op.head_dim * kv_bytes


def layer_weight_params(op: TransformerLayer, *, tp: int) -> tuple[float, float, float]:
    """Parameters of ``op`` one device holds, as ``(attention, mlp, other)``: the attention
    projections, the MLP / shared / routed expert weights (experts split ``ep x etp`` ways),
    and the norms and router (16-bit). KV projections of replicated KV heads are replicated."""
    h = op.hidden
    norms = 2 * h
    if isinstance(op, MoELayer):
        attn = float(op.attention_params)
        if op.mla:
            attn = (attn - op._mla_down_params) / tp + op._mla_down_params
        else:
            attn = _gqa_attention_params(op, tp)
        mats = 1 if op.mlp == "gelu" else 2
        dense_w = op.ffn_hidden + op.shared_experts * op.moe_ffn_hidden
        mlp = (mats + 1) * h * dense_w / tp + op.expert_params_per_device()
        return attn, mlp, float(norms + op.router_params)
    mats = 1 if op.mlp == "gelu" else 2
    mlp = (mats + 1) * h * op.ffn_hidden / tp
    return _gqa_attention_params(op, tp), float(mlp), float(norms)


def _gqa_attention_params(op: TransformerLayer, tp: int) -> float:
    """Q and output projections split ``tp`` ways; K and V of the device's KV heads."""
    h, d = op.hidden, op.head_dim
    q = 2 * h * op.q_dim / tp
    kv = 2 * h * kv_heads_per_device(op, tp) * d
    return float(q + kv)


def embedding_params(model: ServedModel) -> float:
    """The vocabulary-parallel embedding's parameters on one device."""
    return model.embedding.vocab * model.embedding.hidden / model.tp


def logits_params(model: ServedModel) -> float:
    """The output layer's parameters on one device (a copy of the embedding when tied: the
    last stage needs it too, and holds it unless it is also the first)."""
    return math.ceil(model.logits.vocab / model.tp) * model.logits.hidden
