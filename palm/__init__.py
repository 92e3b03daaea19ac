"""palm: performance simulator of deep-learning training and inference on tiled accelerators
and GPU clusters (after Fang et al., "PALM", 2024).

Inputs (:mod:`palm.workload`, :mod:`palm.hardware`, :mod:`palm.strategy`) -> cost model
(:mod:`palm.cost`, :mod:`palm.network`, :mod:`palm.plan`) -> engines (:mod:`palm.engines`)
-> :class:`Result`. The simulator knows nothing about the tuner.
"""

from palm.api import ENGINES, simulate
from palm.config import apply_overrides, config_to_dict, load_config, parse_config
from palm.errors import ConfigError, PalmError, SimulationError
from palm.result import Result
from palm.strategy import (
    CommunicationConfig,
    ParallelismConfig,
    PlacementConfig,
    SimConfig,
    TrainingConfig,
)

__all__ = [
    "ENGINES",
    "CommunicationConfig",
    "ConfigError",
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
