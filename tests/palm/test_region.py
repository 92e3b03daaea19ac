"""A stage's cores as rectangles: the same cores as its device array, in a few rectangles."""

from __future__ import annotations

import random

import numpy as np
import pytest
from mesh_toys import wafer_palm

from palm.network.placement import Placement
from palm.network.region import CoreRegion, snake_rectangles


def _cells(arr: np.ndarray) -> set[tuple[int, int]]:
    return set(map(tuple, arr.reshape(-1, 2).tolist()))


@pytest.mark.parametrize("seed", range(4))
def test_stage_region_holds_exactly_the_stage_cores(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        tiles = (rng.randint(1, 5), rng.randint(1, 5))
        cores = (rng.randint(1, 3), rng.randint(1, 3))
        n = tiles[0] * tiles[1] * cores[0] * cores[1]
        pp, tp = rng.randint(1, 4), rng.choice([1, 2, 3])
        dp = rng.randint(1, max(1, n // (pp * tp)))
        if pp * tp * dp > n:
            continue
        placement = Placement(
            pp=pp,
            dp=dp,
            tp=tp,
            compact=rng.random() < 0.5,
            hardware=wafer_palm(tiles, cores),
            layout_snake=rng.random() < 0.5,
        )
        for s in range(pp):
            region = placement.stage_region(s)
            assert region.count == tp * dp
            assert _cells(region.cores()) == _cells(placement.stage_array(s))


def test_explicit_stage_region_is_one_rectangle_per_tile_and_a_partial_tile() -> None:
    hw = wafer_palm((3, 3), (2, 2))
    tiles = (((0, 0), (2, 1), (1, 2)),)
    placement = Placement(pp=1, dp=10, tp=1, compact=True, hardware=hw, stage_tiles=tiles)
    region = placement.stage_region(0)
    assert _cells(region.cores()) == _cells(placement.stage_array(0))
    assert region.count == 10 and len(region.rects) == 3  # 4 + 4 + a row of 2


def test_whole_tile_columns_merge_into_one_rectangle() -> None:
    hw = wafer_palm((4, 6), (1, 1))
    placement = Placement(pp=2, dp=12, tp=1, compact=True, hardware=hw)
    assert placement.stage_region(0).rects.tolist() == [[0, 4, 0, 3]]
    assert placement.stage_region(1).rects.tolist() == [[0, 4, 3, 6]]


def test_snake_positions_of_a_tile() -> None:
    # a 3 x 4 tile: row 0 left to right, row 1 right to left, row 2 left to right
    rects = snake_rectangles(2, 11, origin=(10, 20), cores_per_tile=(3, 4))
    region = CoreRegion.of(rects)
    expected = (
        {(10, 22), (10, 23)} | {(11, c) for c in range(20, 24)} | {(12, c) for c in range(20, 23)}
    )
    assert _cells(region.cores()) == expected
