"""Smoke test of benchmarks/dram_routing.py: the figures docs/model.md quotes."""

from __future__ import annotations

import pytest

from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from tests.benchmark_module import load_benchmark


def test_edge_first_reads_on_the_wafer(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("dram_routing")
    wafer = HARDWARE_PRESETS["wafer-palm"]
    assert isinstance(wafer, Mesh2DHardware)
    xy, yx, edge = bench.routings(wafer)
    # XY and YX disagree on the same machine; edge first beats both there (docs/model.md)
    assert (round(xy, 1), round(yx, 1), round(edge, 1)) == (19.7, 21.3, 32.0)
    assert bench.main([]) == 0
    assert "| wafer-palm | 20 x 16 | 20 | 19.7 | 21.3 | 32.0 |" in capsys.readouterr().out
