"""The Python study API (SPEC sec. 6).

    >>> import search
    >>> study = search.create_study("studies/quickstart.toml", storage="sqlite:///t.db")
    >>> search.optimize(study, n_trials=10)
    >>> config = search.best_config(study)  # a palm.SimConfig: palm.simulate(config) again

A :class:`TuningStudy` pairs the parsed study file with its Optuna study. Loading a study whose
directions or study file differ from the stored one fails with a clear message.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from palm.config import parse_config
from palm.errors import ConfigError
from palm.strategy import SimConfig
from search.artifacts import attach_when_best
from search.dedup import NewConfigBudget, Unrepeating
from search.failures import WorkersFailed
from search.guided import GuidedSampler
from search.lifecycle import guarded, stop_if_signalled, supervise, trial_signals, worker_main
from search.metrics import is_overflow, memory_unit_bytes, metric_names, report_overflow
from search.objective import Objective, TrialFailed
from search.progress import Progress, watch
from search.samplers import learns_from_pruned, make_sampler
from search.screen import screen
from search.storage import DEFAULT_STORAGE, open_storage, sweep_stale_trials, worker_id
from search.study_file import StudySpec, check_sampler, load_study, with_sampler
from spaces import count_configurations

__all__ = [
    "TuningStudy",
    "create_study",
    "optimize",
    "best_config",
    "best_trial",
    "counts",
    "pricing",
]

_FINGERPRINT = "palm_tune_fingerprint"
#: spaces of at most this many draws are counted, so a run stops when it has them all
_COUNT_LIMIT = 2000
_SIZE_ATTR = "space_size"
#: prefix of the user attributes that record the guided sampler's pricing (one per process)
PRICING_ATTR = "pricing"


@dataclass
class TuningStudy:
    """A parsed study file and its Optuna study (``.study``, with ``.sampler``)."""

    spec: StudySpec
    study: optuna.Study
    storage_url: str
    #: the sampler was an object given to :func:`create_study`, not a name
    custom_sampler: bool = False


def _optuna_study(study: TuningStudy | optuna.Study) -> optuna.Study:
    return study.study if isinstance(study, TuningStudy) else study


def create_study(
    study: StudySpec | str | Path,
    *,
    storage: str | None = None,
    study_name: str | None = None,
    sampler: str | optuna.samplers.BaseSampler | None = None,
    seed: int | None = None,
    load_if_exists: bool = True,
) -> TuningStudy:
    """Create, or load and continue, the study described by a study file or a parsed spec.

    As ``optuna.create_study``: ``sampler`` is a name (``search.SAMPLERS``) or an Optuna
    sampler object; ``load_if_exists=False`` refuses a study of that name in the storage
    (palm-tune's default, True, continues it, as ``palm-tune tune`` does)."""
    spec = study if isinstance(study, StudySpec) else load_study(study)
    custom = sampler if isinstance(sampler, optuna.samplers.BaseSampler) else None
    if (sampler is not None and custom is None) or seed is not None:
        name_of = sampler if isinstance(sampler, str) else spec.sampler
        spec = with_sampler(spec, name_of, seed if seed is not None else spec.seed)
        check_sampler(spec.space, spec.sampler)
    url = storage or DEFAULT_STORAGE
    backend = open_storage(url)
    name = study_name or spec.name
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    existing = {s.study_name: s for s in optuna.get_all_study_summaries(backend)}

    def new_sampler() -> optuna.samplers.BaseSampler:
        return custom or make_sampler(
            spec.sampler, seed=spec.seed, objectives=len(spec.objectives), spec=spec
        )

    if name in existing and not load_if_exists:
        raise ConfigError(
            "study_name",
            name,
            f"a name not yet in {url}, or load_if_exists=True to continue that study",
        )
    if name in existing:
        loaded = optuna.load_study(study_name=name, storage=backend, sampler=new_sampler())
        stored = [d.name.lower() for d in loaded.directions]
        if stored != spec.directions:
            raise ConfigError(
                "study.objectives",
                list(spec.objectives),
                f"the directions {stored} of study '{name}' in {url} "
                "(or use --study-name for a new study)",
            )
        fingerprint = loaded.user_attrs.get(_FINGERPRINT)
        if fingerprint is None and not loaded.trials:
            # created this instant by another process that has not stamped it yet
            _stamp(loaded, spec)
            fingerprint = spec.fingerprint
        if fingerprint != spec.fingerprint:
            raise ConfigError(
                "study file",
                spec.name,
                f"the study file that created '{name}' in {url} (its base, space "
                "and objectives differ); use --study-name for a new study",
            )
        sweep_stale_trials(loaded)
        if loaded.metric_names is None:  # made before palm-tune named its objectives
            done = loaded.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            loaded.set_metric_names(metric_names(spec.objectives, memory_in_bytes=bool(done)))
        return TuningStudy(spec, loaded, url, custom is not None)
    try:
        created = optuna.create_study(
            study_name=name,
            storage=backend,
            directions=spec.directions,  # type: ignore[arg-type]
            sampler=new_sampler(),
        )
    except optuna.exceptions.DuplicatedStudyError:
        # another process created it since we looked (how a multi-machine study starts)
        return create_study(spec, storage=url, study_name=name, sampler=custom)
    _stamp(created, spec)
    return TuningStudy(spec, created, url, custom is not None)


def _stamp(study: optuna.Study, spec: StudySpec) -> None:
    study.set_user_attr(_FINGERPRINT, spec.fingerprint)
    study.set_user_attr("objectives", list(spec.objectives))
    study.set_metric_names(metric_names(spec.objectives))


def counts(study: TuningStudy | optuna.Study) -> dict[str, int]:
    """Trials by state: complete (fits memory, simulated), pruned (over memory, not
    simulated: COMPLETE and infeasible; and any PRUNED trial), failed, running."""
    out = {"complete": 0, "pruned": 0, "failed": 0, "running": 0}
    names = {
        TrialState.COMPLETE: "complete",
        TrialState.FAIL: "failed",
        TrialState.RUNNING: "running",
    }
    for t in _optuna_study(study).get_trials(deepcopy=False):
        if is_overflow(t) or t.state == TrialState.PRUNED:
            out["pruned"] += 1
        elif t.state in names:
            out[names[t.state]] += 1
    return out


def _optimize_here(
    tuning: TuningStudy, n_trials: int | None, timeout: float | None, progress: bool
) -> None:
    """Run trials in this process until ``n_trials`` new configurations were evaluated
    (duplicates answered from the storage do not count, see :mod:`search.dedup`)."""
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] = []
    bar = None
    if progress:
        bar = Progress(total=n_trials, first=len(tuning.study.trials), stream=sys.stderr)
        callbacks.append(bar)
    size = _space_size(tuning)
    simulator = Objective(tuning.spec)
    callbacks.append(NewConfigBudget(n_trials, size=size, seen=simulator.seen))
    if not isinstance(tuning.study.sampler, (Unrepeating, GuidedSampler)):
        # the guided sampler never proposes a configuration the study has
        tuning.study.sampler = Unrepeating(tuning.study.sampler, seed=tuning.spec.seed)
    objective = attach_when_best(
        report_overflow(
            simulator,
            tuning.spec.objectives,
            memory_unit=memory_unit_bytes(tuning.study),
            complete=not learns_from_pruned(tuning.study.sampler),
        ),
        storage_url=tuning.storage_url,
        objectives=tuning.spec.objectives,
    )
    try:
        with trial_signals():  # a stop signal fails the running trial, never orphans one
            tuning.study.optimize(
                guarded(objective),
                n_trials=None,
                timeout=timeout,
                catch=(TrialFailed,),
                callbacks=[*callbacks, stop_if_signalled],
                gc_after_trial=False,
            )
    finally:
        if bar is not None:
            bar.close()
        _record_pricing(tuning)


def _run(
    spec: StudySpec,
    storage: str,
    name: str,
    n_trials: int | None,
    timeout: float | None,
    seed: int | None,
    sampler: optuna.samplers.BaseSampler | None,
) -> None:
    """One worker process: open the shared study and run its share of the trials. A sampler
    object is a pickled copy of the parent's, reseeded so that workers propose differently."""
    if sampler is not None:
        sampler.reseed_rng()
    tuning = create_study(spec, storage=storage, study_name=name, seed=seed, sampler=sampler)
    _optimize_here(tuning, n_trials, timeout, progress=False)


def optimize(
    tuning: TuningStudy,
    *,
    n_trials: int | None = None,
    timeout: float | None = None,
    workers: int = 1,
    progress: bool = False,
) -> list[int]:
    """Run trials until ``n_trials`` more configurations (the study file's budget by default)
    were evaluated, in ``workers`` processes sharing the storage (each runs its share);
    duplicate proposals are answered from the storage and not counted. A study file with
    ``screen`` first ranks that many configurations analytically and enqueues the best
    (:mod:`search.screen`).
    Returns the process ids that ran the trials (to tell this run's trials from others')."""
    n = tuning.spec.trials if n_trials is None and timeout is None else n_trials
    if workers < 1:
        raise ConfigError("--workers", workers, "an integer >= 1")
    if tuning.spec.screen and not _guided(tuning):  # once per study, before any worker starts
        # no more enqueued than this run simulates (none left waiting after it)
        top = tuning.spec.screen_top if n is None else min(tuning.spec.screen_top, n)
        screen(tuning.study, tuning.spec, budget=tuning.spec.screen, top=top, seed=tuning.spec.seed)
    if workers == 1:
        _optimize_here(tuning, n, timeout, progress)
        return [os.getpid()]
    if tuning.storage_url.startswith("sqlite"):
        raise ConfigError(
            "--storage",
            tuning.storage_url,
            "a journal file (e.g. palm-tune.journal) or postgresql://... for several workers "
            "(SQLite serialises writers)",
        )
    shares = (
        [None] * workers
        if n is None
        else [n // workers + (i < n % workers) for i in range(workers)]
    )
    ctx = multiprocessing.get_context("spawn")
    base_seed = tuning.spec.seed
    sampler = tuning.study.sampler if tuning.custom_sampler else None
    procs = [
        ctx.Process(
            target=worker_main,
            args=(
                os.getpid(),
                i,
                _run,
                tuning.spec,
                tuning.storage_url,
                tuning.study.study_name,
                share,
                timeout,
                None if base_seed is None else base_seed + i,
                sampler,
            ),
        )
        for i, share in enumerate(shares)
        if share != 0
    ]
    first = len(tuning.study.trials)
    with (
        watch(tuning.study, total=n, first=first, stream=sys.stderr) if progress else nullcontext()
    ):
        codes = supervise(procs, on_stop=lambda: sweep_stale_trials(tuning.study))
    bad = [c for c in codes if c]
    if bad:
        sweep_stale_trials(tuning.study)  # a worker killed outright left its trial RUNNING
        raise WorkersFailed(f"{len(bad)} of {len(codes)} worker(s) failed (exit codes {bad})")
    return [p.pid for p in procs if p.pid is not None]


def _space_size(tuning: TuningStudy) -> int | None:
    """The space's distinct configurations when it is small enough to list (None: not, or a
    continuous knob): the guided sampler's pool when it lists the whole space, else counted
    once per study (up to ``_COUNT_LIMIT`` draws) and kept in the study's user attribute
    ``space_size``, so a resumed run does not enumerate again."""
    sampler = tuning.study.sampler
    sampler = getattr(sampler, "base", sampler)
    if isinstance(sampler, GuidedSampler):
        return sampler.space_size()
    stored = tuning.study.user_attrs.get(_SIZE_ATTR)
    if isinstance(stored, dict) and "size" in stored:
        return None if stored["size"] is None else int(stored["size"])
    size = count_configurations(tuning.spec.space, tuning.spec.context, limit=_COUNT_LIMIT)
    tuning.study.set_user_attr(_SIZE_ATTR, {"size": size})
    return size


def _record_pricing(tuning: TuningStudy) -> None:
    """The guided sampler's memory checks and analytical runs of this process, as the
    study's user attribute ``pricing:<host>:<pid>`` (one per process: workers never write
    the same attribute); :func:`pricing` adds them up."""
    sampler = tuning.study.sampler
    sampler = getattr(sampler, "base", sampler)
    if isinstance(sampler, GuidedSampler) and sampler.stats.memory_checks:
        tuning.study.set_user_attr(f"{PRICING_ATTR}:{worker_id()}", sampler.stats.as_dict())


def pricing(study: TuningStudy | optuna.Study) -> dict[str, float]:
    """What the guided sampler spent besides event simulations in every run of ``study``:
    memory checks (``overflows`` of them did not fit), analytical runs, their seconds and
    its modelling seconds (:class:`search.guided.FidelityStats`); empty when none ran."""
    total: dict[str, float] = {}
    for name, value in _optuna_study(study).user_attrs.items():
        if name.startswith(f"{PRICING_ATTR}:") and isinstance(value, dict):
            for k, v in value.items():
                total[k] = total.get(k, 0.0) + float(v)
    return total


def _guided(tuning: TuningStudy) -> bool:
    """The study's sampler prices configurations analytically itself (search.guided)."""
    sampler = tuning.study.sampler
    return isinstance(getattr(sampler, "base", sampler), GuidedSampler)


def best_trial(study: TuningStudy | optuna.Study) -> FrozenTrial:
    """The best completed trial that fits memory; of several objectives, the trial of the
    Pareto front with the most throughput (the best first objective without throughput)."""
    study = _optuna_study(study)
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


def best_config(tuning: TuningStudy | optuna.Study) -> SimConfig:
    """The best trial's configuration, ready for ``palm.simulate`` (which reproduces it)."""
    trial = best_trial(tuning)
    tables: Any = trial.user_attrs["config"]
    return parse_config(tables)
