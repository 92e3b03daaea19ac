"""The tuner: objective, pruning, samplers, storages, study API and the ``palm-tune`` CLI.

The names below load their modules (and Optuna) on first use (PEP 562), so that the
simulator's commands of ``palm-tune`` (``simulate``, ``validate``...) never import Optuna, and
``python -m search.cli`` and the ``palm-tune`` script reach :mod:`search.cli` (which handles a
Ctrl-C while the rest loads) before Optuna is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from search.api import TuningStudy, best_config, best_trial, counts, create_study, optimize
    from search.artifacts import ArtifactStore
    from search.metrics import METRIC_NAMES
    from search.objective import Objective, TrialFailed, hardware_cost
    from search.study_file import OBJECTIVES, SAMPLERS, StudySpec, load_study

_MODULE_OF = {
    "ArtifactStore": "search.artifacts",
    "METRIC_NAMES": "search.metrics",
    "TuningStudy": "search.api",
    "best_config": "search.api",
    "best_trial": "search.api",
    "counts": "search.api",
    "create_study": "search.api",
    "optimize": "search.api",
    "Objective": "search.objective",
    "TrialFailed": "search.objective",
    "hardware_cost": "search.objective",
    "OBJECTIVES": "search.study_file",
    "SAMPLERS": "search.study_file",
    "StudySpec": "search.study_file",
    "load_study": "search.study_file",
}

__all__ = [
    "ArtifactStore",
    "METRIC_NAMES",
    "OBJECTIVES",
    "SAMPLERS",
    "Objective",
    "StudySpec",
    "TrialFailed",
    "TuningStudy",
    "best_config",
    "best_trial",
    "counts",
    "create_study",
    "hardware_cost",
    "load_study",
    "optimize",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'search' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value
