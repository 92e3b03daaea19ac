"""Hugging Face ``config.json`` import: head_dim, gated MLPs, mixture of experts (Mixtral,
Qwen-MoE, DeepSeek), MLA, and the one-line warning / errors for what it cannot read."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from palm import ConfigError, load_config, simulate
from palm.errors import ConfigWarning
from palm.workload import MODEL_PRESETS, build_workload

ROOT = Path(__file__).resolve().parents[2]

# mistralai/Mixtral-8x7B-v0.1 config.json as released (the fields that matter)
MIXTRAL_HF: dict[str, Any] = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 1e6,
    "tie_word_embeddings": False,
    "attention_dropout": 0.0,
    "router_aux_loss_coef": 0.02,
}

# deepseek-ai/DeepSeek-V3 config.json as released (the fields that matter)
DEEPSEEK_V3_HF: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "num_nextn_predict_layers": 1,
}

# Qwen/Qwen3-30B-A3B config.json (head_dim 128 on a hidden size of 2048)
QWEN3_MOE_HF: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}

# google/gemma-7b config.json: GeGLU MLP, 16 heads of 256 on a hidden size of 3072
GEMMA_7B_HF: dict[str, Any] = {
    "architectures": ["GemmaForCausalLM"],
    "model_type": "gemma",
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "head_dim": 256,
    "num_hidden_layers": 28,
    "vocab_size": 256000,
    "max_position_embeddings": 8192,
    "hidden_act": "gelu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
}


def write(tmp_path: Path, hf: dict[str, Any], *, parallelism: str, seq_len: int | None) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(hf))
    seq = f"seq_len = {seq_len}\n" if seq_len else ""
    path = tmp_path / "sim.toml"
    path.write_text(
        f'[model]\nhf_config = "config.json"\n{seq}\n[hardware]\npreset = "dgx-h100"\n\n'
        '[training]\nglobal_batch = 128\nmicro_batch = 1\nrecompute = "full"\nzero = 1\n\n'
        f"[parallelism]\n{parallelism}\n"
    )
    return path


def _simulate_cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``palm-tune simulate PATH ARGS`` in a subprocess, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "search.cli", "simulate", str(path), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_mixtral_from_its_hugging_face_config_simulates_on_h100s(tmp_path: Path) -> None:
    path = write(tmp_path, MIXTRAL_HF, parallelism="tp = 1\npp = 2\ndp = 16\nep = 8", seq_len=4096)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # seq_len is given: nothing to warn about
        config = load_config(path)
    m = config.model
    assert (m.experts, m.top_k, m.moe_ffn_hidden, m.mlp, m.seq_len) == (8, 2, 14336, "swiglu", 4096)
    workload = build_workload(m)
    assert workload.params == 46_702_792_704  # the released checkpoint's parameter count
    assert workload.params == pytest.approx(46.7e9, rel=0.001)  # published: 46.7B total
    assert workload.active_params == pytest.approx(12.9e9, rel=0.01)  # 12.9B active
    result = simulate(config)
    assert result.iteration_time_s > 0 and result.fits_memory
    assert 0.1 < result.mfu < 0.8  # dgx-h100 carries the fitted grouped-GEMM efficiency


def test_deepseek_v3_from_its_hugging_face_config_matches_the_preset(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        DEEPSEEK_V3_HF,
        parallelism="tp = 2\npp = 8\ndp = 64\nep = 64\netp = 1\nsequence_parallel = true",
        seq_len=4096,
    )
    with pytest.warns(ConfigWarning, match="num_nextn_predict_layers = 1 is ignored"):
        config = load_config(path, overrides=["training.global_batch=8192"])
    m = config.model
    assert (m.experts, m.shared_experts, m.dense_layers, m.kv_lora_rank, m.head_dim) == (
        256,
        1,
        3,
        512,
        192,
    )
    assert build_workload(m).params == build_workload(MODEL_PRESETS["deepseek-v3"]).params
    assert build_workload(m).params == pytest.approx(671e9, rel=0.001)  # published: 671B
    result = simulate(config)  # 1024 H100s, the NeMo recipe's layout
    assert result.iteration_time_s > 0


def test_qwen3_moe_reads_head_dim_and_experts(tmp_path: Path) -> None:
    path = write(tmp_path, QWEN3_MOE_HF, parallelism="dp = 8\nep = 8", seq_len=4096)
    m = load_config(path).model
    assert (m.head_dim, m.experts, m.top_k, m.moe_ffn_hidden) == (128, 128, 8, 768)
    assert build_workload(m).params == build_workload(MODEL_PRESETS["qwen3-30b-a3b"]).params


def test_gemma_reads_head_dim_and_its_gated_gelu(tmp_path: Path) -> None:
    path = write(tmp_path, GEMMA_7B_HF, parallelism="dp = 8", seq_len=8192)
    m = load_config(path).model
    assert (m.head_dim, m.mlp, m.tied_embeddings) == (256, "geglu", True)
    # google/gemma-7b: 8.54B parameters (3 MLP matrices, queries 16 x 256 = 4096 wide)
    assert build_workload(m).params == pytest.approx(8.538e9, rel=0.001)


def test_seq_len_from_max_position_embeddings_warns(tmp_path: Path) -> None:
    path = write(tmp_path, MIXTRAL_HF, parallelism="dp = 8\nep = 8", seq_len=None)
    with pytest.warns(ConfigWarning, match=r"model.seq_len = 32768 taken from .*max_position"):
        config = load_config(path)
    assert config.model.seq_len == 32768


def test_cli_prints_the_seq_len_warning_on_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, MIXTRAL_HF, parallelism="dp = 8\nep = 8", seq_len=None)
    proc = _simulate_cli(path, "--set", "model.layers=2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("palm-tune: warning: model.seq_len = 32768")


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"hidden_act": ["silu"]}, "model.hf_config:hidden_act", "an activation name"),
        ({"hidden_act": 3}, "model.hf_config:hidden_act", "a string"),
        ({"decoder_sparse_step": 2}, "model.hf_config:decoder_sparse_step", "1 (every layer"),
        ({"mlp_only_layers": [5]}, "model.hf_config:mlp_only_layers", "leading layers"),
        ({"num_experts_per_tok": None}, "model.hf_config:num_experts_per_tok", "the key"),
        ({"num_experts_per_tok": 9}, "model.top_k", "1..experts = 8"),
    ],
)
def test_unreadable_hugging_face_fields_are_one_line_errors(
    tmp_path: Path, changes: dict[str, Any], field: str, fragment: str
) -> None:
    path = write(tmp_path, {**MIXTRAL_HF, **changes}, parallelism="dp = 8\nep = 8", seq_len=64)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{field} = ") and fragment in message and "\n" not in message


def test_qwen_moe_shared_expert_width_becomes_shared_experts(tmp_path: Path) -> None:
    # Qwen/Qwen1.5-MoE-A2.7B config.json: 60 experts of 1408, top-4, one shared expert of
    # 5632 = 4 x 1408 wide. Published: 14.3B total, 2.7B activated (model card).
    hf = {
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "max_position_embeddings": 8192,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    }
    path = write(tmp_path, hf, parallelism="dp = 4\nep = 4", seq_len=4096)
    m = load_config(path).model
    assert (m.experts, m.top_k, m.moe_ffn_hidden, m.shared_experts) == (60, 4, 1408, 4)
    w = build_workload(m)
    assert w.params == pytest.approx(14.3e9, rel=0.01)
    assert w.active_params == pytest.approx(2.7e9, rel=0.01)
    bad = {**hf, "shared_expert_intermediate_size": 1000}
    with pytest.raises(
        ConfigError, match=r"^model.hf_config:shared_expert_intermediate_size = 1000"
    ):
        load_config(write(tmp_path, bad, parallelism="dp = 4\nep = 4", seq_len=4096))


# openai/gpt-oss-120b config.json as released (the fields that matter)
GPT_OSS_HF: dict[str, Any] = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_hidden_layers": 36,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "hidden_act": "silu",
    "swiglu_limit": 7.0,
    "attention_bias": True,
    "rms_norm_eps": 1e-5,
    "rope_theta": 150000,
    "tie_word_embeddings": False,
    "attention_dropout": 0.0,
}


def test_gpt_oss_reads_its_clamped_gated_activation_and_biases(tmp_path: Path) -> None:
    path = write(tmp_path, GPT_OSS_HF, parallelism="dp = 8\nep = 8", seq_len=4096)
    m = load_config(path).model
    assert (m.mlp, m.bias, m.experts, m.top_k) == ("clamped-swiglu", True, 128, 4)
    assert build_workload(m).params == build_workload(MODEL_PRESETS["gpt-oss-120b"]).params
    plain = write(
        tmp_path, {**GPT_OSS_HF, "swiglu_limit": None}, parallelism="dp = 8", seq_len=4096
    )
    assert load_config(plain).model.mlp == "swiglu"


# Qwen/Qwen2-0.5B config.json as released (the fields that matter): no attention_bias key,
# yet Qwen2Attention gives q, k and v biases; tied embeddings
QWEN2_05B_HF: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "vocab_size": 151936,
    "max_position_embeddings": 131072,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "max_window_layers": 24,
    "tie_word_embeddings": True,
    "attention_dropout": 0.0,
}


def test_qwen2_counts_its_implicit_qkv_biases_and_tied_embeddings(tmp_path: Path) -> None:
    path = write(tmp_path, QWEN2_05B_HF, parallelism="dp = 8", seq_len=4096)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a window that is switched off is not ignored
        m = load_config(path).model
    assert (m.bias, m.qkv_bias, m.tied_embeddings) == (False, True, True)
    # the checkpoint's parameter count (model.safetensors of Qwen/Qwen2-0.5B): by hand,
    # 24 layers x (896 x (896 + 2 x 128) + 896 x 896 + (896 + 2 x 128) biases
    # + 3 x 896 x 4864 + 2 x 896 norms) + 151936 x 896 (tied) + 896 final norm
    layer = 896 * (896 + 256) + 896 * 896 + (896 + 256) + 3 * 896 * 4864 + 2 * 896
    assert build_workload(m).params == 24 * layer + 151936 * 896 + 896 == 494_032_768
    no_bias = write(tmp_path, {**QWEN2_05B_HF, "qkv_bias": False}, parallelism="dp = 8", seq_len=64)
    assert build_workload(load_config(no_bias).model).params == 494_032_768 - 24 * 1152
    untied = write(
        tmp_path, {**QWEN2_05B_HF, "tie_word_embeddings": False}, parallelism="dp = 8", seq_len=64
    )
    assert build_workload(load_config(untied).model).params == 494_032_768 + 151936 * 896


def _ignored(tmp_path: Path, hf: dict[str, Any]) -> list[str]:
    path = write(tmp_path, hf, parallelism="dp = 8", seq_len=4096)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_config(path)
    return [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def test_every_ignored_field_warns_once(tmp_path: Path) -> None:
    gpt_oss = {
        **GPT_OSS_HF,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0},
        "quantization_config": {"quant_method": "mxfp4"},
    }
    messages = _ignored(tmp_path, gpt_oss)
    fields = [m.split(" = ")[0] for m in messages]
    assert sorted(fields) == sorted(
        f"model.hf_config:{k}"
        for k in ("sliding_window", "layer_types", "rope_scaling", "quantization_config")
    )  # each once
    assert any("18 of 36 layers sliding_attention" in m for m in messages), messages
    assert all(" is ignored: " in m and "\n" not in m for m in messages)
    deepseek = {**DEEPSEEK_V3_HF, "rope_scaling": {"type": "yarn", "factor": 40}}
    fields = [m.split(" = ")[0] for m in _ignored(tmp_path, deepseek)]
    assert sorted(fields) == [
        "model.hf_config:num_nextn_predict_layers",
        "model.hf_config:rope_scaling",
    ]
    assert _ignored(tmp_path, MIXTRAL_HF | {"sliding_window": None}) == []  # nothing ignored


def test_simulate_prints_total_and_active_parameters(tmp_path: Path) -> None:
    path = write(tmp_path, MIXTRAL_HF, parallelism="dp = 8\nep = 8", seq_len=4096)
    proc = _simulate_cli(path, "--engine", "analytical")
    assert proc.returncode == 0, proc.stderr
    w = build_workload(load_config(path).model)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("params "))
    assert f"{w.params:,} (46.7B) total" in line and f"{w.active_params:,} (12.9B) active" in line
