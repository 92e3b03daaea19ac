"""The objective: a trial's configuration run through the full simulator (docs/tuning.md).

In order, each step cheaper than the next, so that a trial stops as early as it can:

1. The space turns the trial into a configuration. A draw whose choices contradict each other
   (:class:`spaces.Infeasible`) records the constraint ``invalid_choices`` (> 0: infeasible,
   in the same units as the memory constraint, see :data:`INVALID_PENALTY`) and is pruned;
   no plan is built.
2. The configuration's key (:func:`search.dedup.config_key`) is looked up in the study's
   storage: a configuration another trial (of any worker, of any earlier run) evaluated or is
   evaluating is pruned as a duplicate (user attribute ``duplicate_of``, the first trial's
   constraints copied), with no simulation, and is not counted as a new configuration. The
   sampler sees a pruned trial there, which steers it to configurations it has not tried.
3. Memory, then the plan, from one plan context (:func:`palm.api.evaluate`: the memory check
   reads the stage memories before any product, ring or flow is priced):
   ``trial.set_constraint("memory_overflow_bytes", peak - capacity)`` (feasible when <= 0);
   an overflow prunes the trial, with user attributes ``memory_overflow_bytes``,
   ``peak_memory_bytes`` and ``pruned``, so the dashboard shows why.
4. When it fits, the plan and the event-driven engine (or the study's engine). The full
   configuration and the result fields (:data:`RESULT_FIELDS`, the memory's among them) are
   stored as user attributes ``config`` and ``result``. Each user attribute is a storage write
   (a commit on SQLite), so a trial writes each fact once.

A trial validates its configuration once, builds its workload at most once (the study's
space built it already for the same model) and one plan context
(tests/search/test_one_context.py counts them).
5. A simulator error fails the trial with its message (user attribute ``error``), counted and
   never hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from palm.api import (
    Evaluation,
    evaluate,
    hardware_cost,
    memory_check,
    plan_for,
    simulate,
    simulate_plan,
)
from palm.config import config_to_dict, parse_config
from palm.errors import ConfigError
from palm.result import Result
from palm.strategy import SimConfig
from search.dedup import DUPLICATE_ATTR, INVALID_CONSTRAINT, KEY_ATTR, SeenConfigs, config_key
from search.lifecycle import interruptible
from search.metrics import LATENCY_VALUES_ATTR
from search.storage import WORKER_ATTR, worker_id
from search.study_file import StudySpec
from spaces import Infeasible

__all__ = [
    "Objective",
    "TrialFailed",
    "hardware_cost",
    "RESULT_FIELDS",
    "INVALID_PENALTY",
    "Simulator",
    "run_engine",
    "over_latency_limits",
    "over_limits",
    "LATENCY_CONSTRAINTS",
]

#: constraint value of one contradictory choice: 1 PiB, more than any memory overflow, so
#: that samplers that sum constraint values (TPE) rank invalid draws below every overflow
INVALID_PENALTY = float(2**50)

#: how a trial's configuration is simulated: (config, engine) -> Result
Simulator = Callable[[SimConfig, str], Result]

#: the result's JSON fields (palm/result.py) stored on every completed trial
RESULT_FIELDS = (
    "throughput_samples_per_s",
    "iteration_time_s",
    "model_tflops_per_device",
    "hardware_tflops_per_device",
    "mfu",
    "bubble_fraction",
    "peak_memory_bytes",
    "memory_capacity_bytes",
    "fits_memory",
    "memory_overflow_bytes",
    "engine",
    "events_simulated",
    "sim_wall_s",
)


class TrialFailed(Exception):
    """The simulator could not evaluate a proposal; the trial ends FAIL with this message."""


def _result_attrs(result: Result) -> dict[str, Any]:
    """``result``'s :data:`RESULT_FIELDS` (scalars), read off the dataclass: ``to_dict``
    first copies every stage, link and operator (about 20 ms a trial on the quickstart)."""
    if isinstance(result, Result):
        return {k: getattr(result, k) for k in RESULT_FIELDS}
    data = result.to_dict()  # a stand-in (benchmarks replay stored values through it)
    return {k: data[k] for k in RESULT_FIELDS}


def run_engine(config: SimConfig, engine: str) -> Result:
    """Build ``config``'s plan and run ``engine`` on it (the default :data:`Simulator`)."""
    started = time.perf_counter()
    if config.training.mode == "serve":  # a closed form, no plan (palm.serving)
        return simulate(config, engine=engine)
    plan = plan_for(config, engine=engine)
    result, _ = simulate_plan(plan, engine=engine, started=started)
    return result


def _failed(trial: optuna.Trial, exc: Exception) -> TrialFailed:
    message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    trial.set_user_attr("error", message)
    return TrialFailed(message)


#: the constraints a served plan's latency limits record (:meth:`palm.serving.spec
#: .ServingConfig.limit_excess`)
LATENCY_CONSTRAINTS = ("tpot_over_limit_s", "ttft_over_limit_s")


def over_latency_limits(config: SimConfig, result: Result) -> bool:
    """Whether a served ``result`` is over a latency limit of ``config`` (never for training)."""
    if config.training.mode != "serve" or result.serving is None:
        return False
    s = result.serving
    excess = config.serving.limit_excess(tpot_s=s.tpot_s, ttft_s=s.ttft_s)
    return any(v > 0 for v in excess.values())


def over_limits(trial: FrozenTrial) -> bool:
    """A finished trial whose served plan was over a latency limit (its constraints
    ``tpot_over_limit_s`` / ``ttft_over_limit_s``, :func:`_latency_limits`)."""
    return any(trial.constraints.get(name, 0.0) > 0 for name in LATENCY_CONSTRAINTS)


def _latency_limits(
    trial: optuna.Trial, config: SimConfig, result: Result, values: list[float]
) -> None:
    """A served configuration's latency limits (``serving.tpot_limit_s``, ``ttft_limit_s``)
    as constraints every sampler sees; a trial over one is pruned, as a memory overflow is,
    with its objective ``values`` kept (:data:`search.metrics.LATENCY_VALUES_ATTR`) for the
    samplers that read COMPLETE trials only (:func:`search.metrics.report_overflow`)."""
    if config.training.mode != "serve" or result.serving is None:
        return
    excess = config.serving.limit_excess(tpot_s=result.serving.tpot_s, ttft_s=result.serving.ttft_s)
    for name, value in excess.items():
        trial.set_constraint(name, value)
    over = [name for name, value in excess.items() if value > 0]
    if over:
        trial.set_user_attr(LATENCY_VALUES_ATTR, values)
        trial.set_user_attr("pruned", f"over its latency limit: {', '.join(over)}")
        raise optuna.TrialPruned(f"over its latency limit: {', '.join(over)}")


class Objective:
    """Callable objective for ``optuna.Study.optimize``; ``simulate`` replaces the engine
    (benchmarks replay stored values through it). ``simulations`` counts engine runs;
    ``seen`` holds the configurations of the study's finished trials, as of the last look-up."""

    def __init__(self, spec: StudySpec, *, simulate: Simulator = run_engine) -> None:
        self.spec = spec
        self.simulate = simulate
        self.simulations = 0
        self.seen = SeenConfigs()

    def _evaluate(self, config: SimConfig) -> Evaluation:
        """The memory check and, when it fits, the result: with :func:`run_engine`,
        :func:`palm.api.evaluate` (one plan context); with a stand-in (benchmarks replay
        stored values), :func:`palm.api.memory_check` and then the stand-in. Counts the
        simulations it runs."""
        engine = self.spec.engine
        if self.simulate is run_engine:
            evaluation = evaluate(config, engine=engine)
            self.simulations += int(evaluation.result is not None)
            return evaluation
        memory = memory_check(config)
        if memory.overflow_bytes > 0:
            return Evaluation(memory, None)
        self.simulations += 1
        return Evaluation(memory, self.simulate(config, engine))

    def _values(self, config: SimConfig, result: Result) -> list[float]:
        out = []
        for name in self.spec.objectives:
            if name == "throughput":
                out.append(result.throughput_samples_per_s)
            elif name == "memory":
                out.append(result.peak_memory_bytes)
            elif name == "tpot":  # ms; a served base (search.study_file)
                assert result.serving is not None
                out.append(result.serving.tpot_s * 1e3)
            else:
                out.append(hardware_cost(config))
        return out

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        trial.set_user_attr(WORKER_ATTR, worker_id())
        try:
            draft = self.spec.space.sample(trial, self.spec.context)
        except Infeasible as exc:
            trial.set_constraint(INVALID_CONSTRAINT, INVALID_PENALTY)
            trial.set_user_attr("pruned", f"invalid choices: {exc}")
            raise optuna.TrialPruned(str(exc)) from None
        try:
            config = parse_config(draft)
        except ConfigError as exc:
            trial.set_user_attr("error", str(exc))
            raise TrialFailed(str(exc)) from None
        tables = config_to_dict(config)
        key = config_key(tables)
        trial.set_user_attr(KEY_ATTR, key)
        first = self.seen.lookup(trial.study, key, number=trial.number)
        if first is not None:
            for name, value in first.constraints.items():
                trial.set_constraint(name, value)
            trial.set_user_attr(DUPLICATE_ATTR, first.number)
            raise optuna.TrialPruned(f"the configuration of trial {first.number}")
        trial.set_user_attr("config", tables)
        try:
            with interruptible():
                evaluation = self._evaluate(config)
        except Exception as exc:  # noqa: BLE001 - recorded, never hidden
            raise _failed(trial, exc) from exc
        memory, result = evaluation.memory, evaluation.result
        excess = memory.overflow_bytes
        trial.set_constraint("memory_overflow_bytes", excess)
        if result is None:  # a trial that fits has both in its ``result``: two writes fewer
            trial.set_user_attr("memory_overflow_bytes", excess)
            trial.set_user_attr("peak_memory_bytes", memory.peak_bytes)
            trial.set_user_attr("pruned", "memory overflow")
            raise optuna.TrialPruned(f"needs {excess / 2**30:.2f} GiB more than a device holds")
        trial.set_user_attr("result", _result_attrs(result))
        values = self._values(config, result)
        _latency_limits(trial, config, result, values)
        return values[0] if len(values) == 1 else values
