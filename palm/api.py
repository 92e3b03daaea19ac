"""The Python entry points: ``palm.simulate`` and ``palm.load_config``; and what a tuner
calls, :func:`evaluate` (the memory check, then the result, from one plan context) and
:func:`batch` (evaluations that share their routes)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from palm.config import load_config
from palm.engines.analytical import run_analytical
from palm.engines.event.engine import Timeline, run_event
from palm.engines.gemm import run_gemm
from palm.errors import ConfigError, SimulationError
from palm.hardware.spec import GpuClusterHardware
from palm.network.memo import shared_geometry
from palm.plan import Plan, build_plan
from palm.plan.context import PlanContext, plan_context
from palm.plan.memory import recompute_mode, stage_memory, stage_params
from palm.result import Result
from palm.strategy import SimConfig

__all__ = [
    "simulate",
    "simulate_timeline",
    "plan_for",
    "simulate_plan",
    "memory_check",
    "analytical_if_fits",
    "analytical_with_memory",
    "MemoryCheck",
    "Evaluation",
    "evaluate",
    "batch",
    "hardware_cost",
    "ENGINES",
    "DEFAULT_ENGINE",
]

ENGINES: tuple[str, ...] = ("event", "analytical")
DEFAULT_ENGINE = "event"


def simulate(
    config: SimConfig | str | Path,
    *,
    engine: str = DEFAULT_ENGINE,
    overrides: Iterable[str] = (),
) -> Result:
    """Simulate one iteration of ``config`` with ``engine`` and return its :class:`Result`.

    ``config`` is a :class:`~palm.strategy.SimConfig` or the path of a TOML configuration
    (``palm.simulate("examples/wafer-t18b.toml")``, read by :func:`palm.config.load_config`
    with ``overrides``, ``section.field=value`` each, as ``palm-tune simulate --set``).
    Raises :class:`~palm.errors.ConfigError` for an invalid configuration; a configuration
    that does not fit in memory is simulated all the same and reported by ``fits_memory``.
    """
    if isinstance(config, (str, Path)):
        config = load_config(config, overrides=overrides)
    elif overrides:
        raise ConfigError("overrides", list(overrides), "overrides with a path, not a SimConfig")
    elif not isinstance(config, SimConfig):
        raise ConfigError(
            "config", type(config).__name__, "a palm.SimConfig or the path of a TOML file"
        )
    return simulate_timeline(config, engine=engine, record=False)[0]


def simulate_timeline(
    config: SimConfig, *, engine: str = DEFAULT_ENGINE, record: bool = True
) -> tuple[Result, Timeline | None]:
    """Like :func:`simulate`, also returning the event engine's timeline (``None`` for the
    analytical engine), for traces and plots; ``record=False`` skips recording it."""
    start = time.perf_counter()
    if config.training.mode == "serve":  # LLM serving: a closed form (palm.serving)
        if engine not in ENGINES:
            raise ConfigError("engine", engine, f"one of {', '.join(ENGINES)}")
        from palm.serving.simulate import simulate_serving

        result = simulate_serving(config, engine=engine)
        return dataclasses.replace(result, sim_wall_s=time.perf_counter() - start), None
    if config.model.family == "gemm":  # one product: a closed form, the same for both engines
        if engine not in ENGINES:
            raise ConfigError("engine", engine, f"one of {', '.join(ENGINES)}")
        result = run_gemm(config)
        return dataclasses.replace(result, sim_wall_s=time.perf_counter() - start), None
    return simulate_plan(
        plan_for(config, engine=engine), engine=engine, record=record, started=start
    )


def plan_for(config: SimConfig, *, engine: str = DEFAULT_ENGINE) -> Plan:
    """The plan of ``config`` as ``engine`` needs it (the event engine keeps link loads where
    its resources come from them)."""
    if engine not in ENGINES:
        raise ConfigError("engine", engine, f"one of {', '.join(ENGINES)}")
    if config.model.family == "gemm" or config.training.mode == "serve":
        what = "gemm" if config.model.family == "gemm" else "serve"
        raise ConfigError(
            "model.family" if what == "gemm" else "training.mode",
            what,
            f"a model with a pipeline plan ({what} runs through simulate)",
        )
    return build_plan(config, with_links=_with_links(config, engine))


def _with_links(config: SimConfig, engine: str) -> bool:
    """Whether ``engine``'s plan of ``config`` keeps per-link loads: the event engine's, where
    its resources come from them (link mode, or a GPU cluster)."""
    if engine != "event":
        return False
    return config.communication.noc_granularity == "link" or not _is_mesh(config)


@dataclasses.dataclass(frozen=True)
class MemoryCheck:
    """Peak device memory of a plan (its fullest stage) against the device's capacity."""

    peak_bytes: float
    capacity_bytes: float

    @property
    def overflow_bytes(self) -> float:
        """``peak - capacity``: the plan fits when this is <= 0."""
        return self.peak_bytes - self.capacity_bytes


def memory_check(config: SimConfig) -> MemoryCheck:
    """The memory of every stage of ``config`` exactly as :func:`plan_for` prices it
    (:mod:`palm.plan.memory`: parameters, optimizer states, stashed activations,
    ``recompute = "auto"``), without pricing the products, rings and flows of the plan (the
    larger share of building it), so a caller can reject a plan that does not fit first.
    A served configuration's check is its serving memory against ``memory_fraction`` of the
    device (:mod:`palm.serving.memory`)."""
    if config.training.mode == "serve":
        from palm.serving.memory import stage_bytes
        from palm.serving.simulate import serving_run

        run = serving_run(config)
        peak = stage_bytes(run.memory, serving=config.serving, sequences=run.replica_sequences)
        return MemoryCheck(peak_bytes=peak, capacity_bytes=run.usable_bytes)
    return _memory_check(_context(config))


def _context(config: SimConfig) -> PlanContext:
    if config.model.family == "gemm":
        raise ConfigError("model.family", "gemm", "a model with a pipeline plan")
    return plan_context(config, with_links=False)


def _memory_check(ctx: PlanContext) -> MemoryCheck:
    config = ctx.config
    params = stage_params(ctx)
    mode = recompute_mode(ctx, params)
    peak = max(
        stage_memory(ctx, s, mode, params=params[s])[0].total_bytes
        for s in range(config.parallelism.pp)
    )
    return MemoryCheck(peak_bytes=peak, capacity_bytes=config.hardware.device_memory_bytes)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What a tuner asks of one configuration: its :class:`MemoryCheck` and, when it fits,
    the engine's :class:`~palm.result.Result` (``None`` when it does not fit: not simulated)."""

    memory: MemoryCheck
    result: Result | None

    @property
    def fits(self) -> bool:
        return self.memory.overflow_bytes <= 0


def evaluate(config: SimConfig, *, engine: str = DEFAULT_ENGINE) -> Evaluation:
    """:func:`memory_check` of ``config`` and, when it fits, ``engine``'s result, from one
    plan context: the configuration is validated once, its workload built once, and the memory
    check reads the context the plan is then priced on (the check's stage memories do not
    depend on the link loads the event engine keeps). The same values as
    :func:`memory_check` and :func:`simulate`, bit for bit. Raises
    :class:`~palm.errors.ConfigError` for an invalid configuration or engine."""
    if engine not in ENGINES:
        raise ConfigError("engine", engine, f"one of {', '.join(ENGINES)}")
    start = time.perf_counter()
    if config.training.mode == "serve":  # LLM serving prices itself (palm.serving)
        memory = memory_check(config)
        fits = memory.overflow_bytes <= 0
        return Evaluation(memory, simulate(config, engine=engine) if fits else None)
    if config.model.family == "gemm":  # one product: its result holds its memory
        result = simulate_timeline(config, engine=engine, record=False)[0]
        peak, capacity = result.peak_memory_bytes, result.memory_capacity_bytes
        memory = MemoryCheck(peak_bytes=peak, capacity_bytes=capacity)
        return Evaluation(memory, result if memory.overflow_bytes <= 0 else None)
    with_links = _with_links(config, engine)
    ctx = plan_context(config, with_links=with_links)
    memory = _memory_check(ctx)
    if memory.overflow_bytes > 0:
        return Evaluation(memory, None)
    plan = build_plan(config, with_links=with_links, context=ctx)
    return Evaluation(memory, simulate_plan(plan, engine=engine, started=start)[0])


@contextmanager
def batch(
    *, max_entries: int = 100_000, store: dict[Hashable, object] | None = None
) -> Iterator[None]:
    """Evaluations inside share the routes and geometry their plans have in common (a tuner's
    candidates on one machine), which leaves every value unchanged
    (:func:`palm.network.memo.shared_geometry`, with its ``max_entries`` and ``store``: a
    dictionary kept by the caller to share them across blocks)."""
    with shared_geometry(max_entries=max_entries, store=store):
        yield


def analytical_if_fits(config: SimConfig) -> Result | None:
    """The analytical engine's result of ``config``, or ``None`` when it does not fit in
    memory (:func:`memory_check`): the check and the plan share one
    :func:`~palm.plan.context.plan_context` (for a screening of many configurations)."""
    return analytical_with_memory(config)[1]


def analytical_with_memory(config: SimConfig) -> tuple[MemoryCheck, Result | None]:
    """:func:`memory_check` of ``config`` and, when it fits, the analytical engine's result
    (else ``None``), sharing one plan context as :func:`analytical_if_fits` does."""
    evaluation = evaluate(config, engine="analytical")
    return evaluation.memory, evaluation.result


def simulate_plan(
    plan: Plan,
    *,
    engine: str = DEFAULT_ENGINE,
    record: bool = False,
    started: float | None = None,
) -> tuple[Result, Timeline | None]:
    """Run ``engine`` on a plan from :func:`plan_for` (so that a caller that also needs the
    plan, e.g. for a memory check, builds it once). ``sim_wall_s`` counts from ``started``
    (default: now)."""
    start = time.perf_counter() if started is None else started
    timeline: Timeline | None = None
    if engine == "event":
        result, timeline = run_event(plan, record=record)
    else:
        result = run_analytical(plan)
    if not (math.isfinite(result.iteration_time_s) and result.iteration_time_s > 0):
        raise SimulationError(f"non-finite or zero iteration time {result.iteration_time_s!r}")
    return dataclasses.replace(result, sim_wall_s=time.perf_counter() - start), timeline


def hardware_cost(config: SimConfig) -> float:
    """A relative cost proxy for co-design studies: on a GPU cluster the number of GPUs; on a
    mesh, per core its bf16 TFLOP/s plus a quarter of its SRAM MiB (compute and SRAM area),
    plus the DRAM bandwidth in units of 100 GB/s and the link bandwidth of every tile in units
    of 100 GB/s. Only differences between designs are meant."""
    hw = config.hardware
    if isinstance(hw, GpuClusterHardware):
        return float(config.parallelism.devices)
    tiles = hw.tiles[0] * hw.tiles[1]
    per_core = hw.core_peak_tflops.bf16 + hw.sram_per_core_mib / 4
    links = tiles * (hw.inter_tile_link_gbps + hw.intra_tile_link_gbps) / 100
    return hw.device_count * per_core + hw.dram_bandwidth_gbps / 100 + links


def _is_mesh(config: SimConfig) -> bool:
    return config.hardware.topology == "mesh2d"
