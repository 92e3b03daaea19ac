"""Compute time of operators: shape-dependent achievable efficiency plus a roofline.

A matrix multiply ``C[m, n] = A[m, k] B[k, n]`` runs at

    eff(m, n, k) = matmul_efficiency * s(m) * s(n) * s(k),   s(d) = d / (d + matmul_half_dim)

of the device's peak for its precision (times ``grouped_gemm_efficiency`` for the many small
products of a mixture-of-experts grouped GEMM): ``matmul_efficiency`` is the fraction of peak that
large, well-shaped products reach (tile quantisation, pipeline fill, clock throttling under
sustained load), and ``s(d)`` is the loss of a small dimension, which halves throughput when
``d = matmul_half_dim``. Each product also takes at least the time to read its operands and
write its result at the memory bandwidth that feeds it (roofline; Williams et al. 2009):

    t = max(flops / (peak * eff), (m k + k n + m n) * bytes / bandwidth).

Operators that are not matrix multiplies (norms, softmax, dropout, activations, residual adds,
pooling) are memory-bound and take ``bytes / bandwidth``. The bandwidth is HBM on a GPU and
the core's SRAM on a mesh; weights that do not fit on chip stream from DRAM, which
:mod:`palm.plan` prices as a DRAM flow running alongside each pass.
Constants and their origin: ``docs/model.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from palm.hardware.spec import GpuClusterHardware, Hardware
from palm.units import bytes_per_element
from palm.workload.ops import Gemm, Op, RecomputeMode

__all__ = ["DeviceRates", "device_rates", "gemm_efficiency", "gemm_time", "OpTimes", "op_times"]


@dataclass(frozen=True)
class DeviceRates:
    """What one device can do, for one precision."""

    peak_flops: float
    matmul_efficiency: float
    matmul_half_dim: float
    local_bandwidth_Bps: float
    dram_bandwidth_Bps: float
    sram_bytes: float
    elem_bytes: int
    grouped_gemm_efficiency: float = 1.0


def device_rates(hw: Hardware, precision: str) -> DeviceRates:
    elem = bytes_per_element(precision)
    if isinstance(hw, GpuClusterHardware):
        hbm = hw.hbm_bandwidth_gbps * 1e9 * hw.memory_efficiency
        return DeviceRates(
            peak_flops=hw.peak_tflops.get(precision) * 1e12,
            matmul_efficiency=hw.matmul_efficiency,
            matmul_half_dim=hw.matmul_half_dim,
            local_bandwidth_Bps=hbm,
            dram_bandwidth_Bps=hbm,
            sram_bytes=float("inf"),
            elem_bytes=elem,
            grouped_gemm_efficiency=hw.grouped_gemm_efficiency,
        )
    return DeviceRates(
        peak_flops=hw.core_peak_tflops.get(precision) * 1e12,
        matmul_efficiency=hw.matmul_efficiency,
        matmul_half_dim=hw.matmul_half_dim,
        local_bandwidth_Bps=hw.sram_bandwidth_per_core_gbps * 1e9 * hw.memory_efficiency,
        dram_bandwidth_Bps=hw.dram_bandwidth_gbps * 1e9 * hw.memory_efficiency / hw.device_count,
        sram_bytes=hw.sram_per_core_mib * 2**20,
        elem_bytes=elem,
    )


def gemm_efficiency(g: Gemm, rates: DeviceRates) -> float:
    """Achievable fraction of peak for the shape of ``g``."""
    h = rates.matmul_half_dim
    sat = (g.m / (g.m + h)) * (g.n / (g.n + h)) * (g.k / (g.k + h))
    grouped = rates.grouped_gemm_efficiency if g.grouped else 1.0
    return rates.matmul_efficiency * sat * grouped


def gemm_time(g: Gemm, rates: DeviceRates) -> float:
    """Roofline time of ``g``: compute at its achievable efficiency, or operand traffic."""
    if g.flops <= 0:
        return 0.0
    compute = g.flops / (rates.peak_flops * gemm_efficiency(g, rates))
    traffic = g.operand_elements() * rates.elem_bytes / rates.local_bandwidth_Bps
    return max(compute, traffic)


def _backward_gemms(g: Gemm) -> tuple[Gemm, Gemm]:
    """Input gradient ``dA = dC B^T`` (m x k, inner n) and weight gradient ``dB = A^T dC``
    (k x n, inner m): each as many FLOPs as the forward product, with other shapes."""
    return (Gemm(g.m, g.k, g.n, g.count, g.grouped), Gemm(g.k, g.n, g.m, g.count, g.grouped))


@dataclass(frozen=True)
class OpTimes:
    """Per-micro-batch times and matrix FLOPs of one operator on one device."""

    forward_s: float
    backward_s: float
    recompute_s: float
    forward_flops: float
    backward_flops: float
    recompute_flops: float


def op_times(
    op: Op,
    *,
    batch: int,
    tp: int,
    sp: bool,
    recompute: RecomputeMode,
    rates: DeviceRates,
    training: bool,
) -> OpTimes:
    """Forward, backward and recompute time of ``op`` for one micro-batch, with operands in
    the device's local memory (weights streamed from DRAM are priced by the plan)."""
    p = rates.elem_bytes
    fwd_gemms = op.forward_gemms(batch=batch, tp=tp)
    vec = op.forward_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=p)
    fwd = sum(gemm_time(g, rates) for g in fwd_gemms) + vec / rates.local_bandwidth_Bps
    fwd_flops = sum(g.flops for g in fwd_gemms)
    if not training:
        return OpTimes(fwd, 0.0, 0.0, fwd_flops, 0.0, 0.0)
    bwd = sum(gemm_time(b, rates) for g in fwd_gemms for b in _backward_gemms(g))
    bwd += 2 * vec / rates.local_bandwidth_Bps
    re_gemms = op.recompute_gemms(batch=batch, tp=tp, recompute=recompute)
    re_vec = op.recompute_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=p, recompute=recompute)
    re = sum(gemm_time(g, rates) for g in re_gemms) + re_vec / rates.local_bandwidth_Bps
    re_flops = sum(g.flops for g in re_gemms)
    return OpTimes(fwd, bwd, re, fwd_flops, 2 * fwd_flops, re_flops)
