"""DRAM access of a stage: nearest channels, edge-first routes, and the rows-and-columns path
against the per-core one."""

from __future__ import annotations

import random

import pytest
from mesh_toys import wafer_palm

from palm.network.dram import dram_access, dram_access_per_core
from palm.network.loads import dram_channel_cores
from palm.network.placement import Placement


def test_reads_from_side_channels_run_along_the_edge_first() -> None:
    # 5 x 3 cores, two channels: (1, 2) on the right edge serves 10 cores, (3, 0) on the left
    # edge 5 (ties go to the lower index). Edge first, the right channel's reads to rows 2-4
    # leave it southwards down column 2: 4 of them share that link (XY would send 5 reads
    # west along row 1). All links are inter-tile (1-core tiles): 50 GB/s / 4.
    hw = wafer_palm(
        (5, 3), dram_channels=2, inter_tile_link_gbps=50.0, inter_tile_link_latency_ns=20.0
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


@pytest.mark.parametrize("seed", range(6))
def test_rows_and_columns_path_equals_the_per_core_path(seed: int) -> None:
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
            slow = dram_access_per_core(hw, region.cores(), at)
            assert fast.channels == slow.channels
            assert fast.cores_per_channel == slow.cores_per_channel
            assert fast.noc.hops == slow.noc.hops
            assert fast.noc.latency_s == pytest.approx(slow.noc.latency_s, abs=1e-18)
            assert fast.noc.bandwidth_Bps == pytest.approx(slow.noc.bandwidth_Bps, rel=1e-12)
        checked += 1
