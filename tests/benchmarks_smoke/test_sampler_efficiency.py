"""Smoke test of benchmarks/sampler_efficiency.py: the stored exhaustive tables are complete
(re-running the benchmark simulates nothing), and a short screened TPE study replays them
with every event simulation a distinct configuration of the space."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from spaces import count_configurations
from tests.benchmark_module import load_benchmark


def _bench() -> ModuleType:
    return load_benchmark("sampler_efficiency")  # it puts benchmarks/ on sys.path


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
