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


def test_the_guided_sampler_replays_a_table_with_every_trial_a_simulation() -> None:
    """The default on a new space: its pricing runs live and agrees with the table, and every
    trial is an event simulation of a distinct configuration that fits."""
    bench = _bench()
    import sampler_spaces

    space = "llama3-70b-h100"
    assert bench.default_name(space) == "guided"
    assert bench.previous_default(space) == "tpe-plain+screen200"
    table = sampler_spaces.stored(space)
    run = bench.run_one(space, table, "guided", 0, budget_sims=6)
    assert run.trials == 6 and run.overflows == run.duplicates == run.invalid == 0
    assert [table[k]["event"] for k in run.keys] == run.values and len(set(run.keys)) == 6
    assert run.screened >= 20 and run.screen_s > 0  # its random start was priced


def test_sampler_tables_check_and_agreement() -> None:
    _bench()
    import sampler_tables

    worst = sampler_tables.check("wafer-t18b-whatif", 2)
    assert worst["overflow"] == worst["analytical"] == 0.0 and worst["event"] < 1e-9
    text = sampler_tables.agreement(["llama3-70b-h100"])
    assert "| llama3-70b-h100 | 3240 | 1833 | 4 | 1.000 |" in text


@pytest.mark.parametrize(
    "name",
    [
        "gpt3-175b-a100",
        "wafer-t18b-mapping",
        "wafer-t18b-whatif",
        "llama3-70b-h100",
        "mixtral-8x22b-h100",
        "wafer-t39b-design",
    ],
)
def test_stored_values_are_what_the_simulator_gives_now(name: str) -> None:
    """A sample of each table re-simulated: the memory verdict and the analytical value
    bit for bit, the event value to 1e-9 (the wafer tables were stored before the fair
    network kept reads as a class, which agrees with the full filling to ~1e-11). A change
    to the model that moves these spaces must regenerate the tables
    (``sampler_spaces.exhaustive`` on the rows it changes), not leave stale values behind."""
    _bench()
    import random

    import sampler_spaces

    from palm.api import memory_check, plan_for, simulate_plan
    from palm.config import parse_config

    spec = sampler_spaces.spec_of(name)
    table = sampler_spaces.stored(name)
    drafts = [d.draft for d in sampler_spaces.enumerate_space(spec.space, spec.context)]
    configs = [parse_config(d) for d in drafts if d is not None]
    keyed = [(sampler_spaces.config_key(sampler_spaces.config_to_dict(c)), c) for c in configs]
    fits = [(k, c) for k, c in keyed if "event" in table[k]]
    sample = random.Random(0).sample(fits, 3) + random.Random(1).sample(keyed, 2)
    for i, (key, config) in enumerate(sample):
        row = table[key]
        assert memory_check(config).overflow_bytes == row["overflow"], key
        if "event" not in row:
            continue
        analytical, _ = simulate_plan(plan_for(config, engine="analytical"), engine="analytical")
        assert analytical.throughput_samples_per_s == row["analytical"], key
        if i == 0:  # one event run
            event, _ = simulate_plan(plan_for(config, engine="event"), engine="event")
            assert event.throughput_samples_per_s == pytest.approx(row["event"], rel=1e-9), key
