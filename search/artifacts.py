"""The best trial's Chrome trace, Gantt chart and link heat map, attached to that trial as Optuna
artifacts (``optuna.artifacts.upload_artifact(study_or_trial=trial)``), so that its page in
optuna-dashboard lists them. File names carry the trial number (``trial12-gantt.png``).

Optuna's storages refuse to change a finished trial (``UpdateFinishedTrialError``), so the
files are attached while the trial runs, to every trial that is the best so far when it
finishes (a handful per study: each new best costs one more event simulation and two plots).
The study's best trial is the last of them; a resumed study attaches nothing twice.

The artifact store is a folder next to the storage file (:func:`search.storage.artifact_dir`),
the one ``palm-tune dashboard`` serves.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta, upload_artifact
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from palm.config import parse_config
from palm.errors import ConfigError
from search.metrics import is_overflow
from search.storage import artifact_dir

__all__ = ["attach_when_best", "upload_trial_artifacts", "artifact_note", "artifact_names"]


def artifact_names(number: int, *, plots: bool = True) -> list[str]:
    """The files attached to trial ``number``: trace, and (with matplotlib) Gantt and heat map."""
    names = [f"trial{number}-trace.json"]
    return names + ([f"trial{number}-gantt.png", f"trial{number}-links.png"] if plots else [])


def _write(out: Path, number: int, tables: dict[str, Any]) -> list[Path]:
    """Simulate the trial's configuration once with the event engine and write its files."""
    from palm.api import simulate_timeline
    from palm.trace import write_chrome_trace

    config = parse_config(tables)
    result, timeline = simulate_timeline(config, engine="event")
    assert timeline is not None
    trace, gantt, links = (out / n for n in artifact_names(number))
    write_chrome_trace(trace, result=result, timeline=timeline, config=config)
    try:
        from palm.plots import plot_gantt, plot_link_heatmap

        plot_gantt(gantt, timeline=timeline, result=result, config=config)
        plot_link_heatmap(links, result=result, timeline=timeline, config=config)
    except ConfigError:
        return [trace]  # no matplotlib: the trace alone
    return [trace, gantt, links]


def _primary(objectives: Sequence[str]) -> int:
    """The objective that ranks trials for :func:`search.api.best_trial`: throughput when
    the study has it, else the first."""
    return list(objectives).index("throughput") if "throughput" in objectives else 0


class _BestSoFar:
    """The primary value of the best feasible trial so far: checked locally first, and in the
    storage (other workers' trials) only when a trial beats this process's best."""

    def __init__(self, study: optuna.Study, objectives: Sequence[str]) -> None:
        self.i = _primary(objectives)
        self.sign = 1.0 if study.directions[self.i] == StudyDirection.MAXIMIZE else -1.0
        self.value = self._stored(study)

    def _stored(self, study: optuna.Study) -> float:
        values = [
            self.sign * t.values[self.i]
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if not is_overflow(t)
        ]
        return max(values, default=-math.inf)

    def beaten_by(self, study: optuna.Study, values: Sequence[float]) -> bool:
        v = self.sign * values[self.i]
        if v <= self.value:
            return False
        self.value = max(v, self._stored(study))
        return v >= self.value


def attach_when_best(
    objective: Callable[[optuna.Trial], float | list[float]],
    *,
    storage_url: str,
    objectives: Sequence[str],
) -> Callable[[optuna.Trial], float | list[float]]:
    """``objective`` that, when a trial fits memory and beats every trial so far, attaches its
    trace and plots to it while it runs (Optuna's storages refuse attributes, and so artifacts,
    on a finished trial). The study's best trial therefore carries its own; a resumed study
    attaches nothing twice."""
    best: list[_BestSoFar] = []

    def run(trial: optuna.Trial) -> float | list[float]:
        out = objective(trial)
        values = [out] if isinstance(out, (int, float)) else out
        if not best:
            best.append(_BestSoFar(trial.study, objectives))
        fits = trial.user_attrs.get("memory_overflow_bytes", 0.0) <= 0
        if fits and "config" in trial.user_attrs and best[0].beaten_by(trial.study, values):
            upload_trial_artifacts(trial, storage_url)
        return out

    return run


def upload_trial_artifacts(trial: optuna.Trial, storage_url: str) -> list[str]:
    """Attach the running ``trial``'s trace and plots to it; returns the file names."""
    store_dir = artifact_dir(storage_url)
    store_dir.mkdir(parents=True, exist_ok=True)
    store = FileSystemArtifactStore(str(store_dir))
    with tempfile.TemporaryDirectory() as tmp:
        files = _write(Path(tmp), trial.number, trial.user_attrs["config"])
        for f in files:
            upload_artifact(artifact_store=store, file_path=str(f), study_or_trial=trial)
    return [f.name for f in files]


def artifact_note(study: optuna.Study, storage_url: str, trial: FrozenTrial) -> str:
    """One line on the artifacts of ``trial`` for the ``tune`` summary."""
    storage = study._storage  # noqa: SLF001 - get_all_artifact_meta needs it for a FrozenTrial
    names = [m.filename for m in get_all_artifact_meta(trial, storage=storage)]
    if not names:
        return f"trial {trial.number} has none (made before palm-tune attached them to trials)"
    return f"trial {trial.number}: {', '.join(sorted(names))} in {artifact_dir(storage_url)}"
