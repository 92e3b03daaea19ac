"""Smoke test of benchmarks/fair_properties.py: the fair network's property tests run through
it at a small scale with a given seed, and pass (docs/model.md sec. 7 reports it at scale 10)."""

from __future__ import annotations

from tests.benchmark_module import load_benchmark


def test_the_property_benchmark_runs_the_property_tests() -> None:
    bench = load_benchmark("fair_properties")
    code, last, cpu = bench.run("pure Python", 0.002, 12345)
    assert code == 0, last
    assert "4 passed" in last
    assert cpu > 0
