"""How a stage's cores reach the DRAM channels on the edge of a mesh (paper Eq. 4, 5).

Where a stage's data lives is ``hardware.dram_placement``:

* ``interleaved`` (default): the data of every stage is interleaved over all channels of the
  mesh, page by page, as memory controllers and tiled chips' runtimes lay out buffers
  (TT-Metalium's *interleaved* DRAM buffers go round-robin over every DRAM bank). A core reading
  ``b`` bytes gets ``b / C`` from each of the ``C`` channels, so a stage of ``N`` cores loads
  each channel with ``N b / C`` and the stage sees the whole DRAM bandwidth ``C x B_ch`` (shared
  with the other stages). See :func:`interleaved_access`.
* ``nearest``: each core reads from its nearest channel (Manhattan distance, lowest channel
  index on ties), which makes a stage's bandwidth depend on how many channels happen to be
  nearest its cores (the previous rule, kept to reproduce earlier results).

Reads are routed **edge first**: from a channel on the top or bottom edge along that edge and
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
  columns of the mesh, not with the cores (the tests check it against the per-core path). It
  lives in :mod:`palm.network.dram_lines`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from palm.hardware.spec import Mesh2DHardware
from palm.network.dram_lines import _by_lines, _interleaved_lines, _perimeter
from palm.network.loads import (
    EAST,
    NORTH,
    SOUTH,
    WEST,
    LinkLoad,
    Profile,
    link_bandwidth_Bps,
    mesh_link_key,
    mesh_profile,
    nearest_channel,
)
from palm.network.memo import remember
from palm.network.region import CoreRegion

__all__ = [
    "DramAccess",
    "dram_access",
    "dram_accesses",
    "dram_access_per_core",
    "interleaved_access",
    "interleaved_access_per_core",
]


@dataclass(frozen=True)
class DramAccess:
    """How one stage's cores reach DRAM (paper Eq. 4, 5): channel ``channels[i]`` serves
    ``cores_per_channel[i]`` cores' worth of bytes per byte a core reads (whole cores under
    ``nearest``, ``N / C`` under ``interleaved``); ``noc`` is the profile of all those reads
    crossing the mesh at once. A read of ``b`` bytes per core takes, on channel ``i``,

        response + NoC latency + b * max(cores_i / channel_bandwidth, 1 / NoC bandwidth)

    and the access is done when its slowest channel is."""

    channels: tuple[int, ...]
    cores_per_channel: tuple[float, ...]
    noc: Profile
    channel_bandwidth_Bps: float
    response_s: float

    @property
    def cores(self) -> float:
        """Cores of the stage (every core reads ``b`` bytes)."""
        return float(sum(self.cores_per_channel))

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
    :func:`~palm.network.loads.dram_channel_cores` places them) under the hardware's
    ``dram_placement``. ``with_links`` keeps the load of every link, which needs the per-core
    path."""
    if hw.dram_placement == "interleaved":
        return interleaved_access(hw, region, channels_at, with_links=with_links)
    if hw.dram_placement == "per-tile":
        from palm.network.dram_tiles import per_tile_accesses  # it builds on this module

        return per_tile_accesses(hw, (region,), with_links=with_links)[0]
    if not _by_rows_and_columns(hw, with_links):
        return dram_access_per_core(hw, region.cores(), channels_at, with_links=with_links)
    counts, noc = _by_lines(hw, region, channels_at)
    return _access(hw, counts, noc)


def dram_accesses(
    hw: Mesh2DHardware,
    regions: Sequence[CoreRegion],
    channels_at: np.ndarray,
    *,
    with_links: bool = False,
) -> tuple[DramAccess, ...]:
    """:func:`dram_access` of every region of ``regions`` (a plan's stages); under the
    ``interleaved`` placement the rows-and-columns path prices them all at once (numpy over
    the regions, :func:`_interleaved_lines`)."""
    if hw.dram_placement == "interleaved" and _by_rows_and_columns(hw, with_links):
        return _interleaved_all(hw, regions, channels_at, with_latency=True)
    if hw.dram_placement == "per-tile":
        from palm.network.dram_tiles import per_tile_accesses

        return per_tile_accesses(hw, regions, with_links=with_links)
    return tuple(dram_access(hw, r, channels_at, with_links=with_links) for r in regions)


def _by_rows_and_columns(hw: Mesh2DHardware, with_links: bool) -> bool:
    """Whether the rows-and-columns paths apply: no link loads asked for, and a mesh of at
    least three rows and three columns (otherwise: the per-core paths)."""
    rows, cols = hw.core_grid
    return not with_links and rows >= 3 and cols >= 3


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
    nearest = nearest_channel(hw, cores)
    counts = np.bincount(nearest, minlength=len(channels_at))
    noc = _edge_first(hw, channels_at[nearest], cores, write=write, with_links=with_links)
    return _access(hw, counts, noc)


def _edge_first(
    hw: Mesh2DHardware,
    ends: np.ndarray,
    cores: np.ndarray,
    *,
    write: bool,
    with_links: bool,
    weight: float = 1.0,
) -> Profile:
    """The profile of the transfers between channel routers ``ends[i]`` and ``cores[i]``,
    each carrying ``weight`` bytes per byte a core reads, routed edge first."""
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
    if not loads:
        return Profile(0.0, float("inf"), 0)
    ids, inverse = np.unique(np.concatenate([x.ids for x in loads]), return_inverse=True)
    per_link = np.bincount(inverse, weights=np.concatenate([x.loads for x in loads])) * weight
    worst = float((per_link / _bandwidth_of_links(hw, ids)).max())
    return Profile(
        max(p.latency_s for p in parts),
        1.0 / worst,
        max(p.hops for p in parts),
        LinkLoad(ids, per_link) if with_links else None,
    )


def _bandwidth_of_links(hw: Mesh2DHardware, link_ids: np.ndarray) -> np.ndarray:
    """Bandwidth of mesh links by id (see :class:`~palm.network.loads.LinkLoad`)."""
    node, direction = np.divmod(np.asarray(link_ids, dtype=np.int64), 4)
    r, c = np.divmod(node, hw.core_grid[1])
    along_row = (direction == EAST) | (direction == WEST)
    return link_bandwidth_Bps(hw, direction, np.where(along_row, c, r))


def _access(hw: Mesh2DHardware, counts: np.ndarray, noc: Profile) -> DramAccess:
    used = np.nonzero(counts)[0]
    return DramAccess(
        channels=tuple(used.tolist()),
        cores_per_channel=tuple(counts[used].tolist()),  # ints (nearest) or floats
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
# the interleaved placement (its rows-and-columns path: palm/network/dram_lines.py)


def interleaved_access(
    hw: Mesh2DHardware,
    region: CoreRegion,
    channels_at: np.ndarray,
    *,
    with_links: bool = False,
    with_latency: bool = True,
) -> DramAccess:
    """The cores of ``region`` reading data interleaved over every channel: each core gets
    ``1 / C`` of its bytes from each of the ``C`` channels, routed edge first. The NoC profile is
    computed from rows and columns (:func:`_interleaved_lines`, cost independent of the core
    count) unless ``with_links`` asks for every link's load or the mesh is thinner than three
    cores (per-core path). ``with_latency=False``: for a caller that needs the bandwidth only,
    the rows-and-columns path leaves the profile's latency and hops at zero (it does not look
    for the farthest route)."""
    if not _by_rows_and_columns(hw, with_links):
        return interleaved_access_per_core(hw, region.cores(), channels_at, with_links=with_links)
    return _interleaved_all(hw, (region,), channels_at, with_latency=with_latency)[0]


def _interleaved_all(
    hw: Mesh2DHardware,
    regions: Sequence[CoreRegion],
    channels_at: np.ndarray,
    *,
    with_latency: bool,
) -> tuple[DramAccess, ...]:
    """:func:`interleaved_access` of every region, from rows and columns, all at once."""
    # remembered inside palm.network.memo.shared_geometry: the channels' side once per mesh
    perimeter = remember(
        lambda: ("dram_perimeter", mesh_link_key(hw), channels_at.tobytes()),
        lambda: _perimeter(hw, channels_at),
    )
    lines = remember(
        lambda: (
            "dram_lines",
            mesh_link_key(hw),
            tuple(r.rects.tobytes() for r in regions),
            channels_at.tobytes(),
            with_latency,
        ),
        lambda: _interleaved_lines(hw, regions, perimeter, with_latency=with_latency),
    )
    return tuple(_interleaved(hw, r.count, noc) for r, noc in zip(regions, lines, strict=True))


def interleaved_access_per_core(
    hw: Mesh2DHardware,
    cores: np.ndarray,
    channels_at: np.ndarray,
    *,
    with_links: bool = False,
    write: bool = False,
) -> DramAccess:
    """Reference path of :func:`interleaved_access`: one route per (channel, core) pair, each
    carrying ``1 / C`` of a core's bytes. ``write``: the cores write interleaved data (the
    same pairs, each routed from the core to the channel, as :func:`dram_access_per_core`
    routes writes); the channels' side is the same as a read's."""
    cores = np.asarray(cores, dtype=np.int64).reshape(-1, 2)
    c = len(channels_at)
    ends = np.repeat(channels_at, len(cores), axis=0)
    dst = np.tile(cores, (c, 1))
    noc = _edge_first(hw, ends, dst, write=write, with_links=with_links, weight=1.0 / c)
    return _interleaved(hw, len(cores), noc)


def _interleaved(hw: Mesh2DHardware, n_cores: int, noc: Profile) -> DramAccess:
    c = hw.dram_channels
    return DramAccess(
        channels=tuple(range(c)),
        cores_per_channel=(n_cores / c,) * c,
        noc=noc,
        channel_bandwidth_Bps=hw.dram_channel_bandwidth_gbps * 1e9 * hw.memory_efficiency,
        response_s=hw.dram_response_ns * 1e-9,
    )
