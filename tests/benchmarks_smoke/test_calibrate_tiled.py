"""Smoke test of benchmarks/calibrate_tiled.py on a small slice of the visible Wormhole data:
the fit recovers the preset's constants' order, the closed form matches the simulator (the
script asserts it), and leave-one-out is reported beside in-sample."""

from __future__ import annotations

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
    assert 30 < fitted["operand_feed_gbps"] < 70
    assert fitted["memory_efficiency"] == pytest.approx(
        np.exp(np.mean(np.log([c["measured"]["bandwidth_GBps"] / 24 for c in dram[:4]])))
    )
    assert "leave-one-out" in text and f"| all products ({len(gemm[::4])}) |" in text
    assert bench.main(["--file", str(path)]) == 0
    assert "Fitted constants" in capsys.readouterr().out


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
