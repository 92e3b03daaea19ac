"""The Python study API (docs/tuning.md, "From Python").

    >>> import search
    >>> study = search.create_study("studies/quickstart.toml", storage="sqlite:///t.db")
    >>> search.optimize(study, n_trials=10)
    >>> study.best_trial.number, study.trials_dataframe().shape   # an optuna.Study
    >>> config = search.best_config(study)  # a palm.SimConfig: palm.simulate(config) again

:func:`create_study` returns a :class:`TuningStudy`, an ``optuna.Study`` (everything Optuna's
study does: ``best_trial``, ``trials_dataframe()``, ``optimize(func)``...) that also carries
the parsed study file (``.spec``) and where its artifacts live (``.artifacts``). Loading a
study whose directions or study file differ from the stored one fails with a clear message.
Logging is left as the caller configured it (``optuna.logging.set_verbosity``); workers
started by :func:`optimize` take the caller's verbosity.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from palm.config import parse_config
from palm.errors import ConfigError
from palm.strategy import SimConfig
from search.artifacts import ArtifactStore, artifact_location, attach_when_best, record_location
from search.dedup import NewConfigBudget, Unrepeating
from search.failures import WorkersFailed
from search.guided import GuidedSampler
from search.lifecycle import guarded, stop_if_signalled, supervise, trial_signals, worker_main
from search.metrics import is_overflow, memory_unit_bytes, metric_names, report_overflow
from search.objective import Objective, TrialFailed
from search.once import once_per_study
from search.progress import Progress, RunCounts, run_counts, watch
from search.samplers import learns_from_pruned, make_sampler
from search.screen import SCREEN_ATTR, Screening, screen
from search.storage import (
    DEFAULT_STORAGE,
    check_workers,
    object_url,
    open_storage,
    printed_url,
    sweep_stale_trials,
    worker_id,
)
from search.study_file import StudySpec, check_sampler, load_study, with_sampler
from spaces import count_configurations

__all__ = [
    "TuningStudy",
    "create_study",
    "optimize",
    "best_config",
    "best_trial",
    "counts",
    "screen_once",
    "pricing",
]

_FINGERPRINT = "palm_tune_fingerprint"
#: spaces of at most this many draws are counted, so a run stops when it has them all
_COUNT_LIMIT = 2000
_SIZE_ATTR = "space_size"
#: prefix of the user attributes that record the guided sampler's pricing (one per process)
PRICING_ATTR = "pricing"


class TuningStudy(optuna.Study):
    """An ``optuna.Study`` made from a palm-tune study file, with palm-tune's extras:

    * ``spec``: the parsed study file (:class:`~search.study_file.StudySpec`);
    * ``storage_url``: the storage as palm-tune prints it (the form Optuna and
      optuna-dashboard open), or None for a storage object;
    * ``artifacts``: the store of the best trials' traces and plots
      (:class:`~search.artifacts.ArtifactStore`; ``artifacts.location`` names it);
    * ``last_run``: what the last :func:`optimize` did (:class:`~search.progress.RunCounts`),
      ``screened_here``: whether it ran the study's screening (:func:`screen_once`).

    ``study`` is the study itself (older callers wrote ``tuning.study``)."""

    def __init__(
        self,
        *,
        spec: StudySpec,
        study_name: str,
        storage: str | BaseStorage,
        backend: BaseStorage,
        sampler: optuna.samplers.BaseSampler,
        custom_sampler: bool,
        artifacts: str | Path | None,
    ) -> None:
        super().__init__(study_name=study_name, storage=backend, sampler=sampler)
        self.spec = spec
        #: what the workers open: the URL, or the storage object itself
        self.storage_arg = storage
        self.storage_url = printed_url(storage) if isinstance(storage, str) else None
        self.custom_sampler = custom_sampler
        self.artifacts = ArtifactStore(artifact_location(self, _url_of(storage), artifacts))
        self.last_run: RunCounts | None = None
        #: whether the last optimize ran the study's screening (False: another worker had)
        self.screened_here: bool | None = None

    @property
    def study(self) -> TuningStudy:
        return self


def create_study(
    study: StudySpec | str | Path,
    *,
    storage: str | BaseStorage | None = None,
    study_name: str | None = None,
    sampler: str | optuna.samplers.BaseSampler | None = None,
    seed: int | None = None,
    load_if_exists: bool = True,
    artifacts: str | Path | None = None,
) -> TuningStudy:
    """Create, or load and continue, the study described by a study file or a parsed spec.

    As ``optuna.create_study``: ``storage`` is a URL (:mod:`search.storage`) or an Optuna
    storage object (``JournalStorage``, ``RDBStorage``...); ``sampler`` is a name
    (``search.SAMPLERS``) or an Optuna sampler object; ``load_if_exists=False`` refuses a
    study of that name in the storage (palm-tune's default, True, continues it, as
    ``palm-tune tune`` does). ``artifacts``: a directory or ``s3://BUCKET`` for the best
    trials' traces and plots (:mod:`search.artifacts`; default: the one recorded in the
    study, else next to a storage file)."""
    spec = study if isinstance(study, StudySpec) else load_study(study)
    custom = sampler if isinstance(sampler, optuna.samplers.BaseSampler) else None
    if (sampler is not None and custom is None) or seed is not None:
        name_of = sampler if isinstance(sampler, str) else spec.sampler
        spec = with_sampler(spec, name_of, seed if seed is not None else spec.seed)
        check_sampler(spec.space, spec.sampler)
    where: str | BaseStorage = storage if storage is not None else DEFAULT_STORAGE
    shown = where if isinstance(where, str) else type(where).__name__
    backend = open_storage(where)
    name = study_name or spec.name
    existing = {s.study_name for s in optuna.get_all_study_summaries(backend)}

    def made(directions: Sequence[str] | None) -> TuningStudy:
        if directions is not None:
            # another process may have created it since we looked (a multi-machine start)
            with contextlib.suppress(optuna.exceptions.DuplicatedStudyError):
                optuna.create_study(
                    study_name=name,
                    storage=backend,
                    directions=list(directions),  # type: ignore[arg-type]
                )
        return TuningStudy(
            spec=spec,
            study_name=name,
            storage=where,
            backend=backend,
            sampler=custom
            or make_sampler(
                spec.sampler, seed=spec.seed, objectives=len(spec.objectives), spec=spec
            ),
            custom_sampler=custom is not None,
            artifacts=artifacts,
        )

    if name in existing and not load_if_exists:
        raise ConfigError(
            "study_name",
            name,
            f"a name not yet in {shown}, or load_if_exists=True to continue that study",
        )
    if name not in existing:
        created = made(spec.directions)
        if not created.user_attrs.get(_FINGERPRINT):
            _stamp(created, spec)
        _check(created, spec, shown)
        _record(created, artifacts)
        return created
    loaded = made(None)
    _check(loaded, spec, shown)
    _record(loaded, artifacts)
    sweep_stale_trials(loaded)
    if loaded.metric_names is None:  # made before palm-tune named its objectives
        done = loaded.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        loaded.set_metric_names(metric_names(spec.objectives, memory_in_bytes=bool(done)))
    return loaded


def _check(study: optuna.Study, spec: StudySpec, shown: str) -> None:
    """Refuse a stored study whose directions or study file differ from ``spec``."""
    name = study.study_name
    stored = [d.name.lower() for d in study.directions]
    if stored != spec.directions:
        raise ConfigError(
            "study.objectives",
            list(spec.objectives),
            f"the directions {stored} of study '{name}' in {shown} "
            "(or use --study-name for a new study)",
        )
    fingerprint = study.user_attrs.get(_FINGERPRINT)
    if fingerprint is None and not study.trials:
        # created this instant by another process that has not stamped it yet
        _stamp(study, spec)
        fingerprint = spec.fingerprint
    if fingerprint != spec.fingerprint:
        raise ConfigError(
            "study file",
            spec.name,
            f"the study file that created '{name}' in {shown} (its base, space "
            "and objectives differ); use --study-name for a new study",
        )


def _url_of(storage: str | BaseStorage) -> str | None:
    """The URL that decides where ``storage``'s artifacts go (:mod:`search.artifacts`)."""
    return storage if isinstance(storage, str) else object_url(storage)


def _record(study: TuningStudy, given: str | Path | None) -> None:
    url = _url_of(study.storage_arg)
    record_location(study, study.artifacts.location, storage_url=url, given=given is not None)


def _stamp(study: optuna.Study, spec: StudySpec) -> None:
    study.set_user_attr(_FINGERPRINT, spec.fingerprint)
    study.set_user_attr("objectives", list(spec.objectives))
    study.set_metric_names(metric_names(spec.objectives))


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials by state: complete (fits memory, simulated), pruned (over memory, not
    simulated: COMPLETE and infeasible; and any PRUNED trial), failed, running."""
    out = {"complete": 0, "pruned": 0, "failed": 0, "running": 0}
    names = {
        TrialState.COMPLETE: "complete",
        TrialState.FAIL: "failed",
        TrialState.RUNNING: "running",
    }
    for t in study.get_trials(deepcopy=False):
        if is_overflow(t) or t.state == TrialState.PRUNED:
            out["pruned"] += 1
        elif t.state in names:
            out[names[t.state]] += 1
    return out


def _optimize_here(
    tuning: TuningStudy, n_trials: int | None, timeout: float | None, bar: Progress | None
) -> None:
    """Run trials in this process until ``n_trials`` new configurations were evaluated
    (duplicates answered from the storage do not count, see :mod:`search.dedup`)."""
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] = []
    if bar is not None:
        callbacks.append(bar)
    size = _space_size(tuning)
    simulator = Objective(tuning.spec)
    callbacks.append(NewConfigBudget(n_trials, size=size, seen=simulator.seen))
    if not isinstance(tuning.sampler, (Unrepeating, GuidedSampler)):
        # the guided sampler never proposes a configuration the study has
        tuning.sampler = Unrepeating(tuning.sampler, seed=tuning.spec.seed)
    objective = attach_when_best(
        report_overflow(
            simulator,
            tuning.spec.objectives,
            memory_unit=memory_unit_bytes(tuning),
            complete=not learns_from_pruned(tuning.sampler),
        ),
        store=tuning.artifacts,
        objectives=tuning.spec.objectives,
    )
    try:
        with trial_signals():  # a stop signal fails the running trial, never orphans one
            optuna.Study.optimize(
                tuning,
                guarded(objective),
                n_trials=None,
                timeout=timeout,
                catch=(TrialFailed,),
                callbacks=[*callbacks, stop_if_signalled],
                gc_after_trial=False,
            )
    finally:
        _record_pricing(tuning)


def _run(
    spec: StudySpec,
    storage: str | BaseStorage,
    name: str,
    n_trials: int | None,
    timeout: float | None,
    seed: int | None,
    sampler: optuna.samplers.BaseSampler | None,
    artifacts: str,
    verbosity: int,
) -> None:
    """One worker process: open the shared study and run its share of the trials. A sampler
    object is a pickled copy of the parent's, reseeded so that workers propose differently."""
    optuna.logging.set_verbosity(verbosity)
    if sampler is not None:
        sampler.reseed_rng()
    tuning = create_study(spec, storage=storage, study_name=name, seed=seed, sampler=sampler)
    tuning.artifacts = ArtifactStore(artifacts)  # the parent's, which it recorded if needed
    _optimize_here(tuning, n_trials, timeout, None)


def screen_once(tuning: TuningStudy, *, top: int) -> tuple[Screening, bool]:
    """The study file's analytical screening (:mod:`search.screen`), run once per study:
    by the first of its workers (on any machine) to get there, while the others wait for it
    (:mod:`search.once`). Returns the screening and whether this process ran it."""
    spec = tuning.spec

    def done() -> Screening | None:
        stored = tuning.user_attrs.get(SCREEN_ATTR)
        if stored is None:
            return None
        return Screening(**{**stored, "enqueued": tuple(stored["enqueued"])})

    return once_per_study(
        tuning,
        purpose="screening",
        done=done,
        work=lambda: screen(tuning, spec, budget=spec.screen, top=top, seed=spec.seed),
    )


def optimize(
    tuning: TuningStudy,
    *,
    n_trials: int | None = None,
    timeout: float | None = None,
    workers: int = 1,
    progress: bool = False,
) -> None:
    """Run trials until ``n_trials`` more configurations (the study file's budget by default)
    were evaluated, in ``workers`` processes sharing the storage (each runs its share);
    duplicate proposals are answered from the storage and not counted. A study file with
    ``screen`` first ranks that many configurations analytically and enqueues the best, once
    per study (:func:`screen_once`). ``progress``: a progress bar on stderr
    (:mod:`search.progress`). Returns None, as ``optuna.Study.optimize``; what the run did is
    in ``tuning.last_run`` (:class:`~search.progress.RunCounts`)."""
    n = tuning.spec.trials if n_trials is None and timeout is None else n_trials
    if workers < 1:
        raise ConfigError("--workers", workers, "an integer >= 1")
    check_workers(tuning.storage_arg, workers)  # before any work
    if tuning.spec.screen and not _guided(tuning):  # once per study, before any worker starts
        # no more enqueued than this run simulates (none left waiting after it)
        top = tuning.spec.screen_top
        if progress and SCREEN_ATTR not in tuning.user_attrs:  # seconds before the bar shows
            sys.stderr.write(
                f"{tuning.study_name}: screening {tuning.spec.screen} configurations with the "
                "analytical engine first (once per study)\n"
            )
        tuning.screened_here = screen_once(tuning, top=top if n is None else min(top, n))[1]
    first = {t.number for t in tuning.get_trials(deepcopy=False) if t.state.is_finished()}
    if workers == 1:
        ours = {worker_id()}
        bar = Progress(tuning, budget=n, ours=lambda: ours, stream=sys.stderr) if progress else None
        try:
            _optimize_here(tuning, n, timeout, bar)
        finally:
            if bar is not None:
                bar.close(tuning)
        tuning.last_run = run_counts(tuning, ours, before=first)
        return
    procs = _workers(tuning, n, timeout, workers)

    def ids() -> set[str]:
        return {worker_id(p.pid) for p in procs if p.pid is not None}

    with watch(tuning, budget=n, ours=ids, stream=sys.stderr) if progress else nullcontext():
        codes = supervise(procs, on_stop=lambda: sweep_stale_trials(tuning))
    tuning.last_run = run_counts(tuning, ids(), before=first)
    bad = [c for c in codes if c]
    if bad:
        sweep_stale_trials(tuning)  # a worker killed outright left its trial RUNNING
        raise WorkersFailed(f"{len(bad)} of {len(codes)} worker(s) failed (exit codes {bad})")


def _workers(
    tuning: TuningStudy, n: int | None, timeout: float | None, workers: int
) -> list[multiprocessing.process.BaseProcess]:
    """The worker processes of a run (not started), each with its share of ``n``."""
    shares = (
        [None] * workers
        if n is None
        else [n // workers + (i < n % workers) for i in range(workers)]
    )
    ctx = multiprocessing.get_context("spawn")
    base_seed = tuning.spec.seed
    sampler = tuning.sampler if tuning.custom_sampler else None
    if isinstance(sampler, Unrepeating):
        sampler = sampler.base
    return [
        ctx.Process(
            target=worker_main,
            args=(
                os.getpid(),
                i,
                _run,
                tuning.spec,
                tuning.storage_arg,
                tuning.study_name,
                share,
                timeout,
                None if base_seed is None else base_seed + i,
                sampler,
                tuning.artifacts.location,
                optuna.logging.get_verbosity(),
            ),
        )
        for i, share in enumerate(shares)
        if share != 0
    ]


def _space_size(tuning: TuningStudy) -> int | None:
    """The space's distinct configurations when it is small enough to list (None: not, or a
    continuous knob): the guided sampler's pool when it lists the whole space, else counted
    once per study (up to ``_COUNT_LIMIT`` draws) and kept in the study's user attribute
    ``space_size``, so a resumed run does not enumerate again."""
    sampler = tuning.sampler
    sampler = getattr(sampler, "base", sampler)
    if isinstance(sampler, GuidedSampler):
        return sampler.space_size()
    stored = tuning.user_attrs.get(_SIZE_ATTR)
    if isinstance(stored, dict) and "size" in stored:
        return None if stored["size"] is None else int(stored["size"])
    size = count_configurations(tuning.spec.space, tuning.spec.context, limit=_COUNT_LIMIT)
    tuning.set_user_attr(_SIZE_ATTR, {"size": size})
    return size


def _record_pricing(tuning: TuningStudy) -> None:
    """The guided sampler's memory checks and analytical runs of this process, as the
    study's user attribute ``pricing:<host>:<pid>`` (one per process: workers never write
    the same attribute); :func:`pricing` adds them up."""
    sampler = tuning.sampler
    sampler = getattr(sampler, "base", sampler)
    if isinstance(sampler, GuidedSampler) and sampler.stats.memory_checks:
        tuning.set_user_attr(f"{PRICING_ATTR}:{worker_id()}", sampler.stats.as_dict())


def pricing(study: optuna.Study) -> dict[str, float]:
    """What the guided sampler spent besides event simulations in every run of ``study``:
    memory checks (``overflows`` of them did not fit), analytical runs, their seconds and
    its modelling seconds (:class:`search.guided.FidelityStats`); empty when none ran."""
    total: dict[str, float] = {}
    for name, value in study.user_attrs.items():
        if name.startswith(f"{PRICING_ATTR}:") and isinstance(value, dict):
            for k, v in value.items():
                total[k] = total.get(k, 0.0) + float(v)
    return total


def _guided(tuning: TuningStudy) -> bool:
    """The study's sampler prices configurations analytically itself (search.guided)."""
    sampler = tuning.sampler
    return isinstance(getattr(sampler, "base", sampler), GuidedSampler)


def best_trial(study: optuna.Study) -> FrozenTrial:
    """The best completed trial that fits memory; of several objectives, the trial of the
    Pareto front with the most throughput (the best first objective without throughput)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not any(not is_overflow(t) for t in complete):
        raise ConfigError(
            "study", study.study_name, "a study with at least one completed trial that fits memory"
        )
    if len(study.directions) == 1:
        return study.best_trial
    objectives: Sequence[str] = study.user_attrs.get("objectives", [])
    i = list(objectives).index("throughput") if "throughput" in objectives else 0
    sign = 1.0 if study.directions[i] == optuna.study.StudyDirection.MAXIMIZE else -1.0
    return max(study.best_trials, key=lambda t: sign * t.values[i])


def best_config(tuning: optuna.Study) -> SimConfig:
    """The best trial's configuration, ready for ``palm.simulate`` (which reproduces it)."""
    trial = best_trial(tuning)
    tables: Any = trial.user_attrs["config"]
    return parse_config(tables)
