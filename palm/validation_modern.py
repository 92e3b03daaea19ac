"""The modern GPU validation set (``shared/validation/visible_modern.json``, SPEC sec. 7).

Each row is a published training run (NVIDIA NeMo / Megatron-Bridge performance tables,
MosaicML llm-foundry, torchtitan, Megatron-LM) with its model, cluster and plan. This module
turns a row into a :class:`~palm.strategy.SimConfig` with the hardware preset of its GPU, or
says why it cannot yet be expressed (:class:`LeftOut`). The mapping rules, each one line:

* GPU -> preset (:data:`GPU_PRESETS`); A100 40 GB rows override the memory size and bandwidth,
  DGX B300 rows the NIC rate (400 Gb/s, as measured; the preset keeps the datasheet's 800);
* precision: every FP8 recipe (Transformer Engine delayed / current scaling, MXFP8, torchao
  float8) -> ``fp8``; ``NVFP4`` has no precision in the simulator yet (left out);
  unstated (Megatron-LM README) -> ``bf16``, which its MFU implies;
* recompute: ``full ...`` -> ``full``, ``selective ...`` -> ``selective``, else ``none``;
* sharding: FSDP ``FULL_SHARD`` / ``true`` / a shard degree -> ``zero = 3``; ``SHARD_GRAD_OP``
  (llm-foundry) -> ``fsdp = true`` with ``zero = 2`` (PyTorch FSDP's per-layer gathers in the
  forward pass and reduce-scatters in the backward pass, not a distributed optimizer's
  step-end collective); Megatron runs without FSDP use the distributed optimizer -> ``zero = 1``;
  the PyTorch stacks' full sharding (llm-foundry / Composer, torchtitan) -> ``fsdp = true``,
  whose full recompute is PyTorch's non-reentrant checkpoint with early stop (llm-foundry's
  ``submit_benchmarks.py`` sets ``activation_checkpointing_reentrant: False``; torchtitan
  wraps blocks with ``ptd_checkpoint_wrapper``), except llm-foundry's A100 tables: they were
  measured under PyTorch 1.13.1 (in the README by 2023-05-03, when ``setup.py`` pinned
  ``torch==1.13.1``; the H100 tables came with ``torch>=2.1`` in 2023-10 / 2024-01), before
  the early stop existed (PyTorch 2.1) -> ``zero = 3``, the same sharding re-running whole
  layers (their ``amp_bf16`` A100-80GB rows were re-measured in 2023-10, whose pin allows
  PyTorch 1.13.1 to 2.1.0 and whose ``submit_benchmarks.py`` defaults to a 1.13.1 image;
  docs/validation.md, "The A100 rows still far off");
* Megatron runs with the distributed optimizer -> ``overlap_param_gather`` (Megatron-Bridge's
  recipe defaults, ``src/megatron/bridge/recipes/common.py`` @067f987df:
  ``overlap_grad_reduce`` and ``overlap_param_gather`` true; the Megatron-LM weak-scaling
  table states ``--overlap-param-gather``);
* ``vp > 1`` with ``pp > 1`` -> ``interleaved-1f1b`` with ``interleave = vp``;
* sequence parallelism whenever ``tp > 1`` (Megatron-Bridge and torchtitan both do); NeMo /
  Megatron-Bridge / Megatron-LM runs with ``tp > 1`` also overlap TP communication
  (``tp_comm_overlap``: their performance recipes set it, the Megatron-LM table states it);
* ``squared_relu`` MLPs (Nemotron) have two matrices, priced as ``gelu``;
* a micro-batch the source does not state is taken as 1 (marked in the case's assumptions);
* MoE rows labelled "(tokendrop)" (Megatron-Bridge 25.09) ran ``apply_moe_token_drop`` with its
  defaults (``moe_expert_capacity_factor = 1.0``, ``moe_pad_expert_input_to_capacity``; the
  25.09 ``scripts/performance/run_script.py``) -> ``capacity_factor = 1.0``; the others are
  dropless with forced balanced routing (the page's footnote) -> ``load_imbalance = 1.0``.
  Both price the same busiest-device load (1.0); the dropless dispatcher's host
  synchronisation is not modelled (docs/validation.md, "Rows measured twice");
* two Megatron-Bridge 25.11 rows whose layout columns contradict the workload config at the
  table's own commit take the config's value (:data:`TABLE_CORRECTIONS`, each with its
  evidence; docs/validation.md, "Layout columns corrected");
* rows whose recipe uses DeepEP or HybridEP (``moe_flex_dispatcher_backend`` in the workload
  config; DeepSeek-V3 on H100 in 25.09; the 25.11 GB200 / GB300 DeepSeek-V3 and Qwen3-235B
  runs, :data:`FLEX_DISPATCH_RUNS`) -> ``moe_dispatcher = "deepep"``, and those that
  overlap the expert all-to-all with another micro-batch (DeepSeek-V3 on H100 in 25.09)
  -> ``moe_a2a_overlap``; the all-to-all is never hidden by ``tp_comm_overlap``;
* the software stack: a row measured in a container of a stack epoch (:data:`STACK_EPOCHS`,
  :func:`stack_epoch`: Blackwell rows of a container older than NeMo 25.04, the first
  release of Blackwell kernels) takes that epoch's constants as overrides of its preset
  (the epoch's FlashAttention efficiency); the presets keep the current stack's
  (docs/validation.md, "The software stack as a calibration input").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from palm.config import parse_config
from palm.errors import ConfigError
from palm.inputs import read_input
from palm.validation import ValidationCase

__all__ = [
    "ARGUED_OUT",
    "FLEX_DISPATCH_RUNS",
    "GPU_PRESETS",
    "STACK_EPOCHS",
    "TABLE_CORRECTIONS",
    "LeftOut",
    "ModernCases",
    "StackEpoch",
    "container_release",
    "default_modern_file",
    "load_modern_cases",
    "modern_case_tables",
    "stack_epoch",
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
    # the DGX B300 of the Megatron-Bridge tables runs its ConnectX-8 NICs at 400 Gb/s (50 GB/s
    # per GPU), not the datasheet's "up to 800": its archived 26.02 run of gpt-oss-120B at
    # EP 64 (the all-to-all crosses the NICs) measures 8359 tokens/s/GPU against 8047 on
    # DGX B200 with the same plan and release (docs/validation.md, "Network of the DGX B300")
    "B300": ("dgx-b300", {"inter_node_bandwidth_gbps": 50.0}),
    "GB300": ("gb300-nvl72", {"gpus_per_node": 64}),
}

#: rows argued inconsistent with the model (docs/validation.md, "Rows measured twice"): the
#: dropless runs measured at twice the time of the same plan run with token drop one release
#: earlier, a cost of the 25.11 / 26.02 releases that 26.02.01 removed (the archived tables
#: measure one H100 plan 1.77x faster after the point release); not modelled. And one
#: llm-foundry row measured a third slower per layer than its two siblings with the same work
#: per GPU ("MPT-70B on 64 A100-40GB: the FSDP schedule of its software, per layer"). They stay
#: in the table and in the first headline; ``palm-tune validate`` reports the figures
#: without them beside it (:mod:`palm.validation_report`).
ARGUED_OUT: dict[str, str] = {
    "mb2511-b200-qwen3-30b-a3b-8g-fp8mx": (
        "dropless, 1.94x its 25.09 token-drop twin (26.02 repeats it, dropless)"
    ),
    "mb2511-h100-qwen3-30b-a3b-16g-fp8cs": (
        "dropless, 1.99x its 25.09 token-drop twin (dropless at mbs 1: 26.02.01 runs the "
        "26.02 plan 1.77x faster)"
    ),
    "foundry-a100-40gb-mpt-70b-64g-s2048": (
        "185.5 ms per layer and sequence pair against 136-137 ms for its two siblings with the "
        "same work per GPU (32 A100-80GB; 128 A100-40GB, one micro-batch per step), its FSDP "
        "collectives 27-81 ms under the compute they overlap"
    ),
}


#: Rows whose layout columns contradict both the Megatron-Bridge workload config at the
#: table's own commit and the same plan measured in a later release: row id -> (the config's
#: values as ``"table.field"`` -> value, the evidence). Each is marked as an assumption.
TABLE_CORRECTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "mb2511-b200-gpt-oss-120b-64g-bf16": (
        {"parallelism.ep": 64, "training.recompute": "selective"},
        "ep 64 and recompute layernorm,moe_act from GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16 "
        "@5776a6d9 (the table's EP 8 repeats the H100 row; 26.02 archive: B200 at EP 64 "
        "8047 tokens/s/GPU as this row's 8213, at EP 8 13722)",
    ),
    "mb2511-h100-gpt-oss-120b-64g-bf16": (
        {"training.micro_batch": 1, "training.recompute": "selective"},
        "micro_batch 1 and recompute layernorm,moe_act from "
        "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16 @5776a6d9 (the table's GA 2 contradicts its "
        "MBS 4, which needs GA 8; 26.02 archive: the same plan at MBS 1, 5993 tokens/s/GPU)",
    ),
}


#: Megatron-Bridge releases whose MoE runs of a model on a GPU dispatch with HybridEP in every
#: workload config of that model and GPU, for rows that record no recipe hints: release ->
#: {(model key, GPU)}. 25.11: ``moe_flex_dispatcher_backend="hybridep"`` in each GB200 / GB300
#: config of DeepSeek-V3 (``scripts/performance/configs/deepseek/
#: deepseek_workload_base_configs.py``) and Qwen3-235B-A22B (``.../qwen/
#: qwen3_workload_base_configs.py``) at the table's commit 5776a6d9 and in their V1 / V2
#: configs at 52a31ded1 (V2 inherits V1's backend); the B200 / B300 configs there name none.
FLEX_DISPATCH_RUNS: dict[str, frozenset[tuple[str, str]]] = {
    "25.11": frozenset(
        (model, gpu) for model in ("deepseek-v3", "qwen3-235b-a22b") for gpu in ("GB200", "GB300")
    ),
}


@dataclass(frozen=True)
class StackEpoch:
    """A software stack (framework container with its cuDNN, Transformer Engine and cuBLAS)
    whose kernels differ measurably from the current one on the same GPU: the rows measured
    in it take ``constants`` (preset field -> value) in place of the preset's."""

    presets: tuple[str, ...]  #: the hardware presets it applies to
    before: tuple[int, int]  #: containers released before this (year, month) belong to it
    constants: dict[str, float]  #: fitted by benchmarks/calibrate_gpus.py on its rows
    why: str


#: Stack epochs of the validation mapping, name -> epoch. One so far: the first Blackwell
#: stack. The same plan on 8 DGX B200 (Llama 3 8B, MBS 2, GBS 128, FP8, 8K) measures 26006
#: tokens/s/GPU in NeMo 25.02 and 29994 / 30624 in Megatron-Bridge 25.09 / 25.11; GB200's
#: first table (NeMo 25.04) is not slower on that plan (33099, against 31357-31737 from 25.07
#: on), hence the bound. Fitted on the four dense 25.02 rows, an epoch attention efficiency
#: also predicts the 64K Mixtral 8x22B row of that table (-21.7% -> -7.1%); an epoch FP8 GEMM
#: efficiency fitted the same way does not (-21.1%). cuDNN's Blackwell kernels date from
#: cuDNN 9.7.0 (January 2025; cudnn-frontend v1.10 release notes), one month before NeMo
#: 25.02. docs/validation.md, "The software stack as a calibration input".
STACK_EPOCHS: dict[str, StackEpoch] = {
    "blackwell-early-2025": StackEpoch(
        presets=("dgx-b200", "gb200-nvl72"),
        before=(25, 4),
        constants={"attention_efficiency": 0.279},
        why="first Blackwell kernels (NeMo 25.02)",
    ),
}

_RELEASE = re.compile(r"(?:NeMo ?(\d\d)\.(\d\d)|\b(\d\d)\.(\d\d)(?:\.\d\d)? NeMo Container)")


def container_release(row: dict[str, Any]) -> tuple[int, int] | None:
    """The (year, month) of the NeMo / Megatron-Bridge container a row was measured in, from
    its source table ("Container NeMo 25.02", "25.09 NeMo Container", "26.04.01 NeMo
    Container"), or ``None`` if the table names none (llm-foundry, torchtitan, Megatron-LM)."""
    match = _RELEASE.search(str(row["source"].get("table", "")))
    if match is None:
        return None
    year, month = (g for g in match.groups() if g is not None)
    return int(year), int(month)


def stack_epoch(row: dict[str, Any]) -> str | None:
    """The stack epoch (:data:`STACK_EPOCHS`) a row was measured in, or ``None`` for the
    current stack: its GPU's preset is one of the epoch's and its container older than the
    epoch's bound."""
    gpu = row["hardware"]["gpu"]
    release = container_release(row)
    if gpu not in GPU_PRESETS or release is None:
        return None
    preset = GPU_PRESETS[gpu][0]
    for name, epoch in STACK_EPOCHS.items():
        if preset in epoch.presets and release < epoch.before:
            return name
    return None


#: Megatron-Bridge model providers that set ``add_bias_linear = True`` (biases on the QKV,
#: projection and expert linears): ``GPTOSSProvider`` (gpt_oss_provider.py @5776a6d9; the
#: 26.04 bridge sets it in ``GPTOSSBridge.provider_bridge``, gpt_oss_bridge.py @v0.4.0)
_BIASED_PROVIDERS = ("GPTOSSProvider",)

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
    #: case id -> its stack epoch (:data:`STACK_EPOCHS`), for the rows of an older stack
    epochs: dict[str, str] = field(default_factory=dict)


def default_modern_file() -> Path:
    return Path(str(resources.files("palm") / "data" / "visible_modern.json"))


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


def _zero(fsdp: Any) -> int:
    if fsdp in (None, False, "False"):
        return 1  # Megatron's distributed optimizer
    if fsdp == "SHARD_GRAD_OP":
        return 2
    return 3  # FULL_SHARD, true, or an FSDP shard degree


#: source families whose FSDP is PyTorch's (Composer / llm-foundry, torchtitan)
_PYTORCH_FSDP = ("mosaicml/llm-foundry", "pytorch/torchtitan")


def _sharding(row: dict[str, Any]) -> dict[str, Any]:
    """The ``[training]`` sharding keys of ``row``: ``fsdp = true`` for full sharding by a
    PyTorch stack whose checkpoint stops early (PyTorch >= 2.1), ``fsdp = true`` with
    ``zero = 2`` for a PyTorch stack's ``SHARD_GRAD_OP`` (all such visible rows are H100 rows,
    PyTorch >= 2.1), else the ZeRO stage (:func:`_zero`)."""
    zero = _zero(row["parallelism"].get("fsdp"))
    pytorch = str(row.get("source_family", "")).startswith(_PYTORCH_FSDP)
    torch_1_13 = "llm-foundry" in str(row["source"].get("repo")) and str(
        row["source"].get("table", "")
    ).startswith("A100")
    if zero == 3 and pytorch and not torch_1_13:
        return {"fsdp": True}
    if zero == 2 and pytorch:  # SHARD_GRAD_OP: per-layer gathers (forward) and reduce-scatters
        return {"fsdp": True, "zero": 2}
    return {"zero": zero}


def _unsupported(row: dict[str, Any], supported: Callable[[str], bool]) -> str | None:
    """Why ``row`` cannot be expressed, or ``None``."""
    m, hw = row["model"], row["hardware"]
    if hw["gpu"] not in GPU_PRESETS:
        return _NO_PRESET.get(hw["gpu"], f"GPU {hw['gpu']}: no hardware preset")
    if _precision(row["training"].get("precision")) is None:
        return f"precision {row['training']['precision']}: not modelled"
    hints = ((row["training"].get("recipe_hints") or {}).get("values")) or {}
    if hints.get("cpu_offloading_num_layers") or row["training"].get("activation_cpu_offload"):
        return "activation CPU offloading (recipe) is not modelled"
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


def modern_case_tables(row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The TOML tables of one row and the assumptions made for fields the source omits."""
    m, tr, par, hw = row["model"], row["training"], row["parallelism"], row["hardware"]
    preset, overrides = GPU_PRESETS[hw["gpu"]]
    assumed: list[str] = []
    seq = m.get("seq_len") or m.get("seq_len_assumed")
    if not m.get("seq_len"):
        assumed.append(f"seq_len {seq} (training config of the source)")
    micro = tr.get("micro_batch")
    if not micro:
        micro = 1
        assumed.append("micro_batch 1 (not stated)")
    if tr.get("precision") is None:
        assumed.append("precision bf16 (not stated; MFU implies it)")
    extra = m.get("arch_extra") or {}
    gated = m["mlp"] == "swiglu"
    # gpt-oss's gate and linear halves are clamped before the gating ("clamped SwiGLU")
    clamped = gated and "clamped" in str(extra.get("mlp_note", "")).lower()
    bias = extra.get("bias")
    if bias is None and any(p in str(m.get("arch_source", "")) for p in _BIASED_PROVIDERS):
        bias = True
        assumed.append("biases on every linear layer (add_bias_linear of the model provider)")
    tp, pp, vp = par["tp"], par["pp"], par.get("vp") or 1
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
        "bias": bool(bias),
        "norm": "rmsnorm" if gated else "layernorm",
        "dropout": False,
        "tied_embeddings": bool(extra.get("tied_embeddings", not gated)),
        "learned_positions": "learned" in str(extra.get("position_embedding", "")),
    }
    if m.get("experts"):
        assumed.extend(_moe_fields(m, model, par, row))
    parallelism: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "dp": par["dp"],
        "sequence_parallel": tp > 1,
    }
    if (par.get("cp") or 1) > 1:
        parallelism["cp"] = par["cp"]
    megatron = "Megatron" in str(row.get("source_family", "")) + str(row["source"])
    if tp > 1 and megatron:
        # NeMo / Megatron-Bridge performance recipes and the Megatron-LM weak-scaling runs
        # overlap TP communication with the linear products (--tp-comm-overlap)
        parallelism["tp_comm_overlap"] = True
    if megatron and _zero(par.get("fsdp")) == 1:
        # and the distributed optimizer's weight all-gather with the next forward pass
        # (--overlap-param-gather; Megatron-Bridge recipes/common.py DDP defaults)
        parallelism["overlap_param_gather"] = True
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
        if _hierarchical_dispatch(row):
            parallelism["moe_dispatcher"] = "deepep"
        if _a2a_overlap(row):
            parallelism["moe_a2a_overlap"] = True
        # Megatron-Bridge MoE recipes run experts without tensor parallelism (etp = 1)
        parallelism["etp"] = par.get("etp") or 1
    epoch = stack_epoch(row)
    if epoch is not None:
        overrides = {**overrides, **STACK_EPOCHS[epoch].constants}
        assumed.append(
            f"software stack {epoch} ({STACK_EPOCHS[epoch].why}): "
            + ", ".join(f"{k} {v}" for k, v in STACK_EPOCHS[epoch].constants.items())
        )
    tables = {
        "model": model,
        "hardware": {"preset": preset, "gpus": hw["gpus"], **overrides},
        "training": {
            "global_batch": tr["global_batch"],
            "micro_batch": micro,
            "precision": _precision(tr.get("precision")),
            "optimizer": "adam",
            "recompute": _recompute(tr.get("recompute")),
            **_sharding(row),
        },
        "parallelism": parallelism,
    }
    if row["id"] in TABLE_CORRECTIONS:
        values, why = TABLE_CORRECTIONS[row["id"]]
        for key, value in values.items():
            table, name = key.split(".")
            tables[table][name] = value
        assumed.append(f"layout corrected: {why}")
    return tables, tuple(assumed)


def _moe_fields(
    m: dict[str, Any], model: dict[str, Any], par: dict[str, Any], row: dict[str, Any]
) -> list[str]:
    """Mixture-of-experts fields of ``model`` from the row; returns the assumptions made."""
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
        # Megatron-Bridge 25.09 perf runs labelled "(tokendrop)": apply_moe_token_drop with its
        # defaults, capacity factor 1.0 and expert inputs padded to capacity
        model["capacity_factor"] = 1.0
        assumed.append("token drop: capacity factor 1.0, padded (apply_moe_token_drop defaults)")
    if not par.get("etp"):
        assumed.append("etp 1 (Megatron-Bridge MoE recipes)")
    return assumed


def _hierarchical_dispatch(row: dict[str, Any]) -> bool:
    """Whether the row's recipe dispatches tokens with DeepEP or HybridEP (the ``flex``
    dispatcher): its workload config names the backend, or it is a Megatron-Bridge 25.09
    DeepSeek-V3 run on H100 (``scripts/performance/run_script.py`` @fa0315ae enables DeepEP
    for DeepSeek-V3 on H100), or a run of :data:`FLEX_DISPATCH_RUNS` without recorded hints."""
    hints = ((row["training"].get("recipe_hints") or {}).get("values")) or {}
    if hints.get("moe_flex_dispatcher_backend") in ("hybridep", "deepep"):
        return True
    if not hints and _flex_dispatch_run(row):
        return True
    return _deepseek_h100_2509(row)


def _flex_dispatch_run(row: dict[str, Any]) -> bool:
    table = str(row["source"].get("table", ""))
    return any(
        table.startswith(release) and (row["model"].get("key"), row["hardware"]["gpu"]) in runs
        for release, runs in FLEX_DISPATCH_RUNS.items()
    )


def _a2a_overlap(row: dict[str, Any]) -> bool:
    """Whether the row's recipe overlaps the expert-parallel all-to-all with another
    micro-batch's compute: its workload config says so, or it is a Megatron-Bridge 25.09
    DeepSeek-V3 run on H100 (``run_script.py`` @fa0315ae sets
    ``overlap_moe_expert_parallel_comm`` and ``delay_wgrad_compute`` for H100)."""
    hints = ((row["training"].get("recipe_hints") or {}).get("values")) or {}
    if hints.get("moe_a2a_overlap") or hints.get("overlap_moe_expert_parallel_comm"):
        return True
    return _deepseek_h100_2509(row)


def _deepseek_h100_2509(row: dict[str, Any]) -> bool:
    table = str(row["source"].get("table", ""))
    return (
        table.startswith("25.09")
        and row["model"].get("key") == "deepseek-v3"
        and row["hardware"]["gpu"].startswith("H100")
    )


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
                if (epoch := stack_epoch(row)) is not None:
                    epochs[row["id"]] = epoch
                continue
        left.append(LeftOut(row["id"], reason))
    return ModernCases(tuple(cases), tuple(left), assumptions, by_id, epochs)
