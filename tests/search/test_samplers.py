"""The samplers honour memory overflow and parameter types.

A plan that does not fit memory is never simulated; it reaches every constraint-aware sampler as
Optuna's constraint ``memory_overflow_bytes`` > 0 on a COMPLETE trial (NSGA-II, GP and CMA-ES read
only COMPLETE trials, ``optuna/samplers/_ga/_base.py``, ``optuna/samplers/_gp/sampler.py``).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.samplers.nsgaii._elite_population_selection_strategy import (
    NSGAIIElitePopulationSelectionStrategy,
)
from optuna.trial import TrialState

import search
from search.dedup import DUPLICATE_ATTR as DUPLICATE
from search.samplers import GP_PACKAGES, NumericCmaEsSampler, make_sampler

REPO = Path(__file__).resolve().parents[2]
WAFER = REPO / "examples" / "wafer-t18b.toml"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _overflow_study(tmp_path: Path, objectives: str = '["throughput", "memory"]') -> Path:
    """t-39b without recompute on the 5 x 4-tile wafer: low-TP / high-DP plans overflow."""
    path = tmp_path / "overflow.toml"
    path.write_text(
        f"""[study]
name = "overflow"
base = "{WAFER}"
set = ["model.preset=\\"t-39b\\"", "training.global_batch=32", "training.recompute=\\"none\\""]
objectives = {objectives}
sampler = "random"
trials = 12
seed = 1

[space]
parallelism = true
micro_batch = [1, 2]
""",
        encoding="utf-8",
    )
    return path


def _infeasible(t: optuna.trial.FrozenTrial) -> bool:
    return t.constraints.get("memory_overflow_bytes", 0.0) > 0


def test_overflow_constraints_reach_nsga2(tmp_path: Path) -> None:
    """NSGA-II's elite selection sees the overflowing plans with their constraint, and its
    constrained domination (Deb et al. 2002) ranks every plan that fits ahead of them."""
    seen: list[tuple[list[Any], list[Any]]] = []
    default = NSGAIIElitePopulationSelectionStrategy(population_size=4)

    def spy(study: optuna.Study, population: list[Any]) -> list[Any]:
        elite = default(study, population)
        seen.append((population, elite))
        return elite

    sampler = optuna.samplers.NSGAIISampler(
        seed=0, population_size=4, elite_population_selection_strategy=spy
    )
    tuning = search.create_study(
        _overflow_study(tmp_path), storage=f"sqlite:///{tmp_path}/s.db", sampler=sampler
    )
    assert tuning.study.sampler is sampler
    search.optimize(tuning, n_trials=12)
    assert seen, "NSGA-II never selected an elite population"
    population = {t.number: t for pop, _ in seen for t in pop}
    overflowed = [t for t in population.values() if _infeasible(t)]
    assert overflowed, "no overflowing plan reached NSGA-II's population"
    for pop, elite in seen:
        feasible = {t.number for t in pop if not _infeasible(t)}
        chosen = {t.number for t in elite}
        if any(_infeasible(t) for t in elite):  # an overflow is kept only after every fit
            assert feasible <= chosen
    # they end COMPLETE (what NSGA-II reads) but are counted as not simulated, beside the
    # invalid draws and duplicates that stay pruned
    trials = tuning.study.trials
    overflows = [t for t in trials if _infeasible(t) and DUPLICATE not in t.user_attrs]
    assert overflows and all(t.state == TrialState.COMPLETE for t in overflows)
    c = search.counts(tuning)
    assert c["pruned"] == sum(_infeasible(t) or t.state == TrialState.PRUNED for t in trials)
    assert c["complete"] == sum(
        t.state == TrialState.COMPLETE and not _infeasible(t) for t in trials
    )


def test_cmaes_learns_categorical_knobs_with_tpe_and_warns_once_without_numeric_ones() -> None:
    pytest.importorskip("cmaes", reason="the cmaes package (extra: samplers) is not installed")
    sampler = make_sampler("cmaes", seed=0, objectives=1)
    assert isinstance(sampler, NumericCmaEsSampler)
    assert isinstance(sampler._independent_sampler, optuna.samplers.TPESampler)
    study = optuna.create_study(sampler=sampler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        study.optimize(lambda t: len(t.suggest_categorical("x", ["a", "bb", "ccc"])), n_trials=5)
    mine = [w for w in caught if "no numeric knob" in str(w.message)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    assert "\n" not in str(mine[0].message)

    numeric = optuna.create_study(sampler=make_sampler("cmaes", seed=0, objectives=1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        numeric.optimize(
            lambda t: t.suggest_float("x", -1, 1) ** 2 + len(t.suggest_categorical("c", ["a"])),
            n_trials=5,
        )
    assert not [w for w in caught if "no numeric knob" in str(w.message)]


def test_gp_extra_holds_what_optunas_gp_sampler_imports() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = {r.split(">")[0].split("=")[0].split("[")[0] for r in extras["gp"]}
    assert set(GP_PACKAGES) <= named


@pytest.mark.skipif(
    not all(importlib.util.find_spec(p) for p in GP_PACKAGES),
    reason="GPSampler needs torch and scipy (pip install 'palm-tune[gp]'; torch is not in dev)",
)
def test_overflow_constraints_reach_the_gp_sampler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna.samplers._gp.sampler as gp_module

    seen: list[Any] = []
    real = gp_module._get_constraint_vals_and_feasibility

    def spy(study: optuna.Study, trials: list[Any]) -> Any:
        out = real(study, trials)
        seen.append(out)
        return out

    monkeypatch.setattr(gp_module, "_get_constraint_vals_and_feasibility", spy)
    sampler = optuna.samplers.GPSampler(seed=0, n_startup_trials=6)
    tuning = search.create_study(
        _overflow_study(tmp_path, '["throughput"]'),
        storage=f"sqlite:///{tmp_path}/s.db",
        sampler=sampler,
    )
    search.optimize(tuning, n_trials=9)
    assert seen, "GPSampler never modelled the constraint"
    values, feasible = seen[-1]
    assert (values > 0).any() and feasible.any(), values
