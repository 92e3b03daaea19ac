"""The default sampler: the analytical engine as a cheap fidelity that event results correct.

:class:`GuidedSampler` chooses every trial's configuration from the space's candidates
(:mod:`search.pool`) with Gaussian processes (:mod:`search.gp`) over their features, in
the spirit of multi-fidelity Bayesian optimisation with an additive correction (Kennedy &
O'Hagan 2000, the autoregressive model with its scale fixed to 1):

* ``y_a(x)``, the study's objective under the analytical engine (a logarithm: log throughput,
  or minus the log of memory or cost), modelled from the configurations priced analytically
  so far (exactly known where priced);
* ``y_e(x) - y_a(x)``, what the event engine adds (contention, overlap, schedules the closed
  form prices approximately), modelled from the configurations the event engine ran; before
  the first, zero with a standard deviation of :data:`RESIDUAL_SCALE`.

Their sum predicts each candidate's event value with an uncertainty; the candidate of largest
expected improvement over the best event value so far (Jones et al. 1998) is the next trial,
once it has been priced analytically. A candidate chosen without an analytical price is first
priced (the memory check, then the analytical engine, at a fifth to a half of an event
simulation's cost: docs/tuning.md) and the choice is made again. A study starts with
``screen`` candidates priced at random (seeded), then allows :data:`PER_SIMULATION` pricings
per event simulation, at most ``per_trial`` in one trial. So the analytical engine is spent
where the model expects the best plans, not on a fixed random sample, and its systematic
errors are learnt from the event results instead of being trusted. The pricing's geometry
memo (:func:`palm.api.batch`) is kept over the study, so that on a mesh
a pricing costs what it costs in a batch.

Memory is exact and cheap (:func:`palm.api.memory_check`): a candidate that does not fit is
struck from the pool when it is priced, so no trial is spent on a memory overflow. A third
process models ``log2(peak / capacity)`` of the candidates checked so far, and the expected
improvement is weighed by the probability of fitting (constrained expected improvement,
Gardner et al. 2014), so that the memory checks, too, go where plans fit. No candidate the
study has (finished, running in another worker, or failed) is proposed again, so no trial is
a duplicate; failed trials are not retried by this sampler.

Seeded, the sampler is deterministic: the random initial pricing is drawn from ``seed`` and
every later choice is a deterministic function of the results (no measured time enters it).

A space of at most :data:`search.pool.POOL_LIMIT` draws is the pool whole; a larger or
continuous one is a seeded sample that gains the one-parameter neighbours of its best
candidates as the study goes (:func:`search.pool.neighbours`).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from numpy.typing import NDArray
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from palm.api import MemoryCheck, analytical_with_memory, batch, memory_check
from palm.config import parse_config
from palm.errors import ConfigError
from palm.strategy import SimConfig
from search.dedup import DUPLICATE_ATTR, INVALID_CONSTRAINT
from search.gp import GaussianProcess, expected_improvement, normal_cdf
from search.metrics import is_overflow, memory_unit_bytes
from search.objective import over_latency_limits, over_limits
from search.pool import (
    POOL_SAMPLE,
    Candidates,
    candidate_pool,
    neighbours,
    params_key,
    replay_draft,
)
from search.study_file import DEFAULT_SCREEN_GUIDED, StudySpec

__all__ = ["GuidedSampler", "FidelityStats", "Pricing", "price_config", "RESIDUAL_SCALE"]

#: prior standard deviation of log(event / analytical) before the first event result, and
#: the scale of the residual model's signal prior: the engines' typical disagreement (a few
#: percent on the GPU spaces of benchmarks/sampler_efficiency.py, up to ~30% on a wafer)
RESIDUAL_SCALE = 0.05
#: pricings at most per trial before the best priced candidate is taken
PER_TRIAL = 12
#: pricings (memory checks, and analytical runs of the candidates that fit) allowed per
#: event simulation over the study, after the ``screen`` random ones: a fixed number, so
#: that a seed gives the same study on any machine (a pricing costs a fifth to a half of a
#: simulation: docs/tuning.md)
PER_SIMULATION = 2
#: a candidate less likely than this to fit memory (by the model) is not priced
MIN_FIT_CHANCE = 0.25
#: candidates priced (those that fit) before the candidates are ranked again
BATCH = 4
#: memory checks at most before the candidates are ranked again
CHECKS_PER_ROUND = 12
#: candidates (the best by expected improvement) weighed by their chance of fitting memory
#: at a time: a ranking returns the first such block with a candidate (likely to fit)
SHORTLIST = 512
#: points a model is conditioned on at most (a stride sample of more)
MAX_POINTS = 150
#: points its hyperparameters are fitted on at most
FIT_POINTS = 80
#: a sampled pool (a space too large or continuous to list) grows by the neighbours of its
#: best GROW_FROM candidates, up to GROWTH times its first size (search.pool.neighbours)
GROW_FROM = 4
GROWTH = 3
#: entries of the pricing's geometry memo kept across trials (palm.network.memo)
MEMO_ENTRIES = 20_000
#: refit a model's hyperparameters once its data grew by this factor (else condition only)
_REFIT_GROWTH = 1.3

#: what pricing a configuration gives: its memory check, the study's objective under the
#: analytical engine in natural units (samples/s, bytes, relative cost) when it fits (else
#: None), and the seconds the pricing took
Pricing = Callable[[SimConfig], tuple[MemoryCheck, "float | None", float]]


def price_config(objective: str) -> Pricing:
    """The pricing of ``objective``: throughput from the analytical engine (its plan sharing
    the memory check's context, :func:`palm.api.analytical_with_memory`); peak memory and
    hardware cost are exact without a plan."""

    def price(config: SimConfig) -> tuple[MemoryCheck, float | None, float]:
        started = time.perf_counter()
        value: float | None = None
        if objective in ("throughput", "tpot"):
            memory, result = analytical_with_memory(config)
            if result is None or over_latency_limits(config, result):
                value = None  # does not fit, or a served plan over its latency limits
            elif objective == "throughput":
                value = result.throughput_samples_per_s
            else:  # a served base: its closed form prices it exactly
                assert result.serving is not None
                value = result.serving.tpot_s * 1e3
        else:
            memory = memory_check(config)
            if memory.overflow_bytes <= 0 and objective == "memory":
                value = memory.peak_bytes
            elif memory.overflow_bytes <= 0:
                from search.objective import hardware_cost

                value = hardware_cost(config)
        return memory, value, time.perf_counter() - started

    return price


@dataclass
class FidelityStats:
    """What the sampler spent besides event simulations: memory checks (of which
    ``overflows`` did not fit) and analytical runs, their seconds, and its modelling time."""

    memory_checks: int = 0
    overflows: int = 0
    analytical_runs: int = 0
    pricing_s: float = 0.0
    model_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(vars(self))


class _Model:
    """A GP whose hyperparameters are refitted (on at most :data:`FIT_POINTS`) only when its
    data has grown by :data:`_REFIT_GROWTH`, and which is conditioned on at most
    :data:`MAX_POINTS` (an even stride of its points)."""

    def __init__(self, dims: int, scale: float | None) -> None:
        self.gp = GaussianProcess(dims)
        self.scale = scale
        self.fitted_on = 0
        self.data_size = -1

    def update(self, X: NDArray[np.float64], y: NDArray[np.float64]) -> GaussianProcess:
        if len(y) == self.data_size:
            return self.gp
        self.data_size = len(y)
        if len(y) >= 2 and len(y) >= _REFIT_GROWTH * max(self.fitted_on, 1):
            steps = 60 if self.fitted_on == 0 else 20
            self.fitted_on = len(y)
            sub = _stride(len(y), FIT_POINTS)
            self.gp.fit(X[sub], y[sub], steps=steps, scale=self.scale)
        keep = _stride(len(y), MAX_POINTS)
        return self.gp.fit(X[keep], y[keep], steps=0, scale=self.scale)


def _stride(n: int, most: int) -> NDArray[np.int64]:
    return np.unique(np.linspace(0, n - 1, min(n, most)).round().astype(np.int64))


class GuidedSampler(optuna.samplers.BaseSampler):
    """Multi-fidelity Gaussian-process sampler of one study's space (module docstring), for
    a single objective. ``screen``: candidates priced at random before the first trial;
    ``per_trial``: analytical pricings at most per trial; ``price`` replaces the pricing
    (:func:`price_config` of the study's objective)."""

    def __init__(
        self,
        spec: StudySpec,
        *,
        seed: int | None = None,
        screen: int = DEFAULT_SCREEN_GUIDED,
        per_trial: int = PER_TRIAL,
        price: Pricing | None = None,
    ) -> None:
        if len(spec.objectives) != 1:
            raise ConfigError(
                "study.sampler", "guided", "one objective (use tpe or nsga2 for several)"
            )
        self._spec, self._seed = spec, seed
        self._screen, self._per_trial = screen, per_trial
        self._price_config = price or price_config(spec.objectives[0])
        self._fallback = optuna.samplers.RandomSampler(seed=seed)
        self._pool: Candidates | None = None
        self._fits: dict[int, bool] = {}
        self._memory: dict[int, float] = {}  # log2(peak / capacity) of checked candidates
        self._analytical: dict[int, float] = {}  # y_a of priced candidates that fit
        self._event: dict[int, float] = {}  # y_e of simulated candidates
        self._taken: set[int] = set()  # failed or duplicate: never proposed again
        self._done: set[int] = set()  # finished trial numbers already read
        self._proposals: dict[int, dict[str, Any]] = {}
        self._models: dict[str, _Model] = {}
        self._unit = 1.0  # bytes per unit of the memory objective in the study
        self._chance: dict[int, float] = {}  # P(fits) of the last ranking's shortlist
        self._grown: set[int] = set()  # candidates whose neighbours joined a sampled pool
        self._geometry: dict[Hashable, object] = {}  # the pricing's memo, kept across trials
        self.stats = FidelityStats()

    # -- Optuna's sampler interface ---------------------------------------------------------

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        chosen = self._proposals.get(trial.number, {})
        if param_name in chosen:
            value = chosen[param_name]
            if param_distribution._contains(param_distribution.to_internal_repr(value)):
                return value
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if trial.system_attrs.get("fixed_params"):
            return  # an enqueued trial: its parameters are given
        if self._seed is not None:  # per trial, so that a resumed run draws as a fresh one
            mixed = (self._seed * 1_000_003 + trial.number) & 0xFFFFFFFF
            self._fallback = optuna.samplers.RandomSampler(seed=mixed)
        self._unit = memory_unit_bytes(study) if self._spec.objectives[0] == "memory" else 1.0
        chosen = self._propose(study, trial.number)
        if chosen is not None:
            self._proposals[trial.number] = chosen

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Any,
    ) -> None:
        self._proposals.pop(trial.number, None)

    def reseed_rng(self) -> None:
        self._fallback.reseed_rng()
        self._seed = None if self._seed is None else (self._seed + 7919) & 0xFFFFFFFF

    def space_size(self) -> int | None:
        """The space's distinct configurations when the pool lists them all, else None."""
        pool = self._candidates()
        return len(pool) if pool.complete else None

    # -- the pool and what is known of it ---------------------------------------------------

    def _candidates(self) -> Candidates:
        if self._pool is None:
            self._pool = candidate_pool(self._spec, seed=self._seed or 0)
        return self._pool

    def _index(self, params: dict[str, Any]) -> int | None:
        pool = self._candidates()
        i = pool.index.get(params_key(params))
        if i is None:
            draft = replay_draft(self._spec, params)
            if draft is None:
                return None
            i = pool.add(dict(params), draft)
        return i

    def _read(self, study: optuna.Study, current: int) -> set[int]:
        """Learn the study's finished trials (once each; their values are in the study's
        display units); return the candidates that other trials are running now."""
        running: set[int] = set()
        for t in study.get_trials(deepcopy=False):
            if t.number == current or t.number in self._done:
                continue
            if not t.state.is_finished():
                i = self._index(t.params) if t.params else None
                if i is not None:
                    running.add(i)
                continue
            self._done.add(t.number)
            i = None if INVALID_CONSTRAINT in t.constraints else self._index(t.params)
            if i is None:
                continue
            if DUPLICATE_ATTR in t.user_attrs or t.state == TrialState.FAIL:
                self._taken.add(i)
            elif is_overflow(t) or over_limits(t):
                self._fits[i] = False
            elif t.state == TrialState.COMPLETE and t.value is not None:
                y = self._y(float(t.value))
                self._fits[i] = y is not None
                if y is not None:
                    self._event[i] = y
        return running

    def _y(self, value: float, unit: float = 1.0) -> float | None:
        """The modelled value (larger is better) of an objective value: the logarithm of a
        throughput, minus that of a memory (in units of ``unit`` bytes) or a cost."""
        magnitude = abs(value) / unit
        if magnitude <= 0:
            return None
        return math.log(magnitude) * (1.0 if self._spec.objectives[0] == "throughput" else -1.0)

    def _price(self, i: int) -> bool:
        """Memory check and analytical value of candidate ``i``; whether it fits."""
        memory, value = None, None
        try:
            config = parse_config(self._candidates().drafts[i])
            memory, value, seconds = self._price_config(config)
            self.stats.pricing_s += seconds
        except Exception:  # noqa: BLE001 - the event engine would record it; skip the plan
            self._taken.add(i)
        self.stats.memory_checks += 1
        if memory is not None and memory.capacity_bytes > 0 and memory.peak_bytes > 0:
            self._memory[i] = math.log2(memory.peak_bytes / memory.capacity_bytes)
        y = None if value is None else self._y(value, self._unit)
        self._fits[i] = y is not None
        if y is None:
            self.stats.overflows += memory is not None
            return False
        self.stats.analytical_runs += 1
        self._analytical[i] = y
        return True

    # -- the choice ---------------------------------------------------------------------------

    def _propose(self, study: optuna.Study, number: int) -> dict[str, Any] | None:
        pool = self._candidates()
        running = self._read(study, number)
        if not pool.complete:
            self._grow(study)
        # the priced plans share their routes, over the study (palm.network.memo)
        with batch(max_entries=MEMO_ENTRIES, store=self._geometry):
            if self.stats.memory_checks == 0:
                for i in np.random.default_rng(self._seed).permutation(len(pool))[: self._screen]:
                    self._price(int(i))
            for i in [i for i in self._event if i not in self._analytical]:
                self._price(i)  # simulated elsewhere (a resumed run, another worker)
            allowance = min(
                self._per_trial,
                self._screen + PER_SIMULATION * (len(self._event) + 1) - self.stats.memory_checks,
            )
            while allowance > 0:
                ranked = self._ranking(running, likely=True)
                head = list(itertools.takewhile(lambda i: i not in self._analytical, ranked))
                if not head:
                    break  # nothing likely to fit is open, or the best candidate is priced
                before = self.stats.memory_checks
                self._price_some(head[:allowance], BATCH)
                allowance -= self.stats.memory_checks - before
            best = self._ranking(running, priced_only=True)
            while not best:  # nothing priced is open: price on until a candidate fits
                ranked = self._ranking(running, likely=True) or self._ranking(running)
                if not ranked:
                    return None
                self._price_some(ranked[:CHECKS_PER_ROUND], 1)
                best = self._ranking(running, priced_only=True)
        return dict(pool.params[best[0]])

    def _grow(self, study: optuna.Study) -> None:
        """A sampled pool gains the neighbours of its best simulated candidates (or, before
        the first simulation, its best priced ones), up to :data:`GROWTH` times its size."""
        pool = self._candidates()
        known = self._event or self._analytical
        limit = GROWTH * POOL_SAMPLE
        if not known or len(pool) >= limit:
            return
        distributions: dict[str, BaseDistribution] = {}
        for t in study.get_trials(deepcopy=False):
            distributions.update(t.distributions)
        for i in sorted(known, key=lambda j: -known[j])[:GROW_FROM]:
            if i not in self._grown:
                self._grown.add(i)
                found = neighbours(self._spec, pool.params[i], distributions)
                pool.extend(found[: max(0, limit - len(pool))])

    def _price_some(self, candidates: list[int], most: int) -> int:
        """Price ``candidates`` in order until ``most`` of them fit; returns how many fit."""
        fitted = 0
        for i in candidates:
            fitted += self._price(i)
            if fitted >= most:
                break
        return fitted

    def _open(self, running: set[int], priced_only: bool) -> NDArray[np.int64]:
        n = len(self._candidates())
        open_ = np.ones(n, dtype=bool)
        for i, fits in self._fits.items():
            open_[i] = fits
        for i in (*self._event, *self._taken, *running):
            open_[i] = False
        if priced_only:
            priced = np.zeros(n, dtype=bool)
            priced[list(self._analytical)] = True
            open_ &= priced
        return np.flatnonzero(open_)

    def _ranking(
        self, running: set[int], *, priced_only: bool = False, likely: bool = False
    ) -> list[int]:
        """Open candidates by constrained expected improvement, best first (ties: lower
        index first), the :data:`SHORTLIST` best; ``likely``: only those at least
        :data:`MIN_FIT_CHANCE` likely to fit memory."""
        started = time.perf_counter()
        cand = self._open(running, priced_only)
        if len(cand) == 0:
            return []
        mean, var = self._predict(cand)
        if self._event:
            incumbent = max(self._event.values())
        else:
            priced = [j for j, c in enumerate(cand) if int(c) in self._analytical]
            incumbent = float(mean[priced].max()) if priced else float(mean.max())
        score = expected_improvement(mean, var, incumbent)
        if float(score.max()) <= 1e-12:  # no improvement expected anywhere: an optimistic bound
            score = mean + 2.0 * np.sqrt(var) - float((mean + 2.0 * np.sqrt(var)).min()) + 1e-9
        by_score = np.argsort(-score, kind="stable")
        ranked: list[int] = []
        for start in range(0, len(by_score), SHORTLIST):  # the best by improvement first
            part = by_score[start : start + SHORTLIST]
            chance = self._fit_chance(cand[part])
            weighed = score[part] * chance
            keep = chance >= MIN_FIT_CHANCE if likely else np.ones(len(part), dtype=bool)
            order = np.argsort(-weighed, kind="stable")
            self._chance.update({int(cand[part[j]]): float(chance[j]) for j in order})
            ranked = [int(cand[part[j]]) for j in order if keep[j]]
            if ranked:
                break
        self.stats.model_s += time.perf_counter() - started
        return ranked

    def _fit_chance(self, cand: NDArray[np.int64]) -> NDArray[np.float64]:
        """P(peak <= capacity) of each candidate: 1 or 0 where checked, else from the model
        of log2(peak / capacity)."""
        checked = sorted(self._memory)
        out = np.ones(len(cand))
        if len(checked) < 2:
            return out
        X = self._candidates().features
        z = np.array([self._memory[i] for i in checked])
        mean, var = self._model("memory", None).update(X[checked], z).predict(X[cand])
        out = normal_cdf(-mean / np.sqrt(np.maximum(var, 1e-12)))
        for j, c in enumerate(cand):
            if int(c) in self._fits:
                out[j] = 1.0 if self._fits[int(c)] else 0.0
        return np.asarray(out)

    def _predict(self, cand: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Predicted event value (mean, variance) of the candidates ``cand``."""
        X = self._candidates().features
        priced = sorted(self._analytical)
        if priced:
            ya = np.array([self._analytical[i] for i in priced])
            mean, var = self._model("analytical", None).update(X[priced], ya).predict(X[cand])
        else:
            mean, var = np.zeros(len(cand)), np.ones(len(cand))
        for j, c in enumerate(cand):
            if int(c) in self._analytical:
                mean[j], var[j] = self._analytical[int(c)], 0.0
        both = [i for i in sorted(self._event) if i in self._analytical]
        if both:
            r = np.array([self._event[i] - self._analytical[i] for i in both])
            gp_r = self._model("residual", RESIDUAL_SCALE).update(X[both], r)
            mr, vr = gp_r.predict(X[cand])
        else:
            mr, vr = np.zeros(len(cand)), np.full(len(cand), RESIDUAL_SCALE**2)
        return mean + mr, var + vr

    def _model(self, name: str, scale: float | None) -> _Model:
        if name not in self._models:
            self._models[name] = _Model(self._candidates().features.shape[1], scale)
        return self._models[name]
