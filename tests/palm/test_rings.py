"""Ring profiles from runs of links: the same numbers as routing every member."""

from __future__ import annotations

import random

import numpy as np
import pytest
from mesh_toys import wafer_palm

from palm.network.loads import mesh_profile, ring_order, ring_orders
from palm.network.placement import Placement
from palm.network.rings import stage_ring_profile


def test_a_line_stage_of_one_core_tiles_is_one_hop_rings_with_a_long_way_back() -> None:
    # 3 x 3 one-core tiles, all 9 in one ring (both sides odd: walk order, column by column):
    # one-hop steps, two column changes of 1 + 2 hops and the way back of 2 + 2 hops, no link
    # used twice
    hw = wafer_palm((3, 3), (1, 1), inter_tile_link_gbps=50.0, inter_tile_link_latency_ns=20.0)
    placement = Placement(pp=1, dp=9, tp=1, compact=True, hardware=hw)
    prof = stage_ring_profile(hw, placement.stage_region(0), snake=False, explicit=False)
    assert prof is not None
    assert prof.hops == 4 and prof.latency_s == pytest.approx(80e-9)
    assert prof.bandwidth_Bps == pytest.approx(50e9)


@pytest.mark.parametrize("seed", range(5))
def test_runs_give_the_profile_of_routing_every_member(seed: int) -> None:
    rng = random.Random(seed)
    compared = 0
    while compared < 40:
        tiles = (rng.randint(1, 8), rng.randint(1, 8))
        cores = (rng.randint(1, 3), rng.choice([1, 1, 2]))
        n = tiles[0] * tiles[1] * cores[0] * cores[1]
        pp = rng.randint(1, 3)
        size = rng.randint(4, max(4, n // pp))
        if size * pp > n:
            continue
        hw = wafer_palm(
            tiles,
            cores,
            intra_tile_link_gbps=rng.choice([100.0, 300.0]),
            inter_tile_link_gbps=rng.choice([50.0, 100.0]),
            intra_tile_link_latency_ns=1.0,
            inter_tile_link_latency_ns=rng.choice([1.0, 5.0]),
        )
        snake = rng.random() < 0.5
        placement = Placement(pp=pp, dp=size, tp=1, compact=True, hardware=hw, layout_snake=snake)
        for s in range(pp):
            fast = stage_ring_profile(hw, placement.stage_region(s), snake=snake, explicit=False)
            if fast is None:
                continue  # several cores per tile row in the walk: routed member by member
            ring = ring_order(placement.stage_array(s).reshape(-1, 2))
            slow = mesh_profile(hw, ring, np.roll(ring, -1, axis=0))
            assert fast.hops == slow.hops
            assert fast.latency_s == pytest.approx(slow.latency_s, abs=1e-18)
            assert fast.bandwidth_Bps == pytest.approx(slow.bandwidth_Bps, rel=1e-12)
            compared += 1


@pytest.mark.parametrize("seed", range(5))
def test_ring_orders_of_many_groups_equal_one_at_a_time(seed: int) -> None:
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(12):
        rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        corner = rng.integers(0, 20, 2)
        cells = np.stack(np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"), -1)
        cells = cells.reshape(-1, 2) + corner
        if rng.random() < 0.3:  # not a full rectangle: kept in member order
            cells[-1] += 7
        groups.append(cells)
    for n in {len(g) for g in groups}:
        same = np.stack([g for g in groups if len(g) == n])
        expected = np.stack([ring_order(g) for g in same])
        assert np.array_equal(ring_orders(same), expected)
