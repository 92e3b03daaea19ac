"""Per-core NoC bandwidth of a whole-mesh DRAM read under three routings of the reads.

Usage:
    python benchmarks/dram_routing.py

Every core reads from its nearest edge channel (``dram_placement = "nearest"``; interleaved
reads are routed edge first too). Plain XY (along the channel's row first)
and plain YX (along its column first) are the same rule on the mesh and on the mesh turned by
90 degrees; edge-first (palm's, docs/model.md sec. 8) runs along the channel's edge, then
straight in. The table gives the per-core bandwidth each leaves, ``1 / max(load / link
bandwidth)``, for the mesh presets.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from palm.network.dram import dram_access_per_core
from palm.network.loads import dram_channel_cores, mesh_profile, nearest_channel


def routings(hw: Mesh2DHardware) -> tuple[float, float, float]:
    """Per-core NoC bandwidth (GB/s) of a whole-mesh read: XY, YX, edge first."""
    rows, cols = hw.core_grid
    cores = np.stack(np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"), -1)
    cores = cores.reshape(-1, 2)
    at = dram_channel_cores(hw)
    ends = at[nearest_channel(hw, cores)]
    turned = dataclasses.replace(hw, tiles=hw.tiles[::-1], cores_per_tile=hw.cores_per_tile[::-1])
    xy = mesh_profile(hw, ends, cores)
    yx = mesh_profile(turned, ends[:, ::-1], cores[:, ::-1])
    edge_first = dram_access_per_core(hw, cores, at).noc
    return xy.bandwidth_Bps / 1e9, yx.bandwidth_Bps / 1e9, edge_first.bandwidth_Bps / 1e9


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)
    print("| mesh preset | cores | DRAM channels | XY (GB/s) | YX (GB/s) | edge first (GB/s) |")
    print("|---|---|---|---|---|---|")
    for name, hw in sorted(HARDWARE_PRESETS.items()):
        if not isinstance(hw, Mesh2DHardware):
            continue
        xy, yx, edge = routings(hw)
        rows, cols = hw.core_grid
        print(
            f"| {name} | {rows} x {cols} | {hw.dram_channels} | {xy:.1f} | {yx:.1f} | {edge:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
