"""Per-chip constants of the tiled product model (docs/model.md sec. 6b, "Operand feed per
datum" and "Per-chip constants"): the feed against the math, worked by hand for a bf16 and a
bfp8 product on Wormhole and on Blackhole; never faster than the peak on either chip; block
formats priced by their real bytes; the out-of-box selection the same in every format."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import palm
from palm.config import parse_config
from palm.engines.gemm import gemm_times
from palm.hardware.preset_data import fit_sets
from palm.hardware.spec import Mesh2DHardware
from palm.units import bytes_per_element

#: chip -> (preset, clock in GHz, compute grid (rows, cols))
CHIPS = {
    "wormhole": ("wormhole-n150", 1.0, (8, 8)),
    "blackhole": ("blackhole-p150", 1.35, (10, 13)),
}


def _tables(chip: str, *, m: int, k: int, n: int, fidelity: str, precision: str) -> dict[str, Any]:
    preset, _, grid = CHIPS[chip]
    return {
        # A and B in L1: no DRAM stream or multicast sender to compete with the engine
        "model": {"family": "gemm", "m": m, "k": k, "n": n, "sram_resident": ["a", "b", "c"]},
        "hardware": {"preset": preset, "math_fidelity": fidelity, "compute_grid": list(grid)},
        "training": {"mode": "inference", "global_batch": 1, "precision": precision},
    }


def _product(chip: str, fidelity: str, precision: str, feed: float | None = None) -> palm.SimConfig:
    """8 x 8 output tiles of 64-deep products on every core: 4096 tile products a core;
    ``feed`` (datums per cycle) sets the chip's operand feed, else its preset's."""
    _, clock, (rows, cols) = CHIPS[chip]
    m, n, k = rows * 8 * 32, cols * 8 * 32, 64 * 32
    tables = _tables(chip, m=m, k=k, n=n, fidelity=fidelity, precision=precision)
    if feed is not None:
        tables["hardware"]["operand_feed_gelems"] = feed * clock
    return parse_config(tables)


#: the Wormhole fit's datums per cycle
WH_FEED = fit_sets()["tensix-wormhole"].constants["operand_feed_gelems"]


@pytest.mark.parametrize("chip", sorted(CHIPS))
@pytest.mark.parametrize("precision", ["bf16", "bfp8"])
def test_feed_binds_at_lofi_and_math_at_hifi4_by_hand(chip: str, precision: str) -> None:
    """4096 tile products a core. Math: 16 cycles each a phase, so 65,536 cycles at LoFi and
    262,144 at HiFi4. Feed at Wormhole's fitted ~24.3 datums a cycle: 1024 datums each,
    about 172,600 cycles, the same in bf16 and bfp8. So LoFi is feed-bound and HiFi4
    math-bound; the times are the cycles over the clock (1 GHz on Wormhole: 65.5, 262.1 and
    172.6 us; 1.35 GHz on Blackhole: 48.5, 194.2 and 127.9 us), and the core time is the
    binding one over eta. Blackhole's own preset has no feed limit (no Blackhole row binds
    one): there LoFi is math-bound, 65,536 cycles over eta."""
    _, clock, _ = CHIPS[chip]
    feed_cycles = 4096 * 1024 / WH_FEED
    assert 160_000 < feed_cycles < 185_000
    lofi = gemm_times(_product(chip, "lofi", precision, feed=WH_FEED))
    hifi4 = gemm_times(_product(chip, "hifi4", precision, feed=WH_FEED))
    assert lofi.split.tile_products == hifi4.split.tile_products == 4096
    assert lofi.math_s == pytest.approx(4096 * 16 / (clock * 1e9))
    assert hifi4.math_s == pytest.approx(4096 * 64 / (clock * 1e9))
    assert lofi.feed_s == hifi4.feed_s == pytest.approx(feed_cycles / (clock * 1e9))
    assert lofi.math_s < lofi.feed_s < hifi4.math_s
    hw = _product(chip, "lofi", precision).hardware
    assert isinstance(hw, Mesh2DHardware)
    assert lofi.core_s == pytest.approx(lofi.feed_s / hw.matmul_efficiency)
    assert hifi4.core_s == pytest.approx(hifi4.math_s / hw.matmul_efficiency)
    own = gemm_times(_product(chip, "lofi", precision))  # the chip's own preset
    if chip == "blackhole":
        assert own.feed_s == 0.0
        assert own.core_s == pytest.approx(own.math_s / hw.matmul_efficiency)
    else:
        assert own.feed_s == lofi.feed_s and own.core_s == lofi.core_s


@pytest.mark.parametrize("chip", sorted(CHIPS))
def test_feed_is_per_datum_the_same_in_every_format(chip: str) -> None:
    """The unpacker's datum rate, not its L1 fetch, binds: at the fitted rate a bf16 tile
    needs ~49 B a cycle, bfp8 (1088 B) ~26 and bfp4 (576 B) ~14, all under the 64 B an
    unpacker fetches a cycle (tt-isa-documentation UNPACR_Regular.md), so the feed time is
    the same in every format; the DRAM bytes follow the format's real tile size."""
    formats = ("bf16", "bfp8", "bfp4")
    times = {p: gemm_times(_product(chip, "lofi", p, WH_FEED)) for p in formats}
    assert len({t.feed_s for t in times.values()}) == 1
    for precision in times:
        tile_bytes = 1024 * bytes_per_element(precision)
        assert tile_bytes * WH_FEED / 1024 < 64
    assert [1024 * bytes_per_element(p) for p in ("bf16", "bfp8", "bfp4")] == [2048, 1088, 576]
    dram = {}
    for precision in times:
        tables = _tables(chip, m=2048, k=2048, n=2048, fidelity="lofi", precision=precision)
        tables["model"]["sram_resident"] = []
        dram[precision] = gemm_times(parse_config(tables)).traffic.dram_bytes
    assert dram["bfp8"] == pytest.approx(dram["bf16"] * 1088 / 2048)
    assert dram["bfp4"] == pytest.approx(dram["bf16"] * 576 / 2048)


@pytest.mark.parametrize("chip", sorted(CHIPS))
def test_never_faster_than_the_chips_peak(chip: str) -> None:
    """On each chip's own constants, every product takes at least its math at the peak of
    its fidelity on the cores it uses, and its compulsory DRAM bytes at the peak bandwidth."""
    preset, _, grid = CHIPS[chip]
    shapes = (32, 100, 640, 2816)
    for (m, k, n), fidelity, precision, config_kind, dispatch in itertools.product(
        itertools.product(shapes, repeat=3),
        ("lofi", "hifi4"),
        ("bf16", "bfp8", "bfp4"),
        ("block2d", "auto"),
        ("trace", "host"),
    ):
        tables = _tables(chip, m=m, k=k, n=n, fidelity=fidelity, precision=precision)
        tables["model"]["sram_resident"] = []
        tables["hardware"].update(matmul_config=config_kind, dispatch=dispatch)
        config = parse_config(tables)
        hw = config.hardware
        assert isinstance(hw, Mesh2DHardware)
        t = palm.simulate(config).iteration_time_s
        cores = grid[0] * grid[1]
        compute = 2.0 * m * n * k / (cores * hw.peak_flops(precision))
        e = bytes_per_element(precision)
        dram = (m * k + k * n + m * n) * e / (hw.dram_bandwidth_gbps * 1e9)
        assert t >= max(compute, dram), (chip, m, k, n, fidelity, precision)
        assert hw.matmul_efficiency <= 1 and hw.memory_efficiency <= 1


def test_out_of_box_selection_is_the_same_in_every_format() -> None:
    """ttnn's per-core factor of 16 tiles fits bf16 (1.25 MiB of buffers) in either chip's L1,
    and block-format tiles are smaller: the selection does not depend on the format."""
    for chip, (m, n) in itertools.product(CHIPS, ((512, 2048), (2048, 512), (2048, 2048))):
        splits = set()
        for precision in ("bf16", "bfp8", "bfp4"):
            tables = _tables(chip, m=m, k=1024, n=n, fidelity="lofi", precision=precision)
            tables["hardware"]["matmul_config"] = "auto"
            tables["model"]["sram_resident"] = []
            splits.add(gemm_times(parse_config(tables)).split)
        assert len(splits) == 1, (chip, m, n)
        hw = parse_config(tables).hardware
        assert isinstance(hw, Mesh2DHardware) and hw.sram_per_core_mib * 2**20 >= 1.25 * 2**20


def test_each_chip_takes_its_own_fit() -> None:
    """Blackhole's efficiency, launch, host costs and feed (0: no limit, no Blackhole row binds
    one) are its own fit set's; its channel efficiency the Wormhole fit's (no Blackhole DRAM
    transfer); the Wormhole preset takes none of Blackhole's."""
    wh, bh = (palm.hardware.hardware_preset(CHIPS[c][0]) for c in ("wormhole", "blackhole"))
    assert isinstance(wh, Mesh2DHardware) and isinstance(bh, Mesh2DHardware)
    own = fit_sets()["tensix-blackhole"].constants
    assert set(own) == {
        "matmul_efficiency",
        "launch_us",
        "host_dispatch_us",
        "host_sharded_output_us",
        "operand_feed_gelems",
    }
    for key, value in own.items():
        assert getattr(bh, key) == value
    assert bh.operand_feed_gelems == 0.0 < wh.operand_feed_gelems
    assert bh.memory_efficiency == wh.memory_efficiency
    assert wh.matmul_efficiency == fit_sets()["tensix-wormhole"].constants["matmul_efficiency"]
