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

Where the artifacts live (:func:`artifact_location`), first of:

1. the location given (``--artifacts``, ``search.create_study(artifacts=...)``): a directory
   (Optuna's ``FileSystemArtifactStore``; on a cluster a shared file system every worker and
   the dashboard mount) or ``s3://BUCKET`` (Optuna's ``Boto3ArtifactStore``, the ``s3``
   extra; boto3 reads the endpoint and credentials from its usual environment, e.g.
   ``AWS_ENDPOINT_URL_S3`` for an S3-compatible server);
2. the location recorded in the study (its user attribute ``palm_tune_artifacts``), which the
   first worker of a study writes: every later worker and ``palm-tune dashboard`` find it;
3. for a storage file (SQLite, journal), a folder next to it
   (:func:`search.storage.artifact_dir`); for a database server or a gRPC proxy, the absolute
   path of ``palm-tune-artifacts`` in the first worker's working directory, recorded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta, upload_artifact
from optuna.artifacts.exceptions import ArtifactNotFound
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from palm.config import parse_config
from palm.errors import ConfigError
from search.metrics import is_overflow
from search.storage import artifact_dir, is_server

__all__ = [
    "ArtifactStore",
    "attach_when_best",
    "materialize",
    "artifact_note",
    "artifact_names",
    "artifact_location",
    "record_location",
    "Stores",
    "KINDS",
    "LOCATION_ATTR",
]

#: what is attached to a best trial, in file-name order
KINDS = ("gantt.png", "links.png", "trace.json")
#: the study's user attribute that names its artifact store (a directory or s3://BUCKET)
LOCATION_ATTR = "palm_tune_artifacts"
_RECIPE = ".recipe"
_S3 = "s3://"


def _kinds() -> tuple[str, ...]:
    """What can be drawn here: the plots need matplotlib (the plot extra)."""
    return KINDS if importlib.util.find_spec("matplotlib") is not None else ("trace.json",)


def artifact_names(number: int) -> list[str]:
    """The files attached to trial ``number``."""
    return [f"trial{number}-{kind}" for kind in _kinds()]


def _normalised(location: str | Path) -> str:
    """A location as it is recorded: ``s3://BUCKET``, or an absolute directory."""
    text = str(location)
    if text.startswith(_S3):
        bucket = text[len(_S3) :].rstrip("/")
        if not bucket or "/" in bucket:
            raise ConfigError(
                "--artifacts", text, "a directory or s3://BUCKET (a bucket name, no key prefix)"
            )
        return _S3 + bucket
    if "://" in text:
        raise ConfigError("--artifacts", text, "a directory or s3://BUCKET")
    return str(Path(text).expanduser().absolute())


def artifact_location(
    study: optuna.Study | None, storage_url: str | None, given: str | Path | None = None
) -> str:
    """Where ``study``'s artifacts live: ``given``, else the location recorded in the study,
    else the default of its storage (see the module docstring)."""
    if given is not None and str(given).strip():
        return _normalised(given)
    recorded = None if study is None else study.user_attrs.get(LOCATION_ATTR)
    if isinstance(recorded, str) and recorded:
        return recorded
    if storage_url is not None and not is_server(storage_url):
        return str(artifact_dir(storage_url).absolute())
    return str(Path("palm-tune-artifacts").absolute())


def record_location(
    study: optuna.Study, location: str, *, storage_url: str | None, given: bool
) -> None:
    """Record ``location`` in ``study`` when it has none and another process needs it to find
    the store: a location given by the user, or any location of a server storage (whose
    workers and dashboard run in other directories or on other machines) or of a storage
    object."""
    if LOCATION_ATTR in study.user_attrs:
        return
    if given or storage_url is None or is_server(storage_url):
        study.set_user_attr(LOCATION_ATTR, location)


class ArtifactStore:
    """An Optuna artifact store (``open_reader``, ``write``, ``remove``) at ``location`` (a
    directory, ``s3://BUCKET`` or another Optuna artifact store), which draws a palm-tune
    artifact from its recipe the first time it is read (with its two siblings: one simulation
    draws all three)."""

    def __init__(self, location: str | Path | Any) -> None:
        self.root: Path | None = None
        if isinstance(location, (str, Path)):
            where = _normalised(location)
            if where.startswith(_S3):
                self.inner: Any = _s3_store(where[len(_S3) :])
            else:
                self.root = Path(where)
                self.inner = FileSystemArtifactStore(self.root)
            self.location = where
        else:
            self.inner, self.location = location, type(location).__name__

    def open_reader(self, artifact_id: str) -> BinaryIO:
        try:
            return self.inner.open_reader(artifact_id)  # type: ignore[no-any-return]
        except ArtifactNotFound:
            try:
                with self.inner.open_reader(artifact_id + _RECIPE) as f:
                    recipe = json.loads(f.read())
            except ArtifactNotFound:
                raise ArtifactNotFound(f"artifact {artifact_id} in {self.location}") from None
        self._draw(recipe)
        return self.inner.open_reader(artifact_id)  # type: ignore[no-any-return]

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
        self.inner.write(artifact_id, content_body)

    def remove(self, artifact_id: str) -> None:
        for name in (artifact_id + _RECIPE, artifact_id):
            with contextlib.suppress(ArtifactNotFound):
                self.inner.remove(name)

    def write_recipe(self, artifact_id: str, recipe: dict[str, Any]) -> None:
        self.write(artifact_id + _RECIPE, io.BytesIO(json.dumps(recipe).encode()))

    def _draw(self, recipe: dict[str, Any]) -> None:
        """Simulate the recipe's configuration once with the event engine and store its files
        (in a directory each renamed into place, so that a reader never sees half a file; an
        object store's put is whole already)."""
        from palm.api import simulate_timeline
        from palm.trace import write_chrome_trace

        config = parse_config(recipe["config"])
        ids: dict[str, str] = recipe["ids"]
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            out = {kind: Path(tmp) / kind for kind in ids}
            if config.training.mode == "serve":  # prefill and decode steps (palm.serving)
                _draw_serving(out, config)
            else:
                result, timeline = simulate_timeline(config, engine="event")
                assert timeline is not None
                write_chrome_trace(
                    out["trace.json"], result=result, timeline=timeline, config=config
                )
                if "gantt.png" in out:
                    from palm.plots import plot_gantt, plot_link_heatmap

                    plot_gantt(out["gantt.png"], timeline=timeline, result=result, config=config)
                    plot_link_heatmap(
                        out["links.png"], result=result, timeline=timeline, config=config
                    )
            for kind, path in out.items():
                if self.root is not None:
                    os.replace(path, self.root / ids[kind])
                else:
                    with path.open("rb") as body:
                        self.inner.write(ids[kind], body)


def _draw_serving(out: dict[str, Path], config: Any) -> None:
    """A served configuration's artifacts in ``out``: the trace and Gantt chart of its prefill
    and decode steps; ``links.png`` says that serving records no link utilisation."""
    from palm.serving.simulate import serving_run
    from palm.serving.timeline import write_serving_trace

    write_serving_trace(out["trace.json"], serving_run(config))
    if "gantt.png" in out:
        from palm.plots import _figure, _save
        from palm.serving.plot import plot_serving_gantt

        os.replace(plot_serving_gantt(out["gantt.png"].parent, config=config), out["gantt.png"])
        fig = _figure(4.0, 1.0)
        fig.text(0.5, 0.5, "serving: no link utilisation recorded", ha="center")
        _save(fig, out["links.png"])


def _s3_store(bucket: str) -> Any:
    try:
        from optuna.artifacts import Boto3ArtifactStore

        return Boto3ArtifactStore(bucket)
    except ImportError:
        raise ConfigError(
            "--artifacts", _S3 + bucket, "a directory, or boto3: pip install 'palm-tune[s3]'"
        ) from None


class _RecipeWriter:
    """An artifact store, for ``upload_artifact`` only, that keeps the uploaded body (the
    recipe) as ``ID.recipe`` and remembers the ids it was given."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self.ids: list[str] = []

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self.ids.append(artifact_id)
        self.store.write(artifact_id + _RECIPE, content_body)

    def open_reader(self, artifact_id: str) -> BinaryIO:
        raise NotImplementedError

    def remove(self, artifact_id: str) -> None:
        raise NotImplementedError


def _attach(trial: optuna.Trial, store: ArtifactStore) -> None:
    """Attach the three artifacts of the running ``trial`` as recipes (no drawing)."""
    writer = _RecipeWriter(store)
    recipe = json.dumps({"number": trial.number, "config": trial.user_attrs["config"]}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        for name in artifact_names(trial.number):
            path = Path(tmp) / name  # the name gives the artifact's file name and MIME type
            path.write_bytes(recipe)
            upload_artifact(artifact_store=writer, file_path=str(path), study_or_trial=trial)
    ids = dict(zip(_kinds(), writer.ids, strict=True))
    for artifact_id in writer.ids:  # each recipe knows its siblings, to draw all three at once
        data = {"number": trial.number, "config": trial.user_attrs["config"], "ids": ids}
        store.write_recipe(artifact_id, data)


def materialize(study: optuna.Study, store: ArtifactStore, trial: FrozenTrial) -> list[str]:
    """Draw the artifacts of ``trial`` that are still recipes; returns its artifacts' names."""
    metas = get_all_artifact_meta(trial, storage=study._storage)  # noqa: SLF001
    for meta in metas[:1]:
        # not found: attached by a worker whose store this process does not reach
        with contextlib.suppress(ArtifactNotFound):
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
    store: ArtifactStore,
    objectives: Sequence[str],
) -> Callable[[optuna.Trial], float | list[float]]:
    """``objective`` that attaches their artifacts (as recipes) to the trials that fit memory
    and beat every trial before them."""
    best: list[_BestSoFar] = []

    def run(trial: optuna.Trial) -> float | list[float]:
        out = objective(trial)
        values = [out] if isinstance(out, (int, float)) else out
        if not best:
            best.append(_BestSoFar(trial.study, objectives))
        attrs = trial.user_attrs  # a deep copy of them all: read once
        fits = attrs.get("memory_overflow_bytes", 0.0) <= 0
        if fits and "config" in attrs and best[0].beaten_by(trial.study, values):
            _attach(trial, store)
        return out

    return run


def artifact_note(study: optuna.Study, store: ArtifactStore, trial: FrozenTrial) -> str:
    """Draw ``trial``'s artifacts now; one line on them for the ``tune`` summary."""
    names = materialize(study, store, trial)
    if not names:
        return f"trial {trial.number} has none (made before palm-tune attached them to trials)"
    return f"trial {trial.number}: {', '.join(names)} in {store.location}"


class Stores:
    """Several artifact stores read as one (the dashboard of a storage whose studies keep
    their artifacts in different places): a read tries each in turn; writes go to the
    first."""

    def __init__(self, stores: Sequence[ArtifactStore]) -> None:
        self.stores = list(stores)

    def open_reader(self, artifact_id: str) -> BinaryIO:
        for store in self.stores:
            try:
                return store.open_reader(artifact_id)
            except ArtifactNotFound:
                continue
        raise ArtifactNotFound(f"artifact {artifact_id}")

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self.stores[0].write(artifact_id, content_body)

    def remove(self, artifact_id: str) -> None:
        for store in self.stores:
            store.remove(artifact_id)
