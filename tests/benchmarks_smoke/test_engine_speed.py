"""Smoke test of benchmarks/engine_speed.py's per-event timing (the figures themselves are
machine-dependent: docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from palm.validation import load_cases
from tests.benchmark_module import load_benchmark


def test_per_event_runs_interleave_and_take_more_repeats_for_a_short_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = load_benchmark("engine_speed")
    config = load_cases()[0].config  # 18.4B: a few hundred events, under a millisecond a run
    simpy_calls: list[int] = []
    original = bench.simpy_per_event_us

    def counted(events: int, processes: int) -> tuple[float, int]:
        simpy_calls.append(events)
        return original(events, processes)  # type: ignore[no-any-return]

    monkeypatch.setattr(bench, "simpy_per_event_us", counted)
    monkeypatch.setattr(bench, "MIN_CASE_CPU_S", 0.02)
    x = bench.per_event_runs(config, "exclusive", 2)
    # a run of the plan is about half a millisecond: 2 repeats are far from 20 ms, so more
    # are taken, SimPy's baseline once beside each
    assert 2 < x.repeats <= bench.MAX_REPEATS
    assert simpy_calls == [x.events] * x.repeats
    assert x.events == 367 and abs(x.simpy_events - x.events) <= 2
    assert x.simpy_us > 0 and 0 < x.second_us <= x.first_us * 1.5
