"""The fused-attention kernel model (palm/cost/gpu_attention.py): work units and waves by
hand, bounds, monotonicity, and the fitted constants reproducing published points."""

from __future__ import annotations

import dataclasses

import pytest

from palm.cost.gpu_attention import (
    AttentionKernelConstants,
    AttentionShape,
    attention_flops,
    attention_kernel_time,
)
from palm.cost.kernels import kernel_fit
from palm.hardware.presets import hardware_preset
from palm.validation_kernels import load_kernel_rows, predict_time

IDEAL = AttentionKernelConstants(efficiency=1.0, exposed_exp=0.0, fill_keys=0.0)


def h100(shape: AttentionShape, c: AttentionKernelConstants, *, peak: float = 989e12,
         exp: float = 3.9e12, hbm: float = 3350e9) -> float:  # fmt: skip
    """Seconds on an H100 SXM5 (132 SMs) with these rates."""
    return attention_kernel_time(
        shape, sm_count=132, peak_flops=peak, exp_per_s=exp, hbm_Bps=hbm, constants=c
    )


def test_units_and_waves_by_hand() -> None:
    # 33 heads x 16 query blocks of 128 rows (s = 2048) = 528 units = 4 waves of 132 SMs,
    # each unit 2048 keys x 128 rows x 4 d FLOPs at a 132nd of the peak
    four = AttentionShape(batch=1, seq_len=2048, heads=33, head_dim=128, causal=False)
    per_unit = 2048 * 128 * 4 * 128 / (989e12 / 132)
    assert h100(four, IDEAL) == pytest.approx(4 * per_unit)
    # one head more: 544 units, a fifth wave for 3% more work
    five = dataclasses.replace(four, heads=34)
    assert h100(five, IDEAL) == pytest.approx(5 * per_unit)


def test_causal_visits_half_the_keys_plus_the_diagonal() -> None:
    full = AttentionShape(batch=1, seq_len=4096, heads=4, head_dim=128, causal=False)
    causal = dataclasses.replace(full, causal=True)
    ratio = h100(causal, IDEAL) / h100(full, IDEAL)
    assert ratio == pytest.approx((32 + 1) / 2 / 32)  # 32 blocks: (B + 1) / 2 of B


@pytest.mark.parametrize("seq", [512, 2048, 16384])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_never_faster_than_peak(seq: int, d: int, causal: bool, direction: str) -> None:
    shape = AttentionShape(batch=16384 // seq, seq_len=seq, heads=2048 // d, head_dim=d,
                           causal=causal, direction=direction)  # fmt: skip
    for c in (IDEAL, AttentionKernelConstants(0.7, 0.5, 200.0)):
        t = h100(shape, c)
        assert t >= attention_flops(shape) / 989e12


@pytest.mark.parametrize("field", ["peak", "exp", "hbm"])
def test_monotone_in_rates(field: str) -> None:
    shape = AttentionShape(batch=4, seq_len=4096, heads=16, head_dim=64, causal=True)
    c = AttentionKernelConstants(0.7, 0.5, 200.0)
    base = {"peak": 989e12, "exp": 3.9e12, "hbm": 3350e9}
    times = [h100(shape, c, **{**base, field: base[field] * s}) for s in (0.5, 1.0, 2.0)]
    assert times == sorted(times, reverse=True)


def test_fitted_constants_reproduce_published_points() -> None:
    """FlashAttention-3 forward, head dim 128, 16k tokens without mask: 648 TFLOP/s (Shah et
    al. 2024, sec. 4.1); FlashAttention-2 on H100, the same shape: 370. The stored fit
    reproduces each within its recorded in-sample maximum error."""
    fit = kernel_fit(hardware_preset("dgx-h100").kernel_arch)  # type: ignore[union-attr]
    assert fit is not None
    rows = {r.row_id: r for r in load_kernel_rows()}
    from palm.hardware.preset_data import fit_sets

    groups = fit_sets()["kernels-sm90"].record["groups"]
    for row_id, group in (
        ("flash3-h100-for-d128-full-s16384", "attention/flash3/forward"),
        ("flash2-h100-for-d128-full-s16384", "attention/flash2/forward"),
        ("cudnn-h100-bac-d128-full-s8192", "attention/cudnn/backward"),
    ):
        row = rows[row_id]
        t = predict_time(row, gemm=fit.gemm, attention=fit.attention)
        assert t is not None
        assert abs(t / row.measured_s - 1) <= groups[group]["in_sample"]["max"] + 1e-9
