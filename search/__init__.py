"""The tuner: objective, pruning, samplers, storages, study API and the ``palm-tune`` CLI.

The names below are imported on first use (PEP 562), so that ``python -m search.cli`` and the
``palm-tune`` script reach :mod:`search.cli` (which handles a Ctrl-C while the rest loads)
before Optuna is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from search.api import TuningStudy, best_config, best_trial, counts, create_study, optimize
    from search.objective import Objective, TrialFailed, hardware_cost
    from search.study_file import OBJECTIVES, SAMPLERS, StudySpec, load_study

__all__ = [
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

_HOME = {
    **dict.fromkeys(
        ("TuningStudy", "best_config", "best_trial", "counts", "create_study", "optimize"),
        "search.api",
    ),
    **dict.fromkeys(("Objective", "TrialFailed", "hardware_cost"), "search.objective"),
    **dict.fromkeys(("OBJECTIVES", "SAMPLERS", "StudySpec", "load_study"), "search.study_file"),
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'search' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
