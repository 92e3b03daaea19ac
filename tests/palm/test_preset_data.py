"""Hardware presets and fitted constants read from data (palm/data/hardware, palm/data/fitted):
the presets are the objects they were when they were Python literals, bit for bit; every figure
has one source; inheritance, clock scaling and fit sets follow the layout of
palm/hardware/preset_data.py; the docs' tables are the data's; the data ships in the package."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from palm.hardware import preset_data
from palm.hardware.preset_data import PresetDataError, fit_sets, preset_hardware, preset_records
from palm.hardware.presets import HARDWARE_PRESETS, hardware_preset
from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
#: every preset's fields as the Python literals built them (generated from the objects of main
#: before the presets moved to data, with the NVFP4 peaks that main's literals had gained by
#: then; never regenerated from the data)
GOLDEN = json.loads((Path(__file__).parent / "data" / "hardware_presets_golden.json").read_text())
#: fields the presets gained after the snapshot, each with its sourced figure in the data
ADDED_FIELDS = {"host_link_gbps"}


def _jsonable(value: object) -> object:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_existing_presets_are_the_objects_they_were(name: str) -> None:
    hw = HARDWARE_PRESETS[name]
    assert type(hw).__name__ == GOLDEN[name]["class"]
    fields = dataclasses.asdict(hw)
    assert set(fields) - ADDED_FIELDS == set(GOLDEN[name]["fields"])
    for key, old in GOLDEN[name]["fields"].items():
        new = _jsonable(fields[key])
        assert new == old, key  # floats compared exactly
        assert type(new) is type(old), key  # 2.0 stays a float, 8 an int


def test_lookup_is_case_insensitive_and_none_for_unknown() -> None:
    assert hardware_preset("DGX-H100") is HARDWARE_PRESETS["dgx-h100"]
    assert hardware_preset("no-such-machine") is None
    assert "dgx-a100" in HARDWARE_PRESETS and len(HARDWARE_PRESETS) == len(preset_records())


def test_import_palm_reads_no_data_file() -> None:
    """The reader is imported, and the files parsed, on the first lookup of a preset."""
    code = (
        "import sys, palm, search.cli\n"
        "print('palm.hardware.preset_data' in sys.modules)\n"
        "palm.hardware.hardware_preset('dgx-a100')\n"
        "print('palm.hardware.preset_data' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_every_data_file_ships_in_the_package() -> None:
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["palm"]
    data = ROOT / "palm" / "data"
    files = [p.relative_to(ROOT / "palm").as_posix() for p in data.rglob("*") if p.is_file()]
    assert any(f.startswith("data/hardware/") for f in files)
    assert any(f.startswith("data/fitted/") for f in files)
    for f in files:
        assert any(fnmatch(f, g) and f.count("/") == g.count("/") for g in globs), f


def test_docs_tables_are_generated_from_the_data() -> None:
    """docs/hardware.md (one block per preset), docs/model.md and docs/validation.md (the
    fitted constants): ``python benchmarks/preset_docs.py --write`` regenerates them."""
    assert load_benchmark("preset_docs").check_docs() == []


def test_presets_take_their_fit_sets_constants() -> None:
    fits = fit_sets()
    for rec in preset_records().values():
        clock = rec.figures.get("clock_ghz", 1.0)
        expected: dict[str, float] = {}
        for name in rec.fitted:  # later sets win
            fit = fits[name]
            expected.update(
                {k: v * clock if k in fit.at_1ghz else v for k, v in fit.constants.items()}
            )
        for key, value in expected.items():
            assert getattr(rec.hardware, key) == value, (rec.name, key)


def test_the_h100_takes_its_own_fit_not_the_a100s() -> None:
    """The drift the data fixed: docs said H100 used the A100's 0.671; the preset holds the
    H100 fit, and the Blackwell presets (no dense BF16 row) the A100's as a prior."""
    h100 = fit_sets()["gpu-h100"].constants["matmul_efficiency"]
    a100 = fit_sets()["megatron-a100"].constants["matmul_efficiency"]
    assert HARDWARE_PRESETS["dgx-h100"].matmul_efficiency == h100 != a100
    assert HARDWARE_PRESETS["dgx-b200"].matmul_efficiency == a100
    assert "matmul_efficiency" not in fit_sets()["gpu-blackwell"].constants


def test_clock_scaling_of_per_cycle_figures() -> None:
    wh, bh = HARDWARE_PRESETS["wormhole-n150"], HARDWARE_PRESETS["blackhole-p150"]
    assert isinstance(wh, Mesh2DHardware) and isinstance(bh, Mesh2DHardware)
    assert bh.core_peak_tflops.bf16 == wh.core_peak_tflops.bf16 * 1.35  # a rate: times
    assert bh.intra_tile_link_latency_ns == wh.intra_tile_link_latency_ns / 1.35  # a time
    # a fitted per-cycle rate is stored at 1 GHz (Wormhole's clock: the same number);
    # Blackhole's own fit has none (0, no limit: no Blackhole row binds it)
    assert wh.operand_feed_gelems == fit_sets()["tensix-wormhole"].constants["operand_feed_gelems"]
    assert "operand_feed_gelems" in fit_sets()["tensix-wormhole"].at_1ghz
    assert bh.operand_feed_gelems == 0.0
    # a fitted time in microseconds is not per cycle: Blackhole's is its own chip's fit
    assert bh.launch_us == fit_sets()["tensix-blackhole"].constants["launch_us"]


def test_base_inherits_figures_and_sources() -> None:
    h100, h200 = preset_records()["dgx-h100"], preset_records()["dgx-h200"]
    assert dataclasses.replace(
        h200.hardware, name="dgx-h100", hbm_gib=h100.hardware.hbm_gib, hbm_bandwidth_gbps=3350.0
    ) == (h100.hardware)
    own = dict(h200.sources)
    assert own[("hbm_gb", "hbm_bandwidth_gbps")].startswith("H200 datasheet")
    sourced = [f for fields, _ in h200.sources for f in fields]
    assert sourced.count("hbm_gb") == 1 and "sfu_exp_tera_per_s" in sourced  # inherited


def _record(table: dict[str, object]) -> object:
    return preset_data._record("toy", "hardware/toy.toml", table, preset_records(), fit_sets())


TOY = {
    "title": "a toy",
    "topology": "gpu-cluster",
    "gpus_per_node": 8,
    "peak_tflops": {"bf16": 100.0},
    "hbm_gb": 10,
    "hbm_bandwidth_gbps": 1000.0,
    "switch_bandwidth_gbps": 100.0,
    "switch_latency_us": 1.0,
    "inter_node_bandwidth_gbps": 10.0,
    "inter_node_latency_us": 2.0,
    "sources": {
        "gpus_per_node, peak_tflops, hbm_gb, hbm_bandwidth_gbps": "a datasheet",
        "switch_bandwidth_gbps, switch_latency_us": "another",
        "inter_node_bandwidth_gbps, inter_node_latency_us": "a third",
    },
}


def test_a_toy_preset_builds_with_converted_units() -> None:
    rec = _record(TOY)
    hw = rec.hardware
    assert isinstance(hw, GpuClusterHardware)
    assert hw.hbm_gib == 10e9 / 2**30 and hw.peak_tflops.bf16 == 100.0
    assert hw.matmul_efficiency == GpuClusterHardware.matmul_efficiency  # no fit: the default


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sources": {"gpus_per_node": "x"}}, "toy.peak_tflops: needs exactly one source"),
        ({"sources": {**TOY["sources"], "hbm_gb": "twice"}}, "toy.hbm_gb: needs exactly one"),
        ({"warp_drive_gbps": 1.0, "sources": {**TOY["sources"], "warp_drive_gbps": "x"}},
         "toy.warp_drive_gbps: not a field of GpuClusterHardware"),
        ({"fitted": ["gpu-h100"], "matmul_efficiency": 0.5,
          "sources": {**TOY["sources"], "matmul_efficiency": "x"}},
         "toy.matmul_efficiency: given as a figure and fitted"),
        ({"fitted": ["no-such-fit"]}, "no fit set 'no-such-fit'"),
        ({"base": "no-such-preset"}, "not a preset defined before it"),
        ({"topology": "torus"}, "toy.topology = 'torus'"),
        ({"title": ""}, "toy.title"),
    ],
)  # fmt: skip
def test_bad_preset_data_is_named(change: dict[str, object], message: str) -> None:
    with pytest.raises(PresetDataError, match=message.replace(".", r"\.").replace("(", r"\(")):
        _record({**TOY, **change})


def _fitted_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    bench = load_benchmark("_fitted")
    monkeypatch.setattr(bench, "FITTED_DIR", tmp_path)
    return bench


@pytest.mark.parametrize(("gain", "adopted"), [(0.0005, False), (0.002, True)])
def test_a_refit_replaces_the_stored_constants_only_if_it_earns_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gain: float, adopted: bool
) -> None:
    """benchmarks/_fitted.py: the run is recorded either way; [constants] moves only if the
    in-sample mean error falls by more than MIN_GAIN (0.1 point)."""
    bench = _fitted_module(tmp_path, monkeypatch)
    stored = dict(fit_sets()["megatron-a100"].constants)
    monkeypatch.setattr(bench, "stored_constants", lambda name: stored)
    wrote = bench.write_fit(
        "megatron-a100",
        script="calibrate.py",
        data="palm/data/visible.json",
        rows=["a", "b"],
        left_out=["b"],
        method="a test",
        fitted={"matmul_efficiency": 0.71234567},
        rounded={"matmul_efficiency": 0.712},
        in_sample_stored=[0.02],
        in_sample_fitted=[0.02 - gain],
        leave_one_out=[0.03],
    )
    import tomllib

    data = tomllib.loads((tmp_path / "megatron-a100.toml").read_text())
    assert wrote is adopted and data["errors"]["adopted"] is adopted
    assert data["constants"] == ({"matmul_efficiency": 0.712} if adopted else stored)
    assert data["fitted"] == {"matmul_efficiency": 0.712346}
    assert data["fit"]["rows"] == 2 and data["fit"]["fitted_on"] == 1
    assert data["fit"]["left_out"] == ["b"] and data["errors"]["leave_one_out"]["mean"] == 0.03
    fit_sets.cache_clear()
    preset_records.cache_clear()
    preset_hardware.cache_clear()
