"""How a stage's cores reach the DRAM channels on the edge of a mesh (paper Eq. 4, 5).

Each core reads from its nearest channel (Manhattan distance, lowest channel index on ties).
The read is routed **edge first**: from a channel on the top or bottom edge along that edge and
then straight down or up the core's column (XY), from a channel on the left or right edge along
that edge and then straight along the core's row (YX); corner channels count as top or bottom.
The paper does not fix the routing of DRAM traffic. Plain XY everywhere would send all reads of
a left-edge channel through the channel's own row while a top-edge channel spreads its reads
along the edge, so rotating a mesh by 90 degrees would change its DRAM time; edge-first routing
treats the four edges alike (see docs/model.md).

Two implementations give the same :class:`DramAccess`:

* :func:`dram_access_per_core` routes every core (numpy over all cores; it also yields the load
  of every link, which the event engine's per-link mode needs);
* the default path of :func:`dram_access` works on rows and columns only. The cores served by
  the top edge form, in every column, a run of rows starting at the top (and likewise for the
  other edges: bottom runs end at the bottom, left and right runs are runs of columns in every
  row), because moving one row down adds one to the distance to the top edge and changes the
  distance to every other edge's nearest channel by at most one the other way. Under edge-first
  routing the load on the straight-in links then falls with the distance from the edge, so a
  column's or row's worst link is the first one of each link kind (intra- or inter-tile), and
  the along-the-edge loads are four one-dimensional sums. Its cost grows with the rows and
  columns of the mesh, not with the cores (the tests check it against the per-core path).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from palm.hardware.spec import Mesh2DHardware
from palm.network.loads import EAST, NORTH, SOUTH, WEST, LinkLoad, Profile, mesh_profile
from palm.network.loads import nearest_channel as _nearest_channel
from palm.network.region import CoreRegion

__all__ = ["DramAccess", "dram_access", "dram_access_per_core", "link_bandwidth_Bps"]


@dataclass(frozen=True)
class DramAccess:
    """How one stage's cores reach DRAM (paper Eq. 4, 5): each core reads its nearest channel,
    so channel ``i`` serves ``cores_per_channel[i]`` cores; ``noc`` is the profile of all those
    reads crossing the mesh at once. A read of ``b`` bytes per core takes, on channel ``i``,

        response + NoC latency + b * max(cores_i / channel_bandwidth, 1 / NoC bandwidth)

    and the access is done when its slowest channel is."""

    channels: tuple[int, ...]
    cores_per_channel: tuple[int, ...]
    noc: Profile
    channel_bandwidth_Bps: float
    response_s: float

    def channel_time(self, index: int, nbytes_per_core: float) -> float:
        if nbytes_per_core <= 0:
            return 0.0
        per_byte = max(
            self.cores_per_channel[index] / self.channel_bandwidth_Bps, 1.0 / self.noc.bandwidth_Bps
        )
        return self.response_s + self.noc.latency_s + nbytes_per_core * per_byte

    def time(self, nbytes_per_core: float) -> float:
        """When the busiest channel is done (the time grows with a channel's core count)."""
        if not self.channels:
            return 0.0
        busiest = self.cores_per_channel.index(max(self.cores_per_channel))
        return self.channel_time(busiest, nbytes_per_core)


def dram_access(
    hw: Mesh2DHardware, region: CoreRegion, channels_at: np.ndarray, *, with_links: bool = False
) -> DramAccess:
    """The DRAM access of the cores of ``region`` (channels at ``channels_at``, as
    :func:`~palm.network.loads.dram_channel_cores` places them). ``with_links`` keeps the load
    of every link, which needs the per-core path."""
    rows, cols = hw.core_grid
    if with_links or rows < 3 or cols < 3:
        return dram_access_per_core(hw, region.cores(), channels_at, with_links=with_links)
    counts, noc = _by_lines(hw, region, channels_at)
    return _access(hw, counts, noc)


def dram_access_per_core(
    hw: Mesh2DHardware,
    cores: np.ndarray,
    channels_at: np.ndarray,
    *,
    with_links: bool = False,
    write: bool = False,
) -> DramAccess:
    """Every core of ``cores`` reads from (``write``: writes to) its nearest channel, routed
    edge first, one route per core."""
    cores = np.asarray(cores, dtype=np.int64).reshape(-1, 2)
    nearest = _nearest_channel(hw, cores)
    ends = channels_at[nearest]
    rows, cols = hw.core_grid
    along_rows = (ends[:, 0] == 0) | (ends[:, 0] == rows - 1)  # top and bottom edges: XY
    parts = []
    if along_rows.any():
        src, dst = ends[along_rows], cores[along_rows]
        parts.append(mesh_profile(hw, *((dst, src) if write else (src, dst)), with_links=True))
    if (~along_rows).any():  # left and right edges: YX, i.e. XY on the transposed mesh
        src, dst = ends[~along_rows][:, ::-1], cores[~along_rows][:, ::-1]
        flipped = _transposed(hw)
        prof = mesh_profile(flipped, *((dst, src) if write else (src, dst)), with_links=True)
        parts.append(dataclasses.replace(prof, links=_untranspose(hw, prof.links)))
    loads = [p.links for p in parts if p.links is not None]
    counts = np.bincount(nearest, minlength=len(channels_at))
    if not loads:
        return _access(hw, counts, Profile(0.0, float("inf"), 0))
    ids, inverse = np.unique(np.concatenate([x.ids for x in loads]), return_inverse=True)
    per_link = np.bincount(inverse, weights=np.concatenate([x.loads for x in loads]))
    worst = float((per_link / link_bandwidth_Bps(hw, ids)).max())
    noc = Profile(
        max(p.latency_s for p in parts),
        1.0 / worst,
        max(p.hops for p in parts),
        LinkLoad(ids, per_link) if with_links else None,
    )
    return _access(hw, counts, noc)


def link_bandwidth_Bps(hw: Mesh2DHardware, link_ids: np.ndarray) -> np.ndarray:
    """Bandwidth of mesh links by id (see :class:`~palm.network.loads.LinkLoad`): inter-tile
    where the link crosses a tile boundary."""
    cr, cc = hw.cores_per_tile
    node, direction = np.divmod(np.asarray(link_ids, dtype=np.int64), 4)
    r, c = np.divmod(node, hw.core_grid[1])
    inter = np.select(
        [direction == EAST, direction == WEST, direction == SOUTH],
        [(c + 1) % cc == 0, c % cc == 0, (r + 1) % cr == 0],
        default=r % cr == 0,
    )
    return np.where(inter, hw.inter_tile_link_gbps, hw.intra_tile_link_gbps) * 1e9


def _access(hw: Mesh2DHardware, counts: np.ndarray, noc: Profile) -> DramAccess:
    used = np.nonzero(counts)[0]
    return DramAccess(
        channels=tuple(used.tolist()),
        cores_per_channel=tuple(counts[used].tolist()),
        noc=noc,
        channel_bandwidth_Bps=hw.dram_channel_bandwidth_gbps * 1e9 * hw.memory_efficiency,
        response_s=hw.dram_response_ns * 1e-9,
    )


def _transposed(hw: Mesh2DHardware) -> Mesh2DHardware:
    return dataclasses.replace(hw, tiles=hw.tiles[::-1], cores_per_tile=hw.cores_per_tile[::-1])


def _untranspose(hw: Mesh2DHardware, links: LinkLoad | None) -> LinkLoad | None:
    """Link ids of the transposed mesh back in the mesh's own numbering."""
    if links is None:
        return None
    rows, cols = hw.core_grid
    node, direction = np.divmod(links.ids, 4)
    c, r = np.divmod(node, rows)  # transposed (row, col) = (c, r)
    turned = np.array([SOUTH, NORTH, EAST, WEST])[direction]
    return LinkLoad((r * cols + c) * 4 + turned, links.loads)


# ---------------------------------------------------------------------------------------------
# rows-and-columns path

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


def _expand(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``[lo[k], hi[k])``: every point and the range it belongs to."""
    sizes = np.maximum(hi - lo, 0)
    which = np.repeat(np.arange(len(lo)), sizes)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return lo[which] + np.arange(int(sizes.sum())) - starts, which


def _span(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.maximum(b - a, 0)
    return out


def _by_lines(
    hw: Mesh2DHardware, region: CoreRegion, channels_at: np.ndarray
) -> tuple[np.ndarray, Profile]:
    """Cores per channel and the NoC profile of the region's reads, from rows and columns."""
    R, C = hw.core_grid
    cr, cc = hw.cores_per_tile
    at = channels_at
    top_pos, top_idx = _side(at, at[:, 0] == 0, 1)
    bot_pos, bot_idx = _side(at, at[:, 0] == R - 1, 1)
    inner = (at[:, 0] > 0) & (at[:, 0] < R - 1)
    left_pos, left_idx = _side(at, inner & (at[:, 1] == 0), 0)
    right_pos, right_idx = _side(at, inner & (at[:, 1] == C - 1), 0)
    dT, iT = _nearest_on_line(top_pos, top_idx, C)
    dB, iB = _nearest_on_line(bot_pos, bot_idx, C)
    dL, iL = _nearest_on_line(left_pos, left_idx, R)
    dR, iR = _nearest_on_line(right_pos, right_idx, R)
    has_t, has_b = len(top_pos) > 0, len(bot_pos) > 0
    has_l, has_r = len(left_pos) > 0, len(right_pos) > 0
    rr, cs = np.arange(R), np.arange(C)

    # how far each edge's cores reach; ties go to the lower channel index, and the edges'
    # index ranges run top < right < bottom < left (corners belong to top and bottom)
    def limit(ok: bool, value: np.ndarray, full: int) -> np.ndarray:
        return value if ok else np.full(len(value), full, dtype=np.int64)

    kT = np.zeros(C, dtype=np.int64)
    if has_t:
        kT = np.minimum.reduce(
            [
                limit(has_b, np.clip((R - 1 + dB - dT) // 2 + 1, 0, R), R),
                limit(has_r, np.searchsorted(rr - dR, C - 1 - cs - dT, "right"), R),
                limit(has_l, np.searchsorted(rr - dL, cs - dT, "right"), R),
            ]
        )
    kB = np.zeros(C, dtype=np.int64)
    if has_b:
        kB = np.minimum.reduce(
            [
                limit(has_t, R - np.clip((R - 1 + dB - dT) // 2 + 1, 0, R), R),
                limit(has_r, R - np.searchsorted(rr + dR, R - 1 + dB - (C - 1 - cs), "right"), R),
                limit(has_l, R - np.searchsorted(rr + dL, R - 1 + dB - cs, "left"), R),
            ]
        )
    kL = np.zeros(R, dtype=np.int64)
    if has_l:
        kL = np.minimum.reduce(
            [
                limit(has_t, np.searchsorted(cs - dT, rr - dL, "left"), C),
                limit(has_r, np.clip((C - 2 + dR - dL) // 2 + 1, 0, C), C),
                limit(has_b, np.searchsorted(cs - dB, R - 1 - rr - dL, "left"), C),
            ]
        )
    kR = np.zeros(R, dtype=np.int64)
    if has_r:
        kR = np.minimum.reduce(
            [
                limit(has_t, C - np.searchsorted(cs + dT, C - 1 + dR - rr, "right"), C),
                limit(has_b, C - np.searchsorted(cs + dB, C - 1 + dR - (R - 1 - rr), "left"), C),
                limit(has_l, C - np.clip(-((-(C - 1 + dR - dL)) // 2), 0, C), C),
            ]
        )

    r0, r1, c0, c1 = (region.rects[:, k] for k in range(4))
    counts = np.zeros(len(at), dtype=np.int64)
    bw_in, bw_out = hw.intra_tile_link_gbps * 1e9, hw.inter_tile_link_gbps * 1e9
    lat_in, lat_out = hw.intra_tile_link_latency_ns, hw.inter_tile_link_latency_ns
    worst = 0.0  # max over links of load / bandwidth
    latency = 0.0
    hops = 0

    def route(
        h_hops: np.ndarray, h_inter: np.ndarray, v_hops: np.ndarray, v_inter: np.ndarray
    ) -> None:
        nonlocal latency, hops
        if len(h_hops):
            total, inter = h_hops + v_hops, h_inter + v_inter
            latency = max(latency, float(((total - inter) * lat_in + inter * lat_out).max()))
            hops = max(hops, int(total.max()))

    def first_links(
        start: int, step: int, stop: int, inter_at: Callable[[int], bool], period: int
    ) -> list[tuple[int, float]]:
        """The first link of each kind walking from ``start`` by ``step`` (exclusive
        ``stop``), with its bandwidth: a straight-in leg's worst link is one of them. Every
        ``period`` links (a tile side) hold one inter-tile link, so the walk is short."""
        out: list[tuple[int, float]] = []
        seen: set[bool] = set()
        for i in range(start, stop, step)[: period + 1]:
            kind = bool(inter_at(i))
            if kind not in seen:
                seen.add(kind)
                out.append((i, bw_out if kind else bw_in))
            if len(seen) == 2:
                break
        return out

    # per column: cores served from the top (rows [0, kT)) and the bottom (rows [R-kB, R))
    col, k = _expand(c0, c1)
    lo, hi = r0[k], r1[k]
    top_hi, bot_lo = np.minimum(hi, kT[col]), np.maximum(lo, R - kB[col])
    n_top, n_bot = _span(lo, top_hi), _span(bot_lo, hi)
    counts += (
        np.bincount(iT[col], weights=n_top, minlength=len(at)).astype(np.int64) if has_t else 0
    )
    counts += (
        np.bincount(iB[col], weights=n_bot, minlength=len(at)).astype(np.int64) if has_b else 0
    )
    for i, bw in first_links(0, 1, R - 1, lambda i: (i + 1) % cr == 0, cr):  # south, from the top
        load = np.bincount(col, weights=_span(np.maximum(lo, i + 1), top_hi), minlength=C)
        worst = max(worst, float(load.max()) / bw)
    for i, bw in first_links(R - 1, -1, 0, lambda i: i % cr == 0, cr):  # north, from the bottom
        load = np.bincount(col, weights=_span(bot_lo, np.minimum(hi, i)), minlength=C)
        worst = max(worst, float(load.max()) / bw)
    x_top, x_bot = at[iT[col], 1], at[iB[col], 1]
    deep = n_top > 0
    far = top_hi[deep] - 1
    route(
        np.abs(col[deep] - x_top[deep]),
        np.abs(col[deep] // cc - x_top[deep] // cc),
        far,
        far // cr,
    )
    deep = n_bot > 0
    near = bot_lo[deep]
    route(
        np.abs(col[deep] - x_bot[deep]),
        np.abs(col[deep] // cc - x_bot[deep] // cc),
        R - 1 - near,
        (R - 1) // cr - near // cr,
    )

    # per row: cores served from the left (columns [0, kL)) and the right ([C-kR, C))
    row, k = _expand(r0, r1)
    lo, hi = c0[k], c1[k]
    left_hi, right_lo = np.minimum(hi, kL[row]), np.maximum(lo, C - kR[row])
    n_left, n_right = _span(lo, left_hi), _span(right_lo, hi)
    counts += (
        np.bincount(iL[row], weights=n_left, minlength=len(at)).astype(np.int64) if has_l else 0
    )
    counts += (
        np.bincount(iR[row], weights=n_right, minlength=len(at)).astype(np.int64) if has_r else 0
    )
    for j, bw in first_links(0, 1, C - 1, lambda j: (j + 1) % cc == 0, cc):  # east, from the left
        load = np.bincount(row, weights=_span(np.maximum(lo, j + 1), left_hi), minlength=R)
        worst = max(worst, float(load.max()) / bw)
    for j, bw in first_links(C - 1, -1, 0, lambda j: j % cc == 0, cc):  # west, from the right
        load = np.bincount(row, weights=_span(right_lo, np.minimum(hi, j)), minlength=R)
        worst = max(worst, float(load.max()) / bw)
    y_left, y_right = at[iL[row], 0], at[iR[row], 0]
    deep = n_left > 0
    far = left_hi[deep] - 1
    route(
        far,
        far // cc,
        np.abs(row[deep] - y_left[deep]),
        np.abs(row[deep] // cr - y_left[deep] // cr),
    )
    deep = n_right > 0
    near = right_lo[deep]
    route(
        C - 1 - near,
        (C - 1) // cc - near // cc,
        np.abs(row[deep] - y_right[deep]),
        np.abs(row[deep] // cr - y_right[deep] // cr),
    )

    # the four edges carry the along-the-edge legs and their own straight-in legs
    n_top_col = np.bincount(col, weights=n_top, minlength=C)
    n_bot_col = np.bincount(col, weights=n_bot, minlength=C)
    n_left_row = np.bincount(row, weights=n_left, minlength=R)
    n_right_row = np.bincount(row, weights=n_right, minlength=R)
    east_bw = np.where((cs + 1) % cc == 0, bw_out, bw_in)
    west_bw = np.where(cs % cc == 0, bw_out, bw_in)
    south_bw = np.where((rr + 1) % cr == 0, bw_out, bw_in)
    north_bw = np.where(rr % cr == 0, bw_out, bw_in)
    for line, n_edge, x in ((0, n_top_col, at[iT, 1]), (R - 1, n_bot_col, at[iB, 1])):
        inward = _line_cells(region, 0, line, 0, int(kL[line]), C)  # left-served, this row
        outward = _line_cells(region, 0, line, C - int(kR[line]), C, C)  # right-served
        # along the edge from the channel at x to the column: forward links [x, c), or
        # backward links [c + 1, x] (link j leaves position j)
        east = _ranges(n_edge, x, cs, C) + _beyond(inward)
        west = _ranges(n_edge, cs + 1, x + 1, C) + _before(outward)
        worst = max(worst, float((east / east_bw).max()), float((west / west_bw).max()))
    for line, n_edge, y in ((0, n_left_row, at[iL, 0]), (C - 1, n_right_row, at[iR, 0])):
        down = _line_cells(region, 1, line, 0, int(kT[line]), R)  # top-served, this column
        up = _line_cells(region, 1, line, R - int(kB[line]), R, R)  # bottom-served
        south = _ranges(n_edge, y, rr, R) + _beyond(down)
        north = _ranges(n_edge, rr + 1, y + 1, R) + _before(up)
        worst = max(worst, float((south / south_bw).max()), float((north / north_bw).max()))
    if worst == 0.0:
        return counts, Profile(0.0, float("inf"), 0)
    return counts, Profile(latency * 1e-9, 1.0 / worst, hops)


def _line_cells(region: CoreRegion, axis: int, index: int, lo: int, hi: int, n: int) -> np.ndarray:
    """How many cores of ``region`` sit at each position ``0 .. n-1`` of row ``index`` (axis 0)
    or column ``index`` (axis 1), counting positions in ``[lo, hi)`` only (0 or 1 each)."""
    r = region.rects
    across, along = (r[:, 0:2], r[:, 2:4]) if axis == 0 else (r[:, 2:4], r[:, 0:2])
    on = (across[:, 0] <= index) & (index < across[:, 1])
    start = np.clip(along[on, 0], lo, max(lo, hi))
    stop = np.clip(along[on, 1], lo, max(lo, hi))
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, start, 1)
    np.add.at(diff, stop, -1)
    return np.cumsum(diff[:n])


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
    cells past ``j``."""
    after = np.cumsum(cells[::-1])[::-1]  # cells at >= j
    return np.append(after[1:], 0).astype(np.float64)


def _before(cells: np.ndarray) -> np.ndarray:
    """Load on backward link ``j`` (toward ``j - 1``) of straight-in legs from the last
    position to every cell: the cells before ``j``."""
    out: np.ndarray = (np.cumsum(cells) - cells).astype(np.float64)
    return out
