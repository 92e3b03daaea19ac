"""Samplers by name (docs/tuning.md).

Memory overflow reaches every sampler through Optuna's constraint mechanism: the objective
records ``trial.set_constraint("memory_overflow_bytes", peak - capacity)`` (feasible when <= 0),
and prunes the trial. Optuna 5's TPE reads constraints from trials of any state,
but NSGA-II (``optuna/samplers/_ga/_base.py``), GP (``optuna/samplers/_gp/sampler.py``) and
CMA-ES read only COMPLETE trials; a pruned overflow was invisible to them, so with these
samplers :func:`search.metrics.report_overflow` ends an overflowing trial COMPLETE and
infeasible (throughput 0, as it cannot run) instead (:func:`learns_from_pruned`).
``constraints_func`` is deprecated in Optuna 5 in favour of ``Trial.set_constraint``.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution

from palm.errors import ConfigError

if TYPE_CHECKING:
    from search.study_file import StudySpec

__all__ = ["make_sampler", "learns_from_pruned", "NumericCmaEsSampler", "GP_PACKAGES"]

#: what Optuna's GPSampler imports (``optuna/_gp/gp.py``): the ``gp`` extra of pyproject.toml
GP_PACKAGES = ("torch", "scipy")

# experimental in Optuna 5 but stable in use here: RDB heartbeats and grouped TPE
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# CMA-ES learns an overflow from its throughput 0 instead (search.metrics.report_overflow)
warnings.filterwarnings("ignore", message="Constraints have been set, but CmaEsSampler")


class NumericCmaEsSampler(optuna.samplers.CmaEsSampler):
    """CMA-ES (Hansen 2016, arXiv:1604.00772) on the numeric knobs only; every categorical
    parameter comes from ``independent_sampler`` (TPE by default, a sampler that learns,
    instead of Optuna's default of random sampling). Warns once, in one line, when the study's
    space has no numeric knob: CMA-ES then proposes nothing and the study is a TPE study."""

    def __init__(self, *, seed: int | None, **kwargs: Any) -> None:
        kwargs.setdefault("independent_sampler", optuna.samplers.TPESampler(seed=seed))
        super().__init__(seed=seed, warn_independent_sampling=False, **kwargs)
        self._warned = False

    def infer_relative_search_space(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial
    ) -> dict[str, BaseDistribution]:
        space = super().infer_relative_search_space(study, trial)
        if not space and not self._warned and _numeric_free(study):
            self._warned = True
            warnings.warn(
                f"sampler cmaes: study '{study.study_name}' has no numeric knob, so CMA-ES "
                "proposes nothing and every parameter comes from its TPE sampler; use "
                'sampler = "tpe" (or add hardware knobs) for the same result',
                UserWarning,
                stacklevel=2,
            )
        return space


def _numeric_free(study: optuna.Study) -> bool:
    """True once a trial has completed and none of its parameters is a numeric range."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not done:
        return False
    return not any(
        isinstance(d, (FloatDistribution, IntDistribution)) and not d.single()
        for t in done[:1]
        for d in t.distributions.values()
    )


def _need(name: str, packages: tuple[str, ...], extra: str) -> None:
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        raise ConfigError(
            "study.sampler",
            name,
            f"an installed sampler: '{name}' needs {' and '.join(missing)} "
            f"(pip install 'palm-tune[{extra}]')",
        )


def learns_from_pruned(sampler: optuna.samplers.BaseSampler) -> bool:
    """Whether ``sampler`` reads a pruned trial's constraints (TPE: trials of any state;
    random, brute force and grid learn nothing, so a pruned trial costs them nothing either).
    NSGA-II, GP and CMA-ES read COMPLETE trials only: for them an overflow is reported as a
    COMPLETE, infeasible trial (:func:`search.metrics.report_overflow`). A wrapper's ``base``
    sampler decides (:class:`search.dedup.Unrepeating`)."""
    inner = getattr(sampler, "base", sampler)
    complete_only = (
        optuna.samplers.NSGAIISampler,
        optuna.samplers.NSGAIIISampler,
        optuna.samplers.GPSampler,
        optuna.samplers.CmaEsSampler,
    )
    return not isinstance(inner, complete_only)


def make_sampler(
    name: str, *, seed: int | None, objectives: int, spec: StudySpec | None = None
) -> optuna.samplers.BaseSampler:
    """``guided`` (the default for one objective: the analytical engine as a cheap fidelity
    corrected by the event results, :mod:`search.guided`; needs the study's ``spec``),
    ``tpe`` (Bergstra et al. 2011; Watanabe 2023, arXiv:2304.11127), ``random``, ``cmaes``
    (Hansen 2016, numeric knobs only: :class:`NumericCmaEsSampler`), ``nsga2`` (Deb et al.
    2002, constrained domination), ``gp`` (Gaussian-process BO with constrained log-EI;
    Gardner et al. 2014), ``bruteforce`` (every combination, for exhaustive baselines on small
    spaces)."""
    if name == "guided":
        if spec is None:
            raise ValueError("the guided sampler needs the study's spec")
        from search.guided import GuidedSampler

        return GuidedSampler(spec, seed=seed, screen=spec.screen)
    if name == "tpe":
        # Optuna 5's default (multivariate, no group): as good as or better than
        # multivariate + group on benchmarks/sampler_efficiency.py's spaces (docs/results.md)
        return optuna.samplers.TPESampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        _need(name, ("cmaes",), "samplers")
        return NumericCmaEsSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "gp":
        _need(name, GP_PACKAGES, "gp")
        return optuna.samplers.GPSampler(seed=seed)
    if name == "bruteforce":
        return optuna.samplers.BruteForceSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}")
