"""The tuner: objective, pruning, samplers, storages, study API and the ``palm-tune`` CLI."""

from search.api import TuningStudy, best_config, best_trial, counts, create_study, optimize
from search.artifacts import ArtifactStore
from search.metrics import METRIC_NAMES
from search.objective import Objective, TrialFailed, hardware_cost
from search.study_file import OBJECTIVES, SAMPLERS, StudySpec, load_study

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
