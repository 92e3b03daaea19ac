"""The Python entry points: ``palm.simulate`` and ``palm.load_config``."""

from __future__ import annotations

import dataclasses
import math
import time

from palm.engines.analytical import run_analytical
from palm.engines.event.engine import Timeline, run_event
from palm.errors import ConfigError, SimulationError
from palm.plan import build_plan
from palm.result import Result
from palm.strategy import SimConfig

__all__ = ["simulate", "simulate_timeline", "ENGINES", "DEFAULT_ENGINE"]

ENGINES: tuple[str, ...] = ("event", "analytical")
DEFAULT_ENGINE = "event"


def simulate(config: SimConfig, *, engine: str = DEFAULT_ENGINE) -> Result:
    """Simulate one iteration of ``config`` with ``engine`` and return its :class:`Result`.

    Raises :class:`~palm.errors.ConfigError` for an invalid configuration; a configuration
    that does not fit in memory is simulated all the same and reported by ``fits_memory``.
    """
    return simulate_timeline(config, engine=engine, record=False)[0]


def simulate_timeline(
    config: SimConfig, *, engine: str = DEFAULT_ENGINE, record: bool = True
) -> tuple[Result, Timeline | None]:
    """Like :func:`simulate`, also returning the event engine's timeline (``None`` for the
    analytical engine), for traces and plots; ``record=False`` skips recording it."""
    if engine not in ENGINES:
        raise ConfigError("engine", engine, f"one of {', '.join(ENGINES)}")
    start = time.perf_counter()
    timeline: Timeline | None = None
    if engine == "event":
        link_mode = config.communication.noc_granularity == "link"
        plan = build_plan(config, with_links=link_mode or not _is_mesh(config))
        result, timeline = run_event(
            plan, granularity=config.communication.noc_granularity, record=record
        )
    else:
        result = run_analytical(build_plan(config))
    if not (math.isfinite(result.iteration_time_s) and result.iteration_time_s > 0):
        raise SimulationError(f"non-finite or zero iteration time {result.iteration_time_s!r}")
    return dataclasses.replace(result, sim_wall_s=time.perf_counter() - start), timeline


def _is_mesh(config: SimConfig) -> bool:
    return config.hardware.topology == "mesh2d"
