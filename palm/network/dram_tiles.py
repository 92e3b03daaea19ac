"""DRAM of a mesh whose tiles are chips, each with its own channels
(``hardware.dram_placement = "per-tile"``): Tenstorrent n300, T3000 and Galaxy systems, whose
Wormholes each own their GDDR6 and are joined by Ethernet (docs/model.md sec. 7c).

A chip's runtime allocates a tensor's interleaved buffer in that chip's DRAM banks only
(TT-Metalium: each device has its own allocator and DRAM; there is no memory shared across
chips, tt-metal tech_reports/EthernetMultichip/BasicEthernetGuide.md "Moving Data Between
Chips"). So the cores of a stage on tile ``t`` read their data interleaved over tile ``t``'s
channels, routed edge first inside tile ``t`` (:mod:`palm.network.dram`), and no read crosses
an inter-tile (chip) link: data that lives on another chip moves as an explicit transfer (a
collective or a hand-off), priced on the links between the tiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from palm.hardware.spec import Mesh2DHardware
from palm.network.dram import (
    DramAccess,
    _by_rows_and_columns,
    _interleaved_all,
    interleaved_access,
)
from palm.network.loads import LinkLoad, Profile, dram_channel_cores, tile_hardware
from palm.network.region import CoreRegion

__all__ = ["per_tile_accesses", "tile_parts"]


def tile_parts(hw: Mesh2DHardware, region: CoreRegion) -> dict[int, CoreRegion]:
    """The cores of ``region`` on each tile it touches (row-major tile index), in the tile's
    own coordinates: each rectangle cut at the tile boundaries."""
    cr, cc = hw.cores_per_tile
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for r0, r1, c0, c1 in region.rects.tolist():
        for tr in range(r0 // cr, (r1 - 1) // cr + 1) if r1 > r0 else ():
            for tc in range(c0 // cc, (c1 - 1) // cc + 1) if c1 > c0 else ():
                top, left = tr * cr, tc * cc
                rect = (
                    max(r0, top) - top,
                    min(r1, top + cr) - top,
                    max(c0, left) - left,
                    min(c1, left + cc) - left,
                )
                out.setdefault(tr * hw.tiles[1] + tc, []).append(rect)
    return {t: CoreRegion.of(rects) for t, rects in sorted(out.items())}


def per_tile_accesses(
    hw: Mesh2DHardware, regions: Sequence[CoreRegion], *, with_links: bool = False
) -> tuple[DramAccess, ...]:
    """DRAM access of each region under ``dram_placement = "per-tile"``: every tile is a chip
    with its own ``C = dram_channels / tiles`` channels round its own edge
    (:func:`~palm.network.loads.per_tile_channel_cores`), and a core's data is interleaved
    over its own tile's channels (TT-Metalium allocates a device's interleaved buffers in that
    device's own DRAM banks; chips share no memory). A region's ``n_t`` cores on tile ``t``
    load each of tile ``t``'s channels with ``n_t / C`` and cross only that tile's links, so
    a local read never crosses a chip link. The access is the tiles' accesses side by side:
    channel ``i`` of tile ``t`` is channel ``t C + i``, and the NoC profile is the slowest
    tile's (least bandwidth, longest route; the link loads, with ``with_links``, in the whole
    mesh's numbering). Each tile is priced by :func:`interleaved_access` on one tile
    (:func:`~palm.network.loads.tile_hardware`), all tiles of all regions at once."""
    one = tile_hardware(hw)
    at = dram_channel_cores(one)
    per = one.dram_channels
    parts = [tile_parts(hw, region) for region in regions]
    # the distinct tile regions (in tile coordinates) priced once each
    unique: dict[bytes, CoreRegion] = {}
    for p in parts:
        for sub in p.values():
            unique.setdefault(sub.rects.tobytes(), sub)
    flat = list(unique.values())
    if with_links or not _by_rows_and_columns(one, False):
        priced = tuple(interleaved_access(one, sub, at, with_links=with_links) for sub in flat)
    else:
        priced = _interleaved_all(one, flat, at, with_latency=True)
    by_rects = dict(zip(unique, priced, strict=True))
    out = []
    for p in parts:
        counts = np.zeros(hw.dram_channels)
        profiles, links = [], []
        for t, sub in p.items():
            acc = by_rects[sub.rects.tobytes()]
            counts[t * per : (t + 1) * per] = acc.cores_per_channel
            profiles.append(acc.noc)
            if acc.noc.links is not None:
                links.append(_tile_links(hw, t, acc.noc.links))
        used = np.nonzero(counts)[0]
        out.append(
            DramAccess(
                channels=tuple(used.tolist()),
                cores_per_channel=tuple(counts[used].tolist()),
                noc=_slowest(profiles, links),
                channel_bandwidth_Bps=hw.dram_channel_bandwidth_gbps * 1e9 * hw.memory_efficiency,
                response_s=hw.dram_response_ns * 1e-9,
            )
        )
    return tuple(out)


def _slowest(profiles: list[Profile], links: list[LinkLoad]) -> Profile:
    """The tiles' profiles as one: least bandwidth, longest route, link loads together."""
    if not profiles:
        return Profile(0.0, float("inf"), 0)
    return Profile(
        max(p.latency_s for p in profiles),
        min(p.bandwidth_Bps for p in profiles),
        max(p.hops for p in profiles),
        LinkLoad(np.concatenate([x.ids for x in links]), np.concatenate([x.loads for x in links]))
        if links
        else None,
    )


def _tile_links(hw: Mesh2DHardware, tile: int, links: LinkLoad) -> LinkLoad:
    """Link ids of one tile's mesh in the whole mesh's numbering."""
    cr, cc = hw.cores_per_tile
    node, direction = np.divmod(np.asarray(links.ids, dtype=np.int64), 4)
    r, c = np.divmod(node, cc)
    tr, tc = divmod(tile, hw.tiles[1])
    ids = ((r + tr * cr) * hw.core_grid[1] + (c + tc * cc)) * 4 + direction
    return LinkLoad(ids, links.loads)
