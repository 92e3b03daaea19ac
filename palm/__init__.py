"""palm: performance simulator of deep-learning training and inference on tiled accelerators
and GPU clusters (after Fang et al., "PALM", 2024).

Inputs (:mod:`palm.workload`, :mod:`palm.hardware`, :mod:`palm.strategy`) -> cost model
(:mod:`palm.cost`, :mod:`palm.network`, :mod:`palm.plan`) -> engines (:mod:`palm.engines`)
-> :class:`Result`. The simulator knows nothing about the tuner.

The public names below are imported on first use (PEP 562), so ``import palm`` (and
``import palm.errors`` from a command that only reports its version or an error) does not pay
for numpy, SimPy and the engines until a simulation is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as a type checker and a reader see them
    from palm.api import ENGINES, simulate
    from palm.config import apply_overrides, config_to_dict, load_config, parse_config
    from palm.errors import ConfigError, NoProgressError, PalmError, SimulationError
    from palm.result import Result
    from palm.strategy import (
        CommunicationConfig,
        ParallelismConfig,
        PlacementConfig,
        SimConfig,
        TrainingConfig,
    )

#: public name -> the module that defines it
_HOMES = {
    "ENGINES": "palm.api",
    "simulate": "palm.api",
    "apply_overrides": "palm.config",
    "config_to_dict": "palm.config",
    "load_config": "palm.config",
    "parse_config": "palm.config",
    "ConfigError": "palm.errors",
    "NoProgressError": "palm.errors",
    "PalmError": "palm.errors",
    "SimulationError": "palm.errors",
    "Result": "palm.result",
    "CommunicationConfig": "palm.strategy",
    "ParallelismConfig": "palm.strategy",
    "PlacementConfig": "palm.strategy",
    "SimConfig": "palm.strategy",
    "TrainingConfig": "palm.strategy",
}

__all__ = [
    "ENGINES",
    "CommunicationConfig",
    "ConfigError",
    "NoProgressError",
    "PalmError",
    "ParallelismConfig",
    "PlacementConfig",
    "Result",
    "SimConfig",
    "SimulationError",
    "TrainingConfig",
    "apply_overrides",
    "config_to_dict",
    "load_config",
    "parse_config",
    "simulate",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access and keep the name here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'palm' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
