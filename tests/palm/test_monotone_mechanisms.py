"""Where more hardware can make a plan or a product slower, and why (docs/model.md sec. 7b):
each documented mechanism pinned by a hand-worked case, and the defects that made more cores
slower for no physical reason (cores a split leaves without work; the wrong cores writing)
fixed. The sweeps over presets and knobs are in test_monotone_hardware.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mesh_toys import toy_mesh

import palm
from palm.engines.event.engine import _steady_period
from palm.engines.gemm import gemm_times, output_write_Bps
from palm.hardware import Mesh2DHardware
from palm.network.dram import interleaved_access, interleaved_access_per_core
from palm.network.loads import dram_channel_cores
from palm.network.region import CoreRegion
from palm.workload.gemm import split_product

WORMHOLE_GEMM = "examples/wormhole-gemm.toml"


def _product(m: int, k: int, n: int, *more: str) -> palm.SimConfig:
    return palm.load_config(
        WORMHOLE_GEMM, overrides=[f"model.m={m}", f"model.k={k}", f"model.n={n}", *more]
    )


def test_cores_a_split_leaves_without_work_change_nothing() -> None:
    # 512^3 is 16 x 16 tiles. On 5 grid rows each row takes ceil(16 / 5) = 4 tile rows, so 4
    # rows hold all 16 and the fifth has none: tt-metal runs the program on ceil(16 / 4) = 4
    # rows. The fifth row neither receives multicasts nor writes C, and the product takes
    # what it takes on 4 x 4 cores, bit for bit (before: 1.1% more, its receivers and writers
    # counted); likewise a fifth column (before: 1.9% more, the wrong cores writing)
    split = split_product(m=512, n=512, k=512, grid=(5, 4))
    assert (split.m_parts, split.n_parts, split.tiles_m, split.tiles_n) == (4, 4, 4, 4)
    square = gemm_times(_product(512, 512, 512, "hardware.compute_grid=[4, 4]")).total_s
    for grid in ("[5, 4]", "[4, 5]", "[5, 5]"):
        assert (
            gemm_times(_product(512, 512, 512, f"hardware.compute_grid={grid}")).total_s == square
        )


def test_the_writers_of_a_2d_split_are_its_own_corner_of_the_grid() -> None:
    # 16 writers on a 4 x 5 compute grid are the 4 x 4 cores that compute C, not the first 16
    # of the grid row by row (three rows of five and one core of the fourth)
    hw = _product(512, 512, 512, "hardware.compute_grid=[4, 5]").hardware
    assert isinstance(hw, Mesh2DHardware)
    corner = output_write_Bps(hw, 16, grid=(4, 4))
    assert corner == output_write_Bps(
        _product(1, 1, 1, "hardware.compute_grid=[4, 4]").hardware, 16
    )
    assert corner != output_write_Bps(hw, 16)  # the grid's first 16, row by row


def test_more_sram_holds_a_bigger_output_block_whose_write_is_exposed() -> None:
    # docs/model.md sec. 7b, "The output tail". 3072 x 3072 x 4096 bf16 on Wormhole's 8 x 8
    # grid: each core's share of C is 12 x 16 = 192 tiles of 2048 B. With 1464 KiB of SRAM an
    # output block and its partial sums fit in half of it up to floor(1464 KiB / (4 x 2048 B))
    # = 183 tiles, so the share is written as two blocks of 96 and only the last one follows
    # the math: 64 cores x 96 tiles x 2048 B = 12.58 MB at the writers' 74.9 GB/s = 167.9 us.
    # With twice the SRAM (cap 366) the share is one block: 25.17 MB, 335.9 us. Everything
    # else is the same (the operands fit either way): the product ends 167.9 us (14.9%) later
    small = gemm_times(_product(3072, 3072, 4096))
    big = gemm_times(_product(3072, 3072, 4096, f"hardware.sram_per_core_mib={2 * 1464 / 1024}"))
    hw = _product(3072, 3072, 4096).hardware
    assert isinstance(hw, Mesh2DHardware)
    rate = output_write_Bps(hw, 64, grid=(8, 8))
    assert rate == pytest.approx(74.93e9, rel=1e-3)
    assert small.tail_s == pytest.approx(64 * 96 * 2048 / rate, rel=1e-12)
    assert big.tail_s == pytest.approx(64 * 192 * 2048 / rate, rel=1e-12)
    assert small.traffic == big.traffic and small.core_s == big.core_s
    assert big.total_s - big.tail_s == pytest.approx(small.total_s - small.tail_s, rel=1e-12)
    assert big.total_s / small.total_s - 1 == pytest.approx(0.1488, abs=1e-3)


def test_more_cores_can_expose_a_bigger_output_block_too() -> None:
    # 640 x 1280 x 320 (20 x 40 x 10 tiles) on one grid row: 4 cores take 20 x 10 = 200
    # tiles each, over the 183 that fit, so two blocks of 100; 5 cores take 20 x 8 = 160,
    # one block. The math falls by a fifth, the exposed write grows from 4 x 100 to 5 x 160
    # tiles: the product ends 1.1% later, and without its output tail it is faster
    four = gemm_times(_product(640, 320, 1280, "hardware.compute_grid=[1, 4]"))
    five = gemm_times(_product(640, 320, 1280, "hardware.compute_grid=[1, 5]"))
    assert (four.split.tiles_n, five.split.tiles_n) == (10, 8)
    assert five.math_s == pytest.approx(four.math_s * 8 / 10, rel=1e-12)
    hw = _product(640, 320, 1280).hardware
    assert isinstance(hw, Mesh2DHardware)
    assert four.tail_s == pytest.approx(4 * 100 * 2048 / output_write_Bps(hw, 4, grid=(1, 4)))
    assert five.tail_s == pytest.approx(5 * 160 * 2048 / output_write_Bps(hw, 5, grid=(1, 5)))
    assert five.total_s > four.total_s
    assert five.total_s - five.tail_s < four.total_s - four.tail_s


def _toy_read(channels: int, link_gbps: float = 10.0) -> tuple[float, float]:
    """All 16 cores of the 4 x 4 toy mesh (inter-tile links of ``link_gbps``, intra-tile ten
    times that) reading interleaved data over ``channels`` channels of 100 GB/s: one core's NoC
    rate (B/s) and the read's seconds per byte a core reads (its latency aside)."""
    hw = dataclasses.replace(
        toy_mesh().hardware,  # type: ignore[arg-type]
        dram_channels=channels,
        dram_channel_bandwidth_gbps=100.0,
        inter_tile_link_gbps=link_gbps,
        intra_tile_link_gbps=10 * link_gbps,
    )
    region = CoreRegion(np.array([[0, 4, 0, 4]]))
    access = interleaved_access(hw, region, dram_channel_cores(hw))
    per_core = interleaved_access_per_core(hw, region.cores(), dram_channel_cores(hw))
    assert access.noc.bandwidth_Bps == pytest.approx(per_core.noc.bandwidth_Bps, rel=1e-12)
    return access.noc.bandwidth_Bps, access.channel_time(0, 2.0) - access.channel_time(0, 1.0)


def test_one_more_channel_can_put_two_channels_behind_a_slow_link() -> None:
    # docs/model.md sec. 7b, "DRAM channels". The toy mesh: 4 x 4 cores in 2 x 2 tiles, 10 GB/s
    # inter-tile links. Six channels spread evenly round the edge sit at (0,1) (0,3) (2,3)
    # (3,2) (3,0) (1,0); the busiest links carry 12 / 6 = 2 bytes per byte a core reads, so a
    # core gets 10 / 2 = 5 GB/s. Seven sit at (0,0) (0,2) (1,3) (3,3) (3,2) (3,0) (1,0): two
    # bottom channels, (3,3) and (3,2), east of the tile boundary, whose reads of the 8 cores
    # in columns 0-1 go west over the inter-tile link (3,2) -> (3,1), with the 2 cores of row
    # 3 there served by (1,3) down the right edge: (8 + 8 + 2) / 7 = 18/7 bytes per byte, 3.89
    # GB/s. With 100 GB/s channels the read is NoC-bound both times: 22% slower with seven
    seven = dataclasses.replace(toy_mesh().hardware, dram_channels=7)  # type: ignore[arg-type]
    assert dram_channel_cores(seven).tolist() == [
        [0, 0], [0, 2], [1, 3], [3, 3], [3, 2], [3, 0], [1, 0]
    ]  # fmt: skip
    six_rate, six_s = _toy_read(6)
    seven_rate, seven_s = _toy_read(7)
    assert six_rate == pytest.approx(10e9 / 2.0, rel=1e-12)
    assert seven_rate == pytest.approx(10e9 * 7 / 18, rel=1e-12)
    assert seven_s / six_s == pytest.approx(18 / 14, rel=1e-9)
    # with links that never bind, the seventh channel only adds bandwidth
    fast = [_toy_read(c, link_gbps=1e5)[1] for c in range(1, 25)]
    assert all(b <= a for a, b in zip(fast, fast[1:], strict=False))


def test_an_earlier_exit_at_the_window_s_start_lengthens_the_steady_state_period() -> None:
    # docs/model.md sec. 7b, "Inference throughput". The steady-state period is the span of
    # the second half of the exits before the drain over their count: exits at 1, 2, ..., 16
    # (drain at 16) give (16 - 9) / 7 = 1. The same run with the ninth exit at 8.5, every
    # exit no later, gives (16 - 8.5) / 7 = 1.071: the estimate moves by a fraction of the
    # shift of the window's first exit (on ResNet-50 on Grayskull, by up to 5e-5)
    exits = [float(t) for t in range(1, 17)]
    assert _steady_period(exits, drain_s=16.0) == 1.0
    earlier = [*exits[:8], 8.5, *exits[9:]]
    assert _steady_period(earlier, drain_s=16.0) == pytest.approx(7.5 / 7, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# the output block: the measured programs expose the largest; a config tuned for time alone
# (palm.engines.gemm.fastest_output_block) never grows with the SRAM


def test_a_block_streams_the_operands_once_each_by_hand() -> None:
    # 3072 x 3072 x 4096 bf16 on 8 x 8 cores: a core's share is 12 x 16 tiles over Kt = 96.
    # With 6 x 8 blocks (2 x 2 of them) each core streams its 12 x 96 tiles of A twice and
    # its 96 x 16 of B twice: one extra pass of each, 12 x 96 + 96 x 16 = 2688 tiles of
    # 2048 B into every core, and the senders read A and B from DRAM again (8 grid rows of
    # A, 8 columns of B: 8 x 12 x 96 + 8 x 96 x 16 tiles); the last block is 6 x 8 = 48
    # tiles on each of 64 writers
    config = _product(3072, 3072, 4096)
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    whole, blocked = gemm_times(config), gemm_times(config, out_block=(6, 8))
    tile, link = 2048, hw.intra_tile_link_gbps * 1e9
    assert blocked.out_block == (6, 8) and whole.out_block == (12, 16)
    assert blocked.noc_s - whole.noc_s == pytest.approx((12 * 96 + 96 * 16) * tile / (2 * link))
    extra_dram = (8 * 12 * 96 + 8 * 96 * 16) * tile
    rate = hw.dram_bandwidth_gbps * 1e9 * hw.memory_efficiency
    tails = (64 * 96 * tile, 64 * 48 * tile)  # the largest block that fits: two of 96 tiles
    assert blocked.dram_s - whole.dram_s == pytest.approx((extra_dram - tails[1] + tails[0]) / rate)
    write = output_write_Bps(hw, 64, grid=(8, 8))
    assert blocked.tail_s == pytest.approx(tails[1] / write)
    # the busiest sender is a grid column's: its 96 x 16 tiles of B twice (a row's A is
    # 96 x 12), at the one-core read and the link in series
    per_byte = 1 / (hw.dram_channel_bandwidth_gbps * 1e9 * hw.memory_efficiency) + 1 / link
    assert blocked.send_s == pytest.approx(2 * 96 * 16 * tile * per_byte)
    assert whole.send_s == pytest.approx(96 * 16 * tile * per_byte)


def test_the_fastest_block_is_never_slower_with_more_sram() -> None:
    """Sizes and SRAM drawn from a fixed generator: the fastest block's time never grows as
    the SRAM does (more SRAM only adds candidate blocks), while the largest block's may."""
    import random

    from palm.engines.gemm import fastest_output_block

    rng = random.Random(20261207)
    grew_largest = 0
    for _ in range(300):
        m, k, n = (32 * rng.randint(1, 160) for _ in range(3))
        grid = f"hardware.compute_grid=[{rng.randint(1, 8)}, {rng.randint(1, 8)}]"
        fidelity = f'hardware.math_fidelity="{rng.choice(["lofi", "hifi2", "hifi4"])}"'
        times = []
        for sram in (0.25, 0.5, 1464 / 1024, 2 * 1464 / 1024, 8.0):
            config = _product(m, k, n, grid, fidelity, f"hardware.sram_per_core_mib={sram}")
            block = fastest_output_block(config)
            assert block is not None
            fastest = gemm_times(config, out_block=block).total_s
            largest = gemm_times(config).total_s
            if gemm_times(config).split.tiles_m * gemm_times(config).split.tiles_n <= (
                sram * 2**20 // (4 * 2048)
            ):  # the share fits: the largest block, the whole share, is a candidate
                assert fastest <= largest * (1 + 1e-12)
            times.append((fastest, largest))
        for (f0, l0), (f1, l1) in zip(times, times[1:], strict=False):
            assert f1 <= f0 * (1 + 1e-12), (m, k, n, grid)
            grew_largest += l1 > l0 * (1 + 1e-12)
    assert grew_largest > 0  # the mechanism the measured programs show is still there


def test_the_measured_programs_expose_the_largest_block() -> None:
    """docs/model.md sec. 7b: on the visible hand-tuned products whose C goes to DRAM, the
    largest-block rule meets the measured times better than the fastest-block rule on both
    chips (python benchmarks/output_blocks.py)."""
    from palm.engines.gemm import fastest_output_block
    from palm.validation_tiled import load_tiled_cases

    for chip in ("wormhole", "blackhole"):
        rows = [
            c
            for c in load_tiled_cases().gemm
            if c.chip == chip and fastest_output_block(c.config) is not None
        ]
        assert len(rows) == 24

        def mean_error(rule: str, rows: list = rows) -> float:  # type: ignore[type-arg]
            errors = []
            for c in rows:
                block = fastest_output_block(c.config) if rule == "fastest" else None
                t = gemm_times(c.config, out_block=block).total_s
                errors.append(abs(t / c.measured_time_s - 1))
            return sum(errors) / len(errors)

        assert mean_error("largest") < mean_error("fastest")
