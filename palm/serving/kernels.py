"""Time of the kernels of one serving step on one device: the roofline of each product with
its weights read in their stored format, decode and prefill attention over the KV cache, and
the element-wise traffic.

**Products.** A product of ``m`` tokens by a weight ``k x n`` (``count`` of them) runs at

    t = max(2 m n k count / (peak x eff(m, n, k)),
            (m k a + k n w touched + m n a) / bw)

with ``eff`` the shape rule of :func:`palm.cost.compute.gemm_efficiency` (the hardware's
large-product efficiency for the compute precision times the loss of small dimensions),
``a`` the activation bytes, ``w`` the stored bytes of a weight value (a weight-only format
reads fewer bytes and computes at the compute precision's rate, :mod:`palm.serving.spec`) and
``bw`` the device's achievable memory bandwidth (``hbm_bandwidth x memory_efficiency``). Every
weight of a dense product is read once per step whatever ``m``: at a small batch a decode
step is bound by these bytes (Williams et al. 2009, roofline; Pope et al. 2023, "Efficiently
Scaling Transformer Inference", sec. 3.1).

**Experts read only when routed to.** A grouped product over ``E`` local experts of a layer
with ``E_all`` routed experts reads the weights of the experts its tokens chose: with ``T``
tokens each choosing ``k`` of ``E_all`` experts uniformly at random, an expert is left
untouched with probability ``(1 - k / E_all)^T``, so ``E (1 - (1 - k/E_all)^T)`` experts are
read (balanced routing, the assumption of the MoE serving benchmarks).

**Decode attention** (FlashDecoding-style kernels, one query per sequence): per sequence and
layer the kernel reads the sequence's KV cache, ``L x kv_bytes_per_token`` (:mod:`.model`),
and computes ``4 L d heads`` FLOPs (``q K^T`` and ``p V``; with MLA's absorbed form, DeepSeek-
V2 report appendix B, ``2 L heads (2 d_c + d_rope)`` against the latent); it takes
:func:`palm.cost.compute.attention_time` of both (the 16-bit peak at the kernel's
``attention_efficiency``, the softmax's exponentials on the special-function units, or the
bytes at ``bw``).

**Prefill attention** of a prompt of ``I`` tokens is one causal FlashAttention call
(:meth:`palm.workload.ops.TransformerLayer.fused_attention` at ``seq_len = I``); run in chunks
of ``c`` tokens (chunked prefill), each chunk re-reads the cache of the chunks before it:
``c n (n - 1) / 2`` tokens' KV for ``n = ceil(I / c)`` chunks (Agrawal et al. 2024,
"Sarathi-Serve", sec. 4.3).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from palm.cost.compute import DeviceRates, attention_time, device_rates, gemm_efficiency
from palm.hardware.spec import GpuClusterHardware, Hardware, Mesh2DHardware
from palm.serving.chips import chip_devices
from palm.serving.model import is_mla, kv_bytes_per_token_layer
from palm.workload.moe import MoELayer
from palm.workload.ops import Gemm, TransformerLayer

__all__ = [
    "ServeRates",
    "serve_rates",
    "product_time",
    "experts_touched",
    "expert_product_time",
    "decode_attention_time",
    "prefill_attention_time",
    "kv_write_bytes",
]


@dataclass(frozen=True)
class ServeRates:
    """What one device does in one serving configuration: the compute rates of
    :class:`palm.cost.compute.DeviceRates` for the compute precision, the stored bytes of
    attention weights, MLP weights, the KV cache and activations, and the memory bandwidth."""

    rates: DeviceRates
    attention_weight_bytes: float
    mlp_weight_bytes: float
    kv_bytes: float
    act_bytes: float

    @property
    def bandwidth_Bps(self) -> float:
        return self.rates.local_bandwidth_Bps


def serve_rates(
    hw: Hardware,
    precision: str,
    *,
    attention_weight_bytes: float,
    mlp_weight_bytes: float,
    kv_bytes: float,
    act_bytes: float,
    grouped_efficiency: float = 0.0,
    attention_efficiency: float = 0.0,
    matmul_efficiency: float = 0.0,
) -> ServeRates:
    """Rates of a device serving in ``precision``. FP8 and FP4 products run at their peak with
    the hardware's ``fp8_matmul_efficiency`` (the narrow-format kernels' fraction of peak), and
    the products that stay in 16 bits (attention, the output layer) at the 16-bit peak.
    ``grouped_efficiency`` (> 0) replaces the hardware's grouped-GEMM efficiency and
    ``attention_efficiency`` (> 0) its attention kernels' efficiency (serving runs the
    forward pass only: FlashAttention-3's forward kernel reaches 75% of the H100's 16-bit
    peak, Shah et al. 2024, "FlashAttention-3", sec. 4.1, against the fused forward-and-backward
    fraction the training fit stores); ``matmul_efficiency`` (> 0) the large-product
    efficiency of every precision (a serving step runs forward products only, against the
    forward-and-backward mix of the training fit)."""
    # serving runtimes run a layer's local experts in one fused grouped kernel (TensorRT-LLM's
    # and vLLM's fused MoE kernels): no per-expert launch of training's one GEMM per expert
    # (Transformer Engine's GroupedLinear); the grouped kernel's own loss stays
    rates = dataclasses.replace(device_rates(hw, precision), grouped_expert_s=0.0)
    if grouped_efficiency > 0:
        rates = dataclasses.replace(rates, grouped_gemm_efficiency=grouped_efficiency)
    if attention_efficiency > 0:
        rates = dataclasses.replace(rates, attention_efficiency=attention_efficiency)
    if isinstance(hw, Mesh2DHardware):
        # a chip serves as one device: every core's matrix engine, weights and cache streamed
        # from the DRAM channels (the cores' SRAM holds a layer's working set, not the model);
        # chips on links serve as one device each, with their own channels
        # (:func:`palm.serving.chips.chip_devices`)
        chips = chip_devices(hw)
        dram = hw.dram_bandwidth_gbps * 1e9 * hw.memory_efficiency / chips
        rates = dataclasses.replace(
            rates,
            peak_flops=hw.peak_flops(precision) * hw.device_count / chips,
            local_bandwidth_Bps=dram,
            dram_bandwidth_Bps=dram,
        )
    if isinstance(hw, GpuClusterHardware) and precision == "fp4":
        rates = dataclasses.replace(
            rates,
            matmul_efficiency=hw.fp8_matmul_efficiency,
            wide_peak_flops=hw.peak_tflops.bf16 * 1e12,
            wide_matmul_efficiency=hw.matmul_efficiency,
        )
    if matmul_efficiency > 0:
        rates = dataclasses.replace(
            rates,
            matmul_efficiency=matmul_efficiency,
            wide_matmul_efficiency=matmul_efficiency if rates.wide_matmul_efficiency else 0.0,
        )
    return ServeRates(
        rates=rates,
        attention_weight_bytes=attention_weight_bytes,
        mlp_weight_bytes=mlp_weight_bytes,
        kv_bytes=kv_bytes,
        act_bytes=act_bytes,
    )


def product_time(g: Gemm, sr: ServeRates, *, weight_bytes: float) -> float:
    """Roofline time of ``g`` whose ``B`` operand is a weight stored in ``weight_bytes`` per
    value."""
    if g.flops <= 0:
        return 0.0
    rates = sr.rates
    compute = g.flops / (rates.peak_for(g)[0] * gemm_efficiency(g, rates))
    a = sr.act_bytes
    traffic = ((g.m * g.k + g.m * g.n) * a + g.k * g.n * weight_bytes) * g.count
    fixed = g.count * rates.grouped_expert_s if g.grouped else 0.0
    return max(compute, traffic / rates.local_bandwidth_Bps) + fixed


def expert_product_time(
    g: Gemm, sr: ServeRates, *, rows: float, touched: float, weight_bytes: float
) -> float:
    """One projection of a layer's routed experts on one device: ``rows`` token-expert rows
    spread over the ``touched`` local experts (:func:`experts_touched`), each reading its
    ``k x n`` weight; FLOPs ``2 rows n k`` at the efficiency of ``rows / touched``-row
    products (and the grouped GEMM's loss and fixed cost per expert)."""
    if rows <= 0 or touched <= 0:
        return 0.0
    rates = sr.rates
    per = max(1, math.ceil(rows / touched))
    shaped = dataclasses.replace(g, m=per, count=1)
    flops = 2.0 * rows * g.n * g.k
    compute = flops / (rates.peak_for(g)[0] * gemm_efficiency(shaped, rates))
    traffic = rows * (g.k + g.n) * sr.act_bytes + touched * g.k * g.n * weight_bytes
    fixed = touched * rates.grouped_expert_s if g.grouped else 0.0
    return max(compute, traffic / rates.local_bandwidth_Bps) + fixed


def experts_touched(op: MoELayer, *, tokens: int) -> float:
    """Local experts of ``op`` that ``tokens`` tokens route to (module docstring)."""
    local = op.experts / op.ep
    if tokens <= 0:
        return 0.0
    untouched = (1.0 - op.top_k / op.experts) ** tokens
    return local * (1.0 - untouched)


def decode_attention_time(
    op: TransformerLayer, sr: ServeRates, *, sequences: float, context: float, tp: int
) -> float:
    """One decode step's attention of ``sequences`` sequences whose caches hold ``context``
    tokens, on one tensor-parallel rank (module docstring)."""
    if sequences <= 0:
        return 0.0
    heads = op.heads / tp
    tokens = sequences * context
    nbytes = tokens * kv_bytes_per_token_layer(op, kv_bytes=sr.kv_bytes, tp=tp)
    if is_mla(op):
        assert isinstance(op, MoELayer)
        flops = 2.0 * tokens * heads * (2 * op.kv_lora_rank + op.qk_rope_head_dim)
    else:
        flops = 4.0 * tokens * heads * op.head_dim
    return attention_time(flops, nbytes, sr.rates, exponentials=tokens * heads)


def prefill_attention_time(
    op: TransformerLayer, sr: ServeRates, *, prompt: int, chunk: int, tp: int
) -> float:
    """Causal attention of one prompt of ``prompt`` tokens on one rank, run in chunks of
    ``chunk`` tokens (0: one chunk), with the chunks' re-reads of the cache."""
    if prompt <= 0:
        return 0.0
    shaped = dataclasses.replace(op, seq_len=prompt, cp=1)
    fused = shaped.fused_attention(batch=1, tp=tp, act_bytes=sr.act_bytes)
    assert fused is not None
    t = attention_time(
        fused.forward_flops, fused.forward_bytes, sr.rates, exponentials=fused.score_elements
    )
    if 0 < chunk < prompt:
        n = math.ceil(prompt / chunk)
        reread = chunk * n * (n - 1) / 2.0
        t += (
            reread
            * kv_bytes_per_token_layer(op, kv_bytes=sr.kv_bytes, tp=tp)
            / (sr.rates.local_bandwidth_Bps)
        )
    return t


def kv_write_bytes(op: TransformerLayer, sr: ServeRates, *, tokens: int, tp: int) -> float:
    """Bytes one rank writes into its cache for ``tokens`` new tokens."""
    return tokens * kv_bytes_per_token_layer(op, kv_bytes=sr.kv_bytes, tp=tp)
