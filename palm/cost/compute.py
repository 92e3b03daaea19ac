"""Compute time of operators: shape-dependent achievable efficiency plus a roofline.

A matrix multiply ``C[m, n] = A[m, k] B[k, n]`` runs at

    eff(m, n, k) = matmul_efficiency * s(m) * s(n) * s(k),   s(d) = d / (d + matmul_half_dim)

of the device's peak for its precision (times ``grouped_gemm_efficiency`` for the many small
products of a mixture-of-experts grouped GEMM, which also pays ``grouped_gemm_expert_us`` per
local expert and pass: Transformer Engine's ``GroupedLinear`` runs one GEMM kernel per local
expert, spread over several streams, Megatron-Core ``--moe-grouped-gemm``, each with its own
launch, prologue and tail): ``matmul_efficiency`` is the fraction of peak that
large, well-shaped products reach (tile quantisation, pipeline fill, clock throttling under
sustained load), and ``s(d)`` is the loss of a small dimension, which halves throughput when
``d = matmul_half_dim``. Each product also takes at least the time to read its operands and
write its result at the memory bandwidth that feeds it (roofline; Williams et al. 2009):

    t = max(flops / (peak * eff), (m k + k n + m n) * bytes / bandwidth).

Operators that are not matrix multiplies (norms, softmax, dropout, activations, residual adds,
pooling) are memory-bound and take ``bytes / bandwidth``.

FlashAttention (:class:`~palm.workload.ops.FusedAttention`) is one kernel with its own
achievable fraction of the 16-bit peak, ``attention_efficiency`` (the kernel is tuned as a
whole, so no shape factor): ``t = max(flops / (peak_bf16 * attention_efficiency),
bytes / bandwidth)`` where its tensor cores bind (below). Published kernel throughput:
FlashAttention-2 reaches 50-73% of the A100's peak forward and about 60% forward + backward
(Dao 2023, Fig. 4-6); on H100 FlashAttention-3 reaches 75% forward in BF16 (Shah et al. 2024,
sec. 4.1), while FlashAttention-2 there reaches 35-40%.

Each element of the score matrix also needs one exponential, forward (the softmax) and again
backward (``P = exp(S - LSE)`` recomputed), on the special-function units (``MUFU.EX2``, 16
per clock per SM on sm_80 / sm_90 / sm_100, CUDA C++ Programming Guide, "Arithmetic
Instructions"), whose rate grows far slower than the tensor cores': H100 has 989 TFLOP/s of
16-bit matrix throughput but 3.9 T special-function results per second (Shah et al. 2024,
"FlashAttention-3", sec. 3.1), B200 2250 against 5 T, and Blackwell Ultra doubles the
exponential rate to 10.7 T (NVIDIA, "Inside NVIDIA Blackwell Ultra", 2025). Forward, a score
costs ``4 d`` tensor FLOPs (``Q K^T`` and ``P V``, head dimension ``d``) and one exponential,
so where ``4 d < peak / exp rate`` (``d`` below 112.5 on B200, 63.4 on H100, 52.6 on B300,
32 on A100) the kernel is bound by its exponentials; backward it costs ``10 d`` FLOPs and
one exponential. FlashAttention-3 and -4 overlap the softmax of one tile with the products
of another (ping-pong scheduling, warp specialisation; Shah et al. 2024 sec. 3.1-3.2;
Zadouri et al. 2026, "FlashAttention-4"), so the kernel runs at the pace of the busier
unit and reaches ``attention_efficiency`` of that unit's rate (the pipeline's bubbles,
synchronisation and memory stalls idle both units alike):

    t = max(max(flops / peak_bf16, exponentials / exp_rate) / attention_efficiency,
            bytes / bandwidth).

Under context parallelism the attention runs as one call per ring step, and the partial
outputs and gradients of the steps are merged by memory-bound kernels outside those calls
(:func:`~palm.workload.ops.cp_merge_bytes`), which take ``merge bytes / bandwidth`` after
the kernels; the K/V exchange overlaps the kernels only (:func:`palm.cost.overlap.cp_exposed_s`).

FP8 training as Transformer Engine runs it: products flagged ``fp8`` (the linear layers) run
at the FP8 peak with their own ``fp8_matmul_efficiency``; the others (attention, logits) at
the BF16 peak. Each FP8 product casts its 16-bit input to FP8 with a per-tensor scale
(current or delayed scaling: an amax reduction fused into the cast), reading 2 B and
writing 1 B per element: the activation input in the forward pass and the output gradient
in the backward pass (weights are cast once per iteration and cached across micro-batches,
TE ``is_first_microbatch``). The bandwidth is HBM on a GPU and
the core's SRAM on a mesh; weights that do not fit on chip stream from DRAM, which
:mod:`palm.plan` prices as a DRAM flow running alongside each pass.
Constants and their origin: ``docs/model.md``.

On a GPU whose architecture has kernel constants (``sm_count`` and ``kernel_arch`` of the
preset, :mod:`palm.cost.kernels`), training replaces the shape rule ``s(m) s(n) s(k)`` and the
single ``attention_efficiency`` by the kernel models of :mod:`palm.cost.gpu_gemm` (tiles, waves,
fill, operand feed, roofline; :func:`_shaped_gemm_time`) and :mod:`palm.cost.gpu_attention`
(:func:`fused_attention_time`), fitted on published kernel measurements only; the end-to-end
constants then stand for the fraction of a kernel's benchmark speed a training step sustains
(docs/model.md, section 2b). Inference (:mod:`palm.serving`) keeps the rule above.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from palm.cost.gpu_attention import AttentionKernelConstants, AttentionShape
from palm.cost.gpu_attention import attention_kernel_time as _attention_kernel_time
from palm.cost.gpu_gemm import GemmDevice, GemmKernelConstants, grouped_gemm_kernel_time
from palm.cost.kernels import kernel_fit
from palm.hardware.spec import GpuClusterHardware, Hardware
from palm.units import bytes_per_element
from palm.workload.ops import FusedAttention, Gemm, Op, RecomputeMode

__all__ = [
    "DeviceRates",
    "device_rates",
    "gemm_efficiency",
    "gemm_time",
    "attention_time",
    "linear_gemm_time",
    "fused_attention_time",
    "OpTimes",
    "op_times",
]


@dataclass(frozen=True)
class DeviceRates:
    """What one device can do, for one precision."""

    peak_flops: float
    matmul_efficiency: float
    matmul_half_dim: float
    local_bandwidth_Bps: float
    dram_bandwidth_Bps: float
    sram_bytes: float
    elem_bytes: float
    grouped_gemm_efficiency: float = 1.0
    grouped_expert_s: float = 0.0
    wide_peak_flops: float = 0.0
    wide_matmul_efficiency: float = 0.0
    attention_efficiency: float = 0.0
    #: exponentials per second of the special-function units (0: not modelled)
    exp_per_s: float = 0.0
    fp8_casts: bool = False
    #: the kernel models' inputs (:mod:`palm.cost.kernels`; training on a GPU whose
    #: architecture has kernel constants): SMs, architecture, the GEMM constants, the fused
    #: attention kernel in use and every (kernel, pass) with constants
    sm_count: int = 0
    kernel_arch: str = ""
    gemm_kernel: GemmKernelConstants | None = None
    attention_kernel: str = ""
    attention_kernels: tuple[tuple[tuple[str, str], AttentionKernelConstants], ...] = ()

    def attention_constants(
        self, direction: str, *, kernel: str = ""
    ) -> AttentionKernelConstants | None:
        """The constants of ``kernel`` (default: the one in use) for ``direction``."""
        for key, c in self.attention_kernels:
            if key == (kernel or self.attention_kernel, direction):
                return c
        return None

    def peak_for(self, g: Gemm) -> tuple[float, float]:
        """Peak FLOP/s and large-product efficiency for ``g``: products that stay in 16 bits
        under FP8 training use the 16-bit figures."""
        if not g.fp8 and self.wide_peak_flops > 0:
            return self.wide_peak_flops, self.wide_matmul_efficiency or self.matmul_efficiency
        return self.peak_flops, self.matmul_efficiency


def device_rates(hw: Hardware, precision: str, *, training: bool = False) -> DeviceRates:
    """Rates of one device. FP8 training on a GPU is Transformer Engine's mixed FP8: 16-bit
    activations (2 B), FP8 linear products, BF16 for the rest (module docstring)."""
    elem = bytes_per_element(precision)
    if isinstance(hw, GpuClusterHardware):
        hbm = hw.hbm_bandwidth_gbps * 1e9 * hw.memory_efficiency
        mixed_fp8 = training and precision == "fp8"
        wide = hw.peak_tflops.get("bf16") * 1e12 if precision in ("fp8", "int8") else 0.0
        rates = DeviceRates(
            peak_flops=hw.peak_tflops.get(precision) * 1e12,
            matmul_efficiency=(
                hw.fp8_matmul_efficiency if precision == "fp8" else hw.matmul_efficiency
            ),
            matmul_half_dim=hw.matmul_half_dim,
            local_bandwidth_Bps=hbm,
            dram_bandwidth_Bps=hbm,
            sram_bytes=float("inf"),
            elem_bytes=2 if mixed_fp8 else elem,
            grouped_gemm_efficiency=hw.grouped_gemm_efficiency,
            grouped_expert_s=hw.grouped_gemm_expert_us * 1e-6,
            wide_peak_flops=wide,
            wide_matmul_efficiency=hw.matmul_efficiency if wide else 0.0,
            attention_efficiency=hw.attention_efficiency,
            exp_per_s=hw.sfu_exp_tera_per_s * 1e12,
            fp8_casts=mixed_fp8,
        )
        return _with_kernels(rates, hw) if training else rates
    return DeviceRates(
        peak_flops=hw.peak_flops(precision),
        matmul_efficiency=hw.matmul_efficiency,
        matmul_half_dim=hw.matmul_half_dim,
        local_bandwidth_Bps=hw.sram_bandwidth_per_core_gbps * 1e9 * hw.memory_efficiency,
        dram_bandwidth_Bps=hw.dram_bandwidth_gbps * 1e9 * hw.memory_efficiency / hw.device_count,
        sram_bytes=hw.sram_per_core_mib * 2**20,
        elem_bytes=elem,
    )


def _with_kernels(rates: DeviceRates, hw: GpuClusterHardware) -> DeviceRates:
    """``rates`` with the kernel models' inputs of ``hw`` (unchanged without SMs or a kernel
    fit for its architecture)."""
    fit = kernel_fit(hw.kernel_arch) if hw.sm_count > 0 else None
    if fit is None:
        return rates
    return replace(
        rates,
        sm_count=hw.sm_count,
        kernel_arch=hw.kernel_arch,
        gemm_kernel=fit.gemm,
        attention_kernel="flash2",
        attention_kernels=tuple(sorted(fit.attention.items())),
    )


def gemm_efficiency(g: Gemm, rates: DeviceRates) -> float:
    """Achievable fraction of peak for the shape of ``g``."""
    h = rates.matmul_half_dim
    sat = (g.m / (g.m + h)) * (g.n / (g.n + h)) * (g.k / (g.k + h))
    grouped = rates.grouped_gemm_efficiency if g.grouped else 1.0
    return rates.peak_for(g)[1] * sat * grouped


def gemm_time(g: Gemm, rates: DeviceRates) -> float:
    """Roofline time of ``g``: compute at its achievable efficiency, or operand traffic; a
    grouped GEMM adds ``count x grouped_expert_s`` (one kernel per local expert)."""
    if g.flops <= 0:
        return 0.0
    if rates.gemm_kernel is not None and rates.sm_count > 0:
        return _shaped_gemm_time(g, rates)
    compute = g.flops / (rates.peak_for(g)[0] * gemm_efficiency(g, rates))
    traffic = g.operand_elements() * rates.elem_bytes / rates.local_bandwidth_Bps
    fixed = g.count * rates.grouped_expert_s if g.grouped else 0.0
    return max(compute, traffic) + fixed


def _shaped_gemm_time(g: Gemm, rates: DeviceRates) -> float:
    """``g`` priced by the kernel model (:mod:`palm.cost.gpu_gemm`: tiles, waves, fill,
    operand feed, roofline; the batch or experts of ``g`` tiled one by one) with the
    end-to-end sustained efficiency (``matmul_efficiency``, ``fp8_matmul_efficiency``, times
    ``grouped_gemm_efficiency`` for a grouped GEMM) in place of the kernel benchmarks' own:
    what a training step sustains is fitted end to end, how the shape loses to it is not."""
    assert rates.gemm_kernel is not None
    peak, eff = rates.peak_for(g)
    if g.grouped:
        eff *= rates.grouped_gemm_efficiency
    c = replace(rates.gemm_kernel, efficiency=eff, hbm_fraction=1.0)
    device = GemmDevice(rates.kernel_arch, rates.sm_count, peak, rates.local_bandwidth_Bps)
    in_bytes = 1.0 if (g.fp8 and rates.fp8_casts) else rates.elem_bytes
    t = grouped_gemm_kernel_time(
        rows=(g.m,) * g.count, n=g.n, k=g.k, device=device, constants=c, in_bytes=in_bytes,
        out_bytes=rates.elem_bytes,
    )  # fmt: skip
    return t + (g.count * rates.grouped_expert_s if g.grouped else 0.0)


def fused_attention_time(fused: FusedAttention, rates: DeviceRates, *, direction: str
                         ) -> float | None:  # fmt: skip
    """The kernel model's time of ``fused``'s ``direction`` pass (forward: the kernel;
    backward: the kernel with its recompute of ``Q K^T``) on this device, or ``None`` where
    the device has no constants for the kernel in use or the call has no shape.

    The kernel's shape terms (work units, waves, fill, unhidden exponentials) and its speed
    relative to FlashAttention-2 come from the kernel fit; its sustained fraction in training
    is the end-to-end ``attention_efficiency``, which takes the place of FlashAttention-2's
    benchmark efficiency: every kernel's benchmark efficiency is scaled by
    ``attention_efficiency / eta_flash2`` of the same pass (docs/model.md, "Kernel costs from
    shapes")."""
    c = rates.attention_constants(direction)
    ref = rates.attention_constants(direction, kernel="flash2")
    if c is None or ref is None or fused.seq_len <= 0 or fused.batch_heads <= 0:
        return None
    sustained = rates.attention_efficiency or ref.efficiency
    c = replace(c, efficiency=min(1.0, c.efficiency * sustained / ref.efficiency))
    shape = AttentionShape(
        batch=1,
        seq_len=fused.seq_len,
        heads=max(1, round(fused.batch_heads)),
        head_dim=fused.head_dim,
        causal=fused.causal,
        direction=direction,
        kv_len=fused.kv_len,
    )
    return _attention_kernel_time(
        shape,
        sm_count=rates.sm_count,
        peak_flops=rates.wide_peak_flops or rates.peak_flops,
        exp_per_s=rates.exp_per_s,
        hbm_Bps=rates.local_bandwidth_Bps,
        constants=c,
    )


def _fp8_cast_bytes(gemms: tuple[Gemm, ...], rates: DeviceRates, *, backward: bool) -> float:
    """Bytes of the per-tensor FP8 casts (read 2 B, write 1 B per element) of the FP8
    products: their ``A`` input forward, their output gradient backward."""
    if not rates.fp8_casts:
        return 0.0
    return sum(3.0 * g.m * (g.n if backward else g.k) * g.count for g in gemms if g.fp8)


def linear_gemm_time(op: Op, *, batch: int, tp: int, rates: DeviceRates) -> float:
    """Forward time of ``op``'s linear-layer products (those that may run in FP8): what a
    tensor-parallel collective pipelined with them can hide behind."""
    return sum(gemm_time(g, rates) for g in op.forward_gemms(batch=batch, tp=tp) if g.fp8)


def attention_time(
    flops: float, nbytes: float, rates: DeviceRates, *, exponentials: float = 0.0
) -> float:
    """Time of a fused attention kernel: its tensor-core work at the 16-bit peak or its
    ``exponentials`` on the special-function units at their rate, whichever binds, at the
    kernel's efficiency, or its HBM traffic (module docstring)."""
    if flops <= 0:
        return 0.0
    peak = rates.wide_peak_flops or rates.peak_flops
    eff = rates.attention_efficiency or rates.matmul_efficiency
    tensor = flops / peak
    sfu = exponentials / rates.exp_per_s if rates.exp_per_s > 0 else 0.0
    return max(max(tensor, sfu) / eff, nbytes / rates.local_bandwidth_Bps)


def _backward_gemms(g: Gemm) -> tuple[Gemm, Gemm]:
    """Input gradient ``dA = dC B^T`` (m x k, inner n) and weight gradient ``dB = A^T dC``
    (k x n, inner m): each as many FLOPs as the forward product, with other shapes."""
    return (replace(g, n=g.k, k=g.n), replace(g, m=g.k, n=g.n, k=g.m))


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
    early_stop: bool = False,
) -> OpTimes:
    """Forward, backward and recompute time of ``op`` for one micro-batch, with operands in
    the device's local memory (weights streamed from DRAM are priced by the plan).
    ``early_stop``: full recompute as PyTorch's non-reentrant checkpoint runs it, stopping
    once the backward pass has every tensor it needs
    (:meth:`~palm.workload.ops.Op.early_stop_recompute_gemms`)."""
    p = rates.elem_bytes
    bw = rates.local_bandwidth_Bps
    fwd_gemms = op.forward_gemms(batch=batch, tp=tp)
    fused = op.fused_attention(batch=batch, tp=tp, act_bytes=p)
    vec = op.forward_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=p)
    casts = _fp8_cast_bytes(fwd_gemms, rates, backward=False)
    fwd = sum(gemm_time(g, rates) for g in fwd_gemms) + (vec + casts) / bw
    fwd_flops = sum(g.flops for g in fwd_gemms)
    att_fwd = 0.0
    if fused is not None:
        # the kernel, then (context parallelism) the merge of its per-step partial outputs
        shaped = fused_attention_time(fused, rates, direction="forward")
        att_fwd = (
            shaped
            if shaped is not None
            else attention_time(
                fused.forward_flops, fused.forward_bytes, rates, exponentials=fused.score_elements
            )
        )
        att_fwd += fused.forward_merge_bytes / bw
        fwd += att_fwd
        fwd_flops += fused.forward_flops
    if not training:
        return OpTimes(fwd, 0.0, 0.0, fwd_flops, 0.0, 0.0)
    bwd = sum(gemm_time(b, rates) for g in fwd_gemms for b in _backward_gemms(g))
    bwd_vec = op.backward_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=p)
    bwd += (bwd_vec + _fp8_cast_bytes(fwd_gemms, rates, backward=True)) / bw
    if early_stop and recompute == "full":
        re_gemms = op.early_stop_recompute_gemms(batch=batch, tp=tp)
    else:
        re_gemms = op.recompute_gemms(batch=batch, tp=tp, recompute=recompute)
    re_vec = op.recompute_vector_bytes(batch=batch, tp=tp, sp=sp, act_bytes=p, recompute=recompute)
    re = sum(gemm_time(g, rates) for g in re_gemms) + re_vec / bw
    re_flops = sum(g.flops for g in re_gemms)
    if re_gemms:
        re += _fp8_cast_bytes(re_gemms, rates, backward=False) / bw
    bwd_flops = 2 * (fwd_flops - (fused.forward_flops if fused else 0.0))
    if fused is not None:
        # backward kernel: dQ, dK, dV plus the recompute of Q K^T (2.5 x forward FLOPs)
        shaped = fused_attention_time(fused, rates, direction="backward")
        bwd += (
            shaped
            if shaped is not None
            else attention_time(
                fused.backward_flops + fused.recompute_flops,
                fused.backward_bytes,
                rates,
                exponentials=fused.score_elements,  # P = exp(S - LSE) recomputed
            )
        )
        bwd += fused.backward_merge_bytes / bw
        bwd_flops += fused.backward_flops
        re_flops += fused.recompute_flops
        if recompute == "full":
            re += att_fwd
            re_flops += fused.forward_flops
    return OpTimes(fwd, bwd, re, fwd_flops, bwd_flops, re_flops)
