"""Checks of a mesh ``[hardware]`` table that only Tenstorrent chips have: the Wormhole B0
NoC floorplan, chips that own DRAM channels per tile, a Tensix matrix engine's math
fidelity and the compute grid a job selects."""

from __future__ import annotations

import dataclasses

from palm.errors import ConfigError
from palm.hardware.spec import (
    FLOORPLAN_TENSIX_GRID,
    MATH_FIDELITY_CYCLES,
    Mesh2DHardware,
)

__all__ = ["check_chips", "check_floorplan", "tensix_fields"]


def check_chips(hw: Mesh2DHardware) -> None:
    """Tiles that are chips own an equal share of the channels (``per-tile``)."""
    tiles = hw.tiles[0] * hw.tiles[1]
    if hw.dram_placement == "per-tile" and (hw.dram_channels < tiles or hw.dram_channels % tiles):
        raise ConfigError(
            "hardware.dram_channels",
            hw.dram_channels,
            f'a multiple of the {tiles} tiles with dram_placement = "per-tile" (each tile '
            "owns an equal share)",
        )


def check_floorplan(hw: Mesh2DHardware) -> None:
    """A mesh with the Wormhole B0 NoC floorplan (``noc_floorplan``) is one tile whose cores fit
    Tensix cores (``FLOORPLAN_TENSIX_GRID``, 10 x 8)."""
    if hw.noc_floorplan != "wormhole-b0":
        return
    rows, cols = FLOORPLAN_TENSIX_GRID[hw.noc_floorplan]
    if hw.tiles != (1, 1):
        raise ConfigError(
            "hardware.tiles", list(hw.tiles), '[1, 1] with noc_floorplan = "wormhole-b0"'
        )
    grid = hw.cores_per_tile
    if not (1 <= grid[0] <= rows and 1 <= grid[1] <= cols):
        raise ConfigError(
            "hardware.cores_per_tile",
            list(grid),
            f"[rows, cols] with rows <= {rows} and cols <= {cols} (the Tensix cores of the "
            'Wormhole B0 floorplan, noc_floorplan = "wormhole-b0"; "" for none)',
        )


def tensix_fields(hw: Mesh2DHardware, *, has_fidelity: bool | None) -> Mesh2DHardware:
    """Check ``math_fidelity`` (required on a preset that has one, refused on one that has
    not, optional on a custom mesh) and ``compute_grid``; a compute grid becomes the mesh the
    job runs on (``cores_per_tile``), so that every later model sees only the selected cores."""
    fidelity = hw.math_fidelity.lower()
    allowed = ", ".join(repr(f) for f in MATH_FIDELITY_CYCLES)
    bad = fidelity not in MATH_FIDELITY_CYCLES and (fidelity or has_fidelity)
    if has_fidelity is not False and bad:
        raise ConfigError("hardware.math_fidelity", hw.math_fidelity, f"one of {allowed}")
    if has_fidelity is False and hw.math_fidelity:
        raise ConfigError(
            "hardware.math_fidelity",
            hw.math_fidelity,
            f"unset on {hw.name} (only chips with a Tensix matrix engine, e.g. wormhole-n150)",
        )
    hw = dataclasses.replace(hw, math_fidelity=fidelity)
    grid = hw.compute_grid
    if grid == (0, 0):
        return hw
    rows, cols = hw.core_grid
    if hw.tiles != (1, 1):
        raise ConfigError(
            "hardware.compute_grid", list(grid), f"[0, 0] (all) on {hw.name}, a mesh of tiles"
        )
    if not (1 <= grid[0] <= rows and 1 <= grid[1] <= cols):
        raise ConfigError(
            "hardware.compute_grid",
            list(grid),
            f"[rows, cols] with 1 <= rows <= {rows} and 1 <= cols <= {cols} (the cores of "
            f"{hw.name})",
        )
    return dataclasses.replace(hw, cores_per_tile=grid)
