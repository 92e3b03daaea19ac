"""Smoke test of benchmarks/wafer_symmetry.py: the wafer turned by 180 degrees (stage ``s`` on
the tile of stage ``19 - s``) simulates exactly like the wafer as placed, which is why
docs/model.md puts the busier second half of T-18B's pipeline on the schedule, not on the
geometry. (The doc's figures are in link mode, 20 s a run; group and exclusive here.)"""

from __future__ import annotations

from pathlib import Path

import pytest

import palm
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> object:
    return load_benchmark("wafer_symmetry")


@pytest.mark.parametrize("noc_model", ["fair", "exclusive"])
def test_the_turned_wafer_simulates_the_same(noc_model: str) -> None:
    bench = _bench()
    example = ROOT / "examples" / "wafer-t18b.toml"
    model = f'communication.noc_model="{noc_model}"'
    placed = palm.load_config(example, overrides=[model])
    turned_overrides = [model, *bench.reversed_tiles(placed)]  # type: ignore[attr-defined]
    turned = palm.load_config(example, overrides=turned_overrides)
    assert turned.placement.stage_tiles[0] == (19,)  # stage 0 on the bottom-right tile
    assert turned.placement.stage_tiles[19] == (0,)
    a, b = palm.simulate(placed), palm.simulate(turned)
    assert a.iteration_time_s == b.iteration_time_s
    assert [s.busy_s for s in a.stages] == [s.busy_s for s in b.stages]
