"""The kernel constants of one GPU architecture, and the kernel times of one device.

The constants of :mod:`palm.cost.gpu_gemm` and :mod:`palm.cost.gpu_attention` are fitted on
published kernel measurements only (``palm/data/kernels.json``) by
``benchmarks/calibrate_kernels.py --write``, which writes ``palm/data/fitted/kernels-<arch>.toml``
(``<arch>`` is a preset's ``kernel_arch``: ``sm80``, ``sm90``, ``sm100``). An architecture
without such a file, or a preset without ``kernel_arch`` / ``sm_count``, has no kernel
constants (:func:`kernel_fit` returns ``None``) and the simulator prices its kernels with the
end-to-end constants of :mod:`palm.cost.compute` alone.

Keys of a fit set: ``gemm_efficiency``, ``gemm_k_fill``, ``gemm_launch_us``,
``gemm_hbm_fraction``, ``gemm_feed_tbps`` (:class:`~palm.cost.gpu_gemm.GemmKernelConstants`),
and per attention kernel ``<kernel>`` (``flash2``, ``flash3``, ``cudnn``) and pass
``<pass>`` (``forward``, ``backward``) ``attention_<kernel>_<pass>_efficiency``,
``..._exposed_exp`` and ``..._fill_keys``
(:class:`~palm.cost.gpu_attention.AttentionKernelConstants`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from palm.cost.gpu_attention import AttentionKernelConstants
from palm.cost.gpu_gemm import GemmKernelConstants

__all__ = [
    "ATTENTION_KERNELS",
    "KernelFit",
    "attention_constants_from",
    "gemm_constants_from",
    "kernel_fit",
]

#: the fused-attention kernels with constants of their own
ATTENTION_KERNELS = ("flash2", "flash3", "cudnn")
_DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class KernelFit:
    """One architecture's kernel constants."""

    arch: str
    gemm: GemmKernelConstants | None
    attention: Mapping[tuple[str, str], AttentionKernelConstants] = field(default_factory=dict)

    def attention_for(self, kernel: str, direction: str) -> AttentionKernelConstants | None:
        """Constants of ``kernel``'s ``direction`` pass, ``None`` if not fitted."""
        return self.attention.get((kernel, direction))


def gemm_constants_from(values: Mapping[str, float]) -> GemmKernelConstants | None:
    """The GEMM constants among ``values`` (keys in the module docstring), if all are there."""
    keys = ("gemm_efficiency", "gemm_k_fill", "gemm_launch_us", "gemm_hbm_fraction")
    if not all(k in values for k in (*keys, "gemm_feed_tbps")):
        return None
    return GemmKernelConstants(
        efficiency=values["gemm_efficiency"],
        k_fill=values["gemm_k_fill"],
        launch_s=values["gemm_launch_us"] * 1e-6,
        hbm_fraction=values["gemm_hbm_fraction"],
        feed_Bps=values["gemm_feed_tbps"] * 1e12,
    )


def attention_constants_from(
    values: Mapping[str, float],
) -> dict[tuple[str, str], AttentionKernelConstants]:
    """Every (kernel, pass) whose three attention constants are among ``values``."""
    out = {}
    for kernel in ATTENTION_KERNELS:
        for direction in _DIRECTIONS:
            p = f"attention_{kernel}_{direction}_"
            if all(p + k in values for k in ("efficiency", "exposed_exp", "fill_keys")):
                out[(kernel, direction)] = AttentionKernelConstants(
                    efficiency=values[p + "efficiency"],
                    exposed_exp=values[p + "exposed_exp"],
                    fill_keys=values[p + "fill_keys"],
                )
    return out


@cache
def kernel_fit(arch: str) -> KernelFit | None:
    """The stored kernel constants of ``arch`` (``None``: no fit set for it)."""
    if not arch:
        return None
    from palm.hardware.preset_data import fit_sets  # parsed once, on first use

    fit = fit_sets().get(f"kernels-{arch}")
    if fit is None:
        return None
    values = fit.constants
    return KernelFit(arch, gemm_constants_from(values), attention_constants_from(values))
