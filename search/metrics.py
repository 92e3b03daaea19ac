"""What a study reports, in which unit, and how a configuration that overflows memory is told
to the sampler (docs/tuning.md).

* The objectives carry names with units (``study.set_metric_names``), which optuna-dashboard,
  Optuna's plots and ``palm-tune best --json`` show: throughput in samples/s, peak memory in
  GiB (2**30 bytes), hardware cost in the relative units of :func:`palm.api.hardware_cost`.
* A served plan over a latency limit (``serving.tpot_limit_s``, ``ttft_limit_s``) ran: its
  constraints ``tpot_over_limit_s`` / ``ttft_over_limit_s`` are positive and, for the
  samplers that read COMPLETE trials only, it ends COMPLETE with its real values, as below.
* A configuration that does not fit memory is never simulated. The objective records its
  overflow as Optuna's constraint ``memory_overflow_bytes`` (feasible when <= 0) and raises
  ``TrialPruned``: the trial is pruned, which TPE reads (constraints of trials
  in any state). NSGA-II's constrained domination, GP's constrained log-EI and CMA-ES read
  COMPLETE trials only: for them :func:`report_overflow` ends that trial COMPLETE with the
  constraint violated instead.
  Its values are physical, not a tuning knob: throughput 0 (it cannot run), its peak memory,
  its hardware cost. ``study.best_trial``/``best_trials`` and Optuna's plots leave infeasible
  trials out (Optuna 5, ``optuna/study/study.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "METRIC_NAMES",
    "GIB",
    "metric_names",
    "memory_unit_bytes",
    "MEMORY_IN_BYTES",
    "display_names",
    "report_overflow",
    "is_overflow",
    "OVERFLOW_ATTR",
    "LATENCY_VALUES_ATTR",
]

GIB = 2**30
#: display name of each objective, with its unit
METRIC_NAMES = {
    "throughput": "throughput [samples/s]",
    "memory": "peak memory [GiB]",
    "cost": "hardware cost [relative]",
    "tpot": "time per output token [ms]",
}
#: user attribute of an overflowing trial: why it is infeasible, in words
OVERFLOW_ATTR = "infeasible"
#: user attribute of a served plan over a latency limit: its objective values (it ran)
LATENCY_VALUES_ATTR = "latency_values"
_CONSTRAINT = "memory_overflow_bytes"


#: the memory objective's name in studies whose trials already report bytes (made before
#: palm-tune reported GiB): a resumed study keeps one unit
MEMORY_IN_BYTES = "peak memory [bytes]"


def metric_names(objectives: Sequence[str], *, memory_in_bytes: bool = False) -> list[str]:
    """The study's metric names (``study.set_metric_names``), in the objectives' order."""
    names = [METRIC_NAMES[o] for o in objectives]
    return [
        MEMORY_IN_BYTES if memory_in_bytes and o == "memory" else n
        for o, n in zip(objectives, names, strict=True)
    ]


def memory_unit_bytes(study: optuna.Study) -> float:
    """Bytes per unit of the memory objective of ``study``: 2**30, or 1 in a study whose trials
    reported bytes before."""
    return 1.0 if MEMORY_IN_BYTES in (study.metric_names or []) else float(GIB)


def display_names(study: optuna.Study) -> tuple[list[str], list[str]]:
    """(objective keys, names with units) of ``study``: its ``metric_names``, or for a study
    made before palm-tune named them, from the objectives it recorded (else ``value<i>``)."""
    n = len(study.directions)
    keys = [str(o) for o in study.user_attrs.get("objectives") or []]
    if len(keys) != n:  # not a palm-tune study
        keys = [f"value{i}" for i in range(n)] if n > 1 else ["value"]
    stored = study.metric_names
    if stored is not None:
        return keys, [str(name) for name in stored]
    return keys, [METRIC_NAMES.get(k, k) for k in keys]


def is_overflow(trial: FrozenTrial) -> bool:
    """A finished trial that did not fit memory: its constraint ``memory_overflow_bytes`` is
    positive (COMPLETE, or PRUNED in studies made before overflow was reported as a
    constraint violation)."""
    finished = trial.state in (TrialState.COMPLETE, TrialState.PRUNED)
    return finished and trial.constraints.get(_CONSTRAINT, 0.0) > 0


def _in_units(objectives: Sequence[str], values: Sequence[float], unit: float) -> list[float]:
    return [
        v / unit if o == "memory" else float(v) for o, v in zip(objectives, values, strict=True)
    ]


def _overflow_values(objectives: Sequence[str], trial: optuna.Trial, unit: float) -> list[float]:
    from palm.config import parse_config
    from search.objective import hardware_cost

    attrs = trial.user_attrs
    out = []
    for name in objectives:
        if name == "throughput":
            out.append(0.0)  # a plan that does not fit trains nothing
        elif name == "memory":
            out.append(float(attrs["peak_memory_bytes"]) / unit)
        elif name == "tpot":
            out.append(float("inf"))  # a plan that does not fit emits no token
        else:
            out.append(hardware_cost(parse_config(attrs["config"])))
    return out


def report_overflow(
    objective: Callable[[optuna.Trial], float | Sequence[float]],
    objectives: Sequence[str],
    *,
    memory_unit: float = GIB,
    complete: bool = True,
) -> Callable[[optuna.Trial], float | list[float]]:
    """``objective`` with its values in the display units of :data:`METRIC_NAMES` (memory in
    units of ``memory_unit`` bytes: :func:`memory_unit_bytes`), and, when ``complete``, a
    memory overflow (``TrialPruned`` with ``memory_overflow_bytes`` > 0) reported as a
    COMPLETE, infeasible trial (see the module docstring); otherwise it stays pruned
    (docs/tuning.md; :func:`search.samplers.learns_from_pruned` decides)."""

    def run(trial: optuna.Trial) -> float | list[float]:
        try:
            raw: Any = objective(trial)
        except optuna.TrialPruned as exc:
            ran = trial.user_attrs.get(LATENCY_VALUES_ATTR)
            if not complete or (trial.user_attrs.get(_CONSTRAINT, 0.0) <= 0 and ran is None):
                raise
            trial.set_user_attr(OVERFLOW_ATTR, str(exc) or "memory overflow")
            if ran is not None:  # over a latency limit: it ran, its values are real
                values = _in_units(objectives, ran, memory_unit)
            else:
                values = _overflow_values(objectives, trial, memory_unit)
        else:
            raw = [raw] if isinstance(raw, (int, float)) else raw
            values = _in_units(objectives, raw, memory_unit)
        return values[0] if len(values) == 1 else values

    return run
