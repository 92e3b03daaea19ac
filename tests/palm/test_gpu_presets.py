"""GPU presets: datasheet figures as documented (dense = sparse / 2), and each one simulates."""

from __future__ import annotations

import pytest

import palm
from palm.config import parse_config
from palm.hardware.presets import hardware_preset
from palm.hardware.spec import GpuClusterHardware


@pytest.mark.parametrize(
    ("name", "system_sparse_pflops_fp8", "gpus", "hbm_gb"),
    [("dgx-b200", 72.0, 8, 180), ("gb200-nvl72", 720.0, 72, 186), ("dgx-h100", 8 * 3.958, 8, 80)],
)
def test_dense_peaks_are_half_the_sparse_datasheet_figure(
    name: str, system_sparse_pflops_fp8: float, gpus: int, hbm_gb: int
) -> None:
    hw = hardware_preset(name)
    assert isinstance(hw, GpuClusterHardware)
    assert hw.peak_tflops.fp8 == pytest.approx(system_sparse_pflops_fp8 * 1000 / gpus / 2, rel=1e-3)
    assert hw.peak_tflops.bf16 == pytest.approx(hw.peak_tflops.fp8 / 2, rel=1e-3)
    assert hw.device_memory_bytes == pytest.approx(hbm_gb * 1e9)


def test_nvl72_is_one_nvlink_domain() -> None:
    hw = hardware_preset("gb200-nvl72")
    assert isinstance(hw, GpuClusterHardware) and hw.gpus_per_node == 72
    assert hw.switch_bandwidth_gbps == 900.0  # 1.8 TB/s bidirectional per GPU


@pytest.mark.parametrize("name", ["dgx-h200", "dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72"])
def test_new_presets_simulate_a_llama(name: str) -> None:
    cfg = parse_config(
        {
            "model": {"preset": "llama2-7b"}
            if False
            else {
                "layers": 4,
                "hidden": 1024,
                "heads": 8,
                "ffn_hidden": 4096,
                "seq_len": 2048,
                "vocab": 32000,
                "family": "llama",
                "mlp": "swiglu",
            },
            "hardware": {"preset": name},
            "training": {"global_batch": 16, "micro_batch": 1, "precision": "fp8"},
            "parallelism": {"tp": 2, "dp": 8},
        }
    )
    res = palm.simulate(cfg, engine="analytical")
    assert res.iteration_time_s > 0 and res.fits_memory
