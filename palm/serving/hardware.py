"""GPU and Tenstorrent parts of the inference validation rows, as hardware tables.

Each accelerator type named by a row is a preset of :data:`palm.hardware.presets
.HARDWARE_PRESETS` plus, for parts without a preset of their own, the datasheet figures
that differ (per GPU, dense Tensor Core rates: the datasheets' "with sparsity" figures halved).
The row's own ``memory_per_accelerator_GB`` replaces the preset's memory when stated.

* H100 NVL 94 GB (NVIDIA H100 NVL datasheet, 2024): 835 TFLOP/s bf16, 1670 fp8 / int8, 94 GB
  HBM3 at 3.9 TB/s, NVLink bridges 600 GB/s bidirectional (300 per direction) between
  paired cards, PCIe Gen5 x16 otherwise (64 GB/s per direction).
* H100 PCIe 80 GB (H100 Tensor Core GPU datasheet, PCIe column): 756 bf16, 1513 fp8 / int8,
  80 GB HBM2e at 2.0 TB/s, PCIe Gen5 x16.
* H200 NVL 141 GB (H200 datasheet, NVL column): 835 bf16, 1670 fp8 / int8, 141 GB HBM3e at
  4.8 TB/s, NVLink bridges 900 GB/s bidirectional.
* GH200 (GH200 Grace Hopper Superchip datasheet, 2024): the H100 SXM's compute with 96 GB
  HBM3 at 4.0 TB/s or 144 GB HBM3e at 4.9 TB/s (by the row's memory size).
* L40S 48 GB (NVIDIA L40S datasheet, 2023): 362 TFLOP/s bf16 / fp16, 733 fp8 / int8, 91.6
  fp32, 48 GB GDDR6 at 864 GB/s, PCIe Gen4 x16 (32 GB/s per direction), no NVLink. Its
  efficiency constants are the H100's (the nearest fitted part: an Ada GPU of the same
  Tensor Core generation's FP8).

PCIe links: 5 us per step (an assumption, as the NVLink latency of the presets).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from palm.hardware.presets import HARDWARE_PRESETS
from palm.hardware.spec import GpuClusterHardware, PeakTflops

__all__ = ["ACCELERATORS", "accelerator_hardware"]

_PCIE5 = {"switch_bandwidth_gbps": 64.0, "switch_latency_us": 5.0}
_H100 = HARDWARE_PRESETS["dgx-h100"]
assert isinstance(_H100, GpuClusterHardware)

#: accelerator type (as the rows name it) -> (preset, overrides of its fields)
ACCELERATORS: dict[str, tuple[str, dict[str, Any]]] = {
    "H100-SXM-80GB": ("dgx-h100", {}),
    "H200-SXM-141GB": ("dgx-h200", {}),
    "B200-SXM-180GB": ("dgx-b200", {}),
    "GB200": ("gb200-nvl72", {}),
    "GB300": ("gb300-nvl72", {}),
    "A100": ("dgx-a100", {}),
    "H100-NVL-94GB": (
        "dgx-h100",
        {
            "peak_tflops": PeakTflops(fp32=60.0, bf16=835.0, fp16=835.0, fp8=1670.0, int8=1670.0),
            "hbm_bandwidth_gbps": 3900.0,
            "switch_bandwidth_gbps": 300.0,
        },
    ),
    "H100-PCIe-80GB": (
        "dgx-h100",
        {
            "peak_tflops": PeakTflops(fp32=51.0, bf16=756.0, fp16=756.0, fp8=1513.0, int8=1513.0),
            "hbm_bandwidth_gbps": 2000.0,
            **_PCIE5,
        },
    ),
    "H200-NVL-141GB": (
        "dgx-h200",
        {
            "peak_tflops": PeakTflops(fp32=60.0, bf16=835.0, fp16=835.0, fp8=1670.0, int8=1670.0),
            "switch_bandwidth_gbps": 450.0,
        },
    ),
    "GH200": ("dgx-h100", {}),
    "L40S-48GB": (
        "dgx-h100",
        {
            "peak_tflops": PeakTflops(fp32=91.6, bf16=362.0, fp16=362.0, fp8=733.0, int8=733.0),
            "hbm_bandwidth_gbps": 864.0,
            "switch_bandwidth_gbps": 32.0,
            "switch_latency_us": 5.0,
            "sfu_exp_tera_per_s": 0.0,
        },
    ),
}

#: GH200 memory variants: bandwidth by the row's memory size (GB -> GB/s)
_GH200_BANDWIDTH = {96: 4000.0, 144: 4900.0}


def accelerator_hardware(
    kind: str, *, memory_gb: float | None, per_node: int
) -> GpuClusterHardware | None:
    """The hardware of ``kind`` with the row's memory size, or ``None`` when unknown."""
    found = ACCELERATORS.get(kind)
    if found is None:
        return None
    preset, overrides = found
    hw = HARDWARE_PRESETS[preset]
    assert isinstance(hw, GpuClusterHardware)
    hw = dataclasses.replace(hw, name=f"{preset} ({kind})", **overrides)
    if memory_gb:
        hw = dataclasses.replace(hw, hbm_gib=memory_gb * 1e9 / 2**30)
        if kind == "GH200" and int(memory_gb) in _GH200_BANDWIDTH:
            hw = dataclasses.replace(hw, hbm_bandwidth_gbps=_GH200_BANDWIDTH[int(memory_gb)])
    if "nvl72" not in preset and per_node > hw.gpus_per_node:
        hw = dataclasses.replace(hw, gpus_per_node=per_node)
    return hw
