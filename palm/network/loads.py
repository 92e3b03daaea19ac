"""Link loads of a set of simultaneous transfers, and the flow profile they imply.

A *flow* is a set of transfers that start together and finish together: the ring steps of a
collective on all replicas of a stage, the activation hand-off of every device of a stage to its
peer in the next, or every core of a stage reading DRAM. Its time is

    latency + bytes_per_transfer / bandwidth_eff,   bandwidth_eff = min over links (bw / load)

where ``load`` counts the transfers that cross a link (paper Eq. 2 for one transfer; transfers of
one flow sharing a link split its bandwidth). A ring whose edges use distinct links has
``load = 1`` everywhere and recovers the closed form.

On a mesh the routes are XY (along the row, then the column) and loads are accumulated with
difference arrays over the bounding box of the flow, so the cost is linear in the number of
transfers plus the box area, with no per-link Python loop. On a GPU cluster a transfer inside a
node loads the sender's switch port out and the receiver's port in; across nodes, the sender's
and receiver's NICs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from palm.hardware.spec import GpuClusterHardware, Hardware, Mesh2DHardware
from palm.network.memo import remember

__all__ = [
    "Profile",
    "LinkLoad",
    "MeshLine",
    "mesh_lines",
    "mesh_profile",
    "mesh_link_key",
    "tile_aligned_key",
    "cluster_profile",
    "cluster_one_to_one_profile",
    "profile",
    "dram_channel_cores",
    "per_tile_channel_cores",
    "tile_hardware",
    "link_is_inter_tile",
    "link_bandwidth_Bps",
    "route_latency_ns",
    "ring_order",
    "ring_orders",
]

#: directed mesh link directions: east (+col), west (-col), south (+row), north (-row)
EAST, WEST, SOUTH, NORTH = 0, 1, 2, 3


@dataclass(frozen=True)
class LinkLoad:
    """Transfers per link of one flow. Mesh link id: ``((row * cols) + col) * 4 + dir`` of its
    source router; cluster ids: ``("sw_out", gpu)`` etc. encoded as ints
    ``kind * devices + gpu`` with kind 0..3 = switch out, switch in, NIC out, NIC in.

    ``blocks``: on a cluster, optionally the same loads summed per block of ``block`` GPUs,
    each id naming its block's first GPU (``kind * devices + block * (gpu // block)``): what a
    reader that counts loads per group of GPUs (a multiple of ``block``) reads instead of one
    entry per port (:func:`cluster_one_to_one_profile`)."""

    ids: np.ndarray
    loads: np.ndarray
    block: int = 1
    blocks: LinkLoad | None = None


@dataclass(frozen=True)
class Profile:
    """What one transfer of the flow sees: its latency and its effective bandwidth."""

    latency_s: float
    bandwidth_Bps: float
    hops: int
    links: LinkLoad | None = field(default=None, repr=False, compare=False)

    def time(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        return self.latency_s + nbytes / self.bandwidth_Bps


_EMPTY = Profile(0.0, float("inf"), 0)


def link_is_inter_tile(
    hw: Mesh2DHardware, direction: int | np.ndarray, position: int | np.ndarray
) -> np.ndarray:
    """Whether the mesh link leaving core column (east, west) or row (south, north)
    ``position`` in ``direction`` crosses a tile boundary: eastward out of the last column of a
    tile, westward out of its first, and likewise for rows."""
    cr, cc = hw.cores_per_tile
    if isinstance(direction, int | np.integer):  # one direction: no array of sizes
        one = cc if direction in (EAST, WEST) else cr
        at = np.asarray(position)
        ahead = direction in (EAST, SOUTH)
        return np.asarray((at + 1) % one == 0 if ahead else at % one == 0)
    direction, position = np.asarray(direction), np.asarray(position)
    size = np.where((direction == EAST) | (direction == WEST), cc, cr)
    forward = (direction == EAST) | (direction == SOUTH)
    inter: np.ndarray = np.where(forward, (position + 1) % size == 0, position % size == 0)
    return inter


def link_bandwidth_Bps(
    hw: Mesh2DHardware,
    direction: int | np.ndarray,
    position: int | np.ndarray,
    *,
    inter: np.ndarray | None = None,
) -> np.ndarray:
    """Bandwidth of the links of :func:`link_is_inter_tile` (``inter``: its answer for them,
    when the caller has it already)."""
    if inter is None:
        inter = link_is_inter_tile(hw, direction, position)
    if hw.chip_links_per_edge <= 0:
        bw: np.ndarray = np.where(inter, hw.inter_tile_link_gbps, hw.intra_tile_link_gbps) * 1e9
        return bw
    # chips joined by Ethernet: a tile edge's links shared by the rows (columns) crossing it
    along_row = (np.asarray(direction) == EAST) | (np.asarray(direction) == WEST)
    across = np.where(
        along_row, hw.inter_tile_gbps(along_row=True), hw.inter_tile_gbps(along_row=False)
    )
    chip: np.ndarray = np.where(inter, across, hw.intra_tile_link_gbps) * 1e9
    return chip


@dataclass(frozen=True)
class MeshLine:
    """The links of a row (``EAST``, ``WEST``) or a column (``SOUTH``, ``NORTH``) of the mesh
    in one direction, by the position they leave: whether each crosses a tile boundary
    (:func:`link_is_inter_tile`) and its bandwidth (:func:`link_bandwidth_Bps`)."""

    inter: np.ndarray
    bandwidth_Bps: np.ndarray


def mesh_lines(hw: Mesh2DHardware) -> dict[int, MeshLine]:
    """The links of a line in each of the four directions (:class:`MeshLine`), priced once for
    every line of the mesh (a link's kind and bandwidth depend on its position only)."""
    rows, cols = hw.core_grid
    out = {}
    for direction, n in ((EAST, cols), (WEST, cols), (SOUTH, rows), (NORTH, rows)):
        at = np.arange(n)
        inter = link_is_inter_tile(hw, direction, at)
        out[direction] = MeshLine(inter, link_bandwidth_Bps(hw, direction, at, inter=inter))
    return out


def route_latency_ns(hw: Mesh2DHardware, hops: np.ndarray, inter: np.ndarray) -> np.ndarray:
    """Latency of routes of ``hops`` links, ``inter`` of them crossing tile boundaries."""
    lat: np.ndarray = (
        hops - inter
    ) * hw.intra_tile_link_latency_ns + inter * hw.inter_tile_link_latency_ns
    return lat


def _as_array(points: np.ndarray | list[tuple[int, int]]) -> np.ndarray:
    arr = np.asarray(points, dtype=np.int64)
    return arr.reshape(-1, 2)


def mesh_profile(
    hw: Mesh2DHardware, src: np.ndarray, dst: np.ndarray, *, with_links: bool = False
) -> Profile:
    """Profile of simultaneous XY transfers ``src[i] -> dst[i]`` (core coordinates);
    remembered inside :func:`palm.network.memo.shared_geometry` (without link loads) under
    :func:`tile_aligned_key`, so copies of the routes moved by whole tiles share it."""
    src, dst = _as_array(src), _as_array(dst)
    if with_links:
        return _mesh_profile(hw, src, dst, with_links=True)
    return remember(
        lambda: ("mesh_profile", mesh_link_key(hw), *tile_aligned_key(hw, src, dst)),
        lambda: _mesh_profile(hw, src, dst, with_links=False),
    )


def mesh_link_key(hw: Mesh2DHardware) -> tuple[object, ...]:
    """Every hardware field that routes and link loads are priced from (the grid,
    :func:`link_bandwidth_Bps`, :func:`route_latency_ns`): the key of the memoised
    geometry (:mod:`palm.network.memo`) beside the routes' own inputs."""
    return (
        hw.tiles,
        hw.cores_per_tile,
        hw.intra_tile_link_gbps,
        hw.inter_tile_link_gbps,
        hw.intra_tile_link_latency_ns,
        hw.inter_tile_link_latency_ns,
        hw.chip_links_per_edge,
    )


def tile_aligned_key(hw: Mesh2DHardware, *points: np.ndarray) -> tuple[object, ...]:
    """The shapes and bytes of ``points`` (int64 core coordinates, ``(..., 2)``) all moved by
    the same whole number of tiles, so that their least row and least column fall in the
    first tile: a key under which copies of a set of routes translated by whole tiles are
    equal. Such copies have the same profile bit for bit (without link loads): a link's
    bandwidth and latency depend only on its position inside its tile, and the loads and hops
    only on the routes' shape."""
    cores = np.concatenate([p.reshape(-1, 2) for p in points])
    if len(cores) == 0:
        return tuple((p.shape, p.tobytes()) for p in points)
    tile = np.asarray(hw.cores_per_tile, dtype=np.int64)
    shift = cores.min(axis=0) // tile * tile
    return tuple((p.shape, (p - shift).tobytes()) for p in points)


def _mesh_profile(
    hw: Mesh2DHardware, src: np.ndarray, dst: np.ndarray, *, with_links: bool
) -> Profile:
    keep = np.any(src != dst, axis=1)
    src, dst = src[keep], dst[keep]
    if len(src) == 0:
        return _EMPTY
    # latency: intra- and inter-tile hops of each route
    tile = np.asarray(hw.cores_per_tile, dtype=np.int64)
    hops = np.abs(dst - src).sum(axis=1)
    inter = np.abs(dst // tile - src // tile).sum(axis=1)
    latency = float(route_latency_ns(hw, hops, inter).max()) * 1e-9
    # the flow's bounding box, from (r0, c0): nr rows, nc columns
    both = np.concatenate((src, dst))
    corner = both.min(axis=0)
    r0, c0 = corner.tolist()
    nr, nc = (both.max(axis=0) - corner + 1).tolist()
    (rr1, cc1), (rr2, cc2) = (src - corner).T, (dst - corner).T
    # links [start, stop) of each route's row leg (on row r1) and column leg (on column c2),
    # by the position they leave: eastward [c1, c2), westward (c2, c1] (indexed by source
    # position), likewise south and north; a leg of no links adds +1 and -1 at one place
    west, north = cc2 < cc1, rr2 < rr1
    h_load = _line_loads(
        rr1, np.minimum(cc1, cc2) + west, np.maximum(cc1, cc2) + west, west, nr, nc
    )  # [east | west, row, col]
    v_load = _line_loads(
        cc2, np.minimum(rr1, rr2) + north, np.maximum(rr1, rr2) + north, north, nc, nr
    )  # [south | north, col, row]
    lines = remember(lambda: ("mesh_lines", mesh_link_key(hw)), lambda: mesh_lines(hw))
    worst = 0.0
    for load, line, lo, n in (
        (h_load[0], lines[EAST], c0, nc),
        (h_load[1], lines[WEST], c0, nc),
        (v_load[0], lines[SOUTH], r0, nr),
        (v_load[1], lines[NORTH], r0, nr),
    ):
        if load.any():
            worst = max(worst, float((load / line.bandwidth_Bps[None, lo : lo + n]).max()))
    links = None
    if with_links:
        links = _mesh_link_ids(hw, h_load, v_load, r0, c0)
    return Profile(latency, 1.0 / worst, int(hops.max()), links)


def _line_loads(
    line: np.ndarray,
    start: np.ndarray,
    stop: np.ndarray,
    backward: np.ndarray,
    lines: int,
    n: int,
) -> np.ndarray:
    """Routes per link of legs along ``lines`` lines of ``n`` positions: leg ``k`` crosses
    links ``[start[k], stop[k])`` of line ``line[k]`` in the forward direction, or the
    backward one where ``backward[k]``; ``[forward | backward, line, position]``, from a
    difference array (+1 at start, -1 at stop) summed along each line."""
    width = n + 1
    size = lines * width
    at = backward * size + line * width
    diff = np.bincount(at + start, minlength=2 * size) - np.bincount(at + stop, minlength=2 * size)
    load: np.ndarray = np.cumsum(diff.astype(np.float64).reshape(2, lines, width), axis=2)
    return load[:, :, :n]


def _mesh_link_ids(
    hw: Mesh2DHardware, h_load: np.ndarray, v_load: np.ndarray, r0: int, c0: int
) -> LinkLoad:
    cols_total = hw.core_grid[1]
    ids: list[np.ndarray] = []
    loads: list[np.ndarray] = []
    for d in (EAST, WEST):
        r, c = np.nonzero(h_load[d])
        ids.append(((r + r0) * cols_total + (c + c0)) * 4 + d)
        loads.append(h_load[d][r, c])
    for d in (SOUTH, NORTH):
        c, r = np.nonzero(v_load[d - 2])
        ids.append(((r + r0) * cols_total + (c + c0)) * 4 + d)
        loads.append(v_load[d - 2][c, r])
    return LinkLoad(np.concatenate(ids), np.concatenate(loads))


def cluster_profile(
    hw: GpuClusterHardware,
    src: np.ndarray,
    dst: np.ndarray,
    *,
    devices: int,
    with_links: bool = False,
) -> Profile:
    """Profile of simultaneous GPU-to-GPU transfers ``src[i] -> dst[i]`` (global ranks).

    Each transfer loads its source's and its destination's switch port (same node) or NIC
    (across nodes); the busiest port sets the bandwidth. Only the ports the transfers touch are
    counted (:func:`_port_counts`), so the cost grows with the transfers, not with ``devices``
    (a stage's ring of a 98,304-GPU cluster touches a few thousand of its 393,216 ports)."""
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if len(src) == 0:
        return _EMPTY
    g = hw.gpus_per_node
    same = src // g == dst // g
    cross = ~same
    # link id kind * devices + gpu, kinds 0..3: switch out, switch in, NIC out, NIC in
    kinds = (src[same], dst[same] + devices, src[cross] + 2 * devices, dst[cross] + 3 * devices)
    counted = [_port_counts(ids) for ids in kinds]
    sw = hw.switch_bandwidth_gbps * 1e9
    nic = hw.inter_node_bandwidth_gbps * 1e9
    busiest = [float(c.max()) if len(c) else 0.0 for _, c in counted]
    worst = max(max(busiest[:2]) / sw, max(busiest[2:]) / nic)
    latency = (hw.inter_node_latency_us if cross.any() else hw.switch_latency_us) * 1e-6
    links = None
    if with_links:  # ids ascending: each kind's are sorted and the kinds' ranges are disjoint
        links = LinkLoad(
            np.concatenate([ids for ids, _ in counted]),
            np.concatenate([c for _, c in counted]),
        )
    return Profile(latency, 1.0 / float(worst), 1, links)


def cluster_one_to_one_profile(
    hw: GpuClusterHardware,
    src: np.ndarray,
    dst: np.ndarray,
    *,
    devices: int,
    with_links: bool = False,
    block: int = 1,
) -> Profile:
    """:func:`cluster_profile` of transfers in which every GPU sends at most once and receives
    at most once (the steps of disjoint rings, a hand-off between two stages of the same shape):
    every port touched carries exactly one transfer, so the busiest port of a kind carries one
    if the kind is touched at all; no sort or count over the ports is needed.

    ``block``: the link loads also come summed over blocks of ``block`` GPUs
    (:attr:`LinkLoad.blocks`, when ``block`` divides ``devices``); with ``block`` a divisor of
    the event engine's stage group, its per-group loads read from them are the same whole
    numbers as from one entry per port, at a cost that does not grow with the GPUs of a stage.
    Equal to :func:`cluster_profile` on such transfers (the same latency, bandwidth and
    per-port loads)."""
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    if (src == dst).any():
        keep = src != dst
        src, dst = src[keep], dst[keep]
    if len(src) == 0:
        return _EMPTY
    cross = src // hw.gpus_per_node != dst // hw.gpus_per_node
    n_cross = int(np.count_nonzero(cross))
    sw = 1.0 / (hw.switch_bandwidth_gbps * 1e9) if n_cross < len(src) else 0.0
    nic = 1.0 / (hw.inter_node_bandwidth_gbps * 1e9) if n_cross else 0.0
    latency = (hw.inter_node_latency_us if n_cross else hw.switch_latency_us) * 1e-6
    links = None
    if with_links:
        same = ~cross
        ports = (src[same], dst[same], src[cross], dst[cross])
        links = _one_per_port(ports, devices=devices, block=block)
    return Profile(latency, 1.0 / max(sw, nic), 1, links)


def _one_per_port(ports: tuple[np.ndarray, ...], *, devices: int, block: int) -> LinkLoad:
    """Link loads of one transfer per entry of ``ports`` (the GPUs of each port kind, in
    :class:`LinkLoad`'s kind order), with their sums per block of ``block`` GPUs."""
    ids = np.concatenate([x + k * devices for k, x in enumerate(ports)])
    ones = np.broadcast_to(1.0, len(ids))  # one transfer a port (read-only, no copy)
    if block == 1 or devices % block:
        return LinkLoad(ids, ones)
    blocks: dict[int, int] = {}  # block id (kind x devices + first GPU) -> transfers
    for k, x in enumerate(ports):
        if not len(x):
            continue
        first, last = int(x.min()) // block, int(x.max()) // block
        if first == last:  # the kind's ports in one block (a stage ring): no division each
            blocks[k * devices + first * block] = len(x)
            continue
        counts = np.bincount(x // block - first)
        for b in np.nonzero(counts)[0].tolist():
            blocks[k * devices + (first + b) * block] = int(counts[b])
    summed = LinkLoad(
        np.fromiter(blocks, dtype=np.int64, count=len(blocks)),
        np.fromiter(blocks.values(), dtype=np.float64, count=len(blocks)),
    )
    return LinkLoad(ids, ones, block, summed)


def _port_counts(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct port ids of ``ids``, ascending, and the transfers on each (float64)."""
    if len(ids) == 0:
        return ids, np.zeros(0, dtype=np.float64)
    ordered = np.sort(ids)
    if len(ordered) == 1 or bool((ordered[1:] != ordered[:-1]).all()):  # every port once
        return ordered, np.ones(len(ordered), dtype=np.float64)
    unique, counts = np.unique(ordered, return_counts=True)
    return unique, counts.astype(np.float64)


def profile(
    hw: Hardware, src: np.ndarray, dst: np.ndarray, *, devices: int, with_links: bool = False
) -> Profile:
    """Dispatch on the topology; ``src``/``dst`` are lists of devices (ints or (row, col))."""
    if isinstance(hw, Mesh2DHardware):
        return mesh_profile(hw, np.asarray(src), np.asarray(dst), with_links=with_links)
    return cluster_profile(
        hw, np.asarray(src), np.asarray(dst), devices=devices, with_links=with_links
    )


def dram_channel_cores(hw: Mesh2DHardware) -> np.ndarray:
    """Core coordinates of the routers the DRAM channels attach to: ``dram_channels`` points
    spread evenly round the perimeter of the core mesh, clockwise from the top-left corner.
    Under ``dram_placement = "per-tile"`` each tile's ``dram_channels / tiles`` channels go
    round its own perimeter the same way, tile by tile in row-major order (channel
    ``t * per_tile + j`` is tile ``t``'s ``j``-th)."""
    if hw.dram_placement == "per-tile":
        return per_tile_channel_cores(hw)
    return _perimeter_points(*hw.core_grid, hw.dram_channels)


def tile_hardware(hw: Mesh2DHardware) -> Mesh2DHardware:
    """One tile of ``hw`` as a mesh of its own, with its own share of the DRAM channels (and
    of their capacity): the chip a ``per-tile`` placement reads from."""
    tiles = hw.tile_count
    return dataclasses.replace(
        hw,
        tiles=(1, 1),
        dram_channels=hw.dram_channels // tiles,
        dram_capacity_gib=hw.dram_capacity_gib / tiles,
        dram_placement="interleaved",
    )


def per_tile_channel_cores(hw: Mesh2DHardware) -> np.ndarray:
    """Channel positions of the ``per-tile`` placement (see :func:`dram_channel_cores`)."""
    one = _perimeter_points(*hw.cores_per_tile, hw.dram_channels // hw.tile_count)
    cr, cc = hw.cores_per_tile
    rows, cols = np.divmod(np.arange(hw.tile_count), hw.tiles[1])
    shift = np.stack([rows * cr, cols * cc], axis=1)
    out: np.ndarray = (shift[:, None, :] + one[None, :, :]).reshape(-1, 2).astype(np.int64)
    return out


def _perimeter_points(rows: int, cols: int, n: int) -> np.ndarray:
    """``n`` points spread evenly round the perimeter of a ``rows x cols`` mesh, clockwise
    from the top-left corner."""
    if rows == 1 or cols == 1:
        r, c = np.divmod(np.arange(rows * cols), cols)
    else:  # top, right, bottom (right to left), left (bottom to top)
        top_c = np.arange(cols)
        right_r = np.arange(1, rows)
        bottom_c = np.arange(cols - 2, -1, -1)
        left_r = np.arange(rows - 2, 0, -1)
        r = np.concatenate([np.zeros(cols, np.int64), right_r, np.full(cols - 1, rows - 1), left_r])
        c = np.concatenate(
            [top_c, np.full(rows - 1, cols - 1), bottom_c, np.zeros(rows - 2, np.int64)]
        )
    p = len(r)
    picks = ((np.arange(n) + 0.5) * p / n).astype(np.int64) % p
    return np.stack([r[picks], c[picks]], axis=1).astype(np.int64)


def _cycle_template(rows: int, cols: int) -> np.ndarray | None:
    """A Hamiltonian cycle through a ``rows x cols`` rectangle (needs an even side and at least
    two rows and columns), as coordinates from (0, 0): along row 0, snake back over the other
    columns, up column 0."""
    if rows < 2 or cols < 2 or (rows % 2 and cols % 2):
        return None
    if rows % 2:  # make the row count even by transposing
        t = _cycle_template(cols, rows)
        return None if t is None else t[:, ::-1]
    path = [(0, c) for c in range(cols)]
    for r in range(1, rows):
        span = range(cols - 1, 0, -1) if r % 2 else range(1, cols)
        path.extend((r, c) for c in span)
    path.extend((r, 0) for r in range(rows - 1, 0, -1))
    return np.asarray(path, dtype=np.int64)


def ring_order(members: np.ndarray) -> np.ndarray:
    """The members of one mesh ring (``(n, 2)`` core coordinates) in the order a ring
    collective would use: a Hamiltonian cycle of one-hop edges when they fill a rectangle with
    an even side (a *ring-shaped* group, paper sec. V-C), their given order otherwise."""
    lo, hi = members.min(axis=0), members.max(axis=0)
    rows, cols = (hi - lo + 1).tolist()
    if rows * cols != len(members):
        return members
    template = _cycle_template(rows, cols)
    if template is None:
        return members
    ordered: np.ndarray = template + lo
    return ordered


def ring_orders(groups: np.ndarray) -> np.ndarray:
    """:func:`ring_order` of every group of ``groups`` (``(g, n, 2)``) at once: groups whose
    members fill a rectangle of the same shape share one cycle template, shifted to each
    group's corner, so the cost does not grow with a Python loop over the groups."""
    groups = np.asarray(groups, dtype=np.int64)
    out: np.ndarray = groups.copy()
    if groups.ndim != 3 or len(groups) == 0:
        return out
    lo, hi = groups.min(axis=1), groups.max(axis=1)
    dims = hi - lo + 1
    n = groups.shape[1]
    fills = dims[:, 0] * dims[:, 1] == n
    # each filled rectangle's shape as one integer (rows, cols <= n): a one-dimensional unique
    shape_code = np.where(fills, dims[:, 0] * (n + 1) + dims[:, 1], -1)
    for code in np.unique(shape_code[fills]).tolist():
        template = _cycle_template(*divmod(code, n + 1))
        if template is None:
            continue
        pick = shape_code == code
        out[pick] = template[None, :, :] + lo[pick][:, None, :]
    return out


def nearest_channel(
    hw: Mesh2DHardware, cores: np.ndarray, *, exhaustive_below: int = 1 << 20
) -> np.ndarray:
    """Index of the DRAM channel nearest each core (Manhattan distance; ties to the lowest
    index), without a cores x channels distance matrix: channels sit on the perimeter, so the
    nearest one is among the two neighbours of the core's projection on each side. Below
    ``exhaustive_below`` distances the matrix is cheaper and used instead."""
    channels = dram_channel_cores(hw)
    rows, cols = hw.core_grid
    cores = np.asarray(cores, dtype=np.int64).reshape(-1, 2)
    if rows <= 2 or cols <= 2 or len(cores) * len(channels) < exhaustive_below:
        dist = np.abs(cores[:, None, :] - channels[None, :, :]).sum(axis=2)
        nearest: np.ndarray = dist.argmin(axis=1)
        return nearest
    best_d = np.full(len(cores), np.iinfo(np.int64).max)
    best_i = np.full(len(cores), np.iinfo(np.int64).max)
    sides = (
        (channels[:, 0] == 0, 1, cores[:, 1]),
        (channels[:, 0] == rows - 1, 1, cores[:, 1]),
        (channels[:, 1] == 0, 0, cores[:, 0]),
        (channels[:, 1] == cols - 1, 0, cores[:, 0]),
    )
    for on_side, along, position in sides:
        idx = np.nonzero(on_side)[0]
        if len(idx) == 0:
            continue
        order = idx[np.argsort(channels[idx, along], kind="stable")]
        coords = channels[order, along]
        at = np.searchsorted(coords, position)
        for shift in (-1, 0):
            j = np.clip(at + shift, 0, len(order) - 1)
            # every channel at the same coordinate along this side (there is at most one per
            # perimeter cell, but keep ties exact)
            cand = order[j]
            d = np.abs(cores - channels[cand]).sum(axis=1)
            better = (d < best_d) | ((d == best_d) & (cand < best_i))
            best_d = np.where(better, d, best_d)
            best_i = np.where(better, cand, best_i)
    return best_i
