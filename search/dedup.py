"""Never simulate, or count, the same configuration twice.

Every trial records the key of its configuration (``config_key``: a hash of the canonical
configuration tables) before anything is built. :class:`SeenConfigs` answers "has this study
already evaluated, or is it evaluating, this configuration?" from the study's storage, so
worker processes and resumed runs share the answer. It indexes each finished trial once and
re-reads only trials that were unfinished or new (Optuna's cached RDB storage and the journal
storage both serve those incrementally).

Reads of the trials cost a storage query each on an RDB storage (SQLite, PostgreSQL); the
tuner reads them once per trial. The look-up and the stop rules use Optuna's per-trial copy
(``Study._get_trials(use_cache=True)``, filled at the trial's first read), and
:class:`Unrepeating` shows its base sampler the study through :class:`PerTrialView`, so that
Optuna's TPE with ``constant_liar`` (Optuna 5's default), which otherwise reads the storage
for every parameter it samples, reads that copy too.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial

from search.metrics import is_overflow

__all__ = [
    "config_key",
    "SeenConfigs",
    "Seen",
    "KEY_ATTR",
    "DUPLICATE_ATTR",
    "NewConfigBudget",
    "configuration_counts",
    "STALL_AFTER",
    "IDLE_AFTER",
    "simulated",
    "Unrepeating",
    "PerTrialView",
    "INVALID_CONSTRAINT",
]

KEY_ATTR = "config_key"
DUPLICATE_ATTR = "duplicate_of"
#: the constraint of a draw whose choices contradict each other (search.objective)
INVALID_CONSTRAINT = "invalid_choices"


def config_key(tables: dict[str, Any]) -> str:
    """A short stable hash of a configuration's canonical tables."""
    text = json.dumps(tables, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's trials as the sampler read them for this trial: Optuna syncs with the
    storage once a trial (``Study._get_trials(use_cache=True)``, what its samplers use), so
    the look-up adds no storage read; a trial another worker finished since is caught by
    the next look-up, or here while it is still running."""
    get = getattr(study, "_get_trials", None)
    if get is None:  # pragma: no cover - an Optuna without the per-trial cache
        return study.get_trials(deepcopy=False)
    return list(get(deepcopy=False, use_cache=True))


@dataclass(frozen=True)
class Seen:
    """The trial that first evaluated a configuration, and what the sampler was told."""

    number: int
    state: optuna.trial.TrialState
    constraints: dict[str, float]


class SeenConfigs:
    """The configurations a study has evaluated (finished trials) or is evaluating."""

    def __init__(self) -> None:
        self._finished: dict[str, Seen] = {}
        self._done: set[int] = set()
        #: the key of every finished trial that was not a duplicate (failed ones included)
        self.keys: set[str] = set()

    def lookup(self, study: optuna.Study, key: str, *, number: int) -> Seen | None:
        """The earliest other trial of ``study`` with configuration ``key`` (not itself a
        duplicate), or None."""
        running: Seen | None = None
        for t in _trials(study):
            if t.number in self._done or t.number == number:
                continue
            k = t.user_attrs.get(KEY_ATTR)
            if t.state.is_finished():
                self.add(t)
            elif k == key and (running is None or t.number < running.number):
                running = Seen(t.number, t.state, {})
        return self._finished.get(key) or running

    def add(self, t: FrozenTrial) -> None:
        """Index the finished trial ``t`` (once; a later call for it does nothing)."""
        if t.number in self._done:
            return
        self._done.add(t.number)
        k = t.user_attrs.get(KEY_ATTR)
        if k is not None and DUPLICATE_ATTR not in t.user_attrs:
            self.keys.add(k)
            self._remember(k, t)

    def _remember(self, key: str, t: FrozenTrial) -> None:
        if t.state == optuna.trial.TrialState.FAIL:
            return  # a failure (e.g. an interrupted trial) may succeed when run again
        old = self._finished.get(key)
        if old is None or t.number < old.number:
            self._finished[key] = Seen(t.number, t.state, dict(t.constraints))


#: consecutive duplicate proposals after which a run stops: the sampler finds nothing new
#: (a space smaller than the budget, or a sampler that has converged)
STALL_AFTER = 50
#: consecutive trials that simulated nothing (duplicates, memory overflows, invalid draws)
#: after which a run stops: a sampler that keeps proposing plans that cannot run
IDLE_AFTER = 10 * STALL_AFTER


def simulated(trial: FrozenTrial) -> bool:
    """Whether ``trial`` cost an event simulation: it completed and fits memory, or it
    failed (a failure is counted, so that a configuration that keeps failing cannot keep a
    run going)."""
    if trial.state == optuna.trial.TrialState.FAIL:
        return True
    return trial.state == optuna.trial.TrialState.COMPLETE and not is_overflow(trial)


class NewConfigBudget:
    """Optuna callback: stop ``optimize`` once ``n`` event simulations ran in this process
    (:func:`simulated`: duplicates, memory overflows and invalid draws are not counted), once
    the study holds every one of the space's ``size`` configurations (when known), after
    :data:`STALL_AFTER` duplicate proposals in a row, or after :data:`IDLE_AFTER` trials in a
    row that simulated nothing. ``n = None``: only the other rules (a run bounded by a
    timeout). ``new`` counts the trials that were not duplicates.

    ``seen``: the objective's :class:`SeenConfigs` (its look-up already indexed the trials
    of every worker as the trial began, so the count costs no storage read; another worker's
    trial that finished since is counted one trial later). Without it the callback indexes
    the study's trials itself, after every trial."""

    def __init__(
        self, n: int | None, *, size: int | None = None, seen: SeenConfigs | None = None
    ) -> None:
        self.n, self.size, self.new, self.duplicates, self._in_row = n, size, 0, 0, 0
        self.simulations = self._idle = 0
        self.stalled = self.exhausted = False
        self._own = seen is None
        self.seen = SeenConfigs() if seen is None else seen

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if DUPLICATE_ATTR in trial.user_attrs:
            self.duplicates += 1
            self._in_row += 1
        else:
            self.new += 1
            self._in_row = 0
        if simulated(trial):
            self.simulations += 1
            self._idle = 0
        else:
            self._idle += 1
        self.stalled = self._in_row >= STALL_AFTER or self._idle >= IDLE_AFTER
        if self.size is not None:
            if self._own:
                for t in _trials(study):
                    if t.state.is_finished():
                        self.seen.add(t)
            self.seen.add(trial)
            self.exhausted = len(self.seen.keys) >= self.size
        if self.stalled or self.exhausted or (self.n is not None and self.simulations >= self.n):
            study.stop()


def configuration_counts(study: optuna.Study) -> dict[str, int]:
    """Trials by what they cost: ``simulated`` (distinct configurations the engine ran:
    completed trials that fit memory, each a configuration no earlier trial had),
    ``overflow`` (stopped by the memory check, no plan built: pruned, or COMPLETE and
    infeasible for the samplers that read completed trials only), ``invalid``
    (contradictory choices), ``duplicate`` (answered from the storage, no simulation),
    ``failed``."""
    out = {"simulated": 0, "overflow": 0, "invalid": 0, "duplicate": 0, "failed": 0}
    for t in study.get_trials(deepcopy=False):
        if DUPLICATE_ATTR in t.user_attrs:
            out["duplicate"] += 1
        elif is_overflow(t):  # pruned, or COMPLETE and infeasible (NSGA-II, GP, CMA-ES)
            out["overflow"] += 1
        elif t.state == optuna.trial.TrialState.COMPLETE:
            out["simulated"] += 1
        elif t.state == optuna.trial.TrialState.FAIL:
            out["failed"] += 1
        elif t.state == optuna.trial.TrialState.PRUNED:
            invalid = INVALID_CONSTRAINT in t.constraints
            out["invalid" if invalid else "overflow"] += 1
    return out


class PerTrialView:
    """``study`` as a sampler sees it while it samples one trial: every read of the trials is
    served from Optuna's per-trial copy (``Study._get_trials(use_cache=True)``, which Optuna
    refreshes when a trial is asked for and told), everything else is the study's.

    Optuna's TPE with ``constant_liar`` (Optuna 5's default) reads the storage anew for every
    parameter (to see other workers' RUNNING trials), a query each on an RDB storage. The copy
    was read at the trial's first read of the trials, after the trial was created, so it holds
    every RUNNING trial of every worker as of that moment, milliseconds earlier; with one
    worker it holds exactly what the fresh reads would."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(
        self, deepcopy: bool = True, states: Any = None, use_cache: bool = False
    ) -> list[FrozenTrial]:
        get = getattr(self._study, "_get_trials", None)
        if get is None:  # pragma: no cover - an Optuna without the per-trial cache
            return self._study.get_trials(deepcopy=deepcopy, states=states)
        return list(get(deepcopy=deepcopy, states=states, use_cache=True))

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)


def _view(study: optuna.Study) -> optuna.Study:
    return cast(optuna.Study, PerTrialView(study))


class Unrepeating(optuna.samplers.BaseSampler):
    """A sampler that is steered off configurations the study already has.

    It proposes what ``base`` proposes until a proposal is a duplicate. From then on, a step
    of ``k`` of the last trial's parameters, picked at random, are drawn uniformly from their
    distributions instead of by the base: ``k = 1`` after the first duplicate, doubled after
    each further one (up to a random restart), halved after a new configuration but never
    back to 0, since a base that re-proposed a configuration once believes in it and
    proposes it again. So the search becomes the base's choice with one decision moved
    (a local step around what it believes best), widening while it keeps hitting known
    configurations. Duplicates are recognised by the user attribute that
    :class:`search.objective.Objective` sets; for a base that reads completed trials only
    (GP, NSGA-II, CMA-ES), an invalid draw it proposed before counts as a duplicate too.
    Constraint handling, multi-objective support and seeding are the base's; the base reads
    the trials through :class:`PerTrialView`.
    """

    def __init__(self, base: optuna.samplers.BaseSampler, *, seed: int | None = None) -> None:
        self.base = base
        self._seed = seed
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._rng = random.Random(seed)
        self._step = 0  # parameters to mutate in the next trial
        self._mutate: set[str] = set()
        from search.samplers import learns_from_pruned  # samplers imports nothing of ours

        #: the base reads completed trials only (GP, NSGA-II, CMA-ES): it never sees an
        #: invalid draw, which is pruned, and proposes it again and again
        self._blind = not learns_from_pruned(base)
        self._invalid: set[tuple[tuple[str, Any], ...]] = set()

    def __str__(self) -> str:
        return f"Unrepeating({self.base})"

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return self.base.infer_relative_search_space(_view(study), trial)

    def sample_relative(
        self, study: Any, trial: Any, search_space: dict[str, Any]
    ) -> dict[str, Any]:
        out = dict(self.base.sample_relative(_view(study), trial, search_space))
        for name in sorted(self._mutate & set(out)):  # in a fixed order: one RNG stream
            out[name] = self._random.sample_independent(study, trial, name, search_space[name])
        return out

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        if name in self._mutate:
            return self._random.sample_independent(study, trial, name, dist)
        return self.base.sample_independent(_view(study), trial, name, dist)

    def before_trial(self, study: Any, trial: Any) -> None:
        self.base.before_trial(study, trial)
        if self._seed is not None:
            # per trial, so that a resumed run (same seed, more trials) draws other values
            mixed = (self._seed * 1_000_003 + trial.number) & 0xFFFFFFFF
            self._random = optuna.samplers.RandomSampler(seed=mixed)
            self._rng = random.Random(mixed)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.base.after_trial(study, trial, state, values)
        if DUPLICATE_ATTR in trial.user_attrs or self._repeated_invalid(trial):
            self._step = max(1, 2 * self._step)
        elif self._step:
            self._step = max(1, self._step // 2)
        if self._step:
            names = sorted(trial.params)
            self._mutate = set(self._rng.sample(names, min(len(names), self._step)))
        else:
            self._mutate = set()

    def _repeated_invalid(self, trial: FrozenTrial) -> bool:
        """``trial`` is an invalid draw the base proposed before, and the base cannot see
        invalid draws: steered off it as off a duplicate."""
        if not self._blind or INVALID_CONSTRAINT not in trial.constraints:
            return False
        params = tuple(sorted(trial.params.items()))
        seen = params in self._invalid
        self._invalid.add(params)
        return seen

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
        self._random.reseed_rng()
