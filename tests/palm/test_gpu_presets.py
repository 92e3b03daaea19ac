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


# The GPU presets the validation sets need beyond the DGX / NVL72 systems: each figure from its
# vendor datasheet (palm/data/hardware/nvidia.toml gives the source of every one). Dense peaks
# are the datasheet's "with sparsity" figures halved; links per direction are half the
# datasheet's bidirectional figure.
DATASHEET = {
    # name: (sparse bf16, sparse fp8, fp32 TFLOP/s, HBM GB, HBM GB/s, link GB/s bidirectional,
    #        GPUs per node, the fit of the same silicon: the preset whose constants it takes)
    "dgx-a100-40gb": (624.0, 0.0, 19.5, 40, 1555.0, 600.0, 8, "dgx-a100"),
    "h100-pcie": (1513.0, 3026.0, 51.0, 80, 2000.0, 128.0, 8, "dgx-h100"),
    "h100-nvl": (1671.0, 3341.0, 60.0, 94, 3900.0, 128.0, 8, "dgx-h100"),
    "h200-nvl": (1671.0, 3341.0, 60.0, 141, 4800.0, 128.0, 8, "dgx-h100"),
    "gh200-96gb": (1979.0, 3958.0, 67.0, 96, 4000.0, 900.0, 1, "dgx-h100"),
    "gh200-144gb": (1979.0, 3958.0, 67.0, 144, 4900.0, 900.0, 1, "dgx-h100"),
}
EFFICIENCIES = (
    "matmul_efficiency",
    "fp8_matmul_efficiency",
    "attention_efficiency",
    "grouped_gemm_efficiency",
    "grouped_gemm_expert_us",
    "overlap_interference",
    "matmul_half_dim",
    "memory_efficiency",
)


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_variant_presets_are_their_datasheets(name: str) -> None:
    bf16, fp8, fp32, hbm_gb, hbm_gbps, link_gbps, per_node, silicon = DATASHEET[name]
    hw = hardware_preset(name)
    assert isinstance(hw, GpuClusterHardware)
    # 989 / 1979 for H100-class dense peaks: the datasheet's 1,979 / 3,958 halved, to 0.1%
    assert hw.peak_tflops.bf16 == pytest.approx(bf16 / 2, rel=1e-3)
    assert hw.peak_tflops.fp16 == hw.peak_tflops.bf16
    assert hw.peak_tflops.fp8 == pytest.approx(fp8 / 2, rel=1e-3)
    assert hw.peak_tflops.fp32 == fp32
    assert hw.device_memory_bytes == pytest.approx(hbm_gb * 1e9)
    assert hw.hbm_bandwidth_gbps == hbm_gbps
    assert hw.switch_bandwidth_gbps == link_gbps / 2
    assert hw.gpus_per_node == per_node
    same = hardware_preset(silicon)
    for field in EFFICIENCIES:  # the fit of the same silicon, inherited
        assert getattr(hw, field) == getattr(same, field), field


def _small_llama(preset: str, *, tp: int, dp: int) -> palm.SimConfig:
    hw = hardware_preset(preset)
    assert isinstance(hw, GpuClusterHardware)
    return parse_config(
        {
            "model": {"layers": 4, "hidden": 1024, "heads": 8, "ffn_hidden": 4096,
                      "seq_len": 2048, "vocab": 32000, "family": "llama", "mlp": "swiglu"},
            "hardware": {"preset": preset},
            "training": {"global_batch": 16, "micro_batch": 1,
                         "precision": "fp8" if hw.peak_tflops.fp8 else "bf16"},
            "parallelism": {"tp": tp, "dp": dp},
        }
    )  # fmt: skip


def test_l40s_is_its_datasheet_with_priors_for_its_constants() -> None:
    """NVIDIA L40S datasheet (2023): 733 bf16 and 1,466 fp8 TFLOP/s with sparsity, 91.6 fp32,
    48 GB at 864 GB/s, PCIe Gen4 x16 (64 GB/s bidirectional). No fit of Ada silicon: the A100's
    matmul_efficiency as a prior, the rest the field defaults."""
    hw = hardware_preset("l40s")
    assert isinstance(hw, GpuClusterHardware)
    assert (hw.peak_tflops.bf16, hw.peak_tflops.fp8, hw.peak_tflops.fp32) == (366.5, 733.0, 91.6)
    assert hw.device_memory_bytes == pytest.approx(48e9) and hw.hbm_bandwidth_gbps == 864.0
    assert hw.switch_bandwidth_gbps == 64.0 / 2
    a100 = hardware_preset("dgx-a100")
    assert a100 is not None and hw.matmul_efficiency == a100.matmul_efficiency
    defaults = GpuClusterHardware("x", 1, hw.peak_tflops, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    for field in EFFICIENCIES[1:]:
        assert getattr(hw, field) == getattr(defaults, field), field


@pytest.mark.parametrize("name", [*sorted(DATASHEET), "l40s"])
@pytest.mark.parametrize("engine", ["analytical", "event"])
def test_variant_presets_simulate(name: str, engine: str) -> None:
    res = palm.simulate(_small_llama(name, tp=2, dp=4), engine=engine)
    assert res.iteration_time_s > 0 and res.fits_memory


def test_a_pcie_h100_is_slower_than_an_sxm_h100() -> None:
    """Every resource of h100-pcie is at most dgx-h100's (peaks, HBM, links): never faster."""
    for engine in ("analytical", "event"):
        sxm = palm.simulate(_small_llama("dgx-h100", tp=2, dp=4), engine=engine)
        pcie = palm.simulate(_small_llama("h100-pcie", tp=2, dp=4), engine=engine)
        assert pcie.iteration_time_s > sxm.iteration_time_s
        small = palm.simulate(_small_llama("gh200-96gb", tp=1, dp=8), engine=engine)
        large = palm.simulate(_small_llama("gh200-144gb", tp=1, dp=8), engine=engine)
        assert large.iteration_time_s <= small.iteration_time_s  # more HBM bandwidth only
