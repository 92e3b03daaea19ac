"""Smoke test of benchmarks/property_tests.py: each suite of property tests runs through it at
a small scale with a given seed, and passes (docs/model.md secs. 7 and 7b report it at scale
10)."""

from __future__ import annotations

import pytest

from tests.benchmark_module import load_benchmark


@pytest.mark.parametrize(
    ("suite", "build", "tests"), [("fair", "pure Python", 4), ("monotone", "as installed", 2)]
)
def test_the_property_benchmark_runs_the_property_tests(suite: str, build: str, tests: int) -> None:
    bench = load_benchmark("property_tests")
    code, last, cpu = bench.run(suite, build, 0.002, 12345)
    assert code == 0, last
    assert f"{tests} passed" in last
    assert cpu > 0
    assert bench.cases(suite, 1.0) == 10000
