"""Smoke test of benchmarks/sampler_efficiency.py: the stored exhaustive tables are complete
(re-running the benchmark simulates nothing), and a short screened TPE study replays them
with every event simulation a distinct configuration of the space."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from spaces import count_configurations

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "sampler_efficiency_bench", ROOT / "benchmarks" / "sampler_efficiency.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    return bench


def test_tables_are_complete_and_a_screened_study_replays_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = _bench()
    import sampler_spaces

    def no_simulation(config: Any) -> Any:
        raise AssertionError("a stored table is incomplete: the benchmark would simulate")

    monkeypatch.setattr(sampler_spaces, "evaluate", no_simulation)
    for name in sampler_spaces.SPACES:  # every configuration (draft) has its stored row
        spec = sampler_spaces.spec_of(name)
        size = count_configurations(spec.space, spec.context, limit=10_000)
        table = sampler_spaces.stored(name)
        fits = [r for r in table.values() if "event" in r]
        assert size is not None and len(table) >= size >= 300 and fits, name
        assert all(r["overflow"] <= 0 for r in fits)
    space = "wafer-t18b-mapping"
    table = sampler_spaces.exhaustive(space)  # enumerated and looked up: nothing simulated
    run = bench.run_one(space, table, "tpe-plain+screen200", 0, budget_sims=8)
    assert run.screened == 200 and run.screen_s > 0
    assert len(run.values) == 8  # event simulations, each a stored value
    assert [table[k]["event"] for k in run.keys] == run.values
    assert len(set(run.keys)) == len(run.keys)  # never the same configuration twice
