"""Named model presets. Each entry cites where its dimensions come from."""

from __future__ import annotations

from dataclasses import replace

from palm.workload.model import ModelConfig

__all__ = ["MODEL_PRESETS", "model_preset", "MODEL_SOURCES"]


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
}

MODEL_SOURCES: dict[str, str] = {
    **{k: "Narayanan et al. SC21, Table 1" for k in MODEL_PRESETS if k.startswith("t-")},
    "gpt3-175b": "Brown et al. 2020, Table 2.1",
    "llama2-7b": "Touvron et al. 2023, Table 1 + released config.json",
    "llama2-70b": "Touvron et al. 2023, Table 1 + released config.json",
    "bert-base": "Devlin et al. 2019",
    "bert-large": "Devlin et al. 2019",
    "resnet50": "He et al. 2016, Table 1",
}


def model_preset(name: str) -> ModelConfig | None:
    """The preset called ``name`` (case-insensitive), or ``None``."""
    return MODEL_PRESETS.get(name.lower())
