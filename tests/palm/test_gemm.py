"""One matrix product as a workload: the contract TOML, the split over the
compute grid, fidelity, grid and dispatch, bounds, and bad input."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import palm
from palm.config import parse_config
from palm.engines.gemm import gemm_times, output_tail_bytes, output_write_Bps
from palm.errors import ConfigError
from palm.hardware.spec import FLOORPLAN_TENSIX_GRID, Mesh2DHardware
from palm.network.tensix_noc import TENSIX_CORES
from palm.units import bytes_per_element
from palm.workload.gemm import split_product

REPO = Path(__file__).resolve().parents[2]

CONTRACT = """\
[model]
family = "gemm"
m = 4096
k = 4096
n = 4096
[hardware]
preset = "wormhole-n150"
math_fidelity = "hifi2"
compute_grid = [8, 8]
[training]
mode = "inference"
global_batch = 1
precision = "bf16"
"""


def _tables(m: int = 4096, k: int = 4096, n: int = 4096, **hardware: Any) -> dict[str, Any]:
    return {
        "model": {"family": "gemm", "m": m, "k": k, "n": n},
        "hardware": {"preset": "wormhole-n150", "math_fidelity": "hifi2", **hardware},
        "training": {"mode": "inference", "global_batch": 1, "precision": "bf16"},
    }


def _time(tables: dict[str, Any]) -> float:
    return palm.simulate(parse_config(tables)).iteration_time_s


def _lower_bounds(config: palm.SimConfig) -> tuple[float, float]:
    """Peak compute time and compulsory DRAM traffic at the peak DRAM bandwidth."""
    hw, m = config.hardware, config.model
    assert isinstance(hw, Mesh2DHardware)
    e = bytes_per_element(config.training.precision)
    compute = 2.0 * m.m * m.n * m.k / (hw.device_count * hw.peak_flops(config.training.precision))
    dram = (m.m * m.k + m.k * m.n + m.m * m.n) * e / (hw.dram_bandwidth_gbps * 1e9)
    return compute, dram


def test_contract_toml_runs_and_is_within_bounds(tmp_path: Path) -> None:
    path = tmp_path / "gemm.toml"
    path.write_text(CONTRACT)
    proc = subprocess.run(
        [sys.executable, "-m", "search.cli", "simulate", str(path), "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    t = result["iteration_time_s"]
    compute, dram = _lower_bounds(palm.load_config(path))
    assert t > compute and t > dram
    assert compute == pytest.approx(4096**3 * 2 / 131.072e12)
    # measured on a Wormhole n150 (GEMM_FLOPS, traced, HiFi2): 2.008 ms
    assert t == pytest.approx(2.008e-3, rel=0.10)
    assert result["devices"] == 64 and result["sample_unit"] == "products"
    assert result["operators"][0]["strategy"] == "resident"


def test_fidelity_scales_the_matrix_engine_time() -> None:
    t = {f: gemm_times(parse_config(_tables(math_fidelity=f))) for f in
         ("lofi", "hifi2", "hifi3", "hifi4")}  # fmt: skip
    assert t["hifi4"].math_s == pytest.approx(4 * t["lofi"].math_s)
    assert t["hifi2"].math_s == pytest.approx(2 * t["lofi"].math_s)
    # below HiFi3 the unpackers' operand feed binds: LoFi and HiFi2 take as long
    assert t["lofi"].total_s == pytest.approx(t["hifi2"].total_s)
    assert t["hifi2"].total_s < t["hifi3"].total_s < t["hifi4"].total_s
    eta = parse_config(_tables()).hardware.matmul_efficiency  # type: ignore[union-attr]
    assert t["hifi4"].core_s == pytest.approx(t["hifi4"].math_s / eta, rel=1e-3)


def test_compute_grid_changes_the_cores_and_the_split() -> None:
    full = gemm_times(parse_config(_tables()))
    quarter_config = parse_config(_tables(compute_grid=[4, 4]))
    quarter = gemm_times(quarter_config)
    assert palm.simulate(quarter_config).devices == 16
    assert quarter.split.tile_products == 4 * full.split.tile_products
    assert quarter.core_s == pytest.approx(4 * full.core_s)
    wide = gemm_times(parse_config(_tables(m=1024, n=4096, compute_grid=[2, 8])))
    assert (wide.split.m_parts, wide.split.n_parts) == (2, 8)


def test_split_pads_to_tiles_and_takes_the_busiest_core() -> None:
    split = split_product(m=100, n=70, k=64, grid=(2, 3))
    # Mt = 4, Nt = 3, Kt = 2 tiles of 32
    assert (split.tiles_m, split.tiles_n, split.tiles_k) == (2, 1, 2)
    assert split.tile_products == 4 and split.cores == 6
    depth = split_product(m=100, n=70, k=64, grid=(2, 3), linear_split=(1, 1, 3, 2))
    assert (depth.tiles_m, depth.tiles_n, depth.tiles_k, depth.k_parts) == (4, 1, 1, 2)


def test_linear_split_over_depth_adds_a_reduction() -> None:
    tables = _tables()
    tables["parallelism"] = {"linear_split": [1, 4, 4, 4]}
    t = gemm_times(parse_config(tables))
    assert t.split.k_parts == 4 and t.reduce_s > 0
    assert t.split.tile_products == 32 * 32 * 32  # (128/4)^2 x 128/4


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": {"family": "gemm", "m": 0, "k": 8, "n": 8}}, "model.m"),
        ({"model": {"family": "gemm", "m": 8, "k": 8, "n": 8, "sram_resident": ["d"]}},
         "model.sram_resident[0]"),
        ({"training": {"mode": "train", "global_batch": 1}}, "training.mode"),
        ({"training": {"mode": "inference", "global_batch": 2}}, "training.global_batch"),
        ({"parallelism": {"tp": 2}}, "parallelism.tp*pp*dp"),
        ({"parallelism": {"linear_split": [1, 4, 4, 2]}}, "parallelism.linear_split"),
        ({"hardware": {"preset": "dgx-a100"}}, "hardware"),
        ({"hardware": {"preset": "wormhole-n150", "math_fidelity": "hifi9"}},
         "hardware.math_fidelity"),
    ],
)  # fmt: skip
def test_bad_gemm_input_is_a_one_line_error(change: dict[str, Any], field: str) -> None:
    tables = _tables()
    tables.update(change)
    with pytest.raises(ConfigError) as err:
        parse_config(tables)
    assert str(err.value).startswith(field + " = ") and "\n" not in str(err.value)


def test_never_faster_than_peak_compute_or_compulsory_traffic() -> None:
    shapes = (32, 96, 512, 1000, 4096)
    for m, k, n in itertools.product(shapes, repeat=3):
        for fidelity, precision in (("lofi", "bfp4"), ("hifi2", "bfp8"), ("hifi4", "bf16")):
            tables = _tables(m=m, k=k, n=n, math_fidelity=fidelity)
            tables["training"]["precision"] = precision
            config = parse_config(tables)
            t = palm.simulate(config).iteration_time_s
            compute, dram = _lower_bounds(config)
            assert t >= max(compute, dram), (m, k, n, fidelity)


def test_host_dispatch_bounds_small_untraced_products() -> None:
    hw = parse_config(_tables()).hardware
    assert isinstance(hw, Mesh2DHardware)
    traced = _time(_tables(m=64, k=64, n=64))
    host = _time(_tables(m=64, k=64, n=64, dispatch="host"))
    assert traced < host == pytest.approx(hw.host_dispatch_us * 1e-6)
    # an L1-sharded output costs the host its buffer layout on every dispatch
    sharded = _tables(m=64, k=64, n=64, dispatch="host")
    sharded["model"]["sram_resident"] = ["a", "c"]
    assert _time(sharded) == pytest.approx((hw.host_dispatch_us + hw.host_sharded_output_us) * 1e-6)
    sharded["model"]["sram_resident"] = ["a"]  # a sharded input alone does not
    assert _time(sharded) == pytest.approx(hw.host_dispatch_us * 1e-6)
    big = _tables(m=8192, k=8192, n=8192)
    assert _time(big) == _time(dict(big, hardware={**big["hardware"], "dispatch": "host"}))


def test_block_formats_move_fewer_dram_bytes() -> None:
    tables = _tables(m=32, k=8192, n=8192)  # a matrix-vector-like product: DRAM-bound
    bf16 = gemm_times(parse_config(tables))
    tables["training"]["precision"] = "bfp8"
    bfp8 = gemm_times(parse_config(tables))
    assert bfp8.traffic.dram_bytes == pytest.approx(bf16.traffic.dram_bytes * 1.0625 / 2)
    assert bfp8.dram_s < bf16.dram_s


def test_resident_operands_move_nothing_and_big_products_reread() -> None:
    tables = _tables(m=2048, k=2048, n=2048)
    tables["model"]["sram_resident"] = ["a", "c"]
    t = gemm_times(parse_config(tables))
    assert t.traffic.dram_bytes == pytest.approx(2048 * 2048 * 2)  # B only
    huge = gemm_times(parse_config(_tables(m=16384, k=16384, n=16384)))
    assert huge.traffic.strategy != "resident"
    assert huge.traffic.dram_bytes > 3 * 16384**2 * 2


def test_gemm_is_deterministic_and_engines_agree() -> None:
    config = parse_config(_tables(m=3328, k=2560, n=2560))
    a = palm.simulate(config, engine="event")
    b = palm.simulate(config, engine="analytical")
    assert dataclasses.replace(a, sim_wall_s=None) == dataclasses.replace(b, sim_wall_s=None)


# --- ttnn's out-of-box program config and the multicast senders (hand-worked cases) ----------


@pytest.mark.parametrize(
    ("m", "n", "kind", "cores", "tiles"),
    [
        (512, 512, "2d", 64, (2, 2)),  # one 16-tile block: 2-D multicast, 2 x 2 tiles a core
        (512, 1024, "1d-a", 32, (16, 1)),  # one row of 2 blocks: A multicast, N/64 -> 1 tile
        (512, 2048, "1d-a", 64, (16, 1)),
        (1024, 1024, "2d", 64, (4, 4)),  # 2 x 2 blocks
        (1024, 512, "1d-b", 32, (1, 16)),  # one column of blocks: B multicast
        (32, 4096, "1d-a", 64, (1, 2)),  # a side of one tile: narrow
        (4096, 4096, "2d", 64, (16, 16)),
    ],
)  # fmt: skip
def test_out_of_box_selection_follows_ttnn(
    m: int, n: int, kind: str, cores: int, tiles: tuple[int, int]
) -> None:
    split = split_product(m=m, n=n, k=1024, grid=(8, 8), matmul_config="auto")
    assert (split.kind, split.cores, (split.tiles_m, split.tiles_n)) == (kind, cores, tiles)
    assert split.tiles_k == 32
    assert split_product(m=m, n=n, k=1024, grid=(8, 8)).kind == "2d"  # hand-tuned: always 2-D


def test_one_sender_streams_all_of_a_in_the_1d_multicast() -> None:
    auto = gemm_times(parse_config(_tables(m=512, k=1024, n=1024, matmul_config="auto")))
    hw = parse_config(_tables()).hardware
    assert isinstance(hw, Mesh2DHardware)
    a_bytes = 16 * 32 * 1024 * 2  # Mt x Kt tiles of 1024 bf16 values: 1 MiB
    rate = 1 / (1 / (24e9 * hw.memory_efficiency) + 1 / 32e9)  # read, then multicast: 13.1 GB/s
    assert auto.send_s == pytest.approx(a_bytes / rate)
    assert auto.core_s == pytest.approx(auto.send_s)  # the sender, not the engine, binds
    tuned = gemm_times(parse_config(_tables(m=512, k=1024, n=1024)))
    # 2-D: the busiest sender streams a grid column's 32 x 4 tiles of B (A's rows are 32 x 2)
    assert tuned.send_s == pytest.approx(32 * 4 * 2048 / rate)
    assert auto.total_s > 2 * tuned.total_s  # measured: 115 us against 28 us (GEMM_FLOPS)


def test_resident_operands_cost_their_sender_nothing() -> None:
    tables = _tables(m=1024, k=1024, n=1024)
    tables["model"]["sram_resident"] = ["b"]
    only_a = gemm_times(parse_config(tables))
    assert only_a.send_s == pytest.approx(4 * 32 * 2048 / 13.08e9, rel=1e-3)
    tables["model"]["sram_resident"] = ["a", "b"]
    assert gemm_times(parse_config(tables)).send_s == 0.0


def test_out_of_box_equals_hand_tuned_for_large_square_products() -> None:
    auto = _time(_tables(m=4096, k=4096, n=4096, matmul_config="auto"))
    assert auto == _time(_tables())  # measured: 2.0085 ms against 2.0080 ms


def test_bad_matmul_config_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_tables(matmul_config="fast"))
    assert str(err.value).startswith("hardware.matmul_config = ")


def test_out_of_box_example_runs_the_one_dimensional_multicast() -> None:
    config = palm.load_config(REPO / "examples" / "wormhole-gemm-out-of-box.toml")
    t = gemm_times(config)
    assert (t.split.kind, t.split.cores) == ("1d-a", 32)
    assert t.core_s == t.send_s  # one sender streams A: it, not the matrix engine, binds


# --- the output tail: the last output block is written after the math (hand-worked) ---------


def test_output_tail_is_the_last_block_at_the_noc0_write_rate() -> None:
    # 1024^3 out of box on 8 x 8: 4 x 4 tiles a core, far below the 183-tile cap
    # (1464 KiB / (4 x 2 KiB)), so each core writes its whole share after the math: all of C
    config = parse_config(_tables(m=1024, k=1024, n=1024, matmul_config="auto"))
    t = gemm_times(config)
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    c_bytes = 1024 * 1024 * 2
    rate = output_write_Bps(hw, 64)
    assert rate == pytest.approx(74.93e9, rel=1e-3)  # 64 cores, NoC 0, interleaved pages
    assert t.tail_s == pytest.approx(c_bytes / rate)  # 28.0 us
    dram = hw.dram_bandwidth_gbps * 1e9 * hw.memory_efficiency
    assert t.dram_s == pytest.approx((t.traffic.dram_bytes - c_bytes) / dram)  # A and B stream
    assert t.total_s == pytest.approx(t.launch_s + max(t.core_s, t.dram_s) + t.tail_s)


def test_a_share_over_the_sram_cap_is_cut_into_equal_blocks() -> None:
    split = split_product(m=4096, n=4096, k=4096, grid=(8, 8))  # 16 x 16 tiles a core
    sram = 1464 * 1024
    c_bytes = 4096 * 4096 * 2.0
    # 256 tiles over a 183-tile cap: two blocks of 128, the last one (16 MiB in all) exposed
    assert output_tail_bytes(split, 2.0, sram, c_bytes) == 64 * 128 * 2048
    small = split_product(m=512, n=512, k=512, grid=(8, 8))
    assert output_tail_bytes(small, 2.0, sram, 512 * 512 * 2.0) == 512 * 512 * 2  # all of C
    assert output_tail_bytes(small, 2.0, sram, 0.0) == 0.0  # C in L1 (sharded): no tail


def test_an_l1_output_has_no_tail_and_other_chips_write_at_the_dram_rate() -> None:
    tables = _tables(m=1024, k=1024, n=1024)
    tables["model"]["sram_resident"] = ["a", "c"]
    assert gemm_times(parse_config(tables)).tail_s == 0.0
    bh = parse_config(dict(_tables(), hardware={"preset": "blackhole-p150"})).hardware
    assert isinstance(bh, Mesh2DHardware)
    assert output_write_Bps(bh, 64) == pytest.approx(
        bh.dram_bandwidth_gbps * 1e9 * bh.memory_efficiency
    )


def test_the_writer_model_follows_the_floorplan_not_the_name() -> None:
    # a custom mesh with Wormhole's fields and floorplan writes its output as the preset does;
    # the preset without its floorplan writes at the DRAM rate
    wh = parse_config(_tables()).hardware
    assert isinstance(wh, Mesh2DHardware) and wh.noc_floorplan == "wormhole-b0"
    fields = {
        f.name: getattr(wh, f.name)
        for f in dataclasses.fields(wh)
        if f.name not in ("name", "core_peak_tflops")
    }
    custom = dict(_tables(), hardware={**_jsonable(fields), "topology": "mesh2d"})
    custom["hardware"]["core_peak_tflops"] = {"bf16": wh.core_peak_tflops.bf16}
    mine = parse_config(custom).hardware
    assert isinstance(mine, Mesh2DHardware) and mine.name == "custom-mesh2d"
    assert output_write_Bps(mine, 64) == output_write_Bps(wh, 64)
    plain = parse_config(_tables(noc_floorplan="")).hardware
    assert isinstance(plain, Mesh2DHardware)
    assert output_write_Bps(plain, 64) == pytest.approx(
        plain.dram_bandwidth_gbps * 1e9 * plain.memory_efficiency
    )


def _jsonable(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"cores_per_tile": [12, 8]}, "hardware.cores_per_tile"),
        ({"tiles": [2, 1]}, "hardware.tiles"),
    ],
)
def test_a_mesh_that_does_not_fit_the_floorplan_is_refused(
    override: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{field} = "):
        parse_config(_tables(**override))
    # without the floorplan, the same mesh is a valid custom chip
    parse_config(_tables(noc_floorplan="", **override))


def test_the_floorplan_grid_is_the_route_models() -> None:
    rows, cols = FLOORPLAN_TENSIX_GRID["wormhole-b0"]
    assert len(TENSIX_CORES) == rows * cols
    assert len({y for _, y in TENSIX_CORES}) == rows and len({x for x, _ in TENSIX_CORES}) == cols
