"""Named model presets. Each entry cites where its dimensions come from."""

from __future__ import annotations

from dataclasses import replace

from palm.workload.model import ModelConfig

__all__ = [
    "MODEL_PRESETS",
    "MOE_PRESETS",
    "MOE_PUBLISHED_PARAMS",
    "model_preset",
    "MODEL_SOURCES",
]


def _megatron(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    # Narayanan et al., SC21, Table 1: GPT models with ffn = 4h, s = 2048, V = 51200,
    # learned positions and tied embeddings (Megatron-LM GPT).
    return ModelConfig(
        name=name,
        family="gpt",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn_hidden=4 * hidden,
        seq_len=2048,
        vocab=51200,
    )


def _llama2(
    name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int
) -> ModelConfig:
    # Touvron et al. 2023 (Llama 2), Table 1 and the released config.json files:
    # SwiGLU MLP, RMSNorm, no biases, rotary positions, untied embeddings, s = 4096, V = 32000.
    return ModelConfig(
        name=name,
        family="llama",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn_hidden=ffn,
        seq_len=4096,
        vocab=32000,
        mlp="swiglu",
        bias=False,
        norm="rmsnorm",
        dropout=False,
        tied_embeddings=False,
        learned_positions=False,
    )


def _bert(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    # Devlin et al. 2019, sec. 3: ffn = 4h, s = 512, WordPiece V = 30522, learned positions.
    return ModelConfig(
        name=name,
        family="bert",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn_hidden=4 * hidden,
        seq_len=512,
        vocab=30522,
    )


def _moe(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    vocab: int,
    *,
    experts: int,
    top_k: int,
    moe_ffn: int,
    ffn: int = 0,
    head_dim: int = 0,
    **more: object,
) -> ModelConfig:
    # the Llama-style decoder every MoE model here shares (SwiGLU experts, RMSNorm, rotary
    # positions, untied embeddings, no dropout); s = 4096, the sequence length of the
    # NeMo / Megatron-Bridge MoE pre-training recipes
    base = replace(
        _llama2(name, layers, hidden, heads, kv_heads, ffn or moe_ffn),
        vocab=vocab,
        head_dim=head_dim,
        experts=experts,
        top_k=top_k,
        moe_ffn_hidden=moe_ffn,
    )
    return replace(base, **more)  # type: ignore[arg-type]


MOE_PRESETS: dict[str, ModelConfig] = {
    # Jiang et al. 2024, "Mixtral of Experts", sec. 2 / Table 1 and mistralai/Mixtral-8x7B-v0.1
    # config.json: 32 layers, d 4096, 32 heads, 8 KV heads, 8 experts of 14336, top-2, V 32000.
    # Published: 46.7B total, 12.9B active (Mistral AI, "Mixtral of experts", Dec 2023).
    "mixtral-8x7b": _moe("mixtral-8x7b", 32, 4096, 32, 8, 32000, experts=8, top_k=2, moe_ffn=14336),
    # mistralai/Mixtral-8x22B-v0.1 config.json: 56 layers, d 6144, 48 heads, 8 KV heads,
    # 8 experts of 16384, top-2, V 32768 (v0.3 tokenizer; 32000 in v0.1). Published: 141B total,
    # 39B active (Mistral AI, "Cheaper, Better, Faster, Stronger", Apr 2024).
    "mixtral-8x22b": _moe(
        "mixtral-8x22b", 56, 6144, 48, 8, 32768, experts=8, top_k=2, moe_ffn=16384
    ),
    # Qwen3 Technical Report (Yang et al. 2025), Table 2, and Qwen/Qwen3-30B-A3B config.json:
    # 48 layers, d 2048, 32 query / 4 KV heads of 128, 128 experts of 768, top-8, V 151936,
    # untied. Published: 30.5B total, 3.3B activated (model card).
    "qwen3-30b-a3b": _moe(
        "qwen3-30b-a3b",
        48,
        2048,
        32,
        4,
        151936,
        experts=128,
        top_k=8,
        moe_ffn=768,
        ffn=6144,
        head_dim=128,
    ),
    # Qwen3 Technical Report, Table 2, and Qwen/Qwen3-235B-A22B config.json: 94 layers, d 4096,
    # 64 query / 4 KV heads of 128, 128 experts of 1536, top-8, V 151936. Published: 235B total,
    # 22B activated.
    "qwen3-235b-a22b": _moe(
        "qwen3-235b-a22b",
        94,
        4096,
        64,
        4,
        151936,
        experts=128,
        top_k=8,
        moe_ffn=1536,
        ffn=12288,
        head_dim=128,
    ),
    # DeepSeek-V3 Technical Report (DeepSeek-AI 2024), sec. 4.2 and deepseek-ai/DeepSeek-V3
    # config.json: 61 layers, d 7168, 128 heads, MLA (q_lora_rank 1536, kv_lora_rank 512,
    # qk_nope 128 + qk_rope 64, v 128), first 3 layers dense (18432), then 256 routed experts
    # of 2048, top-8, and 1 shared expert; V 129280. Published: 671B total, 37B activated (the
    # 14B multi-token-prediction module is not part of the main model and not modelled).
    "deepseek-v3": _moe(
        "deepseek-v3",
        61,
        7168,
        128,
        128,
        129280,
        experts=256,
        top_k=8,
        moe_ffn=2048,
        ffn=18432,
        head_dim=192,
        shared_experts=1,
        dense_layers=3,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        v_head_dim=128,
    ),
    # OpenAI gpt-oss model card (Aug 2025) and openai/gpt-oss-120b config.json: 36 layers,
    # d 2880, 64 query / 8 KV heads of 64, biases in attention and experts, 128 experts of 2880,
    # top-4, V 201088, the gated activation clamped at swiglu_limit 7. Published: 116.8B total,
    # 5.1B active per token (the card counts the unembedding, not the embedding, as active).
    # Not modelled: the alternating 128-token sliding-window attention (priced as full
    # attention) and the attention sinks (64 scalars).
    "gpt-oss-120b": _moe(
        "gpt-oss-120b",
        36,
        2880,
        64,
        8,
        201088,
        experts=128,
        top_k=4,
        moe_ffn=2880,
        head_dim=64,
        bias=True,
        mlp="clamped-swiglu",
    ),
}

#: parameters published for each MoE preset: (total, active, source)
MOE_PUBLISHED_PARAMS: dict[str, tuple[float, float, str]] = {
    "mixtral-8x7b": (46.7e9, 12.9e9, "Mistral AI, Mixtral of experts (2023)"),
    "mixtral-8x22b": (141e9, 39e9, "Mistral AI, Mixtral 8x22B announcement (2024)"),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, "Qwen3 Technical Report, Table 2 / model card"),
    "qwen3-235b-a22b": (235e9, 22e9, "Qwen3 Technical Report, Table 2 / model card"),
    "deepseek-v3": (671e9, 37e9, "DeepSeek-V3 Technical Report, abstract"),
    "gpt-oss-120b": (116.8e9, 5.1e9, "OpenAI gpt-oss-120b model card"),
}

MODEL_PRESETS: dict[str, ModelConfig] = {
    "t-18b": _megatron("t-18b", 40, 6144, 48),
    "t-39b": _megatron("t-39b", 48, 8192, 64),
    "t-76b": _megatron("t-76b", 60, 10240, 80),
    "t-145b": _megatron("t-145b", 80, 12288, 96),
    "t-310b": _megatron("t-310b", 96, 16384, 128),
    "t-530b": _megatron("t-530b", 105, 20480, 128),
    "t-1t": _megatron("t-1t", 128, 25600, 160),
    # Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, context 2048;
    # GPT-2 BPE vocabulary of 50257 tokens.
    "gpt3-175b": replace(_megatron("gpt3-175b", 96, 12288, 96), vocab=50257),
    "llama2-7b": _llama2("llama2-7b", 32, 4096, 32, 32, 11008),
    "llama2-70b": _llama2("llama2-70b", 80, 8192, 64, 8, 28672),
    "bert-base": _bert("bert-base", 12, 768, 12),
    "bert-large": _bert("bert-large", 24, 1024, 16),
    # He et al. 2016, Table 1 (v1.5 strides), 224x224 ImageNet images, 1000 classes.
    "resnet50": ModelConfig(name="resnet50", family="resnet50"),
    **MOE_PRESETS,
}

MODEL_SOURCES: dict[str, str] = {
    **{k: "Narayanan et al. SC21, Table 1" for k in MODEL_PRESETS if k.startswith("t-")},
    "gpt3-175b": "Brown et al. 2020, Table 2.1",
    "llama2-7b": "Touvron et al. 2023, Table 1 + released config.json",
    "llama2-70b": "Touvron et al. 2023, Table 1 + released config.json",
    "bert-base": "Devlin et al. 2019",
    "bert-large": "Devlin et al. 2019",
    "resnet50": "He et al. 2016, Table 1",
    **{k: v[2] + " + released config.json" for k, v in MOE_PUBLISHED_PARAMS.items()},
}


def model_preset(name: str) -> ModelConfig | None:
    """The preset called ``name`` (case-insensitive), or ``None``."""
    return MODEL_PRESETS.get(name.lower())
