"""Ring profiles of large groups from runs of links instead of one route per member.

A ring through a whole stage (data parallelism with ``tp = 1``, or tensor parallelism with
``dp = 1``) on a big mesh has one member per core, yet its transfers follow few straight lines:
a Hamiltonian cycle of a rectangle (:func:`~palm.network.loads.ring_order`) is a row-by-row
snake, and the layout walk of a stage on tiles one core wide is one vertical run per tile
column. Describing the ring as *segments* (a direction, a line and a range of links, each link
carrying one transfer) plus the few transfers between runs, and sweeping over segment ends,
gives exactly :func:`~palm.network.loads.mesh_profile`'s profile at a cost that grows with the
number of runs, not of members (the tests compare the two).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from palm.hardware.spec import Mesh2DHardware
from palm.network.loads import EAST, NORTH, SOUTH, WEST, Profile, route_latency_ns
from palm.network.region import CoreRegion

__all__ = ["Segments", "segment_profile", "stage_ring_profile"]


@dataclass(frozen=True)
class Segments:
    """Links ``[start, start + count)`` (by the position of their source router along the
    line) of direction ``direction`` on row or column ``line``, each carrying one transfer of
    one hop (``hop = True``) or part of a longer route."""

    direction: np.ndarray
    line: np.ndarray
    start: np.ndarray
    count: np.ndarray
    hop: np.ndarray

    @staticmethod
    def join(parts: list[Segments]) -> Segments:
        return Segments(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("direction", "line", "start", "count", "hop")


def _segments(rows: list[tuple[int, int, int, int, bool]]) -> Segments:
    arr = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
    return Segments(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4].astype(bool))


def _routes(src: np.ndarray, dst: np.ndarray) -> Segments:
    """The XY routes of ``src[i] -> dst[i]``: along the source row, then the destination
    column."""
    r1, c1, r2, c2 = src[:, 0], src[:, 1], dst[:, 0], dst[:, 1]
    east, west, south, north = c2 > c1, c2 < c1, r2 > r1, r2 < r1
    parts = [
        (EAST, r1[east], c1[east], (c2 - c1)[east]),
        (WEST, r1[west], c2[west] + 1, (c1 - c2)[west]),
        (SOUTH, c2[south], r1[south], (r2 - r1)[south]),
        (NORTH, c2[north], r2[north] + 1, (r1 - r2)[north]),
    ]
    return Segments.join(
        [
            Segments(np.full(len(line), d), line, start, count, np.zeros(len(line), dtype=bool))
            for d, line, start, count in parts
        ]
    )


def _inter_links(
    hw: Mesh2DHardware, direction: np.ndarray, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """How many links of sources ``[a, b)`` cross a tile boundary, per direction."""
    cr, cc = hw.cores_per_tile
    size = np.where((direction == EAST) | (direction == WEST), cc, cr)
    # forward links cross after positions size-1, 2*size-1, ...; backward ones leave 0, size, ...
    forward = (direction == EAST) | (direction == SOUTH)
    count: np.ndarray = np.where(forward, b // size - a // size, (b - 1) // size - (a - 1) // size)
    return count


def segment_profile(
    hw: Mesh2DHardware, segments: Segments, src: np.ndarray, dst: np.ndarray
) -> Profile:
    """Profile of the one-hop transfers of ``segments`` together with the XY transfers
    ``src[i] -> dst[i]`` (the same numbers as :func:`~palm.network.loads.mesh_profile` of all
    of them)."""
    src = np.asarray(src, dtype=np.int64).reshape(-1, 2)
    dst = np.asarray(dst, dtype=np.int64).reshape(-1, 2)
    keep = np.any(src != dst, axis=1)
    src, dst = src[keep], dst[keep]
    segs = Segments.join([segments, _routes(src, dst)])
    live = segs.count > 0
    segs = Segments(*(getattr(segs, f)[live] for f in _FIELDS))
    if len(segs.count) == 0:
        return Profile(0.0, float("inf"), 0)
    lat_in, lat_out = hw.intra_tile_link_latency_ns, hw.inter_tile_link_latency_ns
    bw_in = hw.intra_tile_link_gbps * 1e9

    # latency and hops: every one-hop transfer of a segment, and each routed transfer
    latency, hops = 0.0, 0
    hop = segs.hop
    if hop.any():
        inter = _inter_links(
            hw, segs.direction[hop], segs.start[hop], segs.start[hop] + segs.count[hop]
        )
        if (inter > 0).any():
            latency = max(latency, lat_out)
        if (inter < segs.count[hop]).any():
            latency = max(latency, lat_in)
        hops = 1
    if len(src):
        cr, cc = hw.cores_per_tile
        h = np.abs(dst[:, 1] - src[:, 1]) + np.abs(dst[:, 0] - src[:, 0])
        inter = np.abs(dst[:, 1] // cc - src[:, 1] // cc) + np.abs(
            dst[:, 0] // cr - src[:, 0] // cr
        )
        latency = max(latency, float(route_latency_ns(hw, h, inter).max()))
        hops = max(hops, int(h.max()))

    # loads: sweep the ends of the segments of every (direction, line)
    key = segs.direction * (1 << 32) + segs.line
    pos = np.concatenate([segs.start, segs.start + segs.count])
    keys = np.concatenate([key, key])
    delta = np.concatenate([np.ones(len(key)), -np.ones(len(key))])
    order = np.lexsort((pos, keys))
    pos, keys, delta = pos[order], keys[order], delta[order]
    load = np.cumsum(delta)[:-1]
    a, b = pos[:-1], pos[1:]
    span = (keys[:-1] == keys[1:]) & (b > a) & (load > 0)
    a, b, load, direction = a[span], b[span], load[span], keys[:-1][span] >> 32
    inter = _inter_links(hw, direction, a, b)
    along_row = (direction == EAST) | (direction == WEST)
    bw_out = (
        np.where(along_row, hw.inter_tile_gbps(along_row=True), hw.inter_tile_gbps(along_row=False))
        * 1e9
    )  # per direction (tiles joined by chip links: palm.hardware.spec)
    slowest = np.where(
        inter > 0,
        np.where(inter < b - a, np.minimum(bw_in, bw_out), bw_out),
        bw_in,
    )
    worst = float((load / slowest).max())
    return Profile(latency * 1e-9, 1.0 / worst, hops)


def _hamiltonian(rect: tuple[int, int, int, int]) -> Segments | None:
    """The segments of :func:`~palm.network.loads.ring_order`'s cycle through a full
    rectangle, or None when it has none (both sides odd, or a side below two)."""
    r0, r1, c0, c1 = rect
    rows, cols = r1 - r0, c1 - c0
    if rows < 2 or cols < 2 or (rows % 2 and cols % 2):
        return None
    if rows % 2:  # the cycle of the transposed rectangle, transposed back
        t = _hamiltonian((c0, c1, r0, r1))
        assert t is not None
        turn = np.array([SOUTH, NORTH, EAST, WEST])
        return Segments(turn[t.direction], t.line, t.start, t.count, t.hop)
    out = [(EAST, r0, c0, cols - 1, True), (SOUTH, c1 - 1, r0, 1, True)]
    for r in range(1, rows):
        if r % 2:  # right to left over columns c0+1 .. c1-1, then down at c0+1
            out.append((WEST, r0 + r, c0 + 2, cols - 2, True))
            if r < rows - 1:
                out.append((SOUTH, c0 + 1, r0 + r, 1, True))
        else:
            out.append((EAST, r0 + r, c0 + 1, cols - 2, True))
            out.append((SOUTH, c1 - 1, r0 + r, 1, True))
    out.append((WEST, r1 - 1, c0 + 1, 1, True))
    out.append((NORTH, c0, r0 + 1, rows - 1, True))
    return _segments(out)


def stage_ring_profile(
    hw: Mesh2DHardware, region: CoreRegion, *, snake: bool, explicit: bool
) -> Profile | None:
    """The profile of one ring through every core of a stage, in the order
    :func:`~palm.network.loads.ring_order` gives the stage's walk, when it can be had from runs:
    the stage is a rectangle with a Hamiltonian cycle, or its walk is straight down each tile
    column (tiles one core wide, ``line`` layout or one-core tiles). None otherwise."""
    rects = region.rects
    box = (
        int(rects[:, 0].min()),
        int(rects[:, 1].max()),
        int(rects[:, 2].min()),
        int(rects[:, 3].max()),
    )
    if region.count == (box[1] - box[0]) * (box[3] - box[2]):  # fills its bounding box
        cycle = _hamiltonian(box)
        if cycle is not None:
            return segment_profile(hw, cycle, np.zeros((0, 2)), np.zeros((0, 2)))
    cr, cc = hw.cores_per_tile
    if explicit or cc != 1 or (snake and cr != 1):
        return None
    # tiles one core wide: the walk goes down (s-shape: up, in odd columns) each column
    cols, lo, hi = region.runs(per="column")
    order = np.argsort(cols, kind="stable")
    cols, lo, hi = cols[order], lo[order], hi[order]
    if len(np.unique(cols)) != len(cols):
        return None  # a column in two pieces: not a single run per column
    up = (cols % 2 == 1) if snake else np.zeros(len(cols), dtype=bool)
    first = np.where(up, hi - 1, lo)
    last = np.where(up, lo, hi - 1)
    runs = Segments(
        np.where(up, NORTH, SOUTH),
        cols,
        lo + up,  # down: sources lo .. hi-2; up: sources lo+1 .. hi-1
        hi - lo - 1,
        np.ones(len(cols), dtype=bool),
    )
    src = np.stack([last, cols], axis=1)
    dst = np.stack([np.roll(first, -1), np.roll(cols, -1)], axis=1)
    return segment_profile(hw, runs, src, dst)
