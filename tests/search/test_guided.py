"""The guided sampler (``search.guided``), the default for one objective: no trial is a
memory overflow or a duplicate, a seed gives the same study, a resumed run and enqueued
trials are read, the event results correct the analytical fidelity, and the study's
bookkeeping (simulations bought by ``--trials``, overflow counts, the space's size) is
right for every sampler."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

import search
import search.api
from palm.api import analytical_if_fits, analytical_with_memory, memory_check
from palm.config import parse_config
from palm.errors import ConfigError
from search.dedup import configuration_counts
from search.guided import RESIDUAL_SCALE, GuidedSampler, price_config
from search.study_file import study_from_tables

REPO = Path(__file__).resolve().parents[2]
DGX = REPO / "examples" / "t18b-dgx-a100.toml"  # t-18b on 256 A100s, simulations of ~30 ms

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: 380 configurations, 81 of which overflow an A100's memory (recompute none, ZeRO 0)
SPACE: dict[str, Any] = {
    "parallelism": {"tp": [1, 2, 4, 8]},
    "micro_batch": [1, 2, 4, 8],
    "recompute": ["none", "full"],
    "zero": [0, 1],
}


def _spec(seed: int = 0, trials: int = 12, **study: Any) -> Any:
    tables = {"base": str(DGX), "seed": seed, "trials": trials, "name": "g", **study}
    return study_from_tables({"study": tables, "space": SPACE})


def _run(tmp_path: Path, spec: Any, name: str = "g", **kw: Any) -> search.TuningStudy:
    tuning = search.create_study(spec, storage=f"sqlite:///{tmp_path}/g.db", study_name=name)
    search.optimize(tuning, **kw)
    return tuning


def test_the_default_sampler_spends_every_trial_on_a_new_plan_that_fits(tmp_path: Path) -> None:
    spec = _spec()
    assert spec.sampler == "guided"
    tuning = _run(tmp_path, spec)
    trials = tuning.study.trials
    assert len(trials) == 12 and all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["config_key"] for t in trials}) == 12
    assert configuration_counts(tuning.study) == {
        "simulated": 12,
        "overflow": 0,
        "invalid": 0,
        "duplicate": 0,
        "failed": 0,
    }
    sampler = tuning.study.sampler
    assert isinstance(sampler, GuidedSampler)
    assert sampler.stats.overflows > 0  # it met plans that overflow, and struck them
    assert sampler.stats.memory_checks == sampler.stats.overflows + sampler.stats.analytical_runs
    for t in trials:  # and what it proposed really fits
        assert memory_check(parse_config(t.user_attrs["config"])).overflow_bytes <= 0


def test_a_seed_gives_the_same_study_and_another_seed_another(tmp_path: Path) -> None:
    def params(seed: int, name: str) -> list[dict[str, Any]]:
        tuning = _run(tmp_path, _spec(seed=seed, trials=5), name=name)
        return [t.params for t in tuning.study.trials]

    assert params(0, "a") == params(0, "b")
    assert params(0, "a") != params(1, "c")


def test_a_resumed_run_reads_the_study_and_proposes_nothing_twice(tmp_path: Path) -> None:
    spec = _spec(trials=5)
    _run(tmp_path, spec)
    tuning = _run(tmp_path, spec)  # a new sampler, the same storage
    trials = tuning.study.trials
    assert len(trials) == 10 and all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["config_key"] for t in trials}) == 10


def test_an_enqueued_trial_runs_as_given_and_is_learnt(tmp_path: Path) -> None:
    spec = _spec(trials=3)
    tuning = search.create_study(spec, storage=f"sqlite:///{tmp_path}/g.db")
    given = {"log2_tp": 3, "log2_micro_batch": 0, "recompute": "full", "zero": 1}
    tuning.study.enqueue_trial(given)
    search.optimize(tuning)
    trials = tuning.study.trials
    assert given.items() <= trials[0].params.items()  # what the space also draws: sampled
    assert len({t.user_attrs["config_key"] for t in trials}) == 3


def test_a_continuous_knob_is_searched_from_a_sampled_pool(tmp_path: Path) -> None:
    space = {
        "micro_batch": [1, 2],
        "hardware": {"inter_node_bandwidth_gbps": {"low": 10.0, "high": 100.0, "log": True}},
    }
    tables = {"base": str(DGX), "seed": 0, "trials": 4, "name": "c"}
    spec = study_from_tables({"study": tables, "space": space})
    tuning = _run(tmp_path, spec, name="c")
    trials = tuning.study.trials
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials)
    assert all(10.0 <= t.params["hardware.inter_node_bandwidth_gbps"] <= 100.0 for t in trials)


def test_event_results_correct_a_biased_fidelity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fidelity that prices every plan at twice its analytical throughput: before any
    event result the prediction of a priced candidate is that price (log 2 high); after a
    few event results the residual model has learnt the factor and predicts within a few
    percent of the event engine."""
    spec = _spec()
    real = price_config("throughput")

    def doubled(config: Any) -> Any:
        memory, value, seconds = real(config)
        return memory, None if value is None else 2 * value, seconds

    monkeypatch.chdir(tmp_path)  # the artifacts of an in-memory study go to the working dir
    sampler = GuidedSampler(spec, seed=0, price=doubled)
    tuning = search.create_study(spec, storage=optuna.storages.InMemoryStorage(), sampler=sampler)
    search.api._optimize_here(tuning, 1, None, None)
    priced = [i for i in sampler._analytical if i not in sampler._event]
    mean, var = sampler._predict(np.array(priced))
    assert np.allclose(mean, [sampler._analytical[i] for i in priced])
    assert np.allclose(var, RESIDUAL_SCALE**2)  # priced: only the residual is uncertain
    search.api._optimize_here(tuning, 8, None, None)
    open_ = [i for i in sampler._analytical if i not in sampler._event]
    mean, _ = sampler._predict(np.array(open_))
    event = []
    for i in open_:
        config = parse_config(sampler._candidates().drafts[i])
        event.append(
            math.log(search.objective.run_engine(config, "event").throughput_samples_per_s)
        )
    error = np.abs(mean - np.array(event))
    assert np.median(error) < 0.02 and error.max() < math.log(2) / 2  # the factor 2 is gone


def test_a_sampler_for_several_objectives_is_refused() -> None:
    tables = {"base": str(DGX), "objectives": ["throughput", "memory"], "sampler": "guided"}
    with pytest.raises(ConfigError, match=r"study\.sampler = 'guided'.*several"):
        study_from_tables({"study": tables, "space": SPACE})


def test_analytical_with_memory_is_the_memory_check_and_the_analytical_result() -> None:
    fits = []
    for tp, micro_batch, recompute in ((8, 1, "full"), (1, 4, "none")):
        config = parse_config(_tables(tp, micro_batch, recompute))
        memory, result = analytical_with_memory(config)
        assert memory == memory_check(config)
        fitting = analytical_if_fits(config)
        assert (result is None) == (fitting is None) == (memory.overflow_bytes > 0)
        if result is not None and fitting is not None:
            assert result.throughput_samples_per_s == fitting.throughput_samples_per_s
        fits.append(result is not None)
    assert fits == [True, False]  # one of each


def _tables(tp: int, micro_batch: int, recompute: str) -> dict[str, Any]:
    from palm.config import config_to_dict, load_config

    tables = config_to_dict(load_config(DGX))
    tables["training"].update(micro_batch=micro_batch, recompute=recompute, zero=0)
    tables["parallelism"].update(tp=tp, pp=1, dp=256 // tp)
    return tables


# ------------------------------------------------------------------------------------------
# the study's bookkeeping, for every sampler
# ------------------------------------------------------------------------------------------


def test_the_screening_of_other_samplers_follows_the_seed(tmp_path: Path) -> None:
    """``search.optimize`` screens with the study's seed: two seeds, two samples."""
    enqueued = []
    for seed in (0, 1):
        spec = _spec(seed=seed, trials=2, sampler="tpe", screen=40)
        tuning = _run(tmp_path, spec, name=f"s{seed}")
        enqueued.append(tuning.study.user_attrs["screening"]["enqueued"])
    assert enqueued[0] != enqueued[1]


def test_an_infeasible_completed_overflow_is_counted_as_an_overflow(tmp_path: Path) -> None:
    """NSGA-II reads completed trials only, so an overflow ends COMPLETE and infeasible: the
    summary counts it over memory, not simulated."""
    spec = _spec(seed=0, trials=20, sampler="nsga2")
    tuning = _run(tmp_path, spec, name="n")
    counted = configuration_counts(tuning.study)
    infeasible = [t for t in tuning.study.trials if "infeasible" in t.user_attrs]
    assert infeasible, "no overflow: the study no longer tests the count"
    assert all(t.state == TrialState.COMPLETE for t in infeasible)
    assert counted["overflow"] == len(infeasible)
    assert counted["simulated"] == 20  # the budget: event simulations


def test_the_space_is_counted_once_per_study(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = search.api.count_configurations

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(search.api, "count_configurations", counting)
    spec = _spec(seed=0, trials=2, sampler="random")
    _run(tmp_path, spec, name="r")
    _run(tmp_path, spec, name="r")
    assert len(calls) == 1


def test_a_sampled_pool_grows_towards_its_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A space too large to list (here: more than 40 draws) is searched from a sample of 30
    configurations that gains the neighbours of the best ones: the study reaches plans that
    were not in the sample."""
    import search.guided as guided
    import search.pool as pool

    monkeypatch.setattr(pool, "POOL_LIMIT", 40)
    monkeypatch.setattr(pool, "POOL_SAMPLE", 30)
    monkeypatch.setattr(guided, "POOL_SAMPLE", 30)
    real = pool.candidate_pool
    monkeypatch.setattr(
        guided, "candidate_pool", lambda spec, seed=0: real(spec, seed=seed, limit=40, sample=30)
    )
    tuning = _run(tmp_path, _spec(trials=12), name="grown")
    sampler = tuning.study.sampler
    assert isinstance(sampler, GuidedSampler)
    first = {pool.params_key(p) for p in real(_spec(), seed=0, limit=40, sample=30).params}
    trials = tuning.study.trials
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert any(pool.params_key(t.params) not in first for t in trials)
    assert sampler.space_size() is None  # a sample: the space's size is not known


def test_tune_reports_what_the_guided_sampler_priced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from search.cli import main

    path = tmp_path / "g.toml"
    path.write_text(
        f'[study]\nbase = "{DGX}"\ntrials = 3\nseed = 0\n\n[space]\nmicro_batch = [1, 2, 4]\n'
        'recompute = ["none", "full"]\nzero = [0, 1]\n',
        encoding="utf-8",
    )
    url = f"sqlite:///{tmp_path}/g.db"
    assert main(["tune", str(path), "--storage", url, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "3 trials: 3 simulated" in out  # three event simulations
    assert "3 distinct configurations simulated; not simulated: 0 over memory" in out
    line = next(x for x in out.splitlines() if x.startswith("pricing "))
    totals = search.api.pricing(optuna.load_study(study_name="g", storage=url))
    assert f"{totals['memory_checks']:.0f} configurations memory-checked" in line
    assert totals["analytical_runs"] + totals["overflows"] == totals["memory_checks"] > 0
