"""One table at a time: ``[model]`` (a preset, a Hugging Face ``config.json`` through
:mod:`palm.hf_import`, or an operator graph) and ``[hardware]`` (a preset or a custom
topology), each coerced (:mod:`palm.config.coerce`) and checked on its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from palm.config.bounds import (
    MAX_EXPERTS,
    MAX_LAYERS,
    WHY,
)
from palm.config.coerce import build
from palm.config.tensix import check_chips, check_floorplan, tensix_fields
from palm.errors import ConfigError
from palm.hardware.presets import HARDWARE_PRESETS, hardware_preset
from palm.hardware.spec import (
    GpuClusterHardware,
    Hardware,
    Mesh2DHardware,
)
from palm.hf_import import hf_model_table, hf_table_from_dict
from palm.workload.gemm import MAX_GEMM_DIM, OPERANDS
from palm.workload.model import (
    ModelConfig,
)
from palm.workload.ops import Conv2d, Linear, Op, Pool, TransformerLayer
from palm.workload.presets import MODEL_PRESETS, model_preset

__all__ = ["parse_model", "parse_hardware", "hf_model_config", "hf_model_from_dict"]


_TOPOLOGIES = {"mesh2d": Mesh2DHardware, "gpu-cluster": GpuClusterHardware}


def parse_model(table: dict[str, Any], base_dir: Path) -> ModelConfig:
    base = ModelConfig()
    preset = table.pop("preset", None)
    hf = table.pop("hf_config", None)
    if preset is not None and hf is not None:
        raise ConfigError("model.hf_config", hf, "either model.preset or model.hf_config, not both")
    if preset is not None:
        found = model_preset(preset) if isinstance(preset, str) else None
        if found is None:
            raise ConfigError("model.preset", preset, f"one of {', '.join(MODEL_PRESETS)}")
        base = found
    elif hf is not None:
        if not isinstance(hf, str):
            raise ConfigError("model.hf_config", hf, "a path to a config.json file")
        base = hf_model_config(base_dir / hf, seq_len_given="seq_len" in table)
    ops_tables = table.pop("ops", None)
    if ops_tables is not None:
        if not isinstance(ops_tables, list) or not all(isinstance(t, dict) for t in ops_tables):
            raise ConfigError("model.ops", ops_tables, "an array of operator tables")
        if len(ops_tables) > MAX_LAYERS:
            raise ConfigError(
                "model.ops",
                f"{len(ops_tables):,} operators",
                f"at most {MAX_LAYERS:,} operators ({WHY})",
            )
        ops = tuple(_parse_graph_op(i, dict(t)) for i, t in enumerate(ops_tables))
        base = dataclasses.replace(base, graph_ops=ops, family="graph")
    if "graph_ops" in table:
        raise ConfigError("model.graph_ops", table["graph_ops"], "model.ops (an array of tables)")
    model = build(ModelConfig, table, "model", base=base)
    if preset is None and "name" not in table:
        name = Path(hf).parent.name if hf else model.family
        model = dataclasses.replace(model, name=name or model.family)
    _validate_model(model)
    return model


def hf_model_config(path: Path, *, seq_len_given: bool = False) -> ModelConfig:
    """The model of a Hugging Face ``config.json`` (:mod:`palm.hf_import`)."""
    table = hf_model_table(path, seq_len_given=seq_len_given)
    return build(ModelConfig, table, "model.hf_config")


def hf_model_from_dict(
    raw: Mapping[str, Any], *, source: str, seq_len_given: bool = False
) -> ModelConfig:
    """:func:`hf_model_config` of a ``config.json`` already read (``source`` names it in
    errors)."""
    table = hf_table_from_dict(raw, source=source, seq_len_given=seq_len_given)
    return build(ModelConfig, table, "model.hf_config")


_OP_TYPES: dict[str, type[Op]] = {
    "linear": Linear,
    "conv2d": Conv2d,
    "pool": Pool,
    "transformer": TransformerLayer,
}


def _parse_graph_op(index: int, table: dict[str, Any]) -> Op:
    """One operator of a ``family = "graph"`` model, type-checked like every other table."""
    where = f"model.ops[{index}]"
    kind = table.pop("type", None)
    if kind not in _OP_TYPES:
        raise ConfigError(f"{where}.type", kind, f"one of {', '.join(_OP_TYPES)}")
    table.setdefault("name", f"op{index}")
    if kind == "transformer" and "kv_heads" not in table:
        table["kv_heads"] = table.get("heads", 0)
    op = build(_OP_TYPES[kind], table, where)
    zero_ok = {"padding", "kv_heads"} | ({"kernel"} if kind == "pool" else set())
    for f in dataclasses.fields(op):
        value = getattr(op, f.name)
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if is_int and f.name not in zero_ok and value < 1:
            raise ConfigError(f"{where}.{f.name}", value, "an integer >= 1")
    if isinstance(op, Conv2d) and (op.in_channels % op.groups or op.out_channels % op.groups):
        raise ConfigError(
            f"{where}.groups",
            op.groups,
            f"a divisor of in_channels ({op.in_channels}) and out_channels ({op.out_channels})",
        )
    if isinstance(op, (Conv2d, Pool)):
        if any(x < 1 for x in op.in_hw):
            raise ConfigError(f"{where}.in_hw", list(op.in_hw), "two integers >= 1")
        if any(x < 1 for x in op.out_hw):
            raise ConfigError(f"{where}.kernel", op.kernel, "at most the padded input size")
    bad_heads = isinstance(op, TransformerLayer) and (
        op.hidden % op.heads or op.heads % (op.kv_heads or op.heads)
    )
    if bad_heads:
        raise ConfigError(
            f"{where}.heads",
            getattr(op, "heads", None),
            "a divisor of hidden, divisible by kv_heads",
        )
    return op


def parse_hardware(table: dict[str, Any]) -> Hardware:
    preset = table.pop("preset", None)
    topology = table.pop("topology", None)
    if preset is not None:
        found = hardware_preset(preset) if isinstance(preset, str) else None
        if found is None:
            raise ConfigError("hardware.preset", preset, f"one of {', '.join(HARDWARE_PRESETS)}")
        if topology is not None and topology != found.topology:
            raise ConfigError("hardware.topology", topology, f"{found.topology!r} for {preset}")
        hw = build(type(found), table, "hardware", base=found)
        has_fidelity: bool | None = bool(getattr(found, "math_fidelity", ""))
    else:
        if topology not in _TOPOLOGIES:
            raise ConfigError(
                "hardware.topology", topology, f"one of {', '.join(_TOPOLOGIES)} (or a preset)"
            )
        cls = _TOPOLOGIES[topology]
        table.setdefault("name", f"custom-{topology}")
        hw = build(cls, table, "hardware")
        has_fidelity = None  # a custom mesh may or may not have a Tensix matrix engine
    if isinstance(hw, Mesh2DHardware):
        hw = tensix_fields(hw, has_fidelity=has_fidelity)
        check_floorplan(hw)
        check_chips(hw)
    return hw


def _validate_model(m: ModelConfig) -> None:
    if m.family == "gemm":
        for name in ("m", "k", "n"):
            if getattr(m, name) < 1:
                raise ConfigError(f"model.{name}", getattr(m, name), "an integer >= 1")
            if getattr(m, name) > MAX_GEMM_DIM:
                raise ConfigError(
                    f"model.{name}",
                    getattr(m, name),
                    f"at most {MAX_GEMM_DIM:,} for family gemm (the blocking search grows "
                    "with its square root)",
                )
        for i, name in enumerate(m.sram_resident):
            if name not in OPERANDS:
                raise ConfigError(f"model.sram_resident[{i}]", name, "one of 'a', 'b', 'c'")
        return
    if not m.is_transformer:
        if m.family == "resnet50" and m.image_size < 32:
            raise ConfigError("model.image_size", m.image_size, "an integer >= 32 (pixels)")
        if m.family == "resnet50" and m.classes < 1:
            raise ConfigError("model.classes", m.classes, "an integer >= 1")
        return
    for name in ("layers", "hidden", "heads", "ffn_hidden", "seq_len", "vocab"):
        if getattr(m, name) < 1:
            raise ConfigError(f"model.{name}", getattr(m, name), "an integer >= 1")
    if m.layers > MAX_LAYERS:
        raise ConfigError("model.layers", m.layers, f"at most {MAX_LAYERS:,} layers ({WHY})")
    if m.hidden % m.heads:
        raise ConfigError("model.heads", m.heads, f"a divisor of model.hidden = {m.hidden}")
    kv = m.kv_heads or m.heads
    if m.heads % kv:
        raise ConfigError("model.kv_heads", kv, f"a divisor of model.heads = {m.heads}")
    _validate_moe_model(m)


def _validate_moe_model(m: ModelConfig) -> None:
    """Mixture-of-experts and MLA fields of a transformer ``[model]``."""
    if m.experts:
        if m.experts > MAX_EXPERTS:
            raise ConfigError(
                "model.experts",
                m.experts,
                f"at most {MAX_EXPERTS:,} (the tuner lists its divisors)",
            )
        if not 1 <= m.top_k <= m.experts:
            raise ConfigError("model.top_k", m.top_k, f"an integer in 1..experts = {m.experts}")
        if m.moe_ffn_hidden < 1:
            raise ConfigError("model.moe_ffn_hidden", m.moe_ffn_hidden, "an integer >= 1")
        if m.dense_layers >= m.layers:
            raise ConfigError(
                "model.dense_layers", m.dense_layers, f"fewer than model.layers = {m.layers}"
            )
        if m.moe_layer_freq < 1:
            raise ConfigError("model.moe_layer_freq", m.moe_layer_freq, "an integer >= 1")
        if m.moe_load_imbalance < 1:
            raise ConfigError(
                "model.moe_load_imbalance",
                m.moe_load_imbalance,
                "a number >= 1 (busiest device's routed tokens / mean; 1 = balanced)",
            )
    else:
        for name in ("top_k", "moe_ffn_hidden", "shared_experts", "dense_layers"):
            if getattr(m, name):
                raise ConfigError(
                    f"model.{name}", getattr(m, name), "0 unless model.experts > 0 (a MoE model)"
                )
    qk = m.head_dim or m.hidden // m.heads
    if m.kv_lora_rank and (m.qk_rope_head_dim >= qk or m.v_head_dim < 1):
        raise ConfigError(
            "model.qk_rope_head_dim",
            m.qk_rope_head_dim,
            "less than model.head_dim (nope + rope), with model.v_head_dim >= 1 for MLA",
        )
