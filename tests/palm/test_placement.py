"""Stage layouts, TP placement and inter-group strategies (paper sec. V-B, V-C)."""

from __future__ import annotations

import numpy as np
import pytest

import palm
from palm.network.intergroup import choose_adapters, hand_off
from palm.network.loads import mesh_profile
from palm.plan import build_plan


def _mesh_tables(
    *, tiles: list[int], cores: list[int], layers: int, pp: int, tp: int, dp: int, **over: object
) -> dict[str, dict[str, object]]:
    tables: dict[str, dict[str, object]] = {
        "model": {
            "name": "t",
            "family": "gpt",
            "layers": layers,
            "hidden": 256,
            "heads": 8,
            "ffn_hidden": 1024,
            "seq_len": 128,
            "vocab": 1024,
        },
        "hardware": {
            "topology": "mesh2d",
            "tiles": tiles,
            "cores_per_tile": cores,
            "core_peak_tflops": {"fp16": 1.0},
            "sram_per_core_mib": 256.0,
            "sram_bandwidth_per_core_gbps": 1000.0,
            "intra_tile_link_gbps": 100.0,
            "inter_tile_link_gbps": 25.0,
            "intra_tile_link_latency_ns": 1.0,
            "inter_tile_link_latency_ns": 10.0,
            "dram_channels": 4,
            "dram_channel_bandwidth_gbps": 100.0,
            "dram_capacity_gib": 64.0,
            "dram_response_ns": 50.0,
        },
        "training": {"global_batch": 4 * dp, "micro_batch": 1, "precision": "fp16"},
        "parallelism": {"tp": tp, "pp": pp, "dp": dp},
    }
    for key, value in over.items():
        section, field = key.split("__")
        tables.setdefault(section, {})[field] = value
    return tables


def test_line_and_s_shape_route_differently_by_hand_on_a_4x4_mesh() -> None:
    # 16 stages, one per tile of a 4 x 4 mesh (one core per tile). Line: down each column and
    # back to the top of the next, so the 3 column changes cost 3 + 1 = 4 hops and the 12 steps
    # inside a column 1 hop: 24 hops in all. S-shape: every step is to a neighbour: 15 hops.
    hops = {}
    for layout in ("line", "s-shape"):
        cfg = palm.parse_config(
            _mesh_tables(
                tiles=[4, 4], cores=[1, 1], layers=16, pp=16, tp=1, dp=1, placement__layout=layout
            )
        )
        plan = build_plan(cfg)
        hops[layout] = [p.hops for p in plan.send_profiles]
    assert sum(hops["line"]) == 24 and hops["line"][3] == 4
    assert sum(hops["s-shape"]) == 15 and set(hops["s-shape"]) == {1}
    times = [
        palm.simulate(
            palm.parse_config(
                _mesh_tables(
                    tiles=[4, 4],
                    cores=[1, 1],
                    layers=16,
                    pp=16,
                    tp=1,
                    dp=1,
                    placement__layout=layout,
                )
            )
        ).iteration_time_s
        for layout in ("line", "s-shape")
    ]
    assert times[1] < times[0]


def test_explicit_layout_places_stages_on_the_given_tiles() -> None:
    cfg = palm.parse_config(
        _mesh_tables(
            tiles=[2, 2],
            cores=[2, 2],
            layers=4,
            pp=4,
            tp=2,
            dp=2,
            placement__layout="explicit",
            placement__stage_tiles=[[3], [2], [0], [1]],
        )
    )
    plan = build_plan(cfg)
    first = {tuple(x) for x in plan.placement.stage_array(0).reshape(-1, 2).tolist()}
    assert first == {(2, 2), (2, 3), (3, 2), (3, 3)}  # tile 3 = row 1, column 1


def test_compact_and_strided_tp_groups_route_differently() -> None:
    # one tile of 4 x 4 cores, TP = 4 and DP = 4: compact TP partners share a row; strided ones
    # are 4 apart in the snake order, one per row
    plans = {
        placement: build_plan(
            palm.parse_config(
                _mesh_tables(
                    tiles=[1, 1],
                    cores=[4, 4],
                    layers=2,
                    pp=1,
                    tp=4,
                    dp=4,
                    placement__tp_group=placement,
                )
            )
        )
        for placement in ("compact", "strided")
    }
    compact = plans["compact"].placement.stage_array(0)[0].tolist()
    strided = plans["strided"].placement.stage_array(0)[0].tolist()
    assert compact == [[0, 0], [0, 1], [0, 2], [0, 3]]
    assert strided == [[0, 0], [1, 3], [2, 0], [3, 3]]
    assert plans["strided"].tp_profiles[0].latency_s > plans["compact"].tp_profiles[0].latency_s
    assert plans["strided"].chunks[0].tp_forward_s > plans["compact"].chunks[0].tp_forward_s


def _groups() -> tuple[np.ndarray, np.ndarray]:
    src = np.array([[[r, c] for r in range(2) for c in range(3)]])  # 2 x 3 cores, left
    dst = np.array([[[r, c] for r in range(2) for c in range(4, 7)]])  # 2 x 3 cores, right
    return src, dst


def test_strategy_2_with_one_adapter_is_reduce_plus_transfer_plus_broadcast() -> None:
    hw = palm.parse_config(
        _mesh_tables(tiles=[1, 1], cores=[2, 8], layers=2, pp=1, tp=16, dp=1, model__heads=16)
    ).hardware
    src, dst = _groups()
    nbytes = 1e6
    parts = hand_off(
        hw,
        src=src,
        dst=dst,
        nbytes=nbytes,
        strategy="reduce-adapters",  # type: ignore[arg-type]
        adapters=1,
        partial=True,
    )
    s_ad = src[0][choose_adapters(src[0], dst[0], 1)[0]]
    d_ad = dst[0][choose_adapters(dst[0], src[0], 1)[0]]
    assert s_ad.tolist() == [0, 2] and d_ad.tolist() == [0, 4]  # the facing corners
    reduce = mesh_profile(hw, src[0], np.repeat([s_ad], 6, axis=0)).time(nbytes)  # type: ignore[arg-type]
    transfer = mesh_profile(hw, np.array([s_ad]), np.array([d_ad])).time(nbytes)  # type: ignore[arg-type]
    broadcast = mesh_profile(hw, np.repeat([d_ad], 6, axis=0), dst[0]).time(nbytes)  # type: ignore[arg-type]
    assert parts.adapters_allreduce_s == 0.0
    assert parts.total_s == pytest.approx(reduce + transfer + broadcast, rel=1e-12)
    assert (parts.reduce_s, parts.transfer_s, parts.broadcast_s) == pytest.approx(
        (reduce, transfer, broadcast)
    )


def test_strategies_differ_and_complete_data_needs_no_reduction() -> None:
    hw = palm.parse_config(
        _mesh_tables(tiles=[1, 1], cores=[2, 8], layers=2, pp=1, tp=16, dp=1, model__heads=16)
    ).hardware
    src, dst = _groups()
    one = hand_off(
        hw,
        src=src,
        dst=dst,
        nbytes=1e6,
        strategy="allreduce-broadcast",  # type: ignore[arg-type]
        adapters=2,
        partial=True,
    )
    two = hand_off(
        hw,
        src=src,
        dst=dst,
        nbytes=1e6,
        strategy="reduce-adapters",  # type: ignore[arg-type]
        adapters=2,
        partial=True,
    )
    assert one.total_s != two.total_s and two.adapters_allreduce_s > 0
    done = hand_off(
        hw,
        src=src,
        dst=dst,
        nbytes=1e6,
        strategy="reduce-adapters",  # type: ignore[arg-type]
        adapters=2,
        partial=False,
    )
    assert done.reduce_s == 0 and done.adapters_allreduce_s == 0
    assert done.total_s == pytest.approx(done.transfer_s + done.broadcast_s)


def test_per_boundary_strategies_are_validated_and_used() -> None:
    base = _mesh_tables(tiles=[1, 1], cores=[4, 4], layers=4, pp=4, tp=4, dp=1)
    with pytest.raises(palm.ConfigError, match="boundary_strategies"):
        palm.parse_config({**base, "communication": {"boundary_strategies": ["reduce-adapters"]}})
    with pytest.raises(palm.ConfigError, match=r"boundary_strategies\[1\]"):
        palm.parse_config(
            {
                **base,
                "communication": {
                    "boundary_strategies": ["reduce-adapters", "teleport", "reduce-adapters"]
                },
            }
        )
    mixed = build_plan(
        palm.parse_config(
            {
                **base,
                "communication": {
                    "adapters": 2,
                    "boundary_strategies": [
                        "reduce-adapters",
                        "allreduce-broadcast",
                        "reduce-adapters",
                    ],
                },
            }
        )
    )
    same = build_plan(palm.parse_config({**base, "communication": {"adapters": 2}}))
    assert mixed.chunks[0].send_s != same.chunks[0].send_s
    assert mixed.chunks[1].send_s == same.chunks[1].send_s


def test_stage_regions_are_computed_once_and_hold_the_stage_array_cores() -> None:
    # a placement remembers its stages' regions (the plan's pricing and the event engine's
    # DRAM aggregate ask for them): the same object again, with the cores of stage_array
    cfg = palm.parse_config(_mesh_tables(tiles=[2, 2], cores=[2, 2], layers=4, pp=4, tp=2, dp=2))
    placement = build_plan(cfg).placement
    for s in range(4):
        region = placement.stage_region(s)
        assert placement.stage_region(s) is region
        cores = {tuple(c) for c in placement.stage_array(s).reshape(-1, 2).tolist()}
        assert {tuple(c) for c in region.cores().tolist()} == cores
        assert region.count == 4  # tp x dp cores, each once


def test_one_direction_gives_the_links_of_the_array_form() -> None:
    # link_is_inter_tile with one direction (the DRAM pricing's calls) is the array form's
    # answer: on 2 x 3 cores per tile, eastward links leave columns 2, 5, ... across a tile
    # boundary, westward ones columns 0, 3, ...; southward rows 1, 3, ..., northward 0, 2, ...
    from palm.network.loads import EAST, NORTH, SOUTH, WEST, link_is_inter_tile

    cfg = palm.parse_config(_mesh_tables(tiles=[2, 2], cores=[2, 3], layers=4, pp=4, tp=2, dp=3))
    hw = cfg.hardware
    at = np.arange(6)
    expected = {
        EAST: [False, False, True, False, False, True],
        WEST: [True, False, False, True, False, False],
        SOUTH: [False, True, False, True, False, True],
        NORTH: [True, False, True, False, True, False],
    }
    for direction, inter in expected.items():
        assert link_is_inter_tile(hw, direction, at).tolist() == inter  # type: ignore[arg-type]
        both = link_is_inter_tile(hw, np.full(6, direction), at)  # type: ignore[arg-type]
        assert both.tolist() == inter
        assert link_is_inter_tile(hw, direction, 2).shape == ()  # type: ignore[arg-type]
