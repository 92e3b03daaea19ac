"""Tenstorrent chips: the wormhole-n150 and blackhole-p150 presets, math fidelity, the compute
grid and the block floating-point formats."""

from __future__ import annotations

from typing import Any

import pytest

from palm.config import parse_config
from palm.cost.compute import device_rates
from palm.errors import ConfigError
from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from palm.units import bytes_per_element


def _tables(**hardware: Any) -> dict[str, Any]:
    return {
        "model": {"preset": "bert-base"},
        "hardware": {"preset": "wormhole-n150", **hardware},
        "training": {"mode": "inference", "global_batch": 4},
        "parallelism": {"pp": 4, "tp": 4, "dp": 4},
    }


def test_wormhole_figures_match_the_sources() -> None:
    hw = HARDWARE_PRESETS["wormhole-n150"]
    assert isinstance(hw, Mesh2DHardware)
    assert hw.device_count == 64
    assert hw.sram_per_core_mib * 1024 == pytest.approx(1464)
    assert hw.dram_bandwidth_gbps == pytest.approx(288.0)
    # GEMM_FLOPS.md: 64 cores x 4096 FLOP/cycle x 1 GHz at LoFi, half at HiFi2, quarter at HiFi4
    assert hw.core_peak_tflops.bf16 * 64 == pytest.approx(262.144)


def test_blackhole_peak_is_the_published_block_fp8_figure() -> None:
    hw = HARDWARE_PRESETS["blackhole-p150"]
    assert isinstance(hw, Mesh2DHardware)
    assert hw.core_peak_tflops.bfp8 * 140 == pytest.approx(774.1, abs=0.1)
    assert hw.dram_bandwidth_gbps == pytest.approx(512.0)
    assert hw.device_count == 130  # 13 x 10 cores for compute of the 14 x 10


@pytest.mark.parametrize(
    ("fidelity", "chip_tflops"),
    [("lofi", 262.144), ("hifi2", 131.072), ("hifi3", 87.381), ("hifi4", 65.536)],
)
def test_math_fidelity_sets_the_matrix_engine_rate(fidelity: str, chip_tflops: float) -> None:
    config = parse_config(_tables(math_fidelity=fidelity))
    rates = device_rates(config.hardware, "bf16")
    assert rates.peak_flops * 64 / 1e12 == pytest.approx(chip_tflops, rel=1e-4)


def test_math_fidelity_is_case_insensitive() -> None:
    assert parse_config(_tables(math_fidelity="HiFi2")).hardware.math_fidelity == "hifi2"


def test_compute_grid_selects_the_cores_of_the_job() -> None:
    tables = _tables(compute_grid=[4, 2])
    tables["parallelism"] = {"pp": 4, "dp": 2}
    config = parse_config(tables)
    assert isinstance(config.hardware, Mesh2DHardware)
    assert config.hardware.device_count == 8
    assert config.hardware.cores_per_tile == (4, 2)


@pytest.mark.parametrize(
    ("hardware", "field", "allowed"),
    [
        ({"math_fidelity": "hifi5"}, "hardware.math_fidelity", "'lofi', 'hifi2', 'hifi3', 'hifi4'"),
        ({"math_fidelity": ""}, "hardware.math_fidelity", "'lofi'"),
        ({"compute_grid": [9, 8]}, "hardware.compute_grid", "1 <= rows <= 8"),
        ({"compute_grid": [0, 4]}, "hardware.compute_grid", "1 <= rows <= 8"),
        ({"dispatch": "queue"}, "hardware.dispatch", "'trace', 'host'"),
        ({"preset": "wafer-palm", "math_fidelity": "hifi2"}, "hardware.math_fidelity", "unset"),
        ({"preset": "wafer-palm", "compute_grid": [2, 2]}, "hardware.compute_grid", "[0, 0]"),
    ],
)
def test_bad_tensix_fields_name_field_value_and_allowed(
    hardware: dict[str, Any], field: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_tables(**hardware))
    message = str(err.value)
    assert field in message and allowed in message and "\n" not in message


def test_block_formats_count_their_shared_exponents() -> None:
    # tt-metal constants.hpp: a 32x32 tile is 1024 + 64 B in bfp8, 512 + 64 B in bfp4
    assert bytes_per_element("bfp8") * 1024 == 1088
    assert bytes_per_element("bfp4") * 1024 == 576


def test_block_formats_are_inference_only_and_only_on_tensix_chips() -> None:
    tables = _tables()
    tables["training"] = {"mode": "inference", "global_batch": 4, "precision": "bfp8"}
    assert device_rates(parse_config(tables).hardware, "bfp8").elem_bytes == 1.0625
    tables["training"]["mode"] = "train"
    with pytest.raises(ConfigError, match="training.precision"):
        parse_config(tables)
    tables["training"]["mode"] = "inference"
    tables["hardware"] = {"preset": "wafer-palm"}
    tables["parallelism"] = {"pp": 4, "tp": 4, "dp": 20}
    tables["training"]["global_batch"] = 20
    with pytest.raises(ConfigError, match="training.precision.*bfp8"):
        parse_config(tables)
