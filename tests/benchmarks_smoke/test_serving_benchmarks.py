"""Smoke tests of the serving benchmarks: ``calibrate_serving.py``'s closed form agrees with the
simulator and its grid fit reports in-sample, leave-one-out and leave-one-source-out;
``serving_study_optimum.py`` enumerates a serving study's space and ranks only the plans that
fit memory and keep to the latency limits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from palm.api import simulate
from palm.serving.runtime import constants_override
from palm.serving.simulate import serving_run
from palm.serving.validation import load_inference_cases, predicted_value
from tests.benchmark_module import load_benchmark
from tests.cli_run import REPO


@pytest.fixture(scope="module")
def cases() -> list[Any]:
    data = load_inference_cases(None)
    gpu = [c for c in data.cases if not c.hardware.startswith("Wormhole")]
    return gpu[::25]  # both sources, static and continuous rows


def test_closed_form_matches_the_simulator(cases: list[Any]) -> None:
    bench = load_benchmark("calibrate_serving")
    e = (0.0, 0.5, 0.0)
    rows = bench.row_forms(cases, "gpu", e)
    k, h0, h1 = 12.0, 1e-3, 20e-6
    table = bench._runtime("gpu", k, e)
    table["gpu"].update(step_us=h0 * 1e6, sequence_us=h1 * 1e6)
    for case, row in zip(cases, rows, strict=True):
        with constants_override(table):
            run = serving_run(case.configs[0])
        with constants_override(table):
            result = simulate(case.configs[0]).to_dict()
        par = case.configs[0].parallelism
        expected = predicted_value(result, case, par.tp * par.pp * par.dp)
        got = float(row.predict(np.array(k), np.array(h0), np.array(h1)))
        assert run.outcome.sequences == row.sequences
        assert got == pytest.approx(expected, rel=1e-6)


def test_the_fit_reports_every_error(
    cases: list[Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_benchmark("calibrate_serving")
    monkeypatch.setattr(bench, "GROUPED", (0.0,))
    monkeypatch.setattr(bench, "ATTENTION", (0.5,))
    monkeypatch.setattr(bench, "MATMUL", (0.0,))
    big = cases * 3
    fitted = bench.calibrate("gpu", big)
    assert set(fitted) == {
        "kernel_us",
        "step_us",
        "sequence_us",
        "grouped_efficiency",
        "attention_efficiency",
        "matmul_efficiency",
    }
    assert fitted["attention_efficiency"] == 0.5
    out = capsys.readouterr().out
    assert "leave-one-out" in out and "leave-one-source-out" in out


def test_the_tenstorrent_fit_reports_leave_one_system_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_benchmark("calibrate_serving")
    data = load_inference_cases(None)
    mesh = [c for c in data.cases if c.hardware.startswith("Wormhole")][::4]
    assert len({c.hardware for c in mesh}) >= 3
    fitted = bench.calibrate("mesh", mesh)
    assert fitted["attention_efficiency"] == fitted["matmul_efficiency"] == 0.0
    out = capsys.readouterr().out
    assert "leave-one-system-out" in out and "Wormhole-T3K" in out


def test_the_serving_study_optimum_is_the_best_valid_plan() -> None:
    bench = load_benchmark("serving_study_optimum")
    ranked, counts = bench.optimum(str(REPO / "studies" / "serve-llama31-70b-h100.toml"))
    assert counts["configurations"] == (
        counts["over memory"] + counts["over a latency limit"] + counts["valid"]
    )
    assert counts["valid"] == len(ranked) > 0
    values = [v for v, _, _ in ranked]
    assert values == sorted(values, reverse=True)
    best = ranked[0][2]
    assert best.serving.tpot_s <= 0.04 and best.serving.ttft_s <= 2.0
