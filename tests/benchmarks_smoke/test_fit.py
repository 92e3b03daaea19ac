"""benchmarks/_fit.py, the fit helpers shared by the calibration scripts, on hand-worked cases."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import palm
from palm.config import parse_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _fit import (  # noqa: E402 - benchmarks/ is not a package
    golden,
    leave_one_out,
    mean_max,
    nelder_mead,
    summary,
    with_hardware,
)


def test_golden_finds_the_minimum_of_a_parabola() -> None:
    assert golden(lambda x: (x - 0.7) ** 2, 0.0, 1.0, tol=1e-6) == pytest.approx(0.7, abs=1e-5)
    assert golden(lambda x: x, 0.2, 1.0) == pytest.approx(0.2, abs=1e-3)  # an edge minimum


def test_nelder_mead_finds_the_minimum_of_a_quadratic() -> None:
    best = nelder_mead(lambda p: float((p[0] - 3) ** 2 + 2 * (p[1] + 1) ** 2), [0.5, 0.5])
    assert best == pytest.approx([3.0, -1.0], abs=1e-6)


def test_leave_one_out_refits_without_each_case() -> None:
    # fit = mean of the others; error = case / fit - 1: hand-worked for 1, 2, 3
    errors = leave_one_out([1.0, 2.0, 3.0], lambda rest: sum(rest) / len(rest),
                           lambda case, fit: case / fit - 1)  # fmt: skip
    assert errors == pytest.approx([1 / 2.5 - 1, 2 / 2 - 1, 3 / 1.5 - 1])


def test_summaries() -> None:
    assert mean_max([0.1, -0.3]) == pytest.approx((0.2, 0.3))
    assert summary([0.1, -0.3]) == "mean 20.0%, max 30.0%"
    assert summary([]) == "-"


def test_with_hardware_replaces_only_the_named_constants() -> None:
    config = parse_config({
        "model": {"family": "gemm", "m": 64, "k": 64, "n": 64},
        "hardware": {"preset": "wormhole-n150"},
        "training": {"mode": "inference", "global_batch": 1},
    })  # fmt: skip
    changed = with_hardware(config, launch_us=0.0)
    assert changed.hardware.launch_us == 0.0  # type: ignore[union-attr]
    assert changed.model == config.model and changed.hardware.name == config.hardware.name
    assert palm.simulate(changed).iteration_time_s < palm.simulate(config).iteration_time_s
    assert np.isfinite(palm.simulate(changed).iteration_time_s)
