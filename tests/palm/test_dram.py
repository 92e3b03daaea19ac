"""DRAM access of a stage: nearest and interleaved placement, edge-first routes, and the
rows-and-columns paths against the per-core ones."""

from __future__ import annotations

import random

import pytest
from mesh_toys import wafer_palm

from palm.network.dram import (
    dram_access,
    dram_access_per_core,
    interleaved_access,
    interleaved_access_per_core,
)
from palm.network.loads import dram_channel_cores
from palm.network.placement import Placement


def test_reads_from_side_channels_run_along_the_edge_first() -> None:
    # 5 x 3 cores, two channels: (1, 2) on the right edge serves 10 cores, (3, 0) on the left
    # edge 5 (ties go to the lower index). Edge first, the right channel's reads to rows 2-4
    # leave it southwards down column 2: 4 of them share that link (XY would send 5 reads
    # west along row 1). All links are inter-tile (1-core tiles): 50 GB/s / 4.
    hw = wafer_palm(
        (5, 3),
        dram_channels=2,
        inter_tile_link_gbps=50.0,
        inter_tile_link_latency_ns=20.0,
        dram_placement="nearest",
    )
    at = dram_channel_cores(hw)
    assert at.tolist() == [[1, 2], [3, 0]]
    region = Placement(pp=1, dp=15, tp=1, compact=True, hardware=hw).stage_region(0)
    for access in (
        dram_access(hw, region, at),
        dram_access_per_core(hw, region.cores(), at),
        dram_access(hw, region, at, with_links=True),
    ):
        assert access.channels == (0, 1) and access.cores_per_channel == (10, 5)
        assert access.noc.bandwidth_Bps == pytest.approx(50e9 / 4)
        assert access.noc.hops == 3 and access.noc.latency_s == pytest.approx(60e-9)
    links = dram_access(hw, region, at, with_links=True).noc.links
    assert links is not None and links.loads.max() == 4
    # every core is reached once: the loads on the links out of each channel add up
    assert links.loads.sum() == sum(
        abs(r - 1) + abs(c - 2)
        for r, c in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (4, 2)]
    ) + sum(abs(r - 3) + c for r, c in [(2, 0), (3, 1), (4, 0), (4, 1)])


def test_interleaved_reads_worked_by_hand() -> None:
    # 3 x 3 one-core tiles, channels at (0, 2) (top edge) and (2, 0) (bottom edge); every core
    # reads half its bytes from each. Per byte a core reads, the westward link (0,2)->(0,1)
    # carries the top channel's halves for the six cores of columns 0 and 1: 6 / 2 = 3; the
    # eastward link (2,0)->(2,1) likewise for the bottom channel; every other link less. At
    # 50 GB/s per link a core reads at 50 / 3 GB/s; each channel serves 9 / 2 cores' worth.
    hw = wafer_palm(
        (3, 3), dram_channels=2, inter_tile_link_gbps=50.0, inter_tile_link_latency_ns=20.0
    )
    at = dram_channel_cores(hw)
    assert at.tolist() == [[0, 2], [2, 0]]
    region = Placement(pp=1, dp=9, tp=1, compact=True, hardware=hw).stage_region(0)
    for access in (
        dram_access(hw, region, at),
        interleaved_access_per_core(hw, region.cores(), at),
        dram_access(hw, region, at, with_links=True),
    ):
        assert access.channels == (0, 1) and access.cores_per_channel == (4.5, 4.5)
        assert access.noc.bandwidth_Bps == pytest.approx(50e9 / 3)
        assert access.noc.hops == 4 and access.noc.latency_s == pytest.approx(80e-9)
        # alone: 4.5 cores' worth on a 256 GB/s x 0.9 channel is slower than the NoC
        per_byte = max(4.5 / (256e9 * 0.9), 3 / 50e9)
        assert access.time(1e6) == pytest.approx(100e-9 + 80e-9 + 1e6 * per_byte)
    # the bandwidth alone (the event engine's all-stages reads): the same bandwidth and
    # channels, no latency or hops looked for
    alone = interleaved_access(hw, region, at, with_latency=False)
    full = interleaved_access(hw, region, at)
    assert alone.noc.bandwidth_Bps == full.noc.bandwidth_Bps
    assert alone.cores_per_channel == full.cores_per_channel and alone.cores == full.cores
    assert (alone.noc.latency_s, alone.noc.hops) == (0.0, 0)
    links = dram_access(hw, region, at, with_links=True).noc.links
    assert links is not None and links.loads.max() == pytest.approx(3.0)
    # bytes are conserved: the link loads add up to every (channel, core) route's hops / 2
    hops = sum(abs(r - cr) + abs(c - cc) for r in range(3) for c in range(3) for cr, cc in at)
    assert links.loads.sum() == pytest.approx(hops / 2)


def test_interleaving_gives_every_stage_the_bandwidth_of_all_channels() -> None:
    # 18 -> 20 channels on the 5 x 4-tile wafer: every stage's channel share grows by 20 / 18,
    # whatever its position (nearest placement gave the middle stage a second channel)
    accesses = []
    for channels in (18, 20):
        hw = wafer_palm((5, 4), (4, 4), dram_channels=channels)
        at = dram_channel_cores(hw)
        pl = Placement(pp=20, dp=1, tp=16, compact=True, hardware=hw)
        accesses.append([dram_access(hw, pl.stage_region(s), at) for s in range(20)])
    for a, b in zip(*accesses, strict=True):
        assert len(a.channels) == 18 and len(b.channels) == 20
        assert a.cores_per_channel[0] / b.cores_per_channel[0] == pytest.approx(20 / 18)


@pytest.mark.parametrize("where", ["nearest", "interleaved"])
@pytest.mark.parametrize("seed", range(6))
def test_rows_and_columns_path_equals_the_per_core_path(seed: int, where: str) -> None:
    rng = random.Random(seed)
    checked = 0
    while checked < 40:
        tiles = (rng.randint(1, 9), rng.randint(1, 9))
        cores = (rng.randint(1, 3), rng.randint(1, 3))
        rows, cols = tiles[0] * cores[0], tiles[1] * cores[1]
        if rows < 3 or cols < 3:
            continue
        hw = wafer_palm(
            tiles,
            cores,
            dram_channels=rng.choice([1, 2, 3, 5, rng.randint(1, 4 * (rows + cols))]),
            intra_tile_link_gbps=rng.choice([100.0, 300.0]),
            inter_tile_link_gbps=rng.choice([50.0, 100.0]),
            intra_tile_link_latency_ns=1.0,
            inter_tile_link_latency_ns=rng.choice([1.0, 5.0]),
            dram_placement=where,
        )
        n = rows * cols
        pp = rng.randint(1, 3)
        size = rng.randint(1, n // pp)
        if rng.random() < 0.3:  # an explicit stage: random tiles, partly filled
            ids = list(range(tiles[0] * tiles[1]))
            rng.shuffle(ids)
            k = rng.randint(1, len(ids))
            chosen = tuple(divmod(t, tiles[1]) for t in ids[:k])
            size = rng.randint(1, k * cores[0] * cores[1])
            placement = Placement(
                pp=1, dp=size, tp=1, compact=True, hardware=hw, stage_tiles=(chosen,)
            )
            pp = 1
        else:
            placement = Placement(
                pp=pp, dp=size, tp=1, compact=True, hardware=hw, layout_snake=rng.random() < 0.5
            )
        at = dram_channel_cores(hw)
        for s in range(pp):
            region = placement.stage_region(s)
            fast = dram_access(hw, region, at)
            per_core = (
                interleaved_access_per_core if where == "interleaved" else dram_access_per_core
            )
            slow = per_core(hw, region.cores(), at)
            assert fast.channels == slow.channels
            assert fast.cores_per_channel == slow.cores_per_channel
            assert fast.noc.hops == slow.noc.hops
            assert fast.noc.latency_s == pytest.approx(slow.noc.latency_s, abs=1e-18)
            assert fast.noc.bandwidth_Bps == pytest.approx(slow.noc.bandwidth_Bps, rel=1e-12)
        checked += 1


def test_interleaved_writes_route_from_the_cores() -> None:
    # the public write path of interleaved data (case_congestion's DRAM writes): the same
    # (channel, core) pairs as a read, each routed from the core (minimal routes, so the
    # link-bytes are the read's), and the channels see the same bytes; over one channel it is
    # the nearest placement's write
    hw = wafer_palm(
        (5, 4), dram_channels=3, inter_tile_link_gbps=50.0, inter_tile_link_latency_ns=20.0
    )
    at = dram_channel_cores(hw)
    cores = Placement(pp=1, dp=8, tp=1, compact=True, hardware=hw).stage_region(0).cores()
    read = interleaved_access_per_core(hw, cores, at, with_links=True)
    write = interleaved_access_per_core(hw, cores, at, with_links=True, write=True)
    assert read.noc.links is not None and write.noc.links is not None
    assert write.noc.links.loads.sum() == pytest.approx(read.noc.links.loads.sum())
    assert sorted(write.noc.links.ids.tolist()) != sorted(read.noc.links.ids.tolist())
    assert write.cores_per_channel == read.cores_per_channel
    one = wafer_palm((5, 4), dram_channels=1, inter_tile_link_gbps=50.0)
    at1 = dram_channel_cores(one)
    mine = interleaved_access_per_core(one, cores, at1, with_links=True, write=True)
    nearest = dram_access_per_core(one, cores, at1, with_links=True, write=True)
    assert mine.noc.links is not None and nearest.noc.links is not None
    assert mine.noc.links.ids.tolist() == nearest.noc.links.ids.tolist()
    assert mine.noc.links.loads.tolist() == pytest.approx(nearest.noc.links.loads.tolist())
    assert mine.noc.bandwidth_Bps == pytest.approx(nearest.noc.bandwidth_Bps)
