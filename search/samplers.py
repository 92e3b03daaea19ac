"""Samplers by name (SPEC sec. 6). The objective records memory overflow with
``trial.set_constraint("memory_overflow_bytes", ...)``, which Optuna 5's constraint-aware
samplers (TPE, NSGA-II, GP) read directly (``constraints_func`` is deprecated in Optuna 5)."""

from __future__ import annotations

import importlib.util
import warnings

import optuna

from palm.errors import ConfigError

__all__ = ["make_sampler"]

# experimental in Optuna 5 but stable in use here: RDB heartbeats and grouped TPE
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def make_sampler(name: str, *, seed: int | None, objectives: int) -> optuna.samplers.BaseSampler:
    """``tpe`` (Bergstra et al. 2011; Watanabe 2023), ``random``, ``cmaes`` (Hansen 2016),
    ``nsga2`` (Deb et al. 2002), ``gp`` (Gaussian-process Bayesian optimisation), ``bruteforce``
    (every combination, for exhaustive baselines on small spaces)."""
    if name == "tpe":
        # Optuna 5's default (multivariate, no group): as good as or better than
        # multivariate + group on benchmarks/sampler_efficiency.py's spaces (docs/results.md)
        return optuna.samplers.TPESampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        if importlib.util.find_spec("cmaes") is None:
            raise ConfigError(
                "study.sampler",
                name,
                "an installed sampler: 'cmaes' needs the "
                "cmaes package (pip install 'palm-tune[samplers]')",
            ) from None
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "gp":
        if not all(importlib.util.find_spec(m) for m in ("torch", "scipy")):
            raise ConfigError(
                "study.sampler",
                name,
                "an installed sampler: 'gp' needs torch and scipy (pip install torch scipy)",
            ) from None
        return optuna.samplers.GPSampler(seed=seed)
    if name == "bruteforce":
        return optuna.samplers.BruteForceSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}")
