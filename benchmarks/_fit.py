"""Shared pieces of the calibration scripts (calibrate.py, calibrate_gpus.py, calibrate_tiled.py).

Each script fits a few physically meaningful constants by minimising the mean squared log error
of predicted against measured times, and reports leave-one-out beside the in-sample error:
refit without each case and predict it. This module holds what they had each written out:
the one-dimensional golden-section search, a Nelder-Mead simplex for a handful of constants,
the leave-one-out loop, a config with some hardware constants replaced, and the error summary.
A sibling module of the scripts, imported as ``from _fit import ...`` after they put
``benchmarks/`` on ``sys.path``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

import palm

__all__ = ["golden", "leave_one_out", "mean_max", "nelder_mead", "summary", "with_hardware"]

Case = TypeVar("Case")
Params = TypeVar("Params")


def with_hardware(config: palm.SimConfig, **constants: Any) -> palm.SimConfig:
    """``config`` with the named hardware fields replaced."""
    hardware = dataclasses.replace(config.hardware, **constants)
    return dataclasses.replace(config, hardware=hardware)


def golden(f: Callable[[float], float], lo: float, hi: float, tol: float = 1e-4) -> float:
    """The minimiser of a unimodal ``f`` on ``[lo, hi]`` to ``tol`` (golden-section search)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def nelder_mead(f: Callable[[np.ndarray], float], x0: Sequence[float], iters: int = 2000
                ) -> np.ndarray:  # fmt: skip
    """Minimise ``f`` from ``x0`` (standard reflection/expansion/contraction/shrink, a first
    simplex of 20% steps); deterministic."""
    n = len(x0)
    simplex = [np.array(x0, float)]
    simplex += [simplex[0] + np.eye(n)[i] * 0.2 * max(abs(x0[i]), 1e-3) for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centre = np.mean(simplex[:-1], axis=0)
        reflected = 2 * centre - simplex[-1]
        fr = f(reflected)
        if fr < values[0]:
            expanded = 3 * centre - 2 * simplex[-1]
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = (centre + simplex[-1]) / 2
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0]] + [(s + simplex[0]) / 2 for s in simplex[1:]]
                values = [values[0]] + [f(s) for s in simplex[1:]]
    return simplex[int(np.argmin(values))]


def leave_one_out(
    cases: Sequence[Case],
    fit: Callable[[list[Case]], Params],
    error: Callable[[Case, Params], float],
) -> list[float]:
    """For every case: ``fit`` the constants on all the others and return ``error(case,
    constants)``, the relative error of predicting the case left out."""
    out = []
    for i, case in enumerate(cases):
        rest = [c for j, c in enumerate(cases) if j != i]
        out.append(error(case, fit(rest)))
    return out


def mean_max(errors: Sequence[float]) -> tuple[float, float]:
    """Mean and maximum absolute error."""
    a = [abs(e) for e in errors]
    return sum(a) / len(a), max(a)


def summary(errors: Sequence[float]) -> str:
    """``"mean x%, max y%"`` of the absolute errors (``"-"`` for none)."""
    if not errors:
        return "-"
    mean, worst = mean_max(errors)
    return f"mean {mean:.1%}, max {worst:.1%}"
