"""Shared by the trace and plot tests: a toy mesh configuration and its timeline."""

from __future__ import annotations

import dataclasses
from typing import Any

import palm
from palm.api import simulate_timeline
from palm.engines.event.engine import Timeline
from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware

#: a 2x2-tile mesh of 2x2 cores (16 cores) with 1 MiB of SRAM each, slow links between tiles
TOY_HARDWARE: dict[str, Any] = {
    "topology": "mesh2d",
    "tiles": [2, 2],
    "cores_per_tile": [2, 2],
    "core_peak_tflops": {"fp16": 1.0},
    "sram_per_core_mib": 1.0,
    "sram_bandwidth_per_core_gbps": 100.0,
    "intra_tile_link_gbps": 100.0,
    "inter_tile_link_gbps": 10.0,
    "intra_tile_link_latency_ns": 1.0,
    "inter_tile_link_latency_ns": 5.0,
    "dram_channels": 4,
    "dram_channel_bandwidth_gbps": 10.0,
    "dram_capacity_gib": 1.0,
    "dram_response_ns": 50.0,
}


def toy_mesh(
    granularity: str = "link", *, training: dict[str, object] | None = None, **parallelism: object
) -> palm.SimConfig:
    """Four 256x256 linear layers on a 2x2-tile mesh of 2x2 cores (16 cores); ``training`` and
    ``parallelism`` override the defaults (TP=2 PP=4 DP=2, 1F1B)."""
    linear = {"type": "linear", "in_features": 256, "out_features": 256, "bias": False}
    return palm.parse_config(
        {
            "model": {"name": "toy", "ops": [linear] * 4},
            "hardware": dict(TOY_HARDWARE),
            "training": {
                "global_batch": 8,
                "micro_batch": 1,
                "precision": "fp16",
                "optimizer": "sgd",
                **(training or {}),
            },
            "parallelism": {"tp": 2, "pp": 4, "dp": 2, **parallelism},
            "communication": {"noc_granularity": granularity},
        }
    )


def simulate_with_timeline(config: palm.SimConfig) -> tuple[palm.Result, Timeline]:
    result, timeline = simulate_timeline(config, engine="event")
    assert timeline is not None
    return result, timeline


def wafer_palm(
    tiles: tuple[int, int], cores: tuple[int, int] = (1, 1), **changes: object
) -> Mesh2DHardware:
    """The ``wafer-palm`` preset cut into ``tiles`` of ``cores``, with other fields changed."""
    base = HARDWARE_PRESETS["wafer-palm"]
    assert isinstance(base, Mesh2DHardware)
    return dataclasses.replace(base, tiles=tiles, cores_per_tile=cores, **changes)  # type: ignore[arg-type]


LINEAR_SIDE = 256


def linear_toy(
    *, hardware: dict[str, Any] | None = None, parallelism: dict[str, Any] | None = None
) -> palm.SimConfig:
    """Four 256x256 linear layers (fp16, SGD, global batch 16 of micro-batches of 1) on a 2x2
    mesh of 2x2 cores (1 MiB SRAM each), TP=1 PP=1 DP=16; ``hardware`` and ``parallelism``
    override fields."""
    linear = {"type": "linear", "in_features": LINEAR_SIDE, "out_features": LINEAR_SIDE}
    return palm.parse_config(
        {
            "model": {"name": "toy", "ops": [linear | {"bias": False}] * 4},
            "hardware": TOY_HARDWARE | (hardware or {}),
            "training": {"global_batch": 16, "micro_batch": 1, "precision": "fp16"}
            | {"optimizer": "sgd"},
            "parallelism": {"tp": 1, "pp": 1, "dp": 16, **(parallelism or {})},
        }
    )
