"""Hugging Face ``config.json`` import: ``[model] hf_config = "config.json"`` in a
configuration (docs/model.md). :func:`hf_model_table` reads the dimensions, activations,
biases, embeddings, mixture of experts and MLA of a released checkpoint's config into a
``[model]`` table, and warns once for each key it reads but does not model
(:func:`warn_ignored`): the simulation then prices the model without it, and the warning
says which way that errs.

Parameter counts follow the released modelling code: Qwen2 (``model_type`` ``qwen2``,
``qwen2_moe``) gives its query, key and value projections biases whatever
``attention_bias`` says (``Qwen2Attention``: ``nn.Linear(..., bias=True)`` for q, k and v,
``bias=False`` for o; Hugging Face transformers ``models/qwen2/modeling_qwen2.py``), so
Qwen2-0.5B counts 494,032,768 parameters, its model card's 0.49B, with its tied embeddings.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from palm.errors import ConfigError, ConfigWarning
from palm.inputs import read_input

__all__ = ["hf_model_table", "hf_table_from_dict", "warn_ignored", "IGNORED_KEYS"]

#: model types whose query, key and value projections carry biases that their config.json
#: does not name (Qwen2's attention; o_proj has none)
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})

#: model types whose MLP is gated (gate, up and down projections) whatever ``hidden_act``
#: names: the Llama family and its descendants, and Gemma's GeGLU (Shazeer 2020, "GLU
#: Variants Improve Transformer")
_GATED_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "deepseek_v2",
        "deepseek_v3",
        "gpt_oss",
        "olmo",
        "olmo2",
        "olmoe",
        "phi3",
        "granite",
        "granitemoe",
        "cohere",
    }
)
_GELU_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python", "quick_gelu")
#: element-wise activations of a two-matrix MLP: the same products as gelu
_UNGATED_ACTS = ("relu", "relu2", "tanh", "sigmoid", "gelu_10", "gelu_accurate", "mish", "linear")


def hf_model_table(path: Path, *, seq_len_given: bool = False) -> dict[str, Any]:
    """The ``[model]`` table of a Hugging Face ``config.json`` (Llama/Mistral/GPT-NeoX key
    names, with GPT-2 ``n_*`` names as a fallback), including ``head_dim``, gated MLPs
    (SwiGLU, and GeGLU for Gemma), biases (``attention_bias``; Qwen2's query, key and value
    biases, which its config does not name), tied embeddings, mixture of experts (Mixtral,
    Qwen-MoE, DeepSeek, gpt-oss keys) and DeepSeek's MLA. ``seq_len`` falls back to
    ``max_position_embeddings`` (the longest context the model supports, often not its
    training length) with a :class:`ConfigWarning` unless ``seq_len_given`` (the TOML sets
    ``model.seq_len``). Every key that changes the model's cost but that palm does not
    model gets one :class:`ConfigWarning` (:func:`warn_ignored`)."""
    return hf_table_from_dict(_read_hf(path), source=str(path), seq_len_given=seq_len_given)


def hf_table_from_dict(
    raw: Mapping[str, Any], *, source: str, seq_len_given: bool = False
) -> dict[str, Any]:
    """:func:`hf_model_table` of a ``config.json`` already read (``source`` names it in
    errors)."""
    path = source

    def pick(*keys: str, default: Any = None) -> Any:
        for key in keys:
            if key in raw and raw[key] is not None:
                return raw[key]
        if default is None:
            raise ConfigError(f"model.hf_config:{keys[0]}", None, f"the key {keys[0]} in {path}")
        return default

    hidden = pick("hidden_size", "n_embd", "d_model")
    heads = pick("num_attention_heads", "n_head")
    model_type = str(raw.get("model_type", ""))
    mlp = _hf_mlp(raw, model_type)
    gated = mlp != "gelu"
    family = "llama" if gated or model_type in _GATED_MODEL_TYPES else "gpt"
    dropout = raw.get("attention_dropout", raw.get("attn_pdrop", 0.0)) or 0.0
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
        raise ConfigError("model.hf_config:attention_dropout", dropout, "a number")
    table = {
        "name": model_type or "hf-model",
        "family": family,
        "layers": pick("num_hidden_layers", "n_layer"),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": pick("num_key_value_heads", default=heads),
        "ffn_hidden": pick("intermediate_size", "n_inner", default=-1),
        "seq_len": _hf_seq_len(raw, seq_len_given=seq_len_given),
        "vocab": pick("vocab_size"),
        "mlp": mlp,
        "bias": bool(raw.get("attention_bias", raw.get("bias", not gated))),
        "qkv_bias": bool(raw.get("qkv_bias", model_type in _QKV_BIAS_MODEL_TYPES)),
        "norm": "rmsnorm" if "rms_norm_eps" in raw else "layernorm",
        "dropout": float(dropout) > 0,
        "tied_embeddings": bool(
            raw.get("tie_word_embeddings", not gated or model_type.startswith("gemma"))
        ),
        "learned_positions": family == "gpt" and "rope_theta" not in raw,
        "head_dim": pick("head_dim", default=0),
    }
    if table["ffn_hidden"] == -1:
        table["ffn_hidden"] = 4 * hidden if isinstance(hidden, int) else hidden
    table.update(_hf_moe(raw, pick))
    table.update(_hf_mla(raw))
    warn_ignored(raw, table)
    return table


def _read_hf(path: Path) -> dict[str, Any]:
    text = read_input(path, field="model.hf_config", kind="config.json")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("model.hf_config", str(path), f"a readable JSON file ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError("model.hf_config", str(path), "a JSON object")
    return raw


def _hf_mlp(raw: Mapping[str, Any], model_type: str) -> str:
    """``swiglu`` (SiLU-gated), ``geglu`` (GELU-gated: Gemma), ``clamped-swiglu`` (gated with
    its halves clamped at ``swiglu_limit``: gpt-oss) or ``gelu`` (two matrices)."""
    key = next(
        (k for k in ("hidden_act", "hidden_activation", "activation_function") if k in raw),
        None,
    )
    act = raw[key] if key is not None and raw[key] is not None else "gelu"
    if not isinstance(act, str):
        raise ConfigError(f"model.hf_config:{key}", act, "an activation name (a string)")
    act = act.lower()
    if raw.get("swiglu_limit") and (act in ("silu", "swiglu", "swish") or model_type == "gpt_oss"):
        # gpt-oss: the gate and linear halves clamped at swiglu_limit before the gating
        return "clamped-swiglu"
    if act in ("silu", "swiglu", "swish"):
        return "swiglu"
    if model_type in _GATED_MODEL_TYPES or act in ("geglu", "gegelu"):
        return "geglu" if act in (*_GELU_ACTS, "geglu", "gegelu") else "swiglu"
    if act not in (*_GELU_ACTS, *_UNGATED_ACTS):
        warnings.warn(
            f"model.hf_config:{key} = {act!r} is not an activation palm knows; the MLP is "
            "taken as ungated (two matrices, as gelu); set model.mlp to choose",
            ConfigWarning,
            stacklevel=6,
        )
    return "gelu"


def _hf_seq_len(raw: Mapping[str, Any], *, seq_len_given: bool) -> Any:
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        if raw.get(key) is not None:
            if not seq_len_given:
                warnings.warn(
                    f"model.seq_len = {raw[key]!r} taken from the Hugging Face {key} (the "
                    "longest context the model supports, not necessarily its training length); "
                    "set model.seq_len to choose",
                    ConfigWarning,
                    stacklevel=5,
                )
            return raw[key]
    return 2048


def _hf_moe(raw: Mapping[str, Any], pick: Any) -> dict[str, Any]:
    """Mixture-of-experts keys: Mixtral / gpt-oss (``num_local_experts``), Qwen-MoE
    (``num_experts``, ``moe_intermediate_size``, ``shared_expert_intermediate_size``,
    ``decoder_sparse_step``, ``mlp_only_layers``), DeepSeek (``n_routed_experts``,
    ``n_shared_experts``, ``first_k_dense_replace``, ``moe_layer_freq``)."""
    experts = pick("num_local_experts", "num_experts", "n_routed_experts", default=0)
    if not experts:
        return {}
    moe_ffn = pick("moe_intermediate_size", "intermediate_size")
    out: dict[str, Any] = {
        "experts": experts,
        "top_k": pick("num_experts_per_tok", "experts_per_token", "num_experts_per_token"),
        "moe_ffn_hidden": moe_ffn,
        "shared_experts": pick("n_shared_experts", default=0),
        "dense_layers": pick("first_k_dense_replace", default=0),
        "moe_layer_freq": pick("moe_layer_freq", default=1),
    }
    shared_width = raw.get("shared_expert_intermediate_size") or 0
    if shared_width:
        if (
            not isinstance(moe_ffn, int)
            or not isinstance(shared_width, int)
            or (moe_ffn < 1 or shared_width % moe_ffn)
        ):
            raise ConfigError(
                "model.hf_config:shared_expert_intermediate_size",
                shared_width,
                f"a multiple of moe_intermediate_size = {moe_ffn}",
            )
        out["shared_experts"] = shared_width // moe_ffn
    step = raw.get("decoder_sparse_step", 1)
    if step not in (1, None):
        raise ConfigError(
            "model.hf_config:decoder_sparse_step", step, "1 (every layer a MoE layer)"
        )
    only = raw.get("mlp_only_layers") or []
    if only:
        if not isinstance(only, list) or sorted(only) != list(range(len(only))):
            raise ConfigError(
                "model.hf_config:mlp_only_layers", only, "[] or the leading layers [0, 1, ...]"
            )
        out["dense_layers"] = len(only)
    return out


def _hf_mla(raw: Mapping[str, Any]) -> dict[str, Any]:
    """DeepSeek-V2/V3 multi-head latent attention: ``head_dim = qk_nope + qk_rope``."""
    if not raw.get("kv_lora_rank"):
        return {}
    nope, rope = raw.get("qk_nope_head_dim"), raw.get("qk_rope_head_dim")
    for key, value in (("qk_nope_head_dim", nope), ("qk_rope_head_dim", rope)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"model.hf_config:{key}", value, "an integer >= 1 (MLA)")
    return {
        "q_lora_rank": raw.get("q_lora_rank") or 0,
        "kv_lora_rank": raw["kv_lora_rank"],
        "qk_rope_head_dim": rope,
        "v_head_dim": raw.get("v_head_dim") or nope,
        "head_dim": nope + rope,  # type: ignore[operator]
    }


#: keys palm reads but does not model, and what the simulation does instead
IGNORED_KEYS: dict[str, str] = {
    "sliding_window": "every layer's attention is priced over the whole sequence (full "
    "attention): an upper bound on windowed layers, the same when model.seq_len <= the window",
    "layer_types": "every layer is priced as full attention, whatever its type",
    "attention_chunk_size": "attention is priced over the whole sequence, not in chunks",
    "num_nextn_predict_layers": "the multi-token-prediction layers are not simulated, and "
    "their parameters not counted",
    "rope_scaling": "positions are priced as plain rotary embeddings (scaling changes no "
    "matrix product)",
    "quantization_config": "weights are priced at training.precision, not at the "
    "checkpoint's quantization",
    "mlp_bias": "the MLP has biases exactly when model.bias says",
    "attn_logit_softcapping": "the soft-capping of attention scores (element-wise) is not priced",
    "final_logit_softcapping": "the soft-capping of the logits (element-wise) is not priced",
}


def _ignored(raw: Mapping[str, Any], table: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of :data:`IGNORED_KEYS` that say something palm does not model."""
    out: dict[str, Any] = {}
    window = raw.get("sliding_window")
    if window and raw.get("use_sliding_window", True) is not False:
        out["sliding_window"] = window
    types = raw.get("layer_types")
    if isinstance(types, list) and any(t != "full_attention" for t in types):
        kinds = sorted({str(t) for t in types} - {"full_attention"})
        n = sum(1 for t in types if t != "full_attention")
        out["layer_types"] = f"{n} of {len(types)} layers {', '.join(kinds)}"
    for key in ("attention_chunk_size", "num_nextn_predict_layers", "rope_scaling"):
        if raw.get(key):
            out[key] = raw[key]
    if raw.get("quantization_config"):
        q = raw["quantization_config"]
        method = q.get("quant_method", "") if isinstance(q, Mapping) else ""
        out["quantization_config"] = f"{{quant_method: {method}}}" if method else q
    if "mlp_bias" in raw and bool(raw["mlp_bias"]) != bool(table.get("bias")):
        out["mlp_bias"] = raw["mlp_bias"]
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if raw.get(key):
            out[key] = raw[key]
    return out


def warn_ignored(raw: Mapping[str, Any], table: Mapping[str, Any]) -> list[str]:
    """One :class:`ConfigWarning` for each key of ``raw`` that palm does not model (the keys
    of :data:`IGNORED_KEYS` with a value that matters); returns those keys."""
    found = _ignored(raw, table)
    for key, value in found.items():
        shown = json.dumps(value) if not isinstance(value, str) else value
        if len(shown) > 60:
            shown = shown[:57] + "..."
        warnings.warn(
            f"model.hf_config:{key} = {shown} is ignored: {IGNORED_KEYS[key]}",
            ConfigWarning,
            stacklevel=5,
        )
    return list(found)
