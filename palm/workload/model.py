"""What is trained: the model description (``[model]`` table) and the operator graph built from it.

A :class:`ModelConfig` is plain validated data; :func:`build_workload` turns it into a
:class:`Workload`, an ordered chain of :mod:`palm.workload.ops` operators that pipeline stages
split between them. Transformer families produce ``embedding, layer x L, logits``; ``resnet50``
produces its real convolution, pooling and classifier layers; ``graph`` takes an explicit list of
Linear / Conv2d / Pool / Transformer operators.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

from palm import feasibility
from palm.errors import ConfigError
from palm.feasibility import divisors_or_note
from palm.workload.gemm import gemm_ops
from palm.workload.moe import MoELayer
from palm.workload.ops import Embedding, Logits, Op, TransformerLayer
from palm.workload.resnet import resnet50_ops

__all__ = [
    "ModelConfig",
    "Workload",
    "build_workload",
    "check_tensor_parallel",
    "divisors_or_note",
    "FAMILIES",
]

Family = Literal["gpt", "llama", "bert", "resnet50", "graph", "gemm"]
FAMILIES: tuple[str, ...] = ("gpt", "llama", "bert", "resnet50", "graph", "gemm")


@dataclass(frozen=True)
class ModelConfig:
    """The ``[model]`` table. Transformer dimensions are per the usual names:

    ``layers`` (L), ``hidden`` (h), ``heads`` (a), ``kv_heads`` (grouped-query attention; equal
    to ``heads`` for multi-head attention), ``ffn_hidden`` (MLP width), ``seq_len`` (s, tokens
    per sample), ``vocab`` (V). ``mlp`` is ``gelu`` (two matrices) or ``swiglu`` / ``geglu``
    (gated, three), or ``clamped-swiglu``: gpt-oss's gated activation, whose gate and linear
    halves are clamped before the gating (``limit = 7``); its routed experts are priced with
    the element-wise passes Megatron-Core runs it in (docs/model.md, "Mixture of experts"),
    a dense MLP with it as SwiGLU (gpt-oss has none).
    ``image_size`` (pixels, square) is used by ``resnet50``; ``graph_ops`` by ``graph``.
    ``attention`` is the attention kernel: ``flash`` (FlashAttention), ``unfused`` (two batched
    products and the score matrix in memory, Megatron-LM 2021), or ``auto``: flash on a
    gpu-cluster, unfused on a mesh2d (resolved by the plan).
    ``gemm`` is one matrix product ``C[m, n] = A[m, k] B[k, n]`` (:mod:`palm.workload.gemm`);
    ``sram_resident`` names its operands that already sit in SRAM (``"a"``, ``"b"``, ``"c"``:
    e.g. tt-metal's L1-sharded tensors) instead of starting or ending in DRAM.

    ``head_dim`` is the attention head width (0 = ``hidden / heads``; Gemma and Qwen3 differ).

    Mixture of experts (:mod:`palm.workload.moe`, docs/model.md "Mixture of experts"):
    ``experts`` routed experts (0 = a dense model) of width ``moe_ffn_hidden``, ``top_k`` of
    them per token, ``shared_experts`` always-on experts of the same width; the first
    ``dense_layers`` layers keep a dense MLP of ``ffn_hidden`` and after them every
    ``moe_layer_freq``-th layer (``i % moe_layer_freq == 0``) is a MoE layer;
    ``capacity_factor`` (0 = dropless) pads each expert's buffer to ``c`` times its fair share;
    ``moe_load_imbalance`` (>= 1, 1 = balanced) is the busiest device's routed tokens over the
    mean. Multi-head latent attention (DeepSeek-V2/V3) when ``kv_lora_rank > 0``:
    ``q_lora_rank``, ``kv_lora_rank``, ``qk_rope_head_dim`` and ``v_head_dim``, with
    ``head_dim`` the query/key head width (nope + rope).
    """

    name: str = "custom"
    family: Family = "gpt"
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    ffn_hidden: int = 0
    seq_len: int = 0
    vocab: int = 0
    mlp: Literal["gelu", "swiglu", "geglu", "clamped-swiglu"] = "gelu"
    bias: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    dropout: bool = True
    tied_embeddings: bool = True
    #: the query, key and value projections have biases even where ``bias`` is false (Qwen2)
    qkv_bias: bool = False
    learned_positions: bool = True
    image_size: int = 224
    classes: int = 1000
    attention: Literal["auto", "flash", "unfused"] = "auto"
    #: which fused kernel runs ``flash`` attention on a GPU whose architecture has kernel
    #: constants (palm/cost/kernels.py): ``auto`` is FlashAttention-2 (the flash-attn package,
    #: PyTorch's SDPA flash backend); Transformer Engine stacks run cuDNN's (palm/software.py)
    attention_kernel: Literal["auto", "flash2", "flash3", "cudnn"] = "auto"
    m: int = 0
    k: int = 0
    n: int = 0
    sram_resident: tuple[str, ...] = ()
    graph_ops: tuple[Op, ...] = field(default=(), repr=False)
    head_dim: int = 0
    experts: int = 0
    top_k: int = 0
    moe_ffn_hidden: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    moe_layer_freq: int = 1
    capacity_factor: float = 0.0
    moe_load_imbalance: float = 1.0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    @property
    def is_transformer(self) -> bool:
        return self.family in ("gpt", "llama", "bert")

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def is_moe_layer(self, index: int) -> bool:
        """Layer ``index`` (from 0) has routed experts: after the leading dense layers, every
        ``moe_layer_freq``-th (Hugging Face DeepSeek / Megatron-Core convention)."""
        return (
            self.experts > 0
            and index >= self.dense_layers
            and index % max(1, self.moe_layer_freq) == 0
        )


@dataclass(frozen=True)
class Workload:
    """An ordered chain of operators plus what one sample is.

    ``blocks`` is the number of repeated units a pipeline may be cut between (transformer
    layers for transformer families, operators otherwise).
    """

    name: str
    ops: tuple[Op, ...]
    sample_unit: str
    tokens_per_sample: int
    blocks: int
    transformer: bool

    @property
    def params(self) -> int:
        return sum(op.params for op in self.ops)

    @property
    def active_params(self) -> int:
        """Parameters one token uses (``params`` for a dense model; mixture-of-experts layers
        count only ``top_k`` of their routed experts)."""
        return sum(getattr(op, "active_params", op.params) for op in self.ops)

    def forward_flops(self, *, batch: int = 1) -> float:
        """Matrix-multiply FLOPs of one forward pass over ``batch`` samples (no parallelism)."""
        return sum(op.forward_flops(batch=batch) for op in self.ops)


def _transformer_ops(m: ModelConfig) -> tuple[Op, ...]:
    emb = Embedding(
        name="embedding",
        vocab=m.vocab,
        hidden=m.hidden,
        seq_len=m.seq_len,
        learned_positions=m.learned_positions,
        dropout=m.dropout,
    )
    layer_ops = tuple(_layer(m, i) for i in range(m.layers))
    logits = Logits(
        name="logits",
        vocab=m.vocab,
        hidden=m.hidden,
        seq_len=m.seq_len,
        tied=m.tied_embeddings,
        norm=m.norm,
    )
    return (emb, *layer_ops, logits)


def _layer(m: ModelConfig, i: int) -> TransformerLayer:
    """Layer ``i``: a dense :class:`TransformerLayer`, or a :class:`MoELayer` when it has
    routed experts or MLA attention (a MoE layer has no dense MLP: ``ffn_hidden = 0``)."""
    moe = m.is_moe_layer(i)
    common = dict(
        name=f"layer{i}",
        hidden=m.hidden,
        heads=m.heads,
        kv_heads=m.kv_heads or m.heads,
        ffn_hidden=0 if moe else m.ffn_hidden,
        seq_len=m.seq_len,
        mlp=m.mlp,
        bias=m.bias,
        qkv_bias=m.qkv_bias,
        norm=m.norm,
        dropout=m.dropout,
        head_dim=m.head_dim,
    )
    if not moe and not m.kv_lora_rank:
        return TransformerLayer(**common)  # type: ignore[arg-type]
    return MoELayer(
        **common,  # type: ignore[arg-type]
        experts=m.experts if moe else 0,
        top_k=m.top_k if moe else 0,
        moe_ffn_hidden=m.moe_ffn_hidden if moe else 0,
        shared_experts=m.shared_experts if moe else 0,
        capacity_factor=m.capacity_factor,
        load_imbalance=m.moe_load_imbalance,
        q_lora_rank=m.q_lora_rank,
        kv_lora_rank=m.kv_lora_rank,
        qk_rope_head_dim=m.qk_rope_head_dim,
        v_head_dim=m.v_head_dim,
    )


def build_workload(model: ModelConfig) -> Workload:
    """The operator chain of ``model`` (validated by :mod:`palm.config`). A function of the
    model's fields alone, both frozen, so it is built once per distinct model and shared:
    validation, the plan context and a study's search space ask for the same one."""
    try:
        hash(model)
    except TypeError:  # a field that cannot be a key: built afresh
        return _build_workload(model)
    return _cached_workload(model)


@functools.lru_cache(maxsize=64)
def _cached_workload(model: ModelConfig) -> Workload:
    return _build_workload(model)


def _build_workload(model: ModelConfig) -> Workload:
    """:func:`build_workload`, built."""
    if model.is_transformer:
        return Workload(
            name=model.name,
            ops=_transformer_ops(model),
            sample_unit="sequences",
            tokens_per_sample=model.seq_len,
            blocks=model.layers,
            transformer=True,
        )
    if model.family == "resnet50":
        ops = resnet50_ops(image_size=model.image_size, classes=model.classes)
        return Workload(
            name=model.name,
            ops=ops,
            sample_unit="images",
            tokens_per_sample=1,
            blocks=len(ops),
            transformer=False,
        )
    if model.family == "gemm":
        return Workload(
            name=model.name,
            ops=gemm_ops(m=model.m, k=model.k, n=model.n),
            sample_unit="products",
            tokens_per_sample=1,
            blocks=1,
            transformer=False,
        )
    if model.family == "graph":
        if not model.graph_ops:
            raise ConfigError("model.ops", [], "a non-empty list of operators for family 'graph'")
        return Workload(
            name=model.name,
            ops=model.graph_ops,
            sample_unit="samples",
            tokens_per_sample=1,
            blocks=len(model.graph_ops),
            transformer=False,
        )
    raise ConfigError("model.family", model.family, f"one of {', '.join(FAMILIES)}")


def check_tensor_parallel(m: ModelConfig, tp: int) -> None:
    """:func:`palm.feasibility.tensor_parallel` for a transformer, raising
    :class:`ConfigError` (``parallelism.tp``) when ``tp`` breaks it."""
    allowed = feasibility.tensor_parallel(m, tp)
    if allowed is not None:
        raise ConfigError("parallelism.tp", tp, allowed)
