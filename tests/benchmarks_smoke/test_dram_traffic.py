"""Smoke test of benchmarks/dram_traffic.py: the per-layer figures docs/model.md quotes."""

from __future__ import annotations

from pathlib import Path

from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def test_layer_bytes_match_the_docs() -> None:
    bench = load_benchmark("dram_traffic")
    b = bench.layer_forward_bytes()
    # the bounds sit below the blocked traffic; sharing operands beats one core; all of it
    # far below the paper's per-layer penalty
    assert b["bound_one_core"] < b["blocked_one_core"] < b["penalty"]
    assert b["bound_domains"] < b["blocked_domains"] < b["blocked_one_core"]
    assert b["blocked_domains"] < b["penalty"] / 5
    doc = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    for key in ("penalty", "bound_one_core", "blocked_one_core", "blocked_domains"):
        assert f"| {b[key] / 1e9:.2f} |" in doc, key
