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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import optuna
from optuna.trial import FrozenTrial, TrialState

from palm.config import parse_config
from palm.errors import ConfigError
from palm.strategy import SimConfig
from search.failures import WorkersFailed
from search.lifecycle import guarded, stop_if_signalled, supervise, trial_signals, worker_main
from search.objective import Objective, TrialFailed
from search.samplers import make_sampler
from search.storage import DEFAULT_STORAGE, open_storage, sweep_stale_trials
from search.study_file import StudySpec, check_sampler, load_study

__all__ = ["TuningStudy", "create_study", "optimize", "best_config", "best_trial", "counts"]

_FINGERPRINT = "palm_tune_fingerprint"


@dataclass
class TuningStudy:
    spec: StudySpec
    study: optuna.Study
    storage_url: str


def create_study(
    study: StudySpec | str | Path,
    *,
    storage: str | None = None,
    study_name: str | None = None,
    sampler: str | None = None,
    seed: int | None = None,
) -> TuningStudy:
    """Create, or load and continue, the study described by a study file or a parsed spec."""
    spec = study if isinstance(study, StudySpec) else load_study(study)
    if sampler is not None or seed is not None:
        from dataclasses import replace

        spec = replace(
            spec, sampler=sampler or spec.sampler, seed=seed if seed is not None else spec.seed
        )
        check_sampler(spec.space, spec.sampler)
    url = storage or DEFAULT_STORAGE
    backend = open_storage(url)
    name = study_name or spec.name
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    existing = {s.study_name: s for s in optuna.get_all_study_summaries(backend)}
    if name in existing:
        loaded = optuna.load_study(
            study_name=name,
            storage=backend,
            sampler=make_sampler(spec.sampler, seed=spec.seed, objectives=len(spec.objectives)),
        )
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
        return TuningStudy(spec, loaded, url)
    try:
        created = optuna.create_study(
            study_name=name,
            storage=backend,
            directions=spec.directions,  # type: ignore[arg-type]
            sampler=make_sampler(spec.sampler, seed=spec.seed, objectives=len(spec.objectives)),
        )
    except optuna.exceptions.DuplicatedStudyError:
        # another process created it since we looked (how a multi-machine study starts)
        return create_study(spec, storage=url, study_name=name)
    _stamp(created, spec)
    return TuningStudy(spec, created, url)


def _stamp(study: optuna.Study, spec: StudySpec) -> None:
    study.set_user_attr(_FINGERPRINT, spec.fingerprint)
    study.set_user_attr("objectives", list(spec.objectives))


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials by state: complete, pruned (memory), failed, running."""
    out = {"complete": 0, "pruned": 0, "failed": 0, "running": 0}
    names = {
        TrialState.COMPLETE: "complete",
        TrialState.PRUNED: "pruned",
        TrialState.FAIL: "failed",
        TrialState.RUNNING: "running",
    }
    for t in study.get_trials(deepcopy=False):
        if t.state in names:
            out[names[t.state]] += 1
    return out


class _Progress:
    """One status line on a terminal (a line per trial otherwise)."""

    def __init__(self, total: int | None, stream: TextIO) -> None:
        self.total, self.stream, self.done = total, stream, 0
        self.tty = stream.isatty()

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.done += 1
        c = counts(study)
        best = ""
        try:
            if len(study.directions) == 1 and c["complete"]:
                best = f" | best {study.best_value:,.4g}"
        except ValueError:
            pass
        total = f"/{self.total}" if self.total else ""
        bar = ""
        if self.total:
            filled = int(24 * self.done / self.total)
            bar = "[" + "#" * filled + "." * (24 - filled) + "] "
        line = (
            f"{bar}trial {self.done}{total} | complete {c['complete']} pruned "
            f"{c['pruned']} failed {c['failed']}{best}"
        )
        self.stream.write(("\r" + line) if self.tty else (line + "\n"))
        if self.tty and self.total and self.done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def _optimize_here(
    tuning: TuningStudy, n_trials: int | None, timeout: float | None, progress: bool
) -> None:
    """Run trials in this process."""
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] = []
    if progress:
        callbacks.append(_Progress(n_trials, sys.stderr))
    with trial_signals():  # a stop signal fails the running trial, never orphans one
        tuning.study.optimize(
            guarded(Objective(tuning.spec)),
            n_trials=n_trials,
            timeout=timeout,
            catch=(TrialFailed,),
            callbacks=[*callbacks, stop_if_signalled],
            gc_after_trial=False,
        )


def _run(
    spec: StudySpec,
    storage: str,
    name: str,
    n_trials: int | None,
    timeout: float | None,
    seed: int | None,
    progress: bool,
) -> None:
    """One worker process: open the shared study and run its share of the trials."""
    _optimize_here(
        create_study(spec, storage=storage, study_name=name, seed=seed), n_trials, timeout, progress
    )


def optimize(
    tuning: TuningStudy,
    *,
    n_trials: int | None = None,
    timeout: float | None = None,
    workers: int = 1,
    progress: bool = False,
) -> list[int]:
    """Run ``n_trials`` more trials (the study file's budget by default), in ``workers``
    processes sharing the storage (each runs its share, so exactly ``n_trials`` are added).
    Returns the process ids that ran the trials (to tell this run's trials from others')."""
    n = tuning.spec.trials if n_trials is None and timeout is None else n_trials
    if workers < 1:
        raise ConfigError("--workers", workers, "an integer >= 1")
    if workers == 1:
        _optimize_here(tuning, n, timeout, progress)
        return [os.getpid()]
    if tuning.storage_url.startswith("sqlite"):
        raise ConfigError(
            "--storage",
            tuning.storage_url,
            "journal:///FILE or postgresql://... for several workers (SQLite serialises writers)",
        )
    shares = (
        [None] * workers
        if n is None
        else [n // workers + (i < n % workers) for i in range(workers)]
    )
    ctx = multiprocessing.get_context("spawn")
    base_seed = tuning.spec.seed
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
                progress and i == 0,
            ),
        )
        for i, share in enumerate(shares)
        if share != 0
    ]
    codes = supervise(procs, on_stop=lambda: sweep_stale_trials(tuning.study))
    bad = [c for c in codes if c]
    if bad:
        sweep_stale_trials(tuning.study)  # a worker killed outright left its trial RUNNING
        raise WorkersFailed(f"{len(bad)} of {len(codes)} worker(s) failed (exit codes {bad})")
    return [p.pid for p in procs if p.pid is not None]


def best_trial(study: optuna.Study) -> FrozenTrial:
    """The best completed trial (most throughput among the Pareto front when several
    objectives are optimised)."""
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if not complete:
        raise ConfigError("study", study.study_name, "a study with at least one completed trial")
    if len(study.directions) == 1:
        return study.best_trial
    objectives: Sequence[str] = study.user_attrs.get("objectives", [])
    front = study.best_trials
    if "throughput" in objectives:
        i = list(objectives).index("throughput")
        return max(front, key=lambda t: t.values[i])
    return front[0]


def best_config(tuning: TuningStudy | optuna.Study) -> SimConfig:
    """The best trial's configuration, ready for ``palm.simulate`` (which reproduces it)."""
    study = tuning.study if isinstance(tuning, TuningStudy) else tuning
    trial = best_trial(study)
    tables: Any = trial.user_attrs["config"]
    return parse_config(tables)
