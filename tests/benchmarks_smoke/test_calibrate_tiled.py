"""Smoke test of benchmarks/calibrate_tiled.py on a small slice of the visible Wormhole data:
the fit recovers the preset's constants' order, the closed form matches the simulator (the
script asserts it), and leave-one-out is reported beside in-sample."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from palm.validation_tiled import default_tiled_file
from tests.benchmark_module import load_benchmark


def _bench():  # type: ignore[no-untyped-def]
    return load_benchmark("calibrate_tiled")


def test_fit_on_a_slice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(default_tiled_file().read_text())
    gemm = [c for c in data["cases"] if c["kind"] == "gemm" and "tuned" in c["id"]]
    dram = [c for c in data["cases"] if c["kind"] == "dram" and "_1ch_read" in c["id"]]
    data["cases"] = gemm[::4] + dram[:4]
    path = tmp_path / "slice.json"
    path.write_text(json.dumps(data))
    bench = _bench()
    text, fitted = bench.run(str(path))
    assert 0.8 < fitted["matmul_efficiency"] <= 1.0
    assert 15 < fitted["operand_feed_gelems"] < 35  # datums per second (1e9), bf16 rows
    assert fitted["memory_efficiency"] == pytest.approx(
        np.exp(np.mean(np.log([c["measured"]["bandwidth_GBps"] / 24 for c in dram[:4]])))
    )
    assert "leave-one-out" in text and f"| all products ({len(gemm[::4])}) |" in text
    assert bench.main(["--file", str(path)]) == 0
    assert "Fitted on the 16 wormhole products" in capsys.readouterr().out


def test_fidelity_conflicts_need_a_hifi2_row_far_above_its_hifi4_twin() -> None:
    """No model whose time never falls as the fidelity rises meets both rows within 25% when
    the HiFi2 row is over 1.25 / 0.75 = 1.67 times its HiFi4 twin."""
    import dataclasses

    from palm.validation_tiled import load_tiled_cases

    bench = _bench()
    cases = load_tiled_cases().gemm
    twins = [c for c in cases if c.case_id.endswith("_m512_k512_n512_notrace") and c.tuned]
    hifi2, hifi4 = sorted(twins, key=lambda c: c.config.hardware.math_fidelity)
    for ratio, conflicts in ((1.6, 0), (1.7, 1)):
        pair = [dataclasses.replace(hifi2, measured_time_s=ratio * hifi4.measured_time_s), hifi4]
        assert len(bench.fidelity_conflicts(pair)) == conflicts


def _mixed_slice(tmp_path: Path, name: str, wormhole_scale: float) -> Path:
    """Every fourth Blackhole product and every eighth Wormhole one in one file, the Wormhole
    rows' measured times scaled by ``wormhole_scale``."""
    from palm.validation_tiled import default_tiled_files

    wh_file, bh_file = default_tiled_files()
    wh = [c for c in json.loads(wh_file.read_text())["cases"] if c["kind"] == "gemm"][::8]
    for c in wh:
        c["measured"]["inference_time_avg_ns"] *= wormhole_scale
    data = json.loads(bh_file.read_text())
    data["cases"] = data["cases"][::4] + wh
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_blackhole_constants_come_only_from_blackhole_rows(tmp_path: Path) -> None:
    """The Blackhole fit reads the rows that state a Blackhole chip and nothing else: moving
    every Wormhole row's time by half again leaves it exactly as it was (and moves Wormhole's);
    its all-HiFi4 rows cannot bind the operand feed, which it does not fit."""
    bench = _bench()
    same = _mixed_slice(tmp_path, "same.json", 1.0)
    moved = _mixed_slice(tmp_path, "moved.json", 1.5)
    _, bh = bench.run(str(same), "blackhole")
    _, bh_moved = bench.run(str(moved), "blackhole")
    assert bh == bh_moved
    assert set(bh) == {"matmul_efficiency", "launch_us", "host_dispatch_us",
                       "host_sharded_output_us", "operand_feed_gelems"}  # fmt: skip
    assert bh["operand_feed_gelems"] == 0.0  # unbound: no limit, not Wormhole's rate
    assert 0.85 < bh["matmul_efficiency"] <= 1.0
    _, wh = bench.run(str(same), "wormhole")
    _, wh_moved = bench.run(str(moved), "wormhole")
    assert wh_moved["launch_us"] != wh["launch_us"]
    assert "operand_feed_gelems" in wh  # the Wormhole slice has HiFi2 rows: the feed binds


def test_an_unshown_host_cost_is_zero_not_borrowed() -> None:
    """A host cost no row binds (pinning it at 0 and refitting leaves the loss unchanged) is 0;
    one that rows bind is kept."""
    bench = _bench()
    zeros, ones = np.zeros(6), np.ones(6)
    traced = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # 1: untraced
    # two traced products (10 us of math, 20 us measured: launch and eta) and four untraced
    # with C in L1 at 50 us: only the sum of the two host costs is bound
    b = bench.Basis(math_s=ones * 10e-6, feed_elems=zeros, noc_s=zeros, send_s=zeros,
                    reduce_s=zeros, dram_s=zeros, tail_s=zeros, host=traced, sharded=ones,
                    measured_s=np.where(traced > 0, 50e-6, 20e-6))  # fmt: skip
    space = bench.Space(free=(0, 2, 3, 4), base=(0.9, 25.0, 8.0, 40.0, 40.0))
    pinned, x = bench.pin_unbound_hosts(b, np.ones(6, bool), space)
    full = pinned.expand(x)
    assert full[3] == 0.0 and full[4] == pytest.approx(50.0, rel=1e-3)
    # with two host-bound untraced products whose C is in DRAM, both are bound and kept
    b2 = dataclasses.replace(
        b,
        sharded=np.array([0.0, 0.0, 1.0, 1.0, 0.0, 0.0]),
        measured_s=np.array([20e-6, 20e-6, 90e-6, 90e-6, 50e-6, 50e-6]),
    )
    pinned, x = bench.pin_unbound_hosts(b2, np.ones(6, bool), space)
    full = pinned.expand(x)
    assert full[3] == pytest.approx(50.0, rel=1e-3) and full[4] == pytest.approx(40.0, rel=1e-3)
