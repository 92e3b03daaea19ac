"""The best trial's Chrome trace, Gantt chart and link heat map, attached to that trial as Optuna
artifacts (``optuna.artifacts.upload_artifact(study_or_trial=trial)``), so that its page in
optuna-dashboard lists them. File names carry the trial number (``trial12-gantt.png``).

Optuna's storages refuse to change a finished trial (``UpdateFinishedTrialError``), so the
artifacts are attached while the trial runs, to every trial that is the best so far when it
finishes; the study's best trial is the last of them, and a resumed study attaches nothing
twice. Drawing them costs about three trials' time (an event simulation with its timeline and
two plots) and a study has several such trials (10 in 40 quickstart trials;
``benchmarks/artifact_cost.py``), so a trial only
leaves a *recipe* in the store (``ID.recipe``: its number and configuration), and
:class:`ArtifactStore` draws the files the first time one of them is read (``palm-tune
dashboard`` serves that store). :func:`materialize` draws them now: ``tune`` and
:func:`search.optimize` do so for the study's best trial at the end of a run.

The store is a folder next to the storage file (:func:`search.storage.artifact_dir`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta, upload_artifact
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from palm.config import parse_config
from search.metrics import is_overflow
from search.storage import artifact_dir

__all__ = [
    "ArtifactStore",
    "attach_when_best",
    "materialize",
    "artifact_note",
    "artifact_names",
    "KINDS",
]

#: what is attached to a best trial, in file-name order
KINDS = ("gantt.png", "links.png", "trace.json")
_RECIPE = ".recipe"


def _kinds() -> tuple[str, ...]:
    """What can be drawn here: the plots need matplotlib (the plot extra)."""
    return KINDS if importlib.util.find_spec("matplotlib") is not None else ("trace.json",)


def artifact_names(number: int) -> list[str]:
    """The files attached to trial ``number``."""
    return [f"trial{number}-{kind}" for kind in _kinds()]


class ArtifactStore(FileSystemArtifactStore):
    """Optuna's file-system artifact store, which draws a palm-tune artifact from its recipe
    the first time it is read (with its two siblings: one simulation draws all three)."""

    def __init__(self, base_path: str | Path) -> None:
        super().__init__(base_path)
        self.root = Path(base_path)

    def open_reader(self, artifact_id: str) -> BinaryIO:
        recipe = self.root / (artifact_id + _RECIPE)
        if not (self.root / artifact_id).exists() and recipe.exists():
            _draw(self.root, json.loads(recipe.read_text(encoding="utf-8")))
        return super().open_reader(artifact_id)

    def remove(self, artifact_id: str) -> None:
        (self.root / (artifact_id + _RECIPE)).unlink(missing_ok=True)
        if (self.root / artifact_id).exists():
            super().remove(artifact_id)


class _RecipeWriter:
    """An artifact store, for ``upload_artifact`` only, that keeps the uploaded body (the
    recipe) as ``ID.recipe`` and remembers the ids it was given."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ids: list[str] = []

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self.ids.append(artifact_id)
        (self.root / (artifact_id + _RECIPE)).write_bytes(content_body.read())

    def open_reader(self, artifact_id: str) -> BinaryIO:
        raise NotImplementedError

    def remove(self, artifact_id: str) -> None:
        raise NotImplementedError


def _attach(trial: optuna.Trial, store_dir: Path) -> None:
    """Attach the three artifacts of the running ``trial`` as recipes (no drawing)."""
    store_dir.mkdir(parents=True, exist_ok=True)
    writer = _RecipeWriter(store_dir)
    recipe = json.dumps({"number": trial.number, "config": trial.user_attrs["config"]}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        for name in artifact_names(trial.number):
            path = Path(tmp) / name  # the name gives the artifact's file name and MIME type
            path.write_bytes(recipe)
            upload_artifact(artifact_store=writer, file_path=str(path), study_or_trial=trial)
    ids = dict(zip(_kinds(), writer.ids, strict=True))
    for artifact_id in writer.ids:  # each recipe knows its siblings, to draw all three at once
        data = {"number": trial.number, "config": trial.user_attrs["config"], "ids": ids}
        (store_dir / (artifact_id + _RECIPE)).write_text(json.dumps(data), encoding="utf-8")


def _draw(root: Path, recipe: dict[str, Any]) -> None:
    """Simulate the recipe's configuration once with the event engine and write its files
    (each renamed into place, so a reader never sees half a file)."""
    from palm.api import simulate_timeline
    from palm.trace import write_chrome_trace

    config = parse_config(recipe["config"])
    ids: dict[str, str] = recipe["ids"]
    if config.training.mode == "serve":  # prefill and decode steps (palm.serving)
        _draw_serving(root, config, ids)
        return
    result, timeline = simulate_timeline(config, engine="event")
    assert timeline is not None
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        out = {kind: Path(tmp) / kind for kind in ids}
        write_chrome_trace(out["trace.json"], result=result, timeline=timeline, config=config)
        if "gantt.png" in ids:
            from palm.plots import plot_gantt, plot_link_heatmap

            plot_gantt(out["gantt.png"], timeline=timeline, result=result, config=config)
            plot_link_heatmap(out["links.png"], result=result, timeline=timeline, config=config)
        for kind, path in out.items():
            os.replace(path, root / ids[kind])


def _draw_serving(root: Path, config: Any, ids: dict[str, str]) -> None:
    """A served configuration's artifacts: the trace and Gantt chart of its prefill and decode
    steps; ``links.png`` says that serving records no link utilisation."""
    from palm.serving.simulate import serving_run
    from palm.serving.timeline import write_serving_trace

    with tempfile.TemporaryDirectory(dir=root) as tmp:
        out = {kind: Path(tmp) / kind for kind in ids}
        write_serving_trace(out["trace.json"], serving_run(config))
        if "gantt.png" in ids:
            from palm.plots import _figure, _save
            from palm.serving.plot import plot_serving_gantt

            os.replace(plot_serving_gantt(Path(tmp), config=config), out["gantt.png"])
            fig = _figure(4.0, 1.0)
            fig.text(0.5, 0.5, "serving: no link utilisation recorded", ha="center")
            _save(fig, out["links.png"])
        for kind, path in out.items():
            os.replace(path, root / ids[kind])


def materialize(study: optuna.Study, storage_url: str, trial: FrozenTrial) -> list[str]:
    """Draw the artifacts of ``trial`` that are still recipes; returns its artifacts' names."""
    store = ArtifactStore(artifact_dir(storage_url))
    metas = get_all_artifact_meta(trial, storage=study._storage)  # noqa: SLF001
    for meta in metas[:1]:
        if store.root.exists():
            store.open_reader(meta.artifact_id).close()
    return sorted(m.filename for m in metas)


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
    """``objective`` that attaches their artifacts (as recipes) to the trials that fit memory
    and beat every trial before them."""
    best: list[_BestSoFar] = []
    store_dir = artifact_dir(storage_url)

    def run(trial: optuna.Trial) -> float | list[float]:
        out = objective(trial)
        values = [out] if isinstance(out, (int, float)) else out
        if not best:
            best.append(_BestSoFar(trial.study, objectives))
        attrs = trial.user_attrs  # a deep copy of them all: read once
        fits = attrs.get("memory_overflow_bytes", 0.0) <= 0
        if fits and "config" in attrs and best[0].beaten_by(trial.study, values):
            _attach(trial, store_dir)
        return out

    return run


def artifact_note(study: optuna.Study, storage_url: str, trial: FrozenTrial) -> str:
    """Draw ``trial``'s artifacts now; one line on them for the ``tune`` summary."""
    names = materialize(study, storage_url, trial)
    if not names:
        return f"trial {trial.number} has none (made before palm-tune attached them to trials)"
    return f"trial {trial.number}: {', '.join(names)} in {artifact_dir(storage_url)}"
