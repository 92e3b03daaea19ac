"""The modern GPU validation set (``palm/data/visible_modern.json``, docs/validation.md).

Each row is a published training run (NVIDIA NeMo / Megatron-Bridge performance tables,
MosaicML llm-foundry, torchtitan, Megatron-LM) with its model, cluster and plan. This module
turns a row into a :class:`~palm.strategy.SimConfig` with the hardware preset of its GPU, or
says why it cannot yet be expressed (:class:`LeftOut`). A row is translated from its own
stated facts only: never from its id, its source repository, path or commit, its model's name
or key, where its architecture was read (``arch_source``) or a family label
(``tests/palm/test_validation_software.py`` scrambles all of those and checks that the
configuration does not change). The rules, each one line:

* the software: the stack the row states (its table's container, its recorded versions, the
  framework-specific settings it names; :func:`palm.validation_software.stated_software`) is
  its ``[software]`` table, whose documented behaviours (:mod:`palm.software`: attention
  kernel, distributed optimizer and its overlapped weight gather, sequence parallelism and TP
  communication overlap for NeMo, the recompute's early stop of PyTorch's checkpoint, the
  first Blackwell attention kernels of NeMo before 25.04) fill what the row does not state;
* GPU -> preset (:data:`GPU_PRESETS`); A100 40 GB rows override the memory size and bandwidth
  (the 40 GB part's datasheet), NVL72 rows run in NVLink segments of 64 GPUs;
* precision: every FP8 recipe (Transformer Engine delayed / current scaling, MXFP8, torchao
  float8) -> ``fp8``; ``NVFP4`` has no precision in the simulator yet (left out);
  unstated (Megatron-LM README) -> ``bf16``, which its MFU implies;
* recompute: ``full ...`` -> ``full``, ``selective ...`` -> ``selective``, else ``none``;
* sharding: FSDP ``FULL_SHARD`` / ``true`` / a shard degree -> ``fsdp = true``;
  ``SHARD_GRAD_OP`` -> ``fsdp = true`` with ``zero = 2`` (PyTorch FSDP's per-layer gathers in
  the forward pass and reduce-scatters in the backward pass); no FSDP -> the software's
  optimizer (NeMo's distributed optimizer, ``zero = 1``; the others none);
* communication overlap the row states (``--overlap-param-gather`` with the distributed
  optimizer it needs, ``--tp-comm-overlap`` with the sequence parallelism it needs);
* ``vp > 1`` with ``pp > 1`` -> ``interleaved-1f1b`` with ``interleave = vp``;
* ``squared_relu`` MLPs (Nemotron) have two matrices, priced as ``gelu``; a gated MLP the row
  notes as clamped -> ``clamped-swiglu``; biases where the architecture notes state them;
* a micro-batch the source does not state is taken as 1 (marked in the case's assumptions);
* MoE rows labelled "(tokendrop)" -> ``capacity_factor = 1.0`` (``apply_moe_token_drop``'s
  defaults, capacity factor 1.0 with padding); the others are dropless with forced balanced
  routing (the page's footnote), which prices the same busiest-device load;
* the dispatcher and the expert all-to-all overlap from the recipe values the row records
  (``moe_flex_dispatcher_backend`` -> ``moe_dispatcher = "deepep"``,
  ``overlap_moe_expert_parallel_comm`` -> ``moe_a2a_overlap``); without them, the
  software's default all-to-all dispatcher.

A row that the model still predicts far off is reported as it is (docs/validation.md); no
rule names a row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from palm.config import parse_config
from palm.errors import ConfigError
from palm.inputs import read_input
from palm.software import behaviours
from palm.strategy import SimConfig
from palm.validation import ValidationCase
from palm.validation_software import stated_software

__all__ = [
    "GPU_PRESETS",
    "LeftOut",
    "ModernCases",
    "default_modern_file",
    "load_modern_cases",
    "modern_case_tables",
    "software_constants",
]

#: GPU name in the data set -> (hardware preset, overrides of the preset's fields)
GPU_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "H100-SXM5-80GB": ("dgx-h100", {}),
    "H100-80GB": ("dgx-h100", {}),
    "H100 (variant not stated)": ("dgx-h100", {}),
    "H200-141GB": ("dgx-h200", {}),
    "A100-SXM-80GB": ("dgx-a100", {}),
    # A100 40 GB SXM4 datasheet: HBM2 40 GB at 1555 GB/s, same compute as the 80 GB part
    "A100-SXM-40GB": ("dgx-a100", {"hbm_gib": 40e9 / 2**30, "hbm_bandwidth_gbps": 1555.0}),
    "B200": ("dgx-b200", {}),
    # power-of-two jobs on NVL72 racks run in NVLink segments of 16 trays = 64 GPUs (SLURM
    # --segment, as NVIDIA's GB200 recipes launch them), so no pipeline stage straddles racks
    "GB200": ("gb200-nvl72", {"gpus_per_node": 64}),
    "B300": ("dgx-b300", {}),
    "GB300": ("gb300-nvl72", {"gpus_per_node": 64}),
}

_FP8_WORDS = ("fp8", "float8")

#: GPUs with no preset, and why
_NO_PRESET = {
    "H100-96GB-HBM2e (500W, Grand Teton)": (
        "H100 96 GB HBM2e capped at 500 W (Meta Grand Teton, torchtitan): no public clock, "
        "peak or bandwidth for this power-capped variant"
    ),
}


@dataclass(frozen=True)
class LeftOut:
    """A row the simulator cannot express yet, and why."""

    case_id: str
    reason: str


@dataclass(frozen=True)
class ModernCases:
    cases: tuple[ValidationCase, ...]
    left_out: tuple[LeftOut, ...]
    assumptions: dict[str, tuple[str, ...]]
    rows: dict[str, dict[str, Any]]
    #: case id -> the hardware constants its software sets (:func:`software_constants`), for
    #: the rows whose release's kernels differ from the current ones on their GPU
    epochs: dict[str, str] = field(default_factory=dict)


def default_modern_file() -> Path:
    return Path(str(resources.files("palm") / "data" / "visible_modern.json"))


def software_constants(config: SimConfig) -> dict[str, str]:
    """The hardware fields ``config``'s software release sets on its preset (constant name ->
    the behaviour's key, ``"<framework> before <version>"``): the constants a calibration fits
    for that release apart from the generation's."""
    out = {}
    for b in behaviours(config.software):
        table, name = b.field.split(".")
        if table == "hardware" and b.until is not None:
            tables = {"hardware": {"preset": config.hardware.name}}
            value = b.value(tables) if callable(b.value) else b.value
            if value is not None and getattr(config.hardware, name) == value:
                release = ".".join(f"{x:02d}" for x in b.until)
                out[name] = f"{config.software.framework}<{release}"
    return out


def _precision(text: str | None) -> str | None:
    if text is None:
        return "bf16"
    low = text.lower()
    if "fp4" in low:
        return None
    if any(w in low for w in _FP8_WORDS):
        return "fp8"
    if "bf16" in low or "bfloat16" in low:
        return "bf16"
    return None


def _recompute(text: str | None) -> str:
    low = (text or "none").lower()
    if low.startswith("full"):
        return "full"
    if "selective" in low:
        return "selective"
    return "none"


def _sharding(fsdp: Any) -> dict[str, Any]:
    """The ``[training]`` sharding keys of a row's stated FSDP column: ``FULL_SHARD``, ``true``
    or a shard degree -> ``fsdp = true``; ``SHARD_GRAD_OP`` -> ``fsdp = true`` with
    ``zero = 2``; none -> nothing (the software's optimizer)."""
    if fsdp in (None, False, "False", 0):
        return {}
    if fsdp == "SHARD_GRAD_OP":
        return {"fsdp": True, "zero": 2}
    return {"fsdp": True}


def _stated_overlap(row: dict[str, Any], tp: int) -> dict[str, Any]:
    """Communication overlap the row states (Megatron-LM flags in ``training.comm_overlap``):
    ``--overlap-grad-reduce``; ``--overlap-param-gather``, which needs the distributed
    optimizer (ZeRO-1); ``--tp-comm-overlap``, which needs sequence parallelism (Megatron-LM
    ``arguments.py`` asserts both)."""
    text = str(row["training"].get("comm_overlap") or "")
    out: dict[str, Any] = {}
    if "--overlap-grad-reduce" in text:
        out["parallelism.overlap_grad_reduce"] = True
    if "--overlap-param-gather" in text:
        out["training.zero"] = 1
        out["parallelism.overlap_param_gather"] = True
    if "--tp-comm-overlap" in text and tp > 1:
        out["parallelism.tp_comm_overlap"] = True
        out["parallelism.sequence_parallel"] = True
    return out


def _unsupported(row: dict[str, Any], supported: Callable[[str], bool]) -> str | None:
    """Why ``row`` cannot be expressed, or ``None``."""
    m, hw = row["model"], row["hardware"]
    if hw["gpu"] not in GPU_PRESETS:
        return _NO_PRESET.get(hw["gpu"], f"GPU {hw['gpu']}: no hardware preset")
    if _precision(row["training"].get("precision")) is None:
        return f"precision {row['training']['precision']}: not modelled"
    if m.get("experts") and not supported("moe"):
        return "mixture of experts: needs the MoE model"
    if m.get("head_dim") and m["head_dim"] * m["heads"] != m["hidden"] and not supported("moe"):
        return f"head_dim {m['head_dim']} != hidden / heads"
    for need in ("cp", "uneven"):
        if not supported(need) and _needs(row, need):
            return {"cp": "context parallelism", "uneven": "uneven pipeline stages"}[need]
    return None


def _needs(row: dict[str, Any], feature: str) -> bool:
    par, m = row["parallelism"], row["model"]
    if feature == "cp":
        return (par.get("cp") or 1) > 1
    vp, pp = par.get("vp") or 1, par.get("pp") or 1
    return bool(pp > 1 and m["layers"] % (pp * vp))


def _model_table(row: dict[str, Any], assumed: list[str]) -> dict[str, Any]:
    """The ``[model]`` table of a row (its display name is the row's id)."""
    m = row["model"]
    extra = m.get("arch_extra") or {}
    seq = m.get("seq_len") or m.get("seq_len_assumed")
    if not m.get("seq_len"):
        assumed.append(f"seq_len {seq} (training config of the source)")
    gated = m["mlp"] == "swiglu"
    # a gated MLP whose gate and linear halves are clamped before the gating (gpt-oss)
    clamped = gated and "clamped" in str(extra.get("mlp_note", "")).lower()
    model = {
        "name": row["id"],
        "family": "llama" if gated else "gpt",
        "layers": m["layers"],
        "hidden": m["hidden"],
        "heads": m["heads"],
        "kv_heads": m.get("kv_heads") or m["heads"],
        "ffn_hidden": m["ffn_hidden"],
        "seq_len": seq,
        "vocab": m["vocab"],
        "mlp": ("clamped-swiglu" if clamped else "swiglu") if gated else "gelu",
        "bias": bool(extra.get("bias")),
        "norm": "rmsnorm" if gated else "layernorm",
        "dropout": False,
        "tied_embeddings": bool(extra.get("tied_embeddings", not gated)),
        "learned_positions": "learned" in str(extra.get("position_embedding", "")),
    }
    if m.get("experts"):
        assumed.extend(_moe_fields(row, model))
    return model


def _parallelism_table(row: dict[str, Any], assumed: list[str]) -> dict[str, Any]:
    """The ``[parallelism]`` table of a row: its stated degrees and schedule."""
    m, par = row["model"], row["parallelism"]
    tp, pp, vp = par["tp"], par["pp"], par.get("vp") or 1
    parallelism: dict[str, Any] = {"tp": tp, "pp": pp, "dp": par["dp"]}
    if (par.get("cp") or 1) > 1:
        parallelism["cp"] = par["cp"]
    if pp > 1 and vp > 1:
        parallelism["schedule"] = "interleaved-1f1b"
        parallelism["interleave"] = vp
    layers = m["layers"]
    if pp > 1 and layers % (pp * vp) and (layers + 2) % pp == 0:
        # embedding and loss each count as a layer of the split (Megatron-Bridge recipes'
        # account_for_embedding / loss_in_pipeline_split): the end ranks hold one layer less
        parallelism["first_stage_layers"] = parallelism["last_stage_layers"] = (
            layers + 2
        ) // pp - 1
        assumed.append("embedding and loss counted as pipeline layers (recipe)")
    if m.get("experts"):
        parallelism["ep"] = par.get("ep") or 1
        hints = _hints(row)
        if hints.get("moe_flex_dispatcher_backend") in ("hybridep", "deepep"):
            parallelism["moe_dispatcher"] = "deepep"
        if hints.get("moe_a2a_overlap") or hints.get("overlap_moe_expert_parallel_comm"):
            parallelism["moe_a2a_overlap"] = True
        # Megatron-Bridge MoE recipes run experts without tensor parallelism (etp = 1)
        parallelism["etp"] = par.get("etp") or 1
        if not par.get("etp"):
            assumed.append("etp 1 (Megatron-Bridge MoE recipes)")
    return parallelism


def modern_case_tables(row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The TOML tables of one row and the assumptions made for fields the source omits."""
    tr, hw = row["training"], row["hardware"]
    preset, overrides = GPU_PRESETS[hw["gpu"]]
    assumed: list[str] = []
    micro = tr.get("micro_batch")
    if not micro:
        micro = 1
        assumed.append("micro_batch 1 (not stated)")
    if tr.get("precision") is None:
        assumed.append("precision bf16 (not stated; MFU implies it)")
    tables: dict[str, dict[str, Any]] = {
        "model": _model_table(row, assumed),
        "hardware": {"preset": preset, "gpus": hw["gpus"], **overrides},
        "training": {
            "global_batch": tr["global_batch"],
            "micro_batch": micro,
            "precision": _precision(tr.get("precision")),
            "optimizer": "adam",
            "recompute": _recompute(tr.get("recompute")),
            **_sharding(row["parallelism"].get("fsdp")),
        },
        "parallelism": _parallelism_table(row, assumed),
    }
    offload = _activation_offload(row)
    if offload:
        tables["training"]["activation_offload"] = offload
    for key, value in _stated_overlap(row, row["parallelism"]["tp"]).items():
        table, name = key.split(".")
        tables[table][name] = value
    software = stated_software(row)
    if software:
        tables["software"] = software
        assumed.append(
            "software " + " ".join(software.values()) + " (stated); its defaults: "
            "docs/config.md, '[software]'"
        )
    return tables, tuple(assumed)


def _activation_offload(row: dict[str, Any]) -> float:
    """``training.activation_offload`` from the recipe's ``cpu_offloading_num_layers``
    (Megatron-Core ``--cpu-offloading-num-layers``): that many of a model chunk's layers,
    over the ``layers / (pp x vp)`` of a chunk; 0 without it."""
    layers = _hints(row).get("cpu_offloading_num_layers") or 0
    if not layers:
        return 0.0
    par = row["parallelism"]
    per_chunk = row["model"]["layers"] / ((par.get("pp") or 1) * (par.get("vp") or 1))
    return float(min(1.0, layers / per_chunk))


def _hints(row: dict[str, Any]) -> dict[str, Any]:
    """The recipe values a row records (``training.recipe_hints.values``)."""
    return ((row["training"].get("recipe_hints") or {}).get("values")) or {}


def _moe_fields(row: dict[str, Any], model: dict[str, Any]) -> list[str]:
    """Mixture-of-experts fields of ``model`` from the row; returns the assumptions made."""
    m = row["model"]
    extra = m.get("arch_extra") or {}
    assumed = []
    model.update(
        experts=m["experts"],
        top_k=m["top_k"],
        moe_ffn_hidden=m["moe_ffn_hidden"],
        shared_experts=m.get("shared_experts") or 0,
        dense_layers=m.get("dense_layers") or 0,
    )
    if m.get("head_dim") and m["head_dim"] * m["heads"] != m["hidden"]:
        model["head_dim"] = m["head_dim"]
    if extra.get("attention") == "MLA":  # DeepSeek multi-head latent attention
        model.update(
            q_lora_rank=extra["q_lora_rank"],
            kv_lora_rank=extra["kv_lora_rank"],
            qk_rope_head_dim=extra["qk_pos_emb_head_dim"],
            v_head_dim=extra["v_head_dim"],
            head_dim=extra["qk_head_dim"] + extra["qk_pos_emb_head_dim"],
        )
    if "sliding" in str(extra.get("attention", "")) or extra.get("attention_chunk_size"):
        assumed.append("local (sliding-window / chunked) attention layers priced as full")
    if _token_drop(row):
        # runs labelled "(tokendrop)": apply_moe_token_drop with its defaults, capacity factor
        # 1.0 and expert inputs padded to capacity (Megatron-Bridge 25.09 run_script.py)
        model["capacity_factor"] = 1.0
        assumed.append("token drop: capacity factor 1.0, padded (apply_moe_token_drop defaults)")
    return assumed


def _token_drop(row: dict[str, Any]) -> bool:
    """Whether the row's source labels it a token-drop (capacity-limited) MoE run."""
    return "(tokendrop)" in str(row["source"].get("table", "")).lower()


def _supported_features() -> Callable[[str], bool]:
    from palm.strategy import ParallelismConfig
    from palm.workload.model import ModelConfig

    fields = ParallelismConfig.__dataclass_fields__
    have = {
        "cp": "cp" in fields,
        "uneven": "first_stage_layers" in fields,
        "moe": "experts" in ModelConfig.__dataclass_fields__ and "ep" in fields,
    }
    return lambda name: have[name]


def load_modern_cases(path: str | Path | None = None) -> ModernCases:
    """Every row of a modern validation file: the expressible ones as cases, the others with
    the reason they are left out."""
    path = Path(path) if path is not None else default_modern_file()
    text = read_input(path, field="validation file", kind="JSON file")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("validation file", str(path), f"valid JSON ({exc})") from None
    rows = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ConfigError("validation file", str(path), "a JSON object with a cases list")
    supported = _supported_features()
    cases, left, assumptions, by_id, epochs = [], [], {}, {}, {}
    for row in rows:
        by_id[row["id"]] = row
        reason = _unsupported(row, supported)
        if reason is None:
            tables, assumed = modern_case_tables(row)
            try:
                config = parse_config(tables)
            except ConfigError as exc:
                reason = f"not accepted: {exc}"
            else:
                cases.append(
                    ValidationCase(
                        case_id=row["id"],
                        config=config,
                        published_iteration_time_s=float(row["derived"]["iteration_time_s"]),
                        source=f"{row['source'].get('repo')}: {row['source'].get('table')}",
                    )
                )
                if assumed:
                    assumptions[row["id"]] = assumed
                if own := software_constants(config):
                    epochs[row["id"]] = next(iter(own.values()))
                continue
        left.append(LeftOut(row["id"], reason))
    return ModernCases(tuple(cases), tuple(left), assumptions, by_id, epochs)
