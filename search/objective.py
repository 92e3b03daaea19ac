"""The objective: a trial's configuration run through the full simulator (SPEC sec. 6).

1. The space turns the trial into a configuration (only valid values).
2. Memory is checked first, from the plan alone (no event simulation): the trial records
   ``trial.set_constraint("memory_overflow_bytes", peak - capacity)`` (feasible when <= 0) and
   the same as a user attribute; an overflow prunes the trial (``TrialPruned``), so the
   dashboard shows why.
3. The event-driven engine (or the study's engine) simulates it; identical configurations are
   served from a cache. The full configuration and the result fields are stored as user
   attributes.
4. A simulator error fails the trial with its message (user attribute ``error``), counted and
   never hidden.
"""

from __future__ import annotations

import json
import time
from typing import Any

import optuna

from palm.api import plan_for, simulate_plan
from palm.config import config_to_dict, parse_config
from palm.errors import ConfigError
from palm.hardware.spec import GpuClusterHardware
from palm.result import Result
from palm.strategy import SimConfig
from search.lifecycle import interruptible
from search.storage import WORKER_ATTR, worker_id
from search.study_file import StudySpec

__all__ = ["Objective", "TrialFailed", "hardware_cost", "RESULT_FIELDS"]

#: SPEC sec. 5 fields stored on every completed trial
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


def _result_attrs(result: Result) -> dict[str, Any]:
    data = result.to_dict()
    return {k: data[k] for k in RESULT_FIELDS}


class Objective:
    """Callable objective for ``optuna.Study.optimize``."""

    def __init__(self, spec: StudySpec) -> None:
        self.spec = spec
        self._cache: dict[str, Result] = {}
        self.cache_hits = 0

    def _values(self, config: SimConfig, result: Result) -> list[float]:
        out = []
        for name in self.spec.objectives:
            if name == "throughput":
                out.append(result.throughput_samples_per_s)
            elif name == "memory":
                out.append(result.peak_memory_bytes)
            else:
                out.append(hardware_cost(config))
        return out

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        trial.set_user_attr(WORKER_ATTR, worker_id())
        draft = self.spec.space.sample(trial, self.spec.context)
        try:
            config = parse_config(draft)
        except ConfigError as exc:
            trial.set_user_attr("error", str(exc))
            raise TrialFailed(str(exc)) from None
        tables = config_to_dict(config)
        trial.set_user_attr("config", tables)
        try:
            started = time.perf_counter()
            with interruptible():
                plan = plan_for(config, engine=self.spec.engine)
        except Exception as exc:  # noqa: BLE001 - recorded, never hidden
            message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            trial.set_user_attr("error", message)
            raise TrialFailed(message) from exc
        peak = max(s.memory.total_bytes for s in plan.stages)
        excess = peak - plan.memory_capacity_bytes
        trial.set_constraint("memory_overflow_bytes", excess)
        trial.set_user_attr("memory_overflow_bytes", max(0.0, excess))
        trial.set_user_attr("peak_memory_bytes", peak)
        if excess > 0:
            trial.set_user_attr("pruned", "memory overflow")
            raise optuna.TrialPruned(f"needs {excess / 2**30:.2f} GiB more than a device holds")
        key = json.dumps(tables, sort_keys=True)
        result = self._cache.get(key)
        if result is None:
            try:
                with interruptible():
                    result, _ = simulate_plan(plan, engine=self.spec.engine, started=started)
            except Exception as exc:  # noqa: BLE001 - recorded, never hidden
                message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                trial.set_user_attr("error", message)
                raise TrialFailed(message) from exc
            self._cache[key] = result
        else:
            self.cache_hits += 1
            trial.set_user_attr("cached", True)
        trial.set_user_attr("result", _result_attrs(result))
        values = self._values(config, result)
        return values[0] if len(values) == 1 else values
