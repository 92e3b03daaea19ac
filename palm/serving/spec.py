"""What is served: the ``[serving]`` table of a ``training.mode = "serve"`` configuration and
the number formats a served model's weights and KV cache are stored in.

A serving configuration asks: *with ``batch`` sequences in flight on the whole system, each
reading ``input_tokens`` of prompt and writing ``output_tokens``, how long is the first token
(``ttft_s``), how long each next one (``tpot_s``), how many tokens a second leave the system,
and does it fit?* (docs/serving.md).

Number formats. ``training.precision`` is the precision the matrix engine computes in (its
peak is the hardware's for that precision); ``weights`` and ``kv_cache`` are the formats the
weights and the KV cache are *stored* in, which set the bytes read from memory. A format that
is narrower than the compute precision is a *weight-only* format: the kernel reads the narrow
weights and dequantises them to the compute precision on chip (AWQ, Lin et al. 2024, sec. 4;
TensorRT-LLM's ``W4A16`` / ``W8A16`` weight-only GEMMs), so it saves bytes and computes at
the 16-bit rate. Bytes per value (:data:`STORED_BYTES`):

* ``bf16``, ``fp16`` 2; ``fp8`` (E4M3 with a per-tensor scale) 1; ``int8`` 1 (per-channel
  scales, negligible);
* ``int4``: 4-bit integers in groups of 128 values with one 16-bit scale (AWQ's and GPTQ's
  default group size): ``0.5 + 2/128 = 0.515625`` B;
* ``fp4``: NVIDIA's NVFP4, 4-bit E2M1 values in blocks of 16 with one FP8 (E4M3) scale
  ("Introducing NVFP4 for efficient and accurate low-precision inference", NVIDIA technical
  blog, 2025): ``0.5 + 1/16 = 0.5625`` B; its products run at the Blackwell FP4 peak;
* ``bfp8``, ``bfp4``: Tenstorrent's block floating point, 16 values sharing one 8-bit
  exponent (:data:`palm.units.PRECISIONS`), computed at the matrix engine's bf16 rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ServingConfig",
    "SCENARIOS",
    "BATCHING",
    "WEIGHT_FORMATS",
    "KV_FORMATS",
    "STORED_BYTES",
    "stored_bytes",
    "weight_format",
    "attention_weight_format",
    "kv_format",
    "activation_bytes",
]

SCENARIOS: tuple[str, ...] = ("offline", "server")
BATCHING: tuple[str, ...] = ("continuous", "static")
WEIGHT_FORMATS: tuple[str, ...] = (
    "auto",
    "fp32",
    "bf16",
    "fp16",
    "fp8",
    "int8",
    "int4",
    "fp4",
    "bfp8",
    "bfp4",
)
KV_FORMATS: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16", "fp8", "int8", "bfp8", "bfp4")

#: bytes of one stored value by format (module docstring)
STORED_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 2.0 / 128,
    "fp4": 0.5 + 1.0 / 16,
    "bfp8": 1.0625,
    "bfp4": 0.5625,
}


@dataclass(frozen=True)
class ServingConfig:
    """``[serving]``: the requests a served model answers.

    ``batch`` is the number of sequences in flight on the whole system (split evenly over
    the ``dp`` replicas; the busiest replica holds ``ceil(batch / dp)``), each with a prompt of
    ``input_tokens`` and ``output_tokens`` generated tokens.

    ``batching``: ``"continuous"`` (in-flight batching, Yu et al. 2022 "Orca"; vLLM,
    TensorRT-LLM): a finished sequence is replaced at once by a new request, whose prompt is
    run in the same forward steps as the other sequences' next tokens (chunked prefill,
    Agrawal et al. 2024 "Sarathi-Serve"), so the batch is always full and every sequence is,
    on average, half way through its answer; ``"static"``: the whole batch is prefilled in one
    step and then decoded for ``output_tokens`` steps before the next batch starts
    (TensorRT-LLM's ``gptSessionBenchmark``, the tt-metal demos).

    ``chunk_tokens`` is the most tokens one forward step may hold, decode tokens included
    (vLLM ``max_num_batched_tokens``, TensorRT-LLM ``max_num_tokens``); 0: no limit (a prompt
    runs in one step). It bounds how many sequences a continuous batch can keep: each step
    must also prefill the prompts of the sequences that replace the finished ones.

    ``scenario``: ``"offline"`` (every request is waiting: the batch is always full) or
    ``"server"``: requests arrive at ``request_rate_per_s`` (the whole system's); the
    sequences in flight follow from Little's law, ``n = rate x (ttft + output_tokens x
    tpot)``, at most ``batch``; a rate above what ``batch`` sequences sustain saturates.

    ``weights`` (the MLP's, and by default every layer's), ``attention_weights`` and
    ``kv_cache`` are storage formats (module docstring); ``"auto"`` stores weights in
    ``training.precision`` and the KV cache in ``fp8`` when the compute is 8-bit or
    narrower, ``bfp8`` on block floating point, else 16-bit. ``memory_fraction`` is the share
    of a device's memory the server may use (vLLM ``gpu_memory_utilization``, TensorRT-LLM
    ``free_gpu_memory_fraction``: both 0.9 by default). ``tpot_limit_s`` and ``ttft_limit_s``
    (0: none) are latency targets a tuner keeps to (:meth:`limit_excess`)."""

    batch: int = 1
    input_tokens: int = 128
    output_tokens: int = 128
    scenario: Literal["offline", "server"] = "offline"
    request_rate_per_s: float = 1.0
    batching: Literal["continuous", "static"] = "continuous"
    chunk_tokens: int = 0
    weights: Literal[
        "auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "bfp8", "bfp4"
    ] = "auto"
    attention_weights: Literal[
        "auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "bfp8", "bfp4"
    ] = "auto"
    kv_cache: Literal["auto", "fp32", "bf16", "fp16", "fp8", "int8", "bfp8", "bfp4"] = "auto"
    memory_fraction: float = 0.9
    tpot_limit_s: float = 0.0
    ttft_limit_s: float = 0.0

    def limit_excess(self, *, tpot_s: float, ttft_s: float | None) -> dict[str, float]:
        """How far a result is over each latency limit that is set (seconds; <= 0: within):
        ``tpot_over_limit_s`` and ``ttft_over_limit_s``. A saturated server (no ``ttft``) is
        over any time-to-first-token limit by an hour."""
        out: dict[str, float] = {}
        if self.tpot_limit_s > 0:
            out["tpot_over_limit_s"] = tpot_s - self.tpot_limit_s
        if self.ttft_limit_s > 0:
            ttft = 3600.0 + self.ttft_limit_s if ttft_s is None else ttft_s
            out["ttft_over_limit_s"] = ttft - self.ttft_limit_s
        return out


def stored_bytes(fmt: str) -> float:
    """Bytes of one value stored in ``fmt`` (:data:`STORED_BYTES`)."""
    return STORED_BYTES[fmt]


def weight_format(serving: ServingConfig, precision: str) -> str:
    """The storage format of the MLP weights (``auto``: the compute precision)."""
    return precision if serving.weights == "auto" else serving.weights


def attention_weight_format(serving: ServingConfig, precision: str) -> str:
    """The storage format of the attention weights (``auto``: as the MLP's)."""
    if serving.attention_weights == "auto":
        return weight_format(serving, precision)
    return serving.attention_weights


def kv_format(serving: ServingConfig, precision: str) -> str:
    """The storage format of the KV cache (``auto``: 8-bit under 8-bit or narrower compute,
    ``bfp8`` under block floating point, else the 16-bit activations')."""
    if serving.kv_cache != "auto":
        return serving.kv_cache
    if precision in ("fp8", "int8", "fp4"):
        return "fp8"
    if precision.startswith("bfp"):
        return "bfp8"
    return "fp32" if precision == "fp32" else "bf16"


def activation_bytes(precision: str) -> float:
    """Bytes of one activation between kernels: the residual stream stays in 16 bits under
    8- and 4-bit products (quantised on entry to each product), 4 under fp32."""
    return 4.0 if precision == "fp32" else 2.0
