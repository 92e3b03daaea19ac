"""Uncontended cost of moving bytes between devices (paper Eq. 2 without its waiting term).

A path is summarised by its hop count, total latency and bottleneck bandwidth. On a
``mesh2d`` the path is the dimension-ordered (XY: columns first, then rows) route between
two cores; a link joining two cores of the same tile runs at the intra-tile figures, one
crossing a tile boundary at the inter-tile figures. On a ``gpu-cluster`` two GPUs of one node
talk through the switch (NVSwitch) and GPUs of different nodes through their own NICs into a
non-blocking fat tree, so one "hop" either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from palm.hardware.spec import GpuClusterHardware, Hardware, Mesh2DHardware
from palm.network.placement import Device

__all__ = ["PathCost", "path_cost", "ring_cost", "xy_route"]


@dataclass(frozen=True)
class PathCost:
    """``hops`` links, ``latency_s`` summed over them, ``bandwidth_Bps`` of the slowest."""

    hops: int
    latency_s: float
    bandwidth_Bps: float

    def time(self, nbytes: float) -> float:
        """Eq. 2 of the paper without contention: hops x link time + bytes / bandwidth."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + nbytes / self.bandwidth_Bps


def xy_route(
    a: tuple[int, int], b: tuple[int, int]
) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Directed links of the XY route from core ``a`` to core ``b``: along the row first
    (changing the column), then along the column."""
    links = []
    r, c = a
    step = 1 if b[1] > c else -1
    while c != b[1]:
        links.append(((r, c), (r, c + step)))
        c += step
    step = 1 if b[0] > r else -1
    while r != b[0]:
        links.append(((r, c), (r + step, c)))
        r += step
    return links


def _mesh_path(hw: Mesh2DHardware, a: tuple[int, int], b: tuple[int, int]) -> PathCost:
    if a == b:
        return PathCost(0, 0.0, float("inf"))
    cr, cc = hw.cores_per_tile
    # Count intra- and inter-tile hops along the XY route without listing links.
    col_lo, col_hi = sorted((a[1], b[1]))
    row_lo, row_hi = sorted((a[0], b[0]))
    inter_cols = col_hi // cc - col_lo // cc
    inter_rows = row_hi // cr - row_lo // cr
    hops = (col_hi - col_lo) + (row_hi - row_lo)
    inter = inter_cols + inter_rows
    intra = hops - inter
    latency = (intra * hw.intra_tile_link_latency_ns + inter * hw.inter_tile_link_latency_ns) * 1e-9
    bw = hw.inter_tile_link_gbps if inter else hw.intra_tile_link_gbps
    if intra and inter:
        bw = min(hw.intra_tile_link_gbps, hw.inter_tile_link_gbps)
    return PathCost(hops, latency, bw * 1e9)


def _cluster_path(hw: GpuClusterHardware, a: int, b: int) -> PathCost:
    if a == b:
        return PathCost(0, 0.0, float("inf"))
    if a // hw.gpus_per_node == b // hw.gpus_per_node:
        return PathCost(1, hw.switch_latency_us * 1e-6, hw.switch_bandwidth_gbps * 1e9)
    return PathCost(1, hw.inter_node_latency_us * 1e-6, hw.inter_node_bandwidth_gbps * 1e9)


def path_cost(hw: Hardware, a: Device, b: Device) -> PathCost:
    """Uncontended path between two devices."""
    if isinstance(hw, Mesh2DHardware):
        assert isinstance(a, tuple) and isinstance(b, tuple)
        return _mesh_path(hw, a, b)
    assert isinstance(a, int) and isinstance(b, int)
    return _cluster_path(hw, a, b)


def ring_cost(hw: Hardware, members: Sequence[Device]) -> PathCost:
    """The step of a ring through ``members`` in order (closing back to the first): the
    slowest edge's bandwidth and the largest edge latency, which bound every ring step."""
    n = len(members)
    if n <= 1:
        return PathCost(0, 0.0, float("inf"))
    edges = [path_cost(hw, members[i], members[(i + 1) % n]) for i in range(n)]
    return PathCost(
        hops=max(e.hops for e in edges),
        latency_s=max(e.latency_s for e in edges),
        bandwidth_Bps=min(e.bandwidth_Bps for e in edges),
    )
