"""DRAM transfers of many cores on a Wormhole B0 chip, with max-min fair sharing of its NoC
links, NoC ports and DRAM channels (validated against the DRAM bandwidth
tables of tt-isa-documentation ``WormholeB0/DRAMTile/README.md``).

**Floorplan** (NoC-0 coordinates, tt-isa-documentation ``WormholeB0/README.md`` and
``DRAMTile/README.md``): a 10 x 12 grid; Tensix cores at ``x in {1..4, 6..9}``,
``y in {1..5, 7..11}``; 18 DRAM tiles in six groups of three in the columns ``x = 0`` and
``x = 5``, each group exposing two GDDR6 channels on all three of its tiles (``DRAM_GROUPS``).

**Routes.** Each of the two NoCs is a unidirectional 2-D torus of 32 B/cycle links, routed in
dimension order: NoC 0 goes +x then +y, NoC 1 goes -y then -x (the ISA documentation: "NoC #1
... flows in the opposite direction"). A read's data flows from the DRAM tile to the core, a
write's from the core to the DRAM tile. The two channels of a group are reached through two
different tiles of its three (:func:`channel_tile`; an assumption: the tables do not say which
tile the cores used, and one tile for both channels would cap a group at one port's rate).

**Sharing.** Every transfer is a flow that loads each link of its route, the NoC port of the
DRAM tile and of the core (``intra_tile_link_gbps`` each) and its channel
(``dram_channel_bandwidth_gbps x memory_efficiency``). Rates are max-min fair
(:func:`palm.network.flows.max_min_rates`, in its array form ``fill``), recomputed whenever a
transfer ends; the bandwidth is the bytes moved over the time until the last transfer ends.

**Assignment.** ``paired`` ("carefully" in the tables): channels in turn take the free core
whose route shares the least with the routes already taken (then the shortest); otherwise
("randomly") cores are drawn at random from the 80 Tensix cores and dealt to channels in equal
numbers; the result is the mean over ``RANDOM_DRAWS`` seeded draws (the expected bandwidth;
the measured one is a single draw). One-channel cases use channel 0.

**Interleaved writes** (:func:`interleaved_write_Bps`): a tensor interleaved over the channels
(tt-metal's default DRAM layout: page ``i`` in bank ``i mod 12``) is written by every core of a
compute grid to every channel in turn; each core's bytes are twelve equal flows, one per
channel. On NoC 0 every write leaves its core eastward then southward, so the flows from the
grid's 64 cores crowd the links of the two DRAM columns: 74.9 GB/s against 256 GB/s for the
mirror-image reads (the tables' random static-VC writes on NoC 0: 52-57 GB/s, on NoC 1:
134-155 GB/s; no constant of its own). tt-metal's 2-D and 1-D multicast matmuls write their
output from the in1 reader/writer kernel, which they put on the NoC preferred for DRAM reads,
NoC 0 on Wormhole (``matmul_multicore_reuse_mcast_2d_program_factory.cpp``: "in1 is the reader
of weights/output writer, and we choose to make it use the optimized reader noc";
``GetPreferredNOCForDRAMRead`` returns ``NOC_0`` and ``...Write`` ``NOC_1``).

Not modelled: the collapse of many-writer transfers with dynamic virtual-channel allocation
that the tables show (7-80 GB/s where static allocation reaches 22-264): it is a property of
the routers' buffer allocation, not of link or channel capacity.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from palm.hardware.spec import Mesh2DHardware
from palm.network.flows import fill

__all__ = [
    "GRID",
    "DRAM_GROUPS",
    "TENSIX_CORES",
    "RANDOM_DRAWS",
    "DramTransfer",
    "route",
    "channel_tile",
    "dram_bandwidth_Bps",
    "compute_grid_cores",
    "interleaved_write_Bps",
]

Coord = tuple[int, int]

GRID: Coord = (10, 12)
DRAM_GROUPS: tuple[tuple[Coord, Coord, Coord], ...] = (
    ((0, 0), (0, 1), (0, 11)),
    ((0, 5), (0, 6), (0, 7)),
    ((5, 0), (5, 1), (5, 11)),
    ((5, 2), (5, 9), (5, 10)),
    ((5, 3), (5, 4), (5, 8)),
    ((5, 5), (5, 6), (5, 7)),
)
"""The three DRAM tiles of each group; group ``g`` serves channels ``2g`` and ``2g + 1``."""

_TENSIX_X = (1, 2, 3, 4, 6, 7, 8, 9)
_TENSIX_Y = (1, 2, 3, 4, 5, 7, 8, 9, 10, 11)
TENSIX_CORES: tuple[Coord, ...] = tuple((x, y) for y in _TENSIX_Y for x in _TENSIX_X)
"""The 80 Tensix positions (the ISA documentation's tables measure raw tiles, not tt-metal's
8 x 8 compute grid)."""

RANDOM_DRAWS = 32


@dataclass(frozen=True)
class DramTransfer:
    """``cores`` cores each moving ``bytes_per_core`` between its L1 and ``channels`` channels
    (cores dealt to channels in equal numbers) over NoC ``noc``."""

    cores: int
    channels: int
    paired: bool
    noc: int
    write: bool
    bytes_per_core: float = float(2**20)


def route(src: Coord, dst: Coord, *, noc: int) -> list[Hashable]:
    """The links from ``src`` to ``dst`` on NoC ``noc`` (dimension-ordered on the torus)."""
    (x, y), (xd, yd) = src, dst
    w, h = GRID
    links: list[Hashable] = []
    if noc == 0:
        while x != xd:
            links.append((0, "x", x, y))
            x = (x + 1) % w
        while y != yd:
            links.append((0, "y", x, y))
            y = (y + 1) % h
    else:
        while y != yd:
            links.append((1, "y", x, y))
            y = (y - 1) % h
        while x != xd:
            links.append((1, "x", x, y))
            x = (x - 1) % w
    return links


def _path(core: Coord, tile: Coord, t: DramTransfer) -> list[Hashable]:
    return route(core, tile, noc=t.noc) if t.write else route(tile, core, noc=t.noc)


def channel_tile(channel: int) -> Coord:
    """The DRAM tile through which the cores reach ``channel``: the two channels of a group
    use two different tiles of the three (the second and the third listed)."""
    return DRAM_GROUPS[channel // 2][1 + channel % 2]


def _flow(core: Coord, channel: int, t: DramTransfer) -> dict[Hashable, float]:
    tile = channel_tile(channel)
    load: dict[Hashable, float] = {link: 1.0 for link in _path(core, tile, t)}
    load[("port", t.noc, tile)] = 1.0
    load[("port", t.noc, core)] = 1.0
    load[("channel", channel)] = 1.0
    return load


def _assignment(t: DramTransfer, rng: random.Random | None) -> list[tuple[Coord, int]]:
    channels = [c % t.channels for c in range(t.cores)]
    if rng is not None:
        cores = rng.sample(TENSIX_CORES, t.cores)
        rng.shuffle(channels)
        return list(zip(cores, channels, strict=True))
    out: list[tuple[Coord, int]] = []
    free = list(TENSIX_CORES)
    used: dict[Hashable, int] = {}
    for channel in channels:  # round robin over the channels, each takes its best free core

        def crowding(core: Coord, channel: int = channel) -> tuple[int, int, Coord]:
            links = _path(core, channel_tile(channel), t)
            return (max((used.get(x, 0) for x in links), default=0), len(links), core)

        core = min(free, key=crowding)
        free.remove(core)
        for x in _path(core, channel_tile(channel), t):
            used[x] = used.get(x, 0) + 1
        out.append((core, channel))
    return out


def _makespan(loads: list[dict[Hashable, float]], capacity: dict[Hashable, float], size: float
              ) -> float:  # fmt: skip
    """Time until every flow has moved ``size`` bytes, rates re-shared (max-min fair, by
    :func:`palm.network.flows.fill`, the array form of ``max_min_rates``) as flows end."""
    keys = {r: j for j, r in enumerate(capacity)}
    matrix = np.zeros((len(loads), len(keys)))
    for i, flow in enumerate(loads):
        for r, a in flow.items():
            matrix[i, keys[r]] += a
    cap = np.fromiter(capacity.values(), dtype=np.float64, count=len(keys))
    remaining = np.full(len(loads), size)
    active = np.ones(len(loads), bool)
    now = 0.0
    while active.any():
        rates = fill(matrix[active], cap)
        step = float(np.min(remaining[active] / rates))
        now += step
        remaining[active] -= rates * step
        active &= remaining > size * 1e-9
    return now


def compute_grid_cores(grid: tuple[int, int]) -> tuple[Coord, ...]:
    """The NoC coordinates of tt-metal's logical compute grid of ``rows x cols`` cores, row
    by row (logical column ``j`` is the ``j``-th Tensix column, logical row ``i`` the ``i``-th
    Tensix row); ``ValueError`` when the grid exceeds the chip's 10 x 8 Tensix cores."""
    rows, cols = grid
    if not (1 <= rows <= len(_TENSIX_Y) and 1 <= cols <= len(_TENSIX_X)):
        raise ValueError(f"compute grid {grid} exceeds the 10 x 8 Tensix cores")
    return tuple((_TENSIX_X[j], _TENSIX_Y[i]) for i in range(rows) for j in range(cols))


@lru_cache(maxsize=64)
def interleaved_write_Bps(
    *, grid: tuple[int, int], cores: int, noc: int, link_gbps: float, channel_gbps: float
) -> float:
    """Aggregate rate (bytes/s) at which the first ``cores`` cores of the compute ``grid``
    (row by row) write equal shares of a tensor interleaved over the 12 channels, over NoC
    ``noc`` with ``link_gbps`` links and ports and channels of ``channel_gbps`` achievable
    (module docstring, "Interleaved writes"). Deterministic; cached."""
    sources = compute_grid_cores(grid)[:cores]
    t = DramTransfer(cores=len(sources), channels=12, paired=False, noc=noc, write=True)
    loads = [_flow(core, ch, t) for core in sources for ch in range(2 * len(DRAM_GROUPS))]
    capacity = {r: (channel_gbps if _is_channel(r) else link_gbps) * 1e9 for f in loads for r in f}
    size = 1.0 / (2 * len(DRAM_GROUPS))
    return len(sources) / _makespan(loads, capacity, size)


def _is_channel(resource: Hashable) -> bool:
    return isinstance(resource, tuple) and resource[0] == "channel"


def dram_bandwidth_Bps(t: DramTransfer, *, hardware: Mesh2DHardware) -> float:
    """Aggregate bandwidth (bytes/s) of transfer ``t`` on a Wormhole B0 floorplan with the
    link, port and channel rates of ``hardware``."""
    if not 1 <= t.cores <= len(TENSIX_CORES) or not 1 <= t.channels <= 2 * len(DRAM_GROUPS):
        raise ValueError(f"transfer {t} is not allowed: 1..80 cores and 1..12 channels")
    link = hardware.intra_tile_link_gbps * 1e9
    channel = hardware.dram_channel_bandwidth_gbps * 1e9 * hardware.memory_efficiency
    draws = [None] if t.paired else [random.Random(seed) for seed in range(RANDOM_DRAWS)]
    total = 0.0
    for rng in draws:
        loads = [_flow(core, ch, t) for core, ch in _assignment(t, rng)]
        capacity = {r: (channel if _is_channel(r) else link) for f in loads for r in f}
        total += t.cores * t.bytes_per_core / _makespan(loads, capacity, t.bytes_per_core)
    return total / len(draws)
