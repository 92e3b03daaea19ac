"""Network physics: shared and disjoint links, ring all-reduce closed form, both granularities."""

from __future__ import annotations

import random

import numpy as np
import pytest

import palm
from palm.cost.collectives import collective_time
from palm.engines.event.fabric import _CLUSTER_KINDS, _cluster_group_keys
from palm.hardware import Mesh2DHardware, PeakTflops
from palm.network.loads import LinkLoad, mesh_profile
from palm.plan import build_plan
from palm.workload.ops import Collective


def _mesh(tiles: tuple[int, int], cores: tuple[int, int] = (1, 1)) -> Mesh2DHardware:
    return Mesh2DHardware(
        name="m",
        tiles=tiles,
        cores_per_tile=cores,
        core_peak_tflops=PeakTflops(fp16=1.0),
        sram_per_core_mib=64.0,
        sram_bandwidth_per_core_gbps=1000.0,
        intra_tile_link_gbps=100.0,
        inter_tile_link_gbps=50.0,
        intra_tile_link_latency_ns=1.0,
        inter_tile_link_latency_ns=20.0,
        dram_channels=4,
        dram_channel_bandwidth_gbps=100.0,
        dram_capacity_gib=16.0,
        dram_response_ns=50.0,
    )


def test_transfers_sharing_a_link_split_its_bandwidth() -> None:
    hw = _mesh((1, 4))
    one = mesh_profile(hw, np.array([[0, 0]]), np.array([[0, 2]]))
    two = mesh_profile(hw, np.array([[0, 0], [0, 1]]), np.array([[0, 2], [0, 3]]))  # share 1->2
    apart = mesh_profile(hw, np.array([[0, 0], [0, 3]]), np.array([[0, 1], [0, 2]]))  # disjoint
    nbytes = 1e6
    assert two.time(nbytes) - two.latency_s == pytest.approx(2 * (one.time(nbytes) - one.latency_s))
    assert apart.time(nbytes) - apart.latency_s == pytest.approx(nbytes / 50e9)
    assert one.hops == 2 and one.latency_s == pytest.approx(40e-9)


@pytest.mark.parametrize(
    "tiles, ring",
    [
        ((2, 2), [(0, 0), (0, 1), (1, 1), (1, 0)]),
        (
            (4, 4),
            [
                (0, 0),
                (0, 1),
                (0, 2),
                (0, 3),
                (1, 3),
                (2, 3),
                (3, 3),
                (3, 2),
                (2, 2),
                (1, 2),
                (1, 1),
                (2, 1),
                (3, 1),
                (3, 0),
                (2, 0),
                (1, 0),
            ],
        ),
    ],
)
def test_uncontended_ring_allreduce_equals_closed_form(
    tiles: tuple[int, int], ring: list[tuple[int, int]]
) -> None:
    hw = _mesh(tiles)
    members = np.array(ring)
    prof = mesh_profile(hw, members, np.roll(members, -1, axis=0))
    n, nbytes, bw, lat = len(ring), 64e6, 50e9, 20e-9  # every edge crosses one tile boundary
    expected = 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * lat
    assert collective_time(Collective("all-reduce", nbytes), n=n, step=prof) == pytest.approx(
        expected
    )


def _dp_ring_config(granularity: str) -> palm.SimConfig:
    linear = {"type": "linear", "in_features": 512, "out_features": 512, "bias": False}
    return palm.parse_config(
        {
            "model": {"name": "toy", "ops": [linear, linear]},
            "hardware": {
                "topology": "mesh2d",
                "tiles": [2, 2],
                "cores_per_tile": [1, 1],
                "core_peak_tflops": {"fp16": 1.0},
                "sram_per_core_mib": 64.0,
                "sram_bandwidth_per_core_gbps": 1000.0,
                "intra_tile_link_gbps": 100.0,
                "inter_tile_link_gbps": 50.0,
                "intra_tile_link_latency_ns": 1.0,
                "inter_tile_link_latency_ns": 20.0,
                "dram_channels": 4,
                "dram_channel_bandwidth_gbps": 100.0,
                "dram_capacity_gib": 16.0,
                "dram_response_ns": 50.0,
            },
            "training": {
                "global_batch": 16,
                "micro_batch": 2,
                "precision": "fp16",
                "optimizer": "sgd",
            },
            "parallelism": {"tp": 1, "pp": 1, "dp": 4},
            "placement": {"layout": "s-shape"},
            "communication": {"noc_granularity": granularity},
        }
    )


def test_a_stage_dp_allreduce_on_four_tiles_is_the_closed_form() -> None:
    plan = build_plan(_dp_ring_config("group"))
    nbytes = 2 * 512 * 512 * 2  # two layers of fp16 gradients
    expected = 2 * 3 / 4 * nbytes / 50e9 + 2 * 3 * 20e-9
    assert plan.stages[0].dp_allreduce_s == pytest.approx(expected)


def test_group_and_link_granularity_agree() -> None:
    group = palm.simulate(_dp_ring_config("group"))
    link = palm.simulate(_dp_ring_config("link"))
    assert link.iteration_time_s == pytest.approx(group.iteration_time_s, rel=1e-12)
    assert link.events_simulated == group.events_simulated
    wafer = [
        palm.simulate(
            palm.load_config(
                "examples/wafer-t18b.toml",
                overrides=[f'communication.noc_granularity="{g}"', "training.global_batch=8"],
            )
        )
        for g in ("group", "link")
    ]
    # on the wafer, per-link mode also sees every stage's interleaved DRAM reads crossing the
    # links of the other stages (and their rings and hand-offs), which group mode aggregates
    # into the stage's own links and one shared edge bottleneck: per-link is slower, by 24%
    # here (a known limit of the aggregation, docs/model.md sec. 7)
    assert wafer[0].iteration_time_s < wafer[1].iteration_time_s
    assert wafer[1].iteration_time_s == pytest.approx(wafer[0].iteration_time_s, rel=0.30)
    assert len(wafer[1].links or ()) > len(wafer[0].links or ())


@pytest.mark.parametrize(
    "tiles, channels", [((5, 4), 18), ((37, 23), 7), ((16, 16), 64), ((9, 31), 40)]
)
def test_fast_nearest_channel_equals_the_exhaustive_search(
    tiles: tuple[int, int], channels: int
) -> None:
    import dataclasses

    from palm.hardware import HARDWARE_PRESETS
    from palm.network.loads import dram_channel_cores, nearest_channel

    hw = dataclasses.replace(
        HARDWARE_PRESETS["wafer-palm"],
        tiles=tiles,  # type: ignore[type-var]
        dram_channels=channels,
    )
    rows, cols = hw.core_grid
    cores = np.array([(r, c) for r in range(rows) for c in range(cols)])
    at = dram_channel_cores(hw)
    exhaustive = np.abs(cores[:, None, :] - at[None, :, :]).sum(axis=2).argmin(axis=1)
    fast = nearest_channel(hw, cores, exhaustive_below=0)
    assert np.array_equal(fast, exhaustive)


@pytest.mark.parametrize("side", [8, 9])
def test_large_stage_rings_and_dram_match_the_per_core_plan(side: int) -> None:
    # the default plan prices a whole-mesh ring and the DRAM reads from rows and columns; the
    # per-link plan routes every core: the same profiles (8 x 8: a Hamiltonian cycle; 9 x 9:
    # the layout walk)
    config = palm.parse_config(
        {
            "model": {
                "name": "toy",
                "ops": [{"type": "linear", "in_features": 64, "out_features": 64, "bias": False}]
                * 2,
            },
            "hardware": {
                "preset": "wafer-palm",
                "tiles": [side, side],
                "cores_per_tile": [1, 1],
                "dram_channels": 3 * side,
            },
            "training": {"global_batch": side * side, "micro_batch": 1, "precision": "fp16"},
            "parallelism": {"tp": 1, "pp": 1, "dp": side * side},
        }
    )
    fast, slow = build_plan(config), build_plan(config, with_links=True)
    for a, b in [(fast.dp_profiles[0], slow.dp_profiles[0]), (fast.dram[0].noc, slow.dram[0].noc)]:
        assert (a.hops, a.latency_s) == (b.hops, pytest.approx(b.latency_s))
        assert a.bandwidth_Bps == pytest.approx(b.bandwidth_Bps)
    assert fast.dram[0].cores_per_channel == slow.dram[0].cores_per_channel


def test_a_633_by_633_plan_never_lists_its_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    # wafer scale: layer-wise, one replica per core. The plan must not build per-core arrays
    # (that is what keeps its cost flat in the core count)
    from palm.network.placement import Placement

    def refuse(self: Placement, stage: int) -> np.ndarray:
        raise AssertionError("per-core array built")

    monkeypatch.setattr(Placement, "stage_array", refuse)
    n = 633
    config = palm.parse_config(
        {
            "model": {
                "name": "toy",
                "ops": [{"type": "linear", "in_features": 64, "out_features": 64, "bias": False}]
                * 2,
            },
            "hardware": {
                "preset": "wafer-palm",
                "tiles": [n, n],
                "cores_per_tile": [1, 1],
                "dram_channels": 4 * n,
                "dram_capacity_gib": 2048.0 * n,
            },
            "training": {"global_batch": n * n, "micro_batch": 1, "precision": "fp16"},
            "parallelism": {"tp": 1, "pp": 1, "dp": n * n},
        }
    )
    result = palm.simulate(config)
    assert result.iteration_time_s > 0
    # interleaved placement: every channel serves n^2 / 4n cores' worth of each read
    assert max(build_plan(config).dram[0].cores_per_channel) == pytest.approx(n / 4)


def test_cluster_group_keys_sum_each_ports_loads_by_kind_and_group() -> None:
    # a cluster flow's ports (id = kind x devices + GPU) summed per (kind, stage group), in
    # the order of the ids, as a loop adds them: the one-division path (groups tile the GPUs)
    # and the general one give the loop's sums bit for bit
    rng = random.Random(3)
    for devices, group in ((256, 256), (64, 8), (48, 16), (12, 5), (7, 3)):
        ids = [rng.randrange(len(_CLUSTER_KINDS) * devices) for _ in range(300)]
        loads = [rng.uniform(0.1, 3.0) for _ in ids]
        expected: dict[tuple[str, int], float] = {}
        for i, x in zip(ids, loads, strict=True):
            key = (_CLUSTER_KINDS[i // devices], (i % devices) // group)
            expected[key] = expected.get(key, 0.0) + x
        got = _cluster_group_keys(LinkLoad(np.asarray(ids), np.asarray(loads)), devices, group)
        assert got == expected
        assert list(got) == sorted(expected, key=lambda k: (_CLUSTER_KINDS.index(k[0]), k[1]))


def _dgx(gpus: int) -> palm.SimConfig:
    return palm.parse_config(
        {
            "model": {
                "name": "t",
                "layers": 4,
                "hidden": 1024,
                "ffn_hidden": 4096,
                "vocab": 32000,
                "heads": 16,
                "seq_len": 512,
            },
            "hardware": {"preset": "dgx-a100", "gpus": gpus},
            "training": {"global_batch": 64, "micro_batch": 1},
            "parallelism": {"tp": 2, "pp": 2, "dp": gpus // 4},
        }
    )


@pytest.mark.parametrize("seed", range(6))
def test_one_to_one_transfers_price_as_the_general_cluster_profile(seed: int) -> None:
    """Every GPU sends at most once and receives at most once (rings, a hand-off between two
    stages of one shape): the fast profile has the general one's latency, bandwidth and
    per-port loads, and its per-block sums are the per-port loads summed per block."""
    from palm.network.loads import cluster_one_to_one_profile, cluster_profile

    rng = np.random.default_rng(seed)
    hw = _dgx(64).hardware
    assert isinstance(hw, palm.hardware.GpuClusterHardware)
    devices, block = 64, [1, 4, 8, 16][seed % 4]
    n = int(rng.integers(1, 40))
    src = rng.permutation(devices)[:n]
    dst = rng.permutation(devices)[:n]
    if seed == 0:
        dst = src.copy()  # only self transfers: nothing moves
    elif seed == 1:
        dst[: n // 2] = src[: n // 2]  # some self transfers, dropped
    fast = cluster_one_to_one_profile(hw, src, dst, devices=devices, with_links=True, block=block)
    slow = cluster_profile(hw, src, dst, devices=devices, with_links=True)
    assert (fast.latency_s, fast.bandwidth_Bps, fast.hops) == (
        slow.latency_s,
        slow.bandwidth_Bps,
        slow.hops,
    )
    if slow.links is None:
        assert fast.links is None
        return
    assert fast.links is not None
    per_port = sorted(zip(fast.links.ids.tolist(), fast.links.loads.tolist(), strict=True))
    assert per_port == sorted(zip(slow.links.ids.tolist(), slow.links.loads.tolist(), strict=True))
    summed: dict[int, float] = {}
    for i, x in per_port:
        first = (i // devices) * devices + block * ((i % devices) // block)
        summed[first] = summed.get(first, 0.0) + x
    if block > 1:
        assert fast.links.blocks is not None and fast.links.block == block
        blocks = fast.links.blocks
        got = dict(zip(blocks.ids.tolist(), blocks.loads.tolist(), strict=True))
        assert got == summed
        for group in (block, 2 * block):  # the engine's groups, multiples of the block
            whole = LinkLoad(fast.links.ids, np.asarray(fast.links.loads))
            assert _cluster_group_keys(fast.links, devices, group) == _cluster_group_keys(
                whole, devices, group
            )


def test_a_stage_rings_block_is_the_stage_group() -> None:
    from palm.plan.rings import stage_block

    assert stage_block(_dgx(64)) == 32  # tp 2 x dp 16 per stage, two stages tile the GPUs
