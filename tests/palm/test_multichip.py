"""Multi-chip Tenstorrent systems (docs/model.md sec. 7c): chips with their own DRAM
(``dram_placement = "per-tile"``) joined by Ethernet (``chip_links_per_edge``); the n300,
T3000, Galaxy and p150 x 4 presets; the hand-worked figures of the docs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import palm
from palm.api import plan_for
from palm.errors import ConfigError
from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from palm.network.dram import interleaved_access
from palm.network.dram_tiles import per_tile_accesses, tile_parts
from palm.network.loads import EAST, WEST, dram_channel_cores, link_is_inter_tile
from palm.network.region import CoreRegion

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MULTI = ("wormhole-n300", "wormhole-t3000", "wormhole-galaxy", "blackhole-p150x4")


def _mesh(name: str) -> Mesh2DHardware:
    hw = HARDWARE_PRESETS[name]
    assert isinstance(hw, Mesh2DHardware)
    return hw


def _whole(hw: Mesh2DHardware) -> CoreRegion:
    rows, cols = hw.core_grid
    return CoreRegion.of([(0, rows, 0, cols)])


def test_figures_match_the_sources() -> None:
    n300, t3k, glx, bh = (_mesh(n) for n in MULTI)
    assert (n300.tiles, n300.device_count, n300.dram_bandwidth_gbps) == ((1, 2), 128, 576.0)
    assert n300.dram_capacity_gib == 24.0 and n300.dram_placement == "per-tile"
    # one user link of 100 Gb/s between the chips, shared by the 8 core rows crossing the edge
    assert n300.inter_tile_gbps(along_row=True) == 12.5 / 8
    assert (t3k.tiles, t3k.device_count, t3k.dram_channels) == ((2, 4), 512, 96)
    assert (glx.tiles, glx.device_count, glx.chip_links_per_edge) == ((4, 8), 2048, 4)
    assert glx.inter_tile_gbps(along_row=False) == 4 * 12.5 / 8
    # Blackhole: 2 links of 400 Gb/s per neighbour, over 10 rows (east-west) or 13 columns
    assert bh.tiles == (2, 2) and bh.dram_bandwidth_gbps == 4 * 512.0
    assert bh.inter_tile_gbps(along_row=True) == 2 * 50.0 / 10
    assert bh.inter_tile_gbps(along_row=False) == 2 * 50.0 / 13
    for hw in (n300, t3k, glx, bh):
        assert hw.dram_channels % (hw.tiles[0] * hw.tiles[1]) == 0


@pytest.mark.parametrize("name", MULTI)
def test_a_local_read_never_crosses_a_chip_link(name: str) -> None:
    """Every link the reads of the whole mesh load lies inside one chip; with one pool
    interleaved over every chip (the previous model) reads do cross the chip links."""
    hw = _mesh(name)
    (access,) = per_tile_accesses(hw, (_whole(hw),), with_links=True)
    links = access.noc.links
    assert links is not None and len(links.ids) > 0
    node, direction = np.divmod(links.ids, 4)
    r, c = np.divmod(node, hw.core_grid[1])
    along_row = (direction == EAST) | (direction == WEST)
    inter = link_is_inter_tile(hw, direction, np.where(along_row, c, r))
    assert not inter.any()
    if name == "wormhole-n300":
        pooled = interleaved_access(hw, _whole(hw), dram_channel_cores(hw), with_links=True)
        assert pooled.noc.links is not None
        node, direction = np.divmod(pooled.noc.links.ids, 4)
        r, c = np.divmod(node, hw.core_grid[1])
        along_row = (direction == EAST) | (direction == WEST)
        assert link_is_inter_tile(hw, direction, np.where(along_row, c, r)).any()


def test_each_chip_reads_its_own_channels() -> None:
    """A region on chip 1 only loads chip 1's 12 channels (indices 12..23), each with 64 / 12
    cores; a region straddling both chips loads each chip's channels with its own cores."""
    hw = _mesh("wormhole-n300")
    right, both = CoreRegion.of([(0, 8, 8, 16)]), CoreRegion.of([(0, 4, 4, 12)])
    a, b = per_tile_accesses(hw, (right, both))
    assert a.channels == tuple(range(12, 24)) and a.cores_per_channel == (64 / 12,) * 12
    assert b.channels == tuple(range(24))
    assert b.cores_per_channel == (16 / 12,) * 24
    assert set(tile_parts(hw, both)) == {0, 1}


def test_n300_dram_access_is_worked_by_hand() -> None:
    """docs/model.md sec. 7c: 64 cores of one chip read b bytes each over its 12 channels of
    24 GB/s at the memory efficiency 0.922: b x (64 / 12) / 22.128 GB/s, after the 300 ns
    response and the longest route, 13 hops of 9 ns; the NoC gives a core 5.05 GB/s, more
    than its 4.15 GB/s of the channels, so the channels bound the read."""
    hw = _mesh("wormhole-n300")
    (access,) = per_tile_accesses(hw, (_whole(hw),))
    assert hw.memory_efficiency == 0.922
    per_byte = (64 / 12) / (24e9 * 0.922)
    assert access.noc.latency_s == pytest.approx(13 * 9e-9, rel=1e-12)
    assert 1 / access.noc.bandwidth_Bps < per_byte
    b = 2.0**20
    assert access.time(b) == pytest.approx(300e-9 + 117e-9 + b * per_byte, rel=1e-12)
    single = _mesh("wormhole-n150")
    (one,) = per_tile_accesses(hw, (CoreRegion.of([(0, 8, 0, 8)]),))
    alone = interleaved_access(single, _whole(single), dram_channel_cores(single))
    assert one.time(b) == alone.time(b)  # a chip of the n300 reads as an n150 does


@pytest.mark.parametrize(
    "example, n150",
    [
        (
            "wormhole-n300-resnet50.toml",
            ["parallelism.dp=64", "training.global_batch=256"],
        ),
        ("wormhole-n300-bert-base.toml", ["parallelism.dp=16", "training.global_batch=256"]),
    ],
)
def test_n300_data_parallel_is_two_n150s(example: str, n150: list[str]) -> None:
    """Inference data-parallel across the chips: no collective crosses Ethernet and each chip
    reads its own weights, so the n300 does twice the work of an n150 in the same time (the
    input fetch, divided over all data ranks, makes ResNet-50's a hair faster); one DRAM pool
    interleaved over both chips (the earlier model) is an order of magnitude slower."""
    path = EXAMPLES / example
    two = palm.simulate(path)
    one = palm.simulate(path, overrides=['hardware.preset="wormhole-n150"', *n150])
    assert two.throughput_samples_per_s == pytest.approx(2 * one.throughput_samples_per_s, rel=1e-4)
    pooled = palm.simulate(path, overrides=['hardware.dram_placement="interleaved"'])
    assert pooled.throughput_samples_per_s < two.throughput_samples_per_s / 5


def test_t3000_prefill_tensor_parallel_ring_is_worked_by_hand() -> None:
    """docs/model.md sec. 7c: the 4 TP rings of a stage each cross the edge between its two
    chips once each way, every ring on its own core column, so a ring step gets one column's
    share of the one Ethernet link, 12.5 / 8 GB/s; the longest step runs 18 hops, one of them
    across the chips: 650 + 17 x 9 ns. A layer's two all-reduces of 2048 x 4096 bf16 over 32
    ranks take 2 x (2 x 31/32 x 16 MiB / 1.5625 GB/s + 62 x 803 ns), 8 layers per stage."""
    plan = plan_for(palm.load_config(EXAMPLES / "wormhole-t3000-llama2-7b-prefill.toml"))
    ring = plan.tp_profiles[0]
    assert ring.bandwidth_Bps == 12.5e9 / 8
    assert ring.latency_s == pytest.approx(650e-9 + 17 * 9e-9, rel=1e-12)
    message = 2048 * 4096 * 2
    all_reduce = 2 * 31 / 32 * message / 1.5625e9 + 62 * 803e-9
    assert plan.chunks[0].tp_forward_s == pytest.approx(2 * 8 * all_reduce, rel=1e-12)


def test_t3000_one_rank_per_chip_shares_each_link_among_the_64_rings() -> None:
    """TP 8 with one rank per chip (strided over DP 64): the 64 rings of a stage each cross
    every chip edge of their path, 8 of them on each core row (column) of the edge, so a step
    gets 12.5 GB/s / 64, exactly the one link shared by the 64 rings; the ring's wrap from
    chip (1, 3) to chip (0, 0) runs 32 hops, 4 of them across chips: 4 x 650 + 28 x 9 ns."""
    config = palm.load_config(
        EXAMPLES / "wormhole-t3000-llama2-7b-prefill.toml",
        overrides=["parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=64"],
    )
    ring = plan_for(config).tp_profiles[0]
    assert ring.bandwidth_Bps == 12.5e9 / 64
    assert ring.latency_s == pytest.approx((4 * 650 + 28 * 9) * 1e-9, rel=1e-12)


@pytest.mark.parametrize(
    "example, overrides",
    [
        ("wormhole-t3000-llama2-7b-prefill.toml", []),
        ("wormhole-n300-resnet50.toml", ["parallelism.pp=16", "parallelism.dp=8"]),
    ],
)
def test_monotone_in_ethernet_bandwidth_and_links(example: str, overrides: list[str]) -> None:
    """Faster or more chip links never slow a plan down (the resnet plan pipelines across the
    two chips, so every hand-off crosses the link)."""
    path = EXAMPLES / example
    times = [
        palm.simulate(path, overrides=[*overrides, f"hardware.inter_tile_link_gbps={g}"])
        for g in (3.125, 6.25, 12.5, 25.0, 50.0, 100.0)
    ]
    it = [r.iteration_time_s for r in times]
    assert all(b <= a for a, b in zip(it, it[1:], strict=False)) and it[-1] < it[0]
    links = [
        palm.simulate(path, overrides=[*overrides, f"hardware.chip_links_per_edge={n}"])
        for n in (1, 2, 4)
    ]
    it = [r.iteration_time_s for r in links]
    assert all(b <= a for a, b in zip(it, it[1:], strict=False))


def test_events_do_not_grow_with_the_chip_count() -> None:
    """The same per-chip plan on 2, 8 and 32 chips (and 4 Blackholes): as many events, and the
    same iteration time on the three Wormhole systems (to the input fetch, which is divided
    over all data ranks)."""
    path = EXAMPLES / "wormhole-n300-bert-base.toml"
    results = [
        palm.simulate(path, overrides=[f'hardware.preset="{name}"', f"parallelism.dp={dp}",
                                       f"training.global_batch={16 * dp}"])
        for name, dp in (("wormhole-n300", 32), ("wormhole-t3000", 128),
                         ("wormhole-galaxy", 512), ("blackhole-p150x4", 130))
    ]  # fmt: skip
    assert len({r.events_simulated for r in results}) == 1
    first = results[0].iteration_time_s
    assert all(r.iteration_time_s == pytest.approx(first, rel=1e-6) for r in results[:3])


def test_bad_multichip_fields_name_the_field() -> None:
    path = EXAMPLES / "wormhole-n300-bert-base.toml"
    with pytest.raises(ConfigError, match="hardware.dram_channels = 25"):
        palm.load_config(path, overrides=["hardware.dram_channels=25"])
    with pytest.raises(ConfigError, match="hardware.chip_links_per_edge = -1"):
        palm.load_config(path, overrides=["hardware.chip_links_per_edge=-1"])


@pytest.mark.parametrize(
    "example, overrides, domain",
    [
        ("wormhole-n300-bert-base.toml", [], (16, "2x16x4:1")),  # 16 replicas per chip
        ("wormhole-n300-resnet50.toml", [], (64, "2x64x1:1")),
        # strided TP 2: each TP rank's 64 data ranks sit on one chip
        ("wormhole-n300-bert-base.toml", ["parallelism.tp=2", "parallelism.dp=64",
                                          'placement.tp_group="strided"'], (64, "dp")),
        ("wormhole-t3000-llama2-7b-prefill.toml", [], (4, "dp")),
        # one DRAM pool: every data rank shares the one read, as before
        ("wormhole-n300-bert-base.toml", ['hardware.dram_placement="interleaved"'], (32, "dp")),
    ],
)  # fmt: skip
def test_weights_are_shared_only_by_the_data_ranks_of_one_chip(
    example: str, overrides: list[str], domain: tuple[int, str]
) -> None:
    from palm.plan.context import plan_context
    from palm.plan.traffic import memory_domain

    ctx = plan_context(palm.load_config(EXAMPLES / example, overrides=overrides), with_links=False)
    assert memory_domain(ctx, 0) == domain
