"""The Python entry points: ``palm.simulate`` and ``palm.load_config``."""

from __future__ import annotations

import time

from palm.engines.analytical import run_analytical
from palm.errors import ConfigError
from palm.plan import build_plan
from palm.result import Result
from palm.strategy import SimConfig

__all__ = ["simulate", "ENGINES"]

ENGINES: tuple[str, ...] = ("analytical",)


def simulate(config: SimConfig, *, engine: str = "analytical") -> Result:
    """Simulate one iteration of ``config`` with ``engine`` and return its :class:`Result`.

    Raises :class:`~palm.errors.ConfigError` for an invalid configuration; a configuration
    that does not fit in memory is simulated all the same and reported by ``fits_memory``.
    """
    if engine not in ENGINES:
        raise ConfigError("engine", engine, f"one of {', '.join(ENGINES)}")
    start = time.perf_counter()
    plan = build_plan(config)
    result = run_analytical(plan)
    import dataclasses

    return dataclasses.replace(result, sim_wall_s=time.perf_counter() - start)
