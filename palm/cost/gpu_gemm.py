"""Time of one GPU matrix-multiply kernel from its shape: tiles, waves over the SMs, a
per-tile pipeline fill, the operand feed of each tile, and the HBM roofline.

A GEMM kernel (cuBLAS, CUTLASS, DeepGEMM) splits ``C[m, n]`` into output tiles of
``block_m x block_n``; each tile runs on one SM, looping over ``k``. The tiles run in
*waves* of ``sm_count`` (NVIDIA, "Matrix Multiplication Background User's Guide", sec. 3.1
"Tile Quantization" and sec. 3.2 "Wave Quantization": a partial last tile or wave costs as
much as a full one). With ``T = ceil(m / block_m) * ceil(n / block_n)`` tiles, the kernel
takes ``W = ceil(T / sm_count)`` waves, and one tile takes

    t_tile = max(2 block_m block_n (k + k_fill) / (peak / sm_count * eta),
                 (block_m + block_n) k in_bytes / (feed / sm_count))

``eta`` is the fraction of the tensor-core peak a tile sustains in its main loop (issue
stalls, clock under load), ``k_fill`` the pipeline prologue and epilogue of a tile (loading the
first stages, writing the tile back) expressed as extra ``k``, and ``feed`` the aggregate
L2-to-SM operand bandwidth that streams each tile's ``A`` and ``B`` panels (a small tile
re-reads its operands more often per FLOP, which is why libraries prefer large tiles). A
kernel picks the tile shape of the architecture's candidates (:data:`TILES`) that runs
fastest, as cuBLAS's heuristics and DeepGEMM's ``get_best_configs`` do. The whole kernel is
never faster than reading its operands and writing its result from HBM (roofline; Williams
et al. 2009), and pays a fixed ``launch_s`` (launch, first-tile latency, tail):

    t = max(W * t_tile, bytes / (hbm * hbm_fraction)) + launch_s.

A grouped GEMM (one kernel over the experts of a mixture-of-experts layer, DeepGEMM's
contiguous and masked layouts, Transformer Engine's grouped linear) tiles each group's rows
separately, so each expert's token count is quantised to ``block_m``: ``T = sum_e
ceil(m_e / block_m) * ceil(n / block_n)``, and it reads every expert's weights.

Bounds: ``eta <= 1`` and ``W * sm_count >= T`` tiles that cover at least ``m n``, so the
time is never below ``2 m n k / peak``; the roofline term keeps it above ``bytes / hbm``. The
time falls (weakly) as the peak, the feed or the HBM bandwidth grows. The constants are
fitted per architecture on published kernel measurements only (``palm/data/kernels.json``,
``benchmarks/calibrate_kernels.py``); docs/model.md lists them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "TILES",
    "GemmDevice",
    "GemmKernelConstants",
    "gemm_kernel_time",
    "grouped_gemm_kernel_time",
    "waves",
]

#: candidate output tiles (block_m, block_n) per architecture. sm80: CUTLASS 2.x's
#: Ampere tensor-op GEMM tiles (128x256, 256x128, 128x128, 64x128, 128x64, 64x64; CUTLASS
#: ``default_gemm_configuration`` and the profiler's sm80 kernels). sm90: WGMMA tiles of one
#: or two consumer warpgroups, block_m 64 / 128 / 256 by block_n 64-256 (DeepGEMM
#: ``get_best_configs``; CUTLASS 3.x sm90 collective builders). sm100: UMMA tiles up to
#: 256x256 over a pair of SMs (CUTLASS 3.x sm100 builders), counted per SM as 128x256.
TILES: dict[str, tuple[tuple[int, int], ...]] = {
    "sm80": ((128, 256), (256, 128), (128, 128), (64, 128), (128, 64), (64, 64)),
    "sm90": (
        (64, 64),
        (64, 128),
        (64, 256),
        (128, 64),
        (128, 128),
        (128, 192),
        (128, 256),
        (256, 128),
    ),  # fmt: skip
    "sm100": ((128, 64), (128, 128), (128, 256), (256, 128), (256, 256)),
}


@dataclass(frozen=True)
class GemmKernelConstants:
    """The fitted constants of one architecture's GEMM kernels (module docstring)."""

    #: fraction of the tensor-core peak a tile sustains in its main loop
    efficiency: float
    #: a tile's pipeline prologue + epilogue, as extra elements of k
    k_fill: float
    #: fixed time of one kernel (launch, first-tile latency, tail), seconds
    launch_s: float
    #: achievable fraction of the HBM bandwidth
    hbm_fraction: float
    #: aggregate L2-to-SM operand feed, bytes per second
    feed_Bps: float


@dataclass(frozen=True)
class GemmDevice:
    """What one GPU offers a GEMM kernel: its SMs, tile candidates, peak for the product's
    precision and HBM bandwidth."""

    arch: str
    sm_count: int
    peak_flops: float
    hbm_Bps: float


def waves(tiles: int, sm_count: int) -> int:
    """Waves of ``tiles`` over ``sm_count`` SMs (a partial wave costs a full one)."""
    if tiles <= 0:
        return 0
    return -(-tiles // sm_count)


def _tile_time(bm: int, bn: int, k: int, dev: GemmDevice, c: GemmKernelConstants, b: float
               ) -> float:  # fmt: skip
    per_sm_peak = dev.peak_flops / dev.sm_count * c.efficiency
    compute = 2.0 * bm * bn * (k + c.k_fill) / per_sm_peak
    feed = (bm + bn) * k * b / (c.feed_Bps / dev.sm_count)
    return max(compute, feed)


def _best_tiled(
    rows: Sequence[int], n: int, k: int, dev: GemmDevice, c: GemmKernelConstants, b: float
) -> float:
    best = math.inf
    for bm, bn in TILES[dev.arch]:
        tiles = sum(-(-m // bm) for m in rows if m > 0) * -(-n // bn)
        best = min(best, waves(tiles, dev.sm_count) * _tile_time(bm, bn, k, dev, c, b))
    return best


def grouped_gemm_kernel_time(
    *,
    rows: Sequence[int],
    n: int,
    k: int,
    device: GemmDevice,
    constants: GemmKernelConstants,
    in_bytes: float,
    out_bytes: float = 2.0,
) -> float:
    """Seconds of one grouped GEMM: group ``e`` multiplies ``rows[e] x k`` by ``k x n``
    (each group its own weights), all groups in one kernel (module docstring)."""
    total = sum(r for r in rows if r > 0)
    if total <= 0 or n <= 0 or k <= 0:
        return 0.0
    groups = sum(1 for r in rows if r > 0)
    nbytes = (total * k + groups * k * n) * in_bytes + total * n * out_bytes
    memory = nbytes / (device.hbm_Bps * constants.hbm_fraction)
    compute = _best_tiled(rows, n, k, device, constants, in_bytes)
    return max(compute, memory) + constants.launch_s


def gemm_kernel_time(
    *,
    m: int,
    n: int,
    k: int,
    device: GemmDevice,
    constants: GemmKernelConstants,
    in_bytes: float,
    out_bytes: float = 2.0,
) -> float:
    """Seconds of one dense ``m x k`` by ``k x n`` GEMM kernel (module docstring)."""
    return grouped_gemm_kernel_time(
        rows=(m,),
        n=n,
        k=k,
        device=device,
        constants=constants,
        in_bytes=in_bytes,
        out_bytes=out_bytes,
    )
