"""The inference validation rows (``palm/data/visible_inference.json`` and any file of its
shape): each row translated into a serving configuration from its own stated facts, or left
out with the reason.

The rules, each from a fact the row states (never its id, commit, model name or source):

* **model**: the published architecture of the row's ``hf_id`` (:data:`MODELS`, read by the
  same importer as ``model.hf_config``); a model not in that table is left out;
* **hardware**: the accelerator type's preset and datasheet figures
  (:mod:`palm.serving.hardware`) with the row's memory size; Tenstorrent n150, n300, T3000
  and Galaxy as the ``wormhole-n150``, ``wormhole-n300``, ``wormhole-t3000`` and
  ``wormhole-galaxy`` presets, one serving device per chip (:mod:`palm.serving.chips`);
* **precision** (the row's text): ``fp4`` / ``FP4`` -> NVFP4 products, ``fp8`` / ``FP8`` -> FP8
  products, both with an FP8 KV cache; ``fp16`` -> 16-bit; Tenstorrent ``bfp4 MLP`` /
  ``bfp8 MLP`` -> MLP weights in that block format, attention weights in ``bf16`` when the
  text says so, else ``bfp8``, the KV cache in ``bfp8``;
* **plan**: the row's TP / PP / DP; unstated PP and DP are 1; an unstated EP is 1 (experts
  split tensor-parallel, TensorRT-LLM's default); on a Tenstorrent system an unstated TP is
  every chip not taken by the stated DP (``tt_transformers``' multi-device default) and an
  unstated DP is 1; on GPUs an unstated TP is the one of 1, 2, 4, 8 (a
  divisor of the accelerators per node) that the simulator finds fastest, with the other
  accelerators as data-parallel replicas (a submitter tunes the plan);
* **batching**: a stated batch -> static batching (one prefill, then decode: TensorRT-LLM's
  ``gptSessionBenchmark``, tt-metal's demo); no batch -> continuous batching at the batch the
  runtime sizes (:func:`runtime_batch`: TensorRT-LLM's ``trtllm-bench`` rule, the largest
  count of requests the KV cache holds, at most 4096, and a step cap of
  ``min(batch (1 + I/O), 32768)`` tokens rounded up as ``finetune_setting`` rounds
  ``max_num_tokens``, :func:`step_token_cap`);
* **lengths**: the stated input and output lengths; a decode row of tt-metal's tables without
  them -> batch 1 and a 128-token prompt (the demo's documented defaults, stated in the row's
  notes) and 200 output tokens ("max 200 decode iterations");
* **measured figure -> predicted key** (by the figure's key and unit, the file's ``units``):
  ``tokens_per_s`` and ``total_output_throughput_tokens_per_s`` -> ``output_tokens_per_s``;
  ``samples_per_s`` (when no token rate) -> ``throughput_samples_per_s``;
  ``output_tokens_per_s_per_gpu`` -> ``output_tokens_per_s`` / GPUs;
  ``first_token_latency_ms`` -> ``ttft_s`` in ms; ``tokens_per_s_per_user`` ->
  ``output_tokens_per_s_per_user``.

Rows whose workload lengths are not stated (the MLPerf rows: their datasets' lengths vary by
request) are left out with that reason.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from palm.config import hf_model_from_dict, parse_config
from palm.errors import ConfigError
from palm.inputs import read_input
from palm.strategy import SimConfig

__all__ = [
    "InferenceCase",
    "LeftOut",
    "InferenceCases",
    "MODELS",
    "load_inference_cases",
    "default_inference_file",
    "is_inference_file",
    "runtime_batch",
    "step_token_cap",
    "predicted_value",
]

#: the unit of each measured key and how a result gives it: (result key, scale)
_MEASURED: dict[str, tuple[str, str]] = {
    "tokens_per_s": ("output_tokens_per_s", "1"),
    "total_output_throughput_tokens_per_s": ("output_tokens_per_s", "1"),
    "output_tokens_per_s_per_gpu": ("output_tokens_per_s", "per_device"),
    "first_token_latency_ms": ("ttft_s", "ms"),
    "tokens_per_s_per_user": ("output_tokens_per_s_per_user", "1"),
    "samples_per_s": ("throughput_samples_per_s", "1"),
}
_ORDER = tuple(_MEASURED)


@dataclass(frozen=True)
class InferenceCase:
    """One translated row: its candidate configurations (one, or one per TP degree when the
    row leaves TP out), the measured figure and the key and scale it compares with."""

    case_id: str
    configs: tuple[SimConfig, ...]
    measured_key: str
    measured: float
    predicted_key: str
    scale: str
    source: str
    hardware: str
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class LeftOut:
    case_id: str
    reason: str


@dataclass(frozen=True)
class InferenceCases:
    cases: list[InferenceCase]
    left_out: list[LeftOut]


@functools.cache
def _models() -> dict[str, Any]:
    text = resources.files("palm").joinpath("data/inference_models.json").read_text()
    models: dict[str, Any] = json.loads(text)["models"]
    return models


MODELS: Callable[[], dict[str, Any]] = _models


def default_inference_file() -> Path:
    return Path(str(resources.files("palm").joinpath("data/visible_inference.json")))


def is_inference_file(path: str | Path) -> bool:
    """Whether ``path`` holds rows of the inference shape (recognised in
    :mod:`palm.validation_files`); unreadable files are not."""
    from palm.validation_files import validation_file_kind

    try:
        return validation_file_kind(path) == "inference"
    except ConfigError:
        return False


def load_inference_cases(path: str | Path | None = None) -> InferenceCases:
    """Translate every row of ``path`` (default: the packaged visible rows)."""
    where = default_inference_file() if path is None else Path(path)
    try:
        data = json.loads(read_input(where, field="validation file", kind="JSON file"))
    except (ValueError, RecursionError) as exc:
        raise ConfigError("validation file", str(where), f"valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ConfigError("validation file", str(where), "a JSON object with a 'cases' list")
    cases: list[InferenceCase] = []
    left: list[LeftOut] = []
    for i, row in enumerate(data["cases"]):
        case_id = str(row.get("id", f"row{i}")) if isinstance(row, dict) else f"row{i}"
        try:
            out = translate_row(row)
        except (ConfigError, KeyError, TypeError, ValueError) as exc:
            left.append(LeftOut(case_id, f"not expressible: {exc}"))
            continue
        if isinstance(out, str):
            left.append(LeftOut(case_id, out))
        else:
            cases.append(out)
    return InferenceCases(cases, left)


# --------------------------------------------------------------------------------------------
# one row
# --------------------------------------------------------------------------------------------


def _measured(row: dict[str, Any]) -> tuple[str, float] | None:
    measured = row.get("measured") or {}
    for key in _ORDER:
        value = measured.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return key, float(value)
    return None


def _precision(text: str) -> tuple[str, dict[str, str]] | str:
    """``(training.precision, serving formats)`` from the row's precision text."""
    t = text.lower()
    if "bfp4 mlp" in t or "bfp8 mlp" in t:
        mlp = "bfp4" if "bfp4 mlp" in t else "bfp8"
        attention = "bf16" if "bf16 attention" in t else "bfp8"
        return "bf16", {"weights": mlp, "attention_weights": attention, "kv_cache": "bfp8"}
    if "fp4" in t:
        return "fp4", {"kv_cache": "fp8"}
    if "fp8" in t:
        return "fp8", {"kv_cache": "fp8"}
    if "fp16" in t:
        return "fp16", {}
    if "bf16" in t:
        return "bf16", {}
    return f"precision {text!r} is not one the serving model knows"


def _model_table(row: dict[str, Any]) -> dict[str, Any] | str:
    hf_id = (row.get("model") or {}).get("hf_id")
    raw = _models().get(str(hf_id))
    if raw is None:
        return f"the architecture of {hf_id!r} is not in palm/data/inference_models.json"
    m = hf_model_from_dict(raw, source=f"inference_models.json:{hf_id}", seq_len_given=True)
    table = {k: v for k, v in dataclasses.asdict(m).items() if k != "graph_ops"}
    table["seq_len"] = 4096
    plain: dict[str, Any] = json.loads(json.dumps(table))  # tuples as arrays, as in TOML
    return plain


#: Tenstorrent systems as the rows name them -> their presets (one device per chip)
_TT_SYSTEMS = {
    "Wormhole-n150": "wormhole-n150",
    "Wormhole-n300": "wormhole-n300",
    "Wormhole-T3K": "wormhole-t3000",
    "Wormhole-Galaxy": "wormhole-galaxy",
}


def _hardware(row: dict[str, Any]) -> tuple[dict[str, Any], int] | str:
    from palm.serving.hardware import accelerator_hardware

    hw = row.get("hardware") or {}
    kind = str(hw.get("accelerator_type"))
    count = int(hw.get("count") or 1)
    preset = _TT_SYSTEMS.get(kind)
    if preset is not None:
        return {"preset": preset}, count
    per_node = int(hw.get("accelerators_per_node") or count)
    gpu = accelerator_hardware(
        kind, memory_gb=hw.get("memory_per_accelerator_GB"), per_node=per_node
    )
    if gpu is None:
        return f"accelerator {kind!r} has no hardware description"
    table = {k: v for k, v in dataclasses.asdict(gpu).items() if k != "topology"}
    table["topology"] = "gpu-cluster"
    plain: dict[str, Any] = json.loads(json.dumps(table))
    return plain, count


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def translate_row(row: dict[str, Any]) -> InferenceCase | str:
    """One row as an :class:`InferenceCase`, or the reason it is left out (module
    docstring)."""
    setup = row["setup"]
    found = _measured(row)
    if found is None:
        return "no measured throughput or latency figure"
    key, value = found
    prec = _precision(str(setup.get("precision", "")))
    if isinstance(prec, str):
        return prec
    model = _model_table(row)
    if isinstance(model, str):
        return model
    hw = _hardware(row)
    if isinstance(hw, str):
        return hw
    hw_table, count = hw
    tt = hw_table.get("preset") in _TT_SYSTEMS.values()
    assumptions: list[str] = []
    batch = _int(setup.get("batch"))
    i_len, o_len = _int(setup.get("input_len")), _int(setup.get("output_len"))
    if tt and batch is None:
        batch, i_len = 1, 128
        assumptions.append("tt-metal demo defaults: batch 1, 128-token prompt")
    if tt and o_len is None:
        o_len = 200
        assumptions.append("200 output tokens (max 200 decode iterations)")
    if i_len is None or o_len is None:
        return "input or output length not stated (the dataset's lengths vary by request)"
    precision, formats = prec
    serving: dict[str, Any] = {"input_tokens": i_len, "output_tokens": o_len, **formats}
    if batch is not None:
        serving.update(batching="static", batch=batch)
    else:
        serving.update(batching="continuous", batch=1)
        assumptions.append("runtime-sized batch (trtllm-bench rule)")
    tp, pp, dp = _int(setup.get("tp")), _int(setup.get("pp")) or 1, _int(setup.get("dp")) or 1
    base: dict[str, Any] = {
        "model": model,
        "hardware": hw_table,
        "training": {"mode": "serve", "precision": precision},
        "serving": serving,
    }
    if tt:
        tps = [tp or max(1, count // (pp * dp))]
        if tp is None:
            assumptions.append("TP across all chips (tt_transformers' multi-device default)")
    elif tp is not None:
        tps = [tp]
    else:
        per_node = int((row.get("hardware") or {}).get("accelerators_per_node") or count)
        tps = [t for t in (1, 2, 4, 8) if per_node % t == 0 and count % t == 0]
        assumptions.append(f"TP chosen among {tps} (fastest)")
    configs = []
    for t in tps:
        replicas = dp if tp is not None else max(1, count // (t * pp))
        par = {"tp": t, "pp": pp, "dp": replicas}
        try:
            configs.append(parse_config({**base, "parallelism": par}))
        except ConfigError:
            continue
    if not configs:
        return "no tensor-parallel degree the model allows on these accelerators"
    if batch is None:
        configs = [runtime_batch(c) for c in configs]
    predicted_key, scale = _MEASURED[key]
    source = str(row.get("source_kind") or (row.get("source") or {}).get("repo") or "")
    return InferenceCase(
        case_id=str(row.get("id")),
        configs=tuple(configs),
        measured_key=key,
        measured=value,
        predicted_key=predicted_key,
        scale=scale,
        source=source,
        hardware=str((row.get("hardware") or {}).get("accelerator_type")),
        assumptions=tuple(assumptions),
    )


#: trtllm-bench's sizing (TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py``,
#: ``finetune_setting``): at most 4096 requests, at most 32768 tokens per step
_MAX_REQUESTS = 4096
_MAX_STEP_TOKENS = 32768


def step_token_cap(*, requests: int, input_tokens: int, output_tokens: int) -> int:
    """``max_num_tokens`` as ``trtllm-bench`` rounds it (``finetune_setting``): ``raw =
    min(requests (1 + I/O), 32768)``, then at least 2048 and rounded up to a multiple of 256
    below 4096, of 512 below 8192, else of 1024 ("min 2048 to ensure context/generation
    overlap efficiency")."""
    raw = min(requests * (1.0 + input_tokens / output_tokens), float(_MAX_STEP_TOKENS))
    if raw < 4096:
        return max(2048, 256 * math.ceil(raw / 256))
    if raw < 8192:
        return 512 * math.ceil(raw / 512)
    return 1024 * math.ceil(raw / 1024)


def runtime_batch(config: SimConfig) -> SimConfig:
    """``config`` at the batch and step cap TensorRT-LLM's ``trtllm-bench`` sizes: as many
    requests as the KV cache holds (``kv_cache_free_gpu_mem_fraction = 0.95`` of what the
    weights leave), at most 4096 per pipeline, and the step cap :func:`step_token_cap`
    (its ``finetune_setting``)."""
    from palm.serving.simulate import serving_run

    sv, par = config.serving, config.parallelism
    probe = dataclasses.replace(
        config, serving=dataclasses.replace(sv, batch=par.dp, memory_fraction=0.95)
    )
    fits = serving_run(probe).max_batch
    per_pipeline = max(1, min(fits // par.dp, _MAX_REQUESTS // par.pp))
    tokens = step_token_cap(
        requests=per_pipeline, input_tokens=sv.input_tokens, output_tokens=sv.output_tokens
    )
    serving = dataclasses.replace(
        sv, batch=per_pipeline * par.dp, chunk_tokens=tokens, memory_fraction=0.95
    )
    return dataclasses.replace(config, serving=serving)


def predicted_value(result: dict[str, Any], case: InferenceCase, devices: int) -> float | None:
    """The predicted figure of ``case`` from a result's JSON form, in the measured unit."""
    value = result.get(case.predicted_key)
    if value is None:
        return None
    v = float(value)
    if case.scale == "per_device":
        return v / devices
    if case.scale == "ms":
        return v * 1e3
    return v
