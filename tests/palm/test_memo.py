"""``palm.network.memo.shared_geometry``: plans priced in one batch share their routes and
give the very values they give alone; ``palm.api.analytical_if_fits`` (the screening's path)
gives the analytical engine's result of what fits and ``None`` for what does not."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

import numpy as np
import pytest

from palm.api import analytical_if_fits, memory_check, simulate
from palm.config import load_config
from palm.network.intergroup import INTER_GROUP_STRATEGIES, hand_off
from palm.network.loads import mesh_profile, tile_aligned_key
from palm.network.memo import memo_stats, remember, shared_geometry
from palm.plan import build_plan
from palm.plan.context import plan_context

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: wafer plans that differ in micro-batch, recompute, layout, placement and link bandwidth
WAFER_VARIANTS = [
    ["training.global_batch=32"],
    ["training.global_batch=32", "training.micro_batch=2"],
    ["training.global_batch=32", 'training.recompute="selective"'],
    ["training.global_batch=32", 'placement.layout="s-shape"'],
    ["training.global_batch=32", 'placement.tp_group="strided"'],
    ["training.global_batch=32", "hardware.inter_tile_link_gbps=128"],
    ["training.global_batch=32", "hardware.dram_channel_bandwidth_gbps=128"],
    ["training.global_batch=32", "hardware.sram_per_core_mib=4"],
]


def _wafer(overrides: list[str]):  # type: ignore[no-untyped-def]
    return load_config(EXAMPLES / "wafer-t18b.toml", overrides=overrides)


def test_a_batch_of_wafer_plans_shares_routes_and_keeps_every_value() -> None:
    configs = [_wafer(o) for o in WAFER_VARIANTS]
    alone = [simulate(c, engine="analytical") for c in configs]
    with shared_geometry():
        batch = [simulate(c, engine="analytical") for c in configs]
        again = [simulate(c, engine="analytical") for c in configs]
    hits, misses = memo_stats()
    assert hits > misses > 0  # the variants share most of their routes
    for a, b, c in zip(alone, batch, again, strict=True):
        for field in ("iteration_time_s", "throughput_samples_per_s", "peak_memory_bytes"):
            assert getattr(a, field) == getattr(b, field) == getattr(c, field)  # bit for bit


def test_nothing_is_remembered_outside_a_block() -> None:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return 7

    assert remember(lambda: ("k",), compute) == remember(lambda: ("k",), compute) == 7
    assert len(calls) == 2
    with shared_geometry():
        with shared_geometry():  # nested: the outer memo
            assert remember(lambda: ("k",), compute) == 7
        assert remember(lambda: ("k",), compute) == 7
    assert len(calls) == 3
    assert remember(lambda: ("k",), compute) == 7  # dropped with the outer block
    assert len(calls) == 4


def test_a_kept_store_carries_the_memo_across_blocks_with_every_value() -> None:
    """``store``: blocks that price one plan each (the guided sampler's trials) share what
    earlier blocks remembered, and give the values of the plans priced alone."""
    configs = [_wafer(o) for o in WAFER_VARIANTS[:4]]
    alone = [simulate(c, engine="analytical") for c in configs]
    store: dict[Hashable, object] = {}
    kept = []
    for config in configs:
        with shared_geometry(store=store):
            kept.append(simulate(config, engine="analytical"))
        hits, misses = memo_stats()
    assert hits > misses  # the last block mostly found its routes in the store
    for a, b in zip(alone, kept, strict=True):
        assert a.iteration_time_s == b.iteration_time_s  # bit for bit
    calls: list[int] = []
    assert remember(lambda: ("k",), lambda: calls.append(1) or 1) == 1  # outside: nothing kept
    with shared_geometry(store=store):
        remember(lambda: ("k",), lambda: calls.append(1) or 1)
    with shared_geometry(store=store):
        remember(lambda: ("k",), lambda: calls.append(1) or 1)
    assert len(calls) == 2  # the second block found it


def test_outside_a_block_no_key_is_built() -> None:
    """A single simulation pays nothing for the memo: the key is built only inside a block."""

    def key() -> tuple[str]:
        raise AssertionError("key built outside shared_geometry")

    assert remember(key, lambda: 3) == 3


def test_a_full_memo_is_cleared_not_grown() -> None:
    with shared_geometry(max_entries=2):
        for i in range(5):
            remember(lambda i=i: ("k", i), lambda i=i: i)
        assert remember(lambda: ("k", 4), lambda: -1) == 4
        assert remember(lambda: ("k", 0), lambda: -1) == -1  # cleared when it was full


@pytest.mark.parametrize(
    ("example", "overrides"),
    [
        ("wafer-t18b.toml", ["training.global_batch=32"]),
        ("t18b-dgx-a100.toml", []),
    ],
)
def test_analytical_if_fits_is_the_analytical_result(example: str, overrides: list[str]) -> None:
    config = load_config(EXAMPLES / example, overrides=overrides)
    assert memory_check(config).overflow_bytes <= 0
    result = analytical_if_fits(config)
    assert result is not None
    assert result.iteration_time_s == simulate(config, engine="analytical").iteration_time_s


def test_analytical_if_fits_skips_an_overflowing_plan() -> None:
    config = load_config(
        EXAMPLES / "t18b-dgx-a100.toml",
        overrides=['training.recompute="none"', "training.micro_batch=16"],
    )
    assert memory_check(config).overflow_bytes > 0
    assert analytical_if_fits(config) is None


def test_a_plan_refuses_another_configurations_context() -> None:
    a = _wafer(["training.global_batch=32"])
    b = _wafer(["training.global_batch=32", "training.micro_batch=2"])
    with pytest.raises(ValueError, match="another configuration"):
        build_plan(b, context=plan_context(a, with_links=False))
    with pytest.raises(ValueError, match="link mode"):
        build_plan(a, context=plan_context(a, with_links=True))


def test_routes_moved_by_whole_tiles_share_one_key_and_their_profile() -> None:
    hw = _wafer([]).hardware
    rows, cols = hw.cores_per_tile
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 6, (12, 2)), rng.integers(0, 6, (12, 2))
    key, alone = tile_aligned_key(hw, src, dst), mesh_profile(hw, src, dst)
    for move in ((rows, 0), (0, 2 * cols), (2 * rows, cols)):
        moved = (src + move, dst + move)
        assert tile_aligned_key(hw, *moved) == key
        assert mesh_profile(hw, *moved) == alone  # priced anew (no block): the same values
    assert tile_aligned_key(hw, src + (1, 0), dst + (1, 0)) != key  # part of a tile: not


@pytest.mark.parametrize("strategy", INTER_GROUP_STRATEGIES)
def test_hand_offs_moved_by_whole_tiles_share_their_routes_and_keep_their_values(
    strategy: str,
) -> None:
    hw = _wafer([]).hardware
    rows, cols = hw.cores_per_tile
    # groups of six: their centroids are not binary fractions (adapters chosen where they are)
    src = np.array([[[r, c] for r in range(3) for c in range(2)]] * 2) + [[[0, 0]], [[3, 0]]]
    dst = src + (0, 3)
    moves = [(0, 0), (rows, 0), (0, cols), (2 * rows, cols)]

    def priced() -> list[object]:
        return [
            hand_off(
                hw,
                src=src + m,
                dst=dst + m,
                nbytes=1e6,
                strategy=strategy,
                adapters=2,
                partial=True,
            )
            for m in moves
        ]

    alone = priced()
    with shared_geometry():
        together = priced()
        hits, _ = memo_stats()
    assert together == alone
    assert hits >= len(moves) - 1
