"""Multi-fidelity: screen the space with the analytical engine, then spend event simulations
on the most promising configurations.

The analytical engine prices the same plan in closed form (no event queue), so it ranks
configurations at a fraction of the event engine's cost (measured in docs/tuning.md). A
screening draws ``budget`` distinct configurations (every one when the space is that small,
else a seeded random sample of them), drops those that do not fit in memory (the memory
check is the same for both engines and builds no plan), ranks the rest by the analytical
value of the study's first objective (the candidates' plans sharing their routes through
:func:`palm.api.batch`, which leaves every value unchanged) and enqueues
the ``top`` best into the study (``study.enqueue_trial``): the event engine evaluates them
first, and the sampler (TPE) starts from them instead of from random draws. The screening
runs once per study; its size, wall time and the enqueued configurations are stored as the
study's user attribute ``screening``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import optuna

from palm.api import batch, evaluate, memory_check
from palm.config import parse_config
from palm.errors import ConfigError
from palm.strategy import SimConfig
from search.objective import Simulator, run_engine
from search.study_file import StudySpec
from spaces import ContinuousSpace, Infeasible, enumerate_space

__all__ = ["Screening", "screen", "SCREEN_ATTR", "analytical_value"]

SCREEN_ATTR = "screening"


@dataclass(frozen=True)
class Screening:
    """What a screening did: configurations drawn and that fit, analytical runs, wall time
    (memory checks included) and the parameters it enqueued, best first."""

    drawn: int
    fit: int
    wall_s: float
    enqueued: tuple[dict[str, Any], ...]
    engine: str = "analytical"


def analytical_value(
    spec: StudySpec, *, simulate: Simulator = run_engine
) -> Callable[[SimConfig], float | None]:
    """The study's first objective under the analytical engine, larger is better; ``None``
    when the configuration does not fit in memory. With the real engine the memory check
    and the plan share one context (:func:`palm.api.evaluate`)."""
    name = spec.objectives[0]

    def value(config: SimConfig) -> float | None:
        if simulate is run_engine:
            result = evaluate(config, engine="analytical").result
            if result is None:
                return None
        else:
            if memory_check(config).overflow_bytes > 0:
                return None
            result = simulate(config, "analytical")
        if name == "throughput":
            return result.throughput_samples_per_s
        if name == "memory":
            return -result.peak_memory_bytes
        if name == "tpot":
            return None if result.serving is None else -result.serving.tpot_s * 1e3
        from search.objective import hardware_cost

        return -hardware_cost(config)

    return value


def _random_draws(spec: StudySpec, seed: int) -> Iterator[tuple[dict[str, Any], Any]]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    while True:
        trial = study.ask()
        try:
            draft = spec.space.sample(trial, spec.context)
        except Infeasible:
            draft = None
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        yield dict(trial.params), draft


def _candidates(spec: StudySpec, budget: int, seed: int) -> list[tuple[dict[str, Any], SimConfig]]:
    """Up to ``budget`` distinct feasible draws: all of them when the space has at most
    ``budget``, else a seeded random sample. Drafts are compared before any is parsed (a
    draw costs a fraction of a millisecond, parsing a configuration several)."""
    drafts: dict[str, tuple[dict[str, Any], Any]] = {}
    try:
        for i, d in enumerate(enumerate_space(spec.space, spec.context)):
            if i > 20 * budget:
                drafts = {}
                break
            if d.draft is not None:
                drafts.setdefault(
                    json.dumps(d.draft, sort_keys=True, default=str), (d.params, d.draft)
                )
        pool = list(drafts.values())
        if pool:
            chosen = pool if len(pool) <= budget else random.Random(seed).sample(pool, budget)
            return _parsed(chosen)
    except ContinuousSpace:
        pass
    found: dict[str, tuple[dict[str, Any], Any]] = {}
    for tries, (params, draft) in enumerate(_random_draws(spec, seed)):
        if len(found) >= budget or tries >= 20 * budget:
            break
        if draft is not None:
            found.setdefault(json.dumps(draft, sort_keys=True, default=str), (params, draft))
    return _parsed(list(found.values()))


def _parsed(draws: list[tuple[dict[str, Any], Any]]) -> list[tuple[dict[str, Any], SimConfig]]:
    out = []
    for params, draft in draws:
        try:
            config = parse_config(draft)
        except ConfigError:
            continue
        out.append((params, config))
    return out


def screen(
    study: optuna.Study,
    spec: StudySpec,
    *,
    budget: int,
    top: int,
    seed: int | None = None,
    simulate: Simulator = run_engine,
) -> Screening:
    """Screen ``budget`` configurations analytically and enqueue the ``top`` best into
    ``study`` (see the module's docstring); a no-op returning the stored record when the
    study was screened before."""
    stored = study.user_attrs.get(SCREEN_ATTR)
    if stored is not None:
        return Screening(**{**stored, "enqueued": tuple(stored["enqueued"])})
    started = time.perf_counter()
    value = analytical_value(spec, simulate=simulate)
    ranked: list[tuple[float, dict[str, Any]]] = []
    candidates = _candidates(spec, budget, 0 if seed is None else seed)
    with batch():  # the candidates share most of their routes
        for params, config in candidates:
            try:
                v = value(config)
            except Exception:  # noqa: BLE001 - the event engine will record it
                continue
            if v is not None:
                ranked.append((v, params))
    ranked.sort(key=lambda vp: -vp[0])
    best = tuple(params for _, params in ranked[:top])
    for params in best:
        study.enqueue_trial(params, skip_if_exists=True)
    record = Screening(
        drawn=len(candidates), fit=len(ranked), wall_s=time.perf_counter() - started, enqueued=best
    )
    study.set_user_attr(SCREEN_ATTR, {**asdict(record), "enqueued": list(best)})
    return record
