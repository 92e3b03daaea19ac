"""The rows-and-columns path of :mod:`palm.network.dram`: a stage's DRAM access priced per
line of the mesh instead of per core, for both placements (``nearest``: :func:`_by_lines`;
``interleaved``: :func:`_perimeter` and :func:`_interleaved_lines`). The cores an edge serves
form a run of rows or columns starting at that edge, so under edge-first routing a line's
worst link is the first one of each link kind and the loads along the edges are
one-dimensional sums; the cost grows with the rows and columns, not with the cores
(tests/palm/test_dram.py checks every result against the per-core path)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from palm.hardware.spec import Mesh2DHardware
from palm.network.loads import (
    EAST,
    NORTH,
    SOUTH,
    WEST,
    MeshLine,
    Profile,
    link_bandwidth_Bps,
    link_is_inter_tile,
    mesh_lines,
    route_latency_ns,
)
from palm.network.region import CoreRegion

__all__: list[str] = []


_FAR = 1 << 40  # distance to an edge without channels


def _nearest_on_line(pos: np.ndarray, idx: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Distance to and index of the channel nearest each point ``0 .. n-1`` of a line, among
    channels at the sorted, distinct positions ``pos`` (ties to the lower index)."""
    if len(pos) == 0:
        return np.full(n, _FAR, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    q = np.arange(n)
    j = np.searchsorted(pos, q)
    lo, hi = np.clip(j - 1, 0, len(pos) - 1), np.clip(j, 0, len(pos) - 1)
    d_lo, d_hi = np.abs(q - pos[lo]), np.abs(pos[hi] - q)
    hi_wins = (d_hi < d_lo) | ((d_hi == d_lo) & (idx[hi] < idx[lo]))
    return np.where(hi_wins, d_hi, d_lo), np.where(hi_wins, idx[hi], idx[lo])


def _side(channels_at: np.ndarray, on: np.ndarray, along: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (sorted, one channel per cell: the lowest index) and indices of the channels
    selected by ``on``, by their coordinate ``along``."""
    idx = np.nonzero(on)[0]
    pos = channels_at[idx, along]
    order = np.lexsort((idx, pos))
    pos, idx = pos[order], idx[order]
    first = np.ones(len(pos), dtype=bool)
    first[1:] = pos[1:] != pos[:-1]
    return pos[first], idx[first]


def _span(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.maximum(b - a, 0)
    return out


@dataclass(frozen=True)
class _Edge:
    """One edge's channels seen from the lines (columns or rows) that meet it: on each line the
    cores within ``reach`` of the edge read from it, from channel ``index``."""

    reach: np.ndarray
    index: np.ndarray
    present: bool


@dataclass
class _Worst:
    """Running maxima of a profile: load over bandwidth, latency (ns) and hops."""

    load: float = 0.0
    latency_ns: float = 0.0
    hops: int = 0


def _reaches(hw: Mesh2DHardware, at: np.ndarray) -> tuple[_Edge, _Edge, _Edge, _Edge]:
    """Top and bottom edges per column, left and right edges per row (corners count as top
    and bottom). An edge's cores form a run from the edge on each line; ties go to the lower
    channel index, and the edges' index ranges run top < right < bottom < left."""
    R, C = hw.core_grid
    inner = (at[:, 0] > 0) & (at[:, 0] < R - 1)
    top = _side(at, at[:, 0] == 0, 1)
    bottom = _side(at, at[:, 0] == R - 1, 1)
    left = _side(at, inner & (at[:, 1] == 0), 0)
    right = _side(at, inner & (at[:, 1] == C - 1), 0)
    dT, iT = _nearest_on_line(*top, C)
    dB, iB = _nearest_on_line(*bottom, C)
    dL, iL = _nearest_on_line(*left, R)
    dR, iR = _nearest_on_line(*right, R)
    has_t, has_b, has_l, has_r = (len(x[0]) > 0 for x in (top, bottom, left, right))
    rr, cs = np.arange(R), np.arange(C)

    def reach(
        present: bool, bounds: list[tuple[bool, np.ndarray]], n: int, full: int
    ) -> np.ndarray:
        if not present:
            return np.zeros(n, dtype=np.int64)
        out: np.ndarray = np.minimum.reduce(
            [value if ok else np.full(n, full, dtype=np.int64) for ok, value in bounds]
        )
        return out

    kT = reach(
        has_t,
        [
            (has_b, np.clip((R - 1 + dB - dT) // 2 + 1, 0, R)),
            (has_r, np.searchsorted(rr - dR, C - 1 - cs - dT, "right")),
            (has_l, np.searchsorted(rr - dL, cs - dT, "right")),
        ],
        C,
        R,
    )
    kB = reach(
        has_b,
        [
            (has_t, R - np.clip((R - 1 + dB - dT) // 2 + 1, 0, R)),
            (has_r, R - np.searchsorted(rr + dR, R - 1 + dB - (C - 1 - cs), "right")),
            (has_l, R - np.searchsorted(rr + dL, R - 1 + dB - cs, "left")),
        ],
        C,
        R,
    )
    kL = reach(
        has_l,
        [
            (has_t, np.searchsorted(cs - dT, rr - dL, "left")),
            (has_r, np.clip((C - 2 + dR - dL) // 2 + 1, 0, C)),
            (has_b, np.searchsorted(cs - dB, R - 1 - rr - dL, "left")),
        ],
        R,
        C,
    )
    kR = reach(
        has_r,
        [
            (has_t, C - np.searchsorted(cs + dT, C - 1 + dR - rr, "right")),
            (has_b, C - np.searchsorted(cs + dB, C - 1 + dR - (R - 1 - rr), "left")),
            (has_l, C - np.clip(-((-(C - 1 + dR - dL)) // 2), 0, C)),
        ],
        R,
        C,
    )
    return _Edge(kT, iT, has_t), _Edge(kB, iB, has_b), _Edge(kL, iL, has_l), _Edge(kR, iR, has_r)


def _straight_in(
    hw: Mesh2DHardware,
    region: CoreRegion,
    at: np.ndarray,
    near: _Edge,
    far: _Edge,
    *,
    per: str,
    counts: np.ndarray,
    worst: _Worst,
) -> tuple[np.ndarray, np.ndarray]:
    """The reads from two opposite edges, line by line (``per`` column: top and bottom; per
    row: left and right): adds each channel's cores to ``counts``, the straight-in links' loads
    and the routes' latencies to ``worst``. Returns the cores each line takes from the near and
    from the far edge."""
    R, C = hw.core_grid
    cr, cc = hw.cores_per_tile
    column = per == "column"
    n, lines = (R, C) if column else (C, R)
    size, size_across = (cr, cc) if column else (cc, cr)
    forward, backward = (SOUTH, NORTH) if column else (EAST, WEST)
    across = 1 if column else 0  # channel coordinate along the edge
    line, lo, hi = region.runs(per=per)
    near_hi, far_lo = np.minimum(hi, near.reach[line]), np.maximum(lo, n - far.reach[line])
    n_near, n_far = _span(lo, near_hi), _span(far_lo, hi)
    for edge, served in ((near, n_near), (far, n_far)):
        if edge.present:
            counts += np.bincount(edge.index[line], weights=served, minlength=len(counts)).astype(
                np.int64
            )
    # straight-in loads fall with the distance from the edge: each line's worst link is the
    # first of each kind (intra- or inter-tile); a tile side holds one inter-tile link
    for direction, walk in ((forward, range(0, n - 1)), (backward, range(n - 1, 0, -1))):
        seen: set[bool] = set()
        for i in walk[: size + 1]:
            kind = bool(link_is_inter_tile(hw, direction, i))
            if kind in seen:
                continue
            seen.add(kind)
            beyond = (  # the cores past link i, seen from its edge
                _span(np.maximum(lo, i + 1), near_hi)
                if direction == forward
                else _span(far_lo, np.minimum(hi, i))
            )
            load = np.bincount(line, weights=beyond, minlength=lines)
            worst.load = max(worst.load, float(load.max() / link_bandwidth_Bps(hw, direction, i)))
    # the farthest core of each line from each edge: along the edge, then straight in
    for edge, deep, depth, depth_inter in (
        (near, n_near > 0, near_hi - 1, (near_hi - 1) // size),
        (far, n_far > 0, n - 1 - far_lo, (n - 1) // size - far_lo // size),
    ):
        if deep.any():
            x = at[edge.index[line[deep]], across]
            hops = np.abs(line[deep] - x) + depth[deep]
            inter = np.abs(line[deep] // size_across - x // size_across) + depth_inter[deep]
            worst.latency_ns = max(worst.latency_ns, float(route_latency_ns(hw, hops, inter).max()))
            worst.hops = max(worst.hops, int(hops.max()))
    return (
        np.bincount(line, weights=n_near, minlength=lines),
        np.bincount(line, weights=n_far, minlength=lines),
    )


def _by_lines(hw: Mesh2DHardware, region: CoreRegion, at: np.ndarray) -> tuple[np.ndarray, Profile]:
    """Cores per channel and the NoC profile of the region's reads, from rows and columns."""
    R, C = hw.core_grid
    top, bottom, left, right = _reaches(hw, at)
    counts = np.zeros(len(at), dtype=np.int64)
    worst = _Worst()
    n_top, n_bottom = _straight_in(
        hw, region, at, top, bottom, per="column", counts=counts, worst=worst
    )
    n_left, n_right = _straight_in(
        hw, region, at, left, right, per="row", counts=counts, worst=worst
    )
    # the four edges carry the along-the-edge legs and their own straight-in legs
    rr, cs = np.arange(R), np.arange(C)
    links = mesh_lines(hw)
    east_Bps, west_Bps = links[EAST].bandwidth_Bps, links[WEST].bandwidth_Bps
    south_Bps, north_Bps = links[SOUTH].bandwidth_Bps, links[NORTH].bandwidth_Bps
    for line, n_edge, x in ((0, n_top, at[top.index, 1]), (R - 1, n_bottom, at[bottom.index, 1])):
        inward = _line_cells(region, 0, line, 0, int(left.reach[line]), C)  # left-served
        outward = _line_cells(region, 0, line, C - int(right.reach[line]), C, C)  # right-served
        # along the edge from the channel at x to the column: forward links [x, c), or
        # backward links [c + 1, x] (link j leaves position j)
        east = _ranges(n_edge, x, cs, C) + _beyond(inward)
        west = _ranges(n_edge, cs + 1, x + 1, C) + _before(outward)
        worst.load = max(
            worst.load,
            float((east / east_Bps).max()),
            float((west / west_Bps).max()),
        )
    for line, n_edge, y in ((0, n_left, at[left.index, 0]), (C - 1, n_right, at[right.index, 0])):
        down = _line_cells(region, 1, line, 0, int(top.reach[line]), R)  # top-served
        up = _line_cells(region, 1, line, R - int(bottom.reach[line]), R, R)  # bottom-served
        south = _ranges(n_edge, y, rr, R) + _beyond(down)
        north = _ranges(n_edge, rr + 1, y + 1, R) + _before(up)
        worst.load = max(
            worst.load,
            float((south / south_Bps).max()),
            float((north / north_Bps).max()),
        )
    if worst.load == 0.0:
        return counts, Profile(0.0, float("inf"), 0)
    return counts, Profile(worst.latency_ns * 1e-9, 1.0 / worst.load, worst.hops)


def _line_cells(
    region: CoreRegion, axis: int, index: int | np.ndarray, lo: int, hi: int, n: int
) -> np.ndarray:
    """How many cores of ``region`` sit at each position ``0 .. n-1`` of row ``index`` (axis 0)
    or column ``index`` (axis 1), counting positions in ``[lo, hi)`` only (0 or 1 each); for
    an array of lines, one row per line."""
    r = region.rects
    across, along = (r[:, 0:2], r[:, 2:4]) if axis == 0 else (r[:, 2:4], r[:, 0:2])
    lines = np.atleast_1d(index)
    which, k = np.nonzero((across[None, :, 0] <= lines[:, None]) & (lines[:, None] < across[:, 1]))
    top = max(lo, hi)
    offset = which * (n + 1)  # each line's positions in a block of its own
    start = np.minimum(np.maximum(along[k, 0], lo), top) + offset  # np.clip, without its wrapper
    stop = np.minimum(np.maximum(along[k, 1], lo), top) + offset
    # +1 where a run starts, -1 where it stops (counted, not added one by one)
    size = len(lines) * (n + 1)
    diff = np.bincount(start, minlength=size) - np.bincount(stop, minlength=size)
    cells = np.cumsum(diff.reshape(len(lines), n + 1)[:, :n], axis=1)
    return cells if np.ndim(index) else cells[0]


def _ranges(weight: np.ndarray, start: np.ndarray, stop: np.ndarray, n: int) -> np.ndarray:
    """Load on the ``n`` links of a line from ``weight[k]`` on links ``[start[k], stop[k])``
    (empty where ``stop <= start``)."""
    go = start < stop
    diff = np.zeros(n + 1)
    np.add.at(diff, start[go], weight[go])
    np.add.at(diff, stop[go], -weight[go])
    return np.cumsum(diff[:n])


def _beyond(cells: np.ndarray) -> np.ndarray:
    """Load on forward link ``j`` of straight-in legs from position 0 to every cell: the
    cells past ``j`` (along the last axis)."""
    after = cells[..., ::-1].cumsum(axis=-1)[..., ::-1]  # cells at >= j
    out = np.zeros(cells.shape, dtype=np.float64)
    out[..., :-1] = after[..., 1:]
    return out


def _before(cells: np.ndarray) -> np.ndarray:
    """Load on backward link ``j`` (toward ``j - 1``) of straight-in legs from the last
    position to every cell: the cells before ``j`` (along the last axis)."""
    out: np.ndarray = (cells.cumsum(axis=-1) - cells).astype(np.float64)
    return out


# ---------------------------------------------------------------------------------------------
# interleaved placement


def _counts_on(at: np.ndarray, on: np.ndarray, along: int, n: int) -> np.ndarray:
    """How many of the channels selected by ``on`` sit at each position of their edge."""
    return np.bincount(at[on, along], minlength=n).astype(np.float64)


def _first_of_each_kind(line: MeshLine, forward: bool) -> list[int]:
    """The links of ``line`` (by source position) nearest its start, one of each kind (intra-
    and inter-tile): forward links from position 0 up, backward ones from the last position
    down. Along a straight-in leg the load only falls with the distance from the edge, so these
    are where each kind's load is largest."""
    n = len(line.inter)
    if n < 2:
        return []
    inter = line.inter.tolist()
    walk = inter[: n - 1] if forward else inter[n - 1 : 0 : -1]  # the kinds in walking order
    other = not walk[0]  # the other kind
    steps = [0, walk.index(other)] if other in walk else [0]
    return [j if forward else n - 1 - j for j in steps]


#: a run end past every run (no clipping)
_NO_END = int(np.iinfo(np.int64).max)


def _straight_in_worst(
    perimeter: _Perimeter,
    runs: tuple[np.ndarray, np.ndarray, np.ndarray],
    per: str,
    w: tuple[float, float],
    regions: int,
) -> np.ndarray:
    """Per region, the worst load over bandwidth of the straight-in legs on every column
    (``per="column"``: from the top with weight ``w[0]``, from the bottom with ``w[1]``) or row
    (left, right): the link past position ``i`` carries ``w`` times the region's cores beyond
    it on that line. ``runs``: the runs of ``regions`` stacked regions along those lines
    (:class:`_Stacked`: line ``l`` of region ``g`` is line ``g * lines + l``);
    ``perimeter``: the mesh's lines and their first links (:func:`_perimeter`). Every first
    link of both directions is one row of one pass: a forward link ``i`` counts the cores of
    a run at ``>= i + 1``, a backward one those at ``< i`` (each run clipped to
    ``[start, stop)``)."""
    links = perimeter.links
    column = per == "column"
    lines = len(links[EAST if column else SOUTH].inter)  # columns (rows) of the mesh
    line, lo, hi = runs
    start, stop, weight, bandwidth = [], [], [], []
    for direction, ahead, wd in (
        (SOUTH if column else EAST, True, w[0]),
        (NORTH if column else WEST, False, w[1]),
    ):
        if wd == 0:
            continue
        for i in perimeter.first[direction]:
            start.append(i + 1 if ahead else -_NO_END)
            stop.append(_NO_END if ahead else i)
            weight.append(wd)
            bandwidth.append(links[direction].bandwidth_Bps[i])
    if not start:
        return np.zeros(regions)
    k, size = len(start), regions * lines
    beyond = _span(
        np.maximum(lo, np.asarray(start)[:, None]), np.minimum(hi, np.asarray(stop)[:, None])
    )
    cells = (line + np.arange(0, k * size, size)[:, None]).ravel()  # row j's lines after j's
    per_line = np.bincount(cells, weights=beyond.ravel(), minlength=k * size)
    load = per_line.reshape(k, regions, lines).max(axis=2) * np.asarray(weight)[:, None]
    out: np.ndarray = (load / np.asarray(bandwidth)[:, None]).max(axis=0, initial=0.0)
    return out


@dataclass(frozen=True)
class _Stacked:
    """Regions side by side, for numpy over all of them: region ``g``'s rectangles with their
    rows moved by ``g`` mesh heights (``by_row``) or their columns by ``g`` mesh widths
    (``by_column``), so that each line (row or column) of each region is a line of its own;
    and the rectangles as they are (``rects``) with the region of each (``region``)."""

    count: int
    rects: np.ndarray
    region: np.ndarray
    by_row: CoreRegion
    by_column: CoreRegion


def _stacked(hw: Mesh2DHardware, regions: Sequence[CoreRegion]) -> _Stacked:
    if len(regions) == 1:  # one region: nothing to move
        (only,) = regions
        return _Stacked(1, only.rects, np.zeros(len(only.rects), dtype=np.int64), only, only)
    rows, cols = hw.core_grid
    rects = np.concatenate([r.rects for r in regions])
    region = np.repeat(np.arange(len(regions)), [len(r.rects) for r in regions])
    by_row, by_column = rects.copy(), rects.copy()
    by_row[:, 0:2] += (region * rows)[:, None]
    by_column[:, 2:4] += (region * cols)[:, None]
    return _Stacked(len(regions), rects, region, CoreRegion(by_row), CoreRegion(by_column))


@dataclass(frozen=True)
class _Perimeter:
    """The channels' side of interleaved reads on one mesh, the same for every region: the
    channels ``at``; the channels on the top, bottom (both with the corners), left and right
    edges (``totals``) and, per position ``j`` along the edges, those at positions ``<= j``
    (``upto``) and ``>= j`` (``from_``): ``[top, bottom]`` as a ``(2, columns)`` array and
    ``[left, right]`` as a ``(2, rows)`` one; the mesh's lines
    (:func:`~palm.network.loads.mesh_lines`) and, per direction, the links of a straight-in
    leg where each link kind's load is largest (:func:`_first_of_each_kind`)."""

    at: np.ndarray
    totals: tuple[float, float, float, float]  # top, bottom, left, right
    upto: tuple[np.ndarray, np.ndarray]
    from_: tuple[np.ndarray, np.ndarray]
    links: dict[int, MeshLine]
    first: dict[int, list[int]]


def _perimeter(hw: Mesh2DHardware, at: np.ndarray) -> _Perimeter:
    """The :class:`_Perimeter` of channels at ``at`` on ``hw``'s mesh."""
    R, C = hw.core_grid
    inner = (at[:, 0] > 0) & (at[:, 0] < R - 1)
    rows = np.stack([_counts_on(at, at[:, 0] == 0, 1, C), _counts_on(at, at[:, 0] == R - 1, 1, C)])
    cols = np.stack(
        [
            _counts_on(at, inner & (at[:, 1] == 0), 0, R),
            _counts_on(at, inner & (at[:, 1] == C - 1), 0, R),
        ]
    )
    links = mesh_lines(hw)
    top, bottom = rows.sum(axis=1)
    left, right = cols.sum(axis=1)
    return _Perimeter(
        at=at,
        totals=(top, bottom, left, right),
        upto=(rows.cumsum(axis=1), cols.cumsum(axis=1)),
        from_=(
            rows[:, ::-1].cumsum(axis=1)[:, ::-1],
            cols[:, ::-1].cumsum(axis=1)[:, ::-1],
        ),
        links=links,
        first={
            d: _first_of_each_kind(links[d], d in (EAST, SOUTH)) for d in (EAST, WEST, SOUTH, NORTH)
        },
    )


def _interleaved_lines(
    hw: Mesh2DHardware,
    regions: Sequence[CoreRegion],
    perimeter: _Perimeter,
    *,
    with_latency: bool = True,
) -> tuple[Profile, ...]:
    """NoC profile of interleaved reads from rows and columns, of every region at once. With
    ``W = 1 / C`` and ``T, B, L, R`` channels on the top, bottom, left and right edges (corners
    count as top and bottom):

    * straight-in legs: the link past row ``i`` of column ``c`` carries ``W T`` times the
      region's cores of column ``c`` below it (from the top), likewise for the other edges;
    * the edge lines add the along-the-edge legs: eastward link ``j`` of row 0 carries
      ``W (top channels at <= j) (region cores in columns > j)`` plus the left channels' row
      legs into row 0, and so on for the other directions and edges.

    The worst link over its bandwidth gives the bandwidth of one core's read; the latency is
    the longest (channel, core) route, found among the corners of the region's rectangles
    (unless ``with_latency`` is False: latency and hops 0)."""
    R, C = hw.core_grid
    at = perimeter.at
    w = 1.0 / len(at)
    T, B, L, Rr = perimeter.totals
    stacked = _stacked(hw, regions)
    g = stacked.count
    col_runs = stacked.by_column.runs(per="column")
    row_runs = stacked.by_row.runs(per="row")
    links = perimeter.links
    worst = np.maximum(
        _straight_in_worst(perimeter, col_runs, "column", (w * T, w * B), g),
        _straight_in_worst(perimeter, row_runs, "row", (w * L, w * Rr), g),
    )
    col_line, col_lo, col_hi = col_runs
    row_line, row_lo, row_hi = row_runs
    # per region and column: its cores, those in row 0 and those in row R-1 (an edge row's
    # channels reach every column along it, the left and right channels' row legs end in it);
    # likewise per row: all, column 0, column C-1
    per_col = np.bincount(col_line, weights=col_hi - col_lo, minlength=g * C).reshape(g, 1, C)
    per_row = np.bincount(row_line, weights=row_hi - row_lo, minlength=g * R).reshape(g, 1, R)
    cols = np.concatenate([per_col, _end_cells(col_runs, (0, R - 1), g, C)], axis=1)
    rows = np.concatenate([per_row, _end_cells(row_runs, (0, C - 1), g, R)], axis=1)
    beyond_col, before_col = _beyond(cols), _before(cols)
    beyond_row, before_row = _beyond(rows), _before(rows)
    east_Bps, west_Bps = links[EAST].bandwidth_Bps, links[WEST].bandwidth_Bps
    south_Bps, north_Bps = links[SOUTH].bandwidth_Bps, links[NORTH].bandwidth_Bps
    # rows 0 and R-1 of every region: along-the-edge legs of the top (bottom) channels to
    # every column, and the left and right channels' row legs into that row
    east = w * (perimeter.upto[0] * beyond_col[:, :1] + L * beyond_col[:, 1:])
    west = w * (perimeter.from_[0] * before_col[:, :1] + Rr * before_col[:, 1:])
    # columns 0 and C-1 likewise, from the left and right channels
    south = w * (perimeter.upto[1] * beyond_row[:, :1] + T * beyond_row[:, 1:])
    north = w * (perimeter.from_[1] * before_row[:, :1] + B * before_row[:, 1:])
    for load in (east / east_Bps, west / west_Bps, south / south_Bps, north / north_Bps):
        worst = np.maximum(worst, load.max(axis=(1, 2)))
    latency_ns, hops = (
        _farthest(hw, stacked, at) if with_latency else (np.zeros(g), np.zeros(g, np.int64))
    )
    return tuple(
        Profile(float(lat) * 1e-9, 1.0 / float(load), int(h))
        if load != 0.0
        else Profile(0.0, float("inf"), 0)
        for load, lat, h in zip(worst, latency_ns, hops, strict=True)
    )


def _end_cells(
    runs: tuple[np.ndarray, np.ndarray, np.ndarray], ends: tuple[int, int], regions: int, n: int
) -> np.ndarray:
    """Per region, its cores at each position ``0 .. n-1`` of the first and the last line
    across ``runs`` (rows 0 and ``R - 1`` from the runs per column, columns 0 and ``C - 1`` from
    the runs per row), as a ``(regions, 2, n)`` array: a run ``[lo, hi)`` on line ``l`` (of
    region ``l // n``, :class:`_Stacked`) puts a core at position ``l % n`` of end ``e`` when
    ``lo <= e < hi``."""
    line, lo, hi = runs
    at = np.asarray(ends)[:, None]
    end, k = ((lo <= at) & (at < hi)).nonzero()
    cells = np.bincount(end * (regions * n) + line[k], minlength=2 * regions * n)
    out: np.ndarray = cells.reshape(2, regions, n).transpose(1, 0, 2)
    return out


def _farthest(
    hw: Mesh2DHardware, stacked: _Stacked, at: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per region, the latency (ns) and hops of the longest channel-to-core route: edge-first
    routes are minimal, so a route's hops and tile crossings are the Manhattan distances in
    cores and in tiles, largest at a corner of one of the region's rectangles."""
    r = stacked.rects
    keep = (r[:, 1] > r[:, 0]) & (r[:, 3] > r[:, 2])  # empty rectangles have no corners
    r, region = r[keep], stacked.region[keep]
    # rectangles are half-open: their last row and column are r1 - 1 and c1 - 1
    corners = np.stack(
        [r[:, [0, 0, 1, 1]] - [0, 0, 1, 1], r[:, [2, 3, 2, 3]] - [0, 1, 0, 1]], axis=2
    )
    corners = corners.reshape(-1, 1, 2)
    hops = np.abs(corners - at[None, :, :]).sum(axis=2)
    tile = np.asarray(hw.cores_per_tile, dtype=np.int64)
    tiles = np.abs(corners // tile - at[None, :, :] // tile).sum(axis=2)
    latency = route_latency_ns(hw, hops, tiles).max(axis=1)  # per corner
    of = np.repeat(region, 4)
    if len(np.unique(of)) < stacked.count:
        raise ValueError("a region without cores has no farthest route")
    worst_ns = np.full(stacked.count, -np.inf)
    np.maximum.at(worst_ns, of, latency)
    most_hops = np.zeros(stacked.count, dtype=np.int64)
    np.maximum.at(most_hops, of, hops.max(axis=1))
    return worst_ns, most_hops
