"""What is trained: the model description (``[model]`` table) and the operator graph built from it.

A :class:`ModelConfig` is plain validated data; :func:`build_workload` turns it into a
:class:`Workload`, an ordered chain of :mod:`palm.workload.ops` operators that pipeline stages
split between them. Transformer families produce ``embedding, layer x L, logits``; ``resnet50``
produces its real convolution, pooling and classifier layers; ``graph`` takes an explicit list of
Linear / Conv2d / Pool / Transformer operators.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from palm.errors import ConfigError
from palm.workload.ops import Embedding, Logits, Op, TransformerLayer
from palm.workload.resnet import resnet50_ops

__all__ = ["ModelConfig", "Workload", "build_workload", "FAMILIES"]

Family = Literal["gpt", "llama", "bert", "resnet50", "graph"]
FAMILIES: tuple[str, ...] = ("gpt", "llama", "bert", "resnet50", "graph")


@dataclass(frozen=True)
class ModelConfig:
    """The ``[model]`` table. Transformer dimensions are per the usual names:

    ``layers`` (L), ``hidden`` (h), ``heads`` (a), ``kv_heads`` (grouped-query attention; equal
    to ``heads`` for multi-head attention), ``ffn_hidden`` (MLP width), ``seq_len`` (s, tokens
    per sample), ``vocab`` (V). ``mlp`` is ``gelu`` (two matrices) or ``swiglu`` (three).
    ``image_size`` (pixels, square) is used by ``resnet50``; ``graph_ops`` by ``graph``.
    ``attention`` is the attention kernel: ``flash`` (FlashAttention), ``unfused`` (two batched
    products and the score matrix in memory, Megatron-LM 2021), or ``auto``: flash on a
    gpu-cluster, unfused on a mesh2d (resolved by the plan).
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
    mlp: Literal["gelu", "swiglu"] = "gelu"
    bias: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    dropout: bool = True
    tied_embeddings: bool = True
    learned_positions: bool = True
    image_size: int = 224
    classes: int = 1000
    attention: Literal["auto", "flash", "unfused"] = "auto"
    graph_ops: tuple[Op, ...] = field(default=(), repr=False)

    @property
    def is_transformer(self) -> bool:
        return self.family in ("gpt", "llama", "bert")


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
    layer_ops = tuple(
        TransformerLayer(
            name=f"layer{i}",
            hidden=m.hidden,
            heads=m.heads,
            kv_heads=m.kv_heads or m.heads,
            ffn_hidden=m.ffn_hidden,
            seq_len=m.seq_len,
            mlp=m.mlp,
            bias=m.bias,
            norm=m.norm,
            dropout=m.dropout,
        )
        for i in range(m.layers)
    )
    logits = Logits(
        name="logits",
        vocab=m.vocab,
        hidden=m.hidden,
        seq_len=m.seq_len,
        tied=m.tied_embeddings,
        norm=m.norm,
    )
    return (emb, *layer_ops, logits)


def build_workload(model: ModelConfig) -> Workload:
    """Build the operator chain of ``model`` (validated by :mod:`palm.config`)."""
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
