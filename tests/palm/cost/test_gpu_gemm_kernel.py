"""The GEMM kernel model (palm/cost/gpu_gemm.py): tiles and waves worked by hand, the
roofline bounds, monotonicity in every rate, grouped GEMMs tiled per expert."""

from __future__ import annotations

import dataclasses

import pytest

from palm.cost import gpu_gemm
from palm.cost.gpu_gemm import (
    GemmDevice,
    GemmKernelConstants,
    gemm_kernel_time,
    grouped_gemm_kernel_time,
    waves,
)

A100 = GemmDevice(arch="sm80", sm_count=108, peak_flops=312e12, hbm_Bps=2039e9)
#: the A100's SMs and peak with unbounded memory: the tile and wave terms alone
A100_COMPUTE = dataclasses.replace(A100, hbm_Bps=1e30)
H100 = GemmDevice(arch="sm90", sm_count=132, peak_flops=1979e12, hbm_Bps=3350e9)
#: no fill, feed or launch: the compute term alone
PURE = GemmKernelConstants(
    efficiency=1.0, k_fill=0.0, launch_s=0.0, hbm_fraction=1.0, feed_Bps=1e30
)
FITTED = GemmKernelConstants(
    efficiency=0.71, k_fill=394.0, launch_s=0.5e-6, hbm_fraction=0.71, feed_Bps=12e12
)


def test_waves_by_hand() -> None:
    assert waves(108, 108) == 1
    assert waves(109, 108) == 2  # one tile more than SMs: a second, nearly empty wave
    assert waves(216, 108) == 2
    assert waves(0, 108) == 0


def test_109_tiles_on_108_sms_take_two_waves(monkeypatch: pytest.MonkeyPatch) -> None:
    # one 128x128 tile candidate: m = 128 x 109 rows, n = 128 gives 109 tiles
    monkeypatch.setitem(gpu_gemm.TILES, "sm80", ((128, 128),))
    k = 4096
    one_wave = 2 * 128 * 128 * k / (312e12 / 108)  # one tile per SM, seconds
    dev = A100_COMPUTE
    t108 = gemm_kernel_time(m=128 * 108, n=128, k=k, device=dev, constants=PURE, in_bytes=2)
    t109 = gemm_kernel_time(m=128 * 109, n=128, k=k, device=dev, constants=PURE, in_bytes=2)
    assert t108 == pytest.approx(one_wave)
    assert t109 == pytest.approx(2 * one_wave)


def test_tile_quantisation_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # m = 129 rows need two 128-row tiles, as many as m = 256
    monkeypatch.setitem(gpu_gemm.TILES, "sm80", ((128, 128),))

    def t(m: int) -> float:
        dev = A100_COMPUTE
        return gemm_kernel_time(m=m, n=128 * 54, k=1024, device=dev, constants=PURE, in_bytes=2)

    assert t(129) == t(256)


@pytest.mark.parametrize("shape", [(64, 2112, 7168), (4096, 7168, 16384), (1, 1, 1),
                                   (300, 5000, 77), (8192, 8192, 8192)])  # fmt: skip
@pytest.mark.parametrize("constants", [PURE, FITTED])
def test_never_faster_than_peak_or_hbm(shape: tuple[int, int, int],
                                       constants: GemmKernelConstants) -> None:  # fmt: skip
    m, n, k = shape
    t = gemm_kernel_time(m=m, n=n, k=k, device=H100, constants=constants, in_bytes=1)
    assert t >= 2 * m * n * k / H100.peak_flops
    assert t >= (m * k + k * n + m * n * 2) / H100.hbm_Bps


@pytest.mark.parametrize("field", ["peak_flops", "hbm_Bps"])
@pytest.mark.parametrize("shape", [(64, 2112, 7168), (4096, 7168, 16384), (128, 32768, 512)])
def test_monotone_in_device_rates(field: str, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    times = []
    for scale in (0.5, 1.0, 2.0, 4.0):
        dev = dataclasses.replace(H100, **{field: getattr(H100, field) * scale})
        times.append(gemm_kernel_time(m=m, n=n, k=k, device=dev, constants=FITTED, in_bytes=1))
    assert times == sorted(times, reverse=True)


def test_monotone_in_feed_and_efficiency() -> None:
    def t(c: GemmKernelConstants) -> float:
        return gemm_kernel_time(m=4096, n=4096, k=7168, device=H100, constants=c, in_bytes=1)

    feeds = [t(dataclasses.replace(FITTED, feed_Bps=f)) for f in (4e12, 8e12, 16e12, 32e12)]
    assert feeds == sorted(feeds, reverse=True)
    effs = [t(dataclasses.replace(FITTED, efficiency=e)) for e in (0.4, 0.6, 0.8, 1.0)]
    assert effs == sorted(effs, reverse=True)


def test_grouped_gemm_tiles_each_expert(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 experts of 65 tokens need 4 x 2 tiles of 64 rows; one GEMM of 260 rows needs 5
    monkeypatch.setitem(gpu_gemm.TILES, "sm90", ((64, 128),))
    dev = dataclasses.replace(H100, sm_count=1, hbm_Bps=1e30)  # one SM: time ~ tiles
    grouped = grouped_gemm_kernel_time(rows=(65,) * 4, n=128, k=1024, device=dev,
                                       constants=PURE, in_bytes=1)  # fmt: skip
    dense = gemm_kernel_time(m=260, n=128, k=1024, device=dev, constants=PURE, in_bytes=1)
    assert grouped / dense == pytest.approx(8 / 5)


def test_uneven_routing_costs_more_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(gpu_gemm.TILES, "sm90", ((128, 128),))
    dev = dataclasses.replace(H100, sm_count=1, hbm_Bps=1e30)
    even = grouped_gemm_kernel_time(rows=(128, 128), n=128, k=512, device=dev,
                                    constants=PURE, in_bytes=1)  # fmt: skip
    uneven = grouped_gemm_kernel_time(rows=(200, 56), n=128, k=512, device=dev,
                                      constants=PURE, in_bytes=1)  # fmt: skip
    assert uneven == pytest.approx(1.5 * even)  # 3 tiles instead of 2
