"""The kernel models in the GPU training path (palm/cost/compute.py): an H100 prices its
fused attention and GEMMs from their shapes, an A100 (no kernel fit) keeps the rule of
section 2; cuDNN's kernel is faster than FlashAttention-2's for the same call; Transformer
Engine stacks default to cuDNN on Hopper only."""

from __future__ import annotations

import dataclasses

import pytest

from palm.config import parse_config
from palm.cost.compute import device_rates, fused_attention_time, gemm_time
from palm.hardware.presets import hardware_preset
from palm.workload.ops import FusedAttention, Gemm


def _fused(seq: int = 4096, d: int = 128, heads: float = 64.0) -> FusedAttention:
    flops = 4.0 * seq * seq * d * heads / 2
    return FusedAttention(
        forward_flops=flops, forward_bytes=0.0, backward_bytes=0.0,
        seq_len=seq, kv_len=seq, head_dim=d, batch_heads=heads, causal=True,
    )  # fmt: skip


def test_h100_training_has_kernel_inputs_a100_has_none() -> None:
    h100 = device_rates(hardware_preset("dgx-h100"), "bf16", training=True)  # type: ignore[arg-type]
    a100 = device_rates(hardware_preset("dgx-a100"), "bf16", training=True)  # type: ignore[arg-type]
    serving = device_rates(hardware_preset("dgx-h100"), "bf16")  # type: ignore[arg-type]
    assert h100.sm_count == 132 and h100.gemm_kernel is not None and h100.attention_kernels
    assert a100.gemm_kernel is None and not a100.attention_kernels
    assert serving.gemm_kernel is None  # inference keeps its own kernels (palm/serving)
    assert fused_attention_time(_fused(), a100, direction="forward") is None


def test_cudnn_is_faster_than_flash2_and_both_bounded_by_peak() -> None:
    rates = device_rates(hardware_preset("dgx-h100"), "bf16", training=True)  # type: ignore[arg-type]
    fused = _fused()
    times = {}
    for kernel in ("flash2", "cudnn"):
        r = dataclasses.replace(rates, attention_kernel=kernel)
        t = fused_attention_time(fused, r, direction="forward")
        assert t is not None and t >= fused.forward_flops / rates.peak_flops
        times[kernel] = t
    assert times["cudnn"] < times["flash2"]


def test_gemm_never_faster_than_peak_and_monotone_in_hbm() -> None:
    rates = device_rates(hardware_preset("dgx-h100"), "bf16", training=True)  # type: ignore[arg-type]
    for g in (Gemm(8192, 8192, 8192), Gemm(64, 4096, 7168), Gemm(512, 2048, 7168, count=8,
                                                                  grouped=True)):  # fmt: skip
        t = gemm_time(g, rates)
        assert t >= g.flops / rates.peak_flops
        faster = dataclasses.replace(rates, local_bandwidth_Bps=rates.local_bandwidth_Bps * 2)
        assert gemm_time(g, faster) <= t


@pytest.mark.parametrize(("preset", "kernel"), [("dgx-h100", "cudnn"), ("dgx-a100", "auto")])
def test_transformer_engine_stacks_prefer_cudnn_on_hopper(preset: str, kernel: str) -> None:
    cfg = parse_config(
        {
            "software": {"framework": "nemo"},
            "model": {"preset": "llama2-7b"},
            "hardware": {"preset": preset, "gpus": 8},
            "training": {"global_batch": 128, "micro_batch": 1},
            "parallelism": {"tp": 1, "dp": 8},
        }
    )
    assert cfg.model.attention_kernel == kernel
