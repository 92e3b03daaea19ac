"""The progress of a tuning run: one tqdm bar over the study, and the counts the run's summary
prints (the same numbers).

The bar counts finished trials of the whole study: it starts at the trials finished before the
run (a continued study) and ends at the trials the run asks for, ``before + budget +
not simulated``: the budget counts event simulations (:class:`search.dedup.NewConfigBudget`),
so each trial of the run that simulated nothing (a duplicate proposal answered from the
storage, a memory overflow, an invalid draw) adds one trial to ask. A run
that stops before (the space exhausted, the sampler stalled, a timeout) closes its bar at the
trials it did. The run's trials are the finished trials that one of its processes ran (their
worker, :data:`search.storage.WORKER_ATTR`), whatever their number: so the trials that a
screening enqueued before the run count when the run simulates them, and another machine's
trials of the same study do not. Beside it: the run's trials by kind (:func:`trial_kind`:
simulated, cached duplicates, pruned for memory, invalid choices, failed) and the study's
best value; tqdm gives the rate (of this run's trials) and the time left. On a terminal it is
one live line; otherwise (a log, CI) one line per finished trial.

With several workers the parent process polls the storage (:func:`watch`).
"""

from __future__ import annotations

import io
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]

from search.dedup import DUPLICATE_ATTR, INVALID_CONSTRAINT
from search.metrics import is_overflow
from search.storage import WORKER_ATTR

__all__ = [
    "Progress",
    "RunCounts",
    "run_counts",
    "study_counts",
    "trial_kind",
    "watch",
    "best_value",
    "KINDS",
]

_POLL_S = 1.0
_FALLBACK_COLUMNS, _FALLBACK_ROWS = 150, 24
#: what a finished trial was, in the order the counts are shown
KINDS = ("simulated", "duplicate", "overflow", "invalid", "failed")
_LABELS = {
    "simulated": "simulated",
    "duplicate": "cached duplicates",
    "overflow": "pruned for memory",
    "invalid": "invalid",
    "failed": "failed",
}


_SHORT = {**_LABELS, "duplicate": "cached", "overflow": "over memory"}


def trial_kind(t: FrozenTrial) -> str | None:
    """What a finished trial cost (one of :data:`KINDS`), or None for an unfinished one:
    ``duplicate`` (a configuration the study had: answered from the storage), ``failed``,
    ``overflow`` (did not fit memory: not simulated, COMPLETE and infeasible or PRUNED),
    ``invalid`` (contradictory choices), ``simulated`` (the engine ran it)."""
    if not t.state.is_finished():
        return None
    if DUPLICATE_ATTR in t.user_attrs:
        return "duplicate"
    if t.state == TrialState.FAIL:
        return "failed"
    if is_overflow(t):
        return "overflow"
    if t.state == TrialState.PRUNED:
        return "invalid" if INVALID_CONSTRAINT in t.constraints else "overflow"
    return "simulated"


@dataclass(frozen=True)
class RunCounts:
    """A run's finished trials by kind, and the study's finished trials before it."""

    before: int
    simulated: int = 0
    duplicate: int = 0
    overflow: int = 0
    invalid: int = 0
    failed: int = 0

    @property
    def done(self) -> int:
        """Finished trials of the run."""
        return self.simulated + self.duplicate + self.overflow + self.invalid + self.failed

    @property
    def new(self) -> int:
        """Trials that were not duplicates."""
        return self.done - self.duplicate

    @property
    def extra(self) -> int:
        """Trials that do not count against the budget (event simulations,
        :func:`search.dedup.simulated`): duplicates, memory overflows and invalid draws."""
        return self.duplicate + self.overflow + self.invalid

    def kinds(self, *, short: bool = False) -> str:
        """``30 simulated, 5 cached duplicates, ...``: every kind, zeros included (``short``:
        the bar's labels, ``5 cached, 3 over memory``)."""
        labels = _SHORT if short else _LABELS
        return ", ".join(f"{getattr(self, k)} {labels[k]}" for k in KINDS)


def run_counts(study: optuna.Study, ours: Iterable[str], *, before: set[int] | int) -> RunCounts:
    """The finished trials of ``study`` that a worker of ``ours`` (``host:pid``) ran and that
    were not finished ``before`` (their numbers; or an int: the count alone, for a fresh run
    whose trials are all new), by kind."""
    mine = set(ours)
    done_before = before if isinstance(before, set) else set()
    counts = dict.fromkeys(KINDS, 0)
    for t in study.get_trials(deepcopy=False):
        kind = trial_kind(t)
        if kind is None or t.number in done_before or t.user_attrs.get(WORKER_ATTR) not in mine:
            continue
        counts[kind] += 1
    n_before = len(before) if isinstance(before, set) else before
    return RunCounts(before=n_before, **counts)


def study_counts(study: optuna.Study) -> RunCounts:
    """Every finished trial of ``study`` by kind (``before`` = 0)."""
    counts = dict.fromkeys(KINDS, 0)
    for t in study.get_trials(deepcopy=False):
        kind = trial_kind(t)
        if kind is not None:
            counts[kind] += 1
    return RunCounts(before=0, **counts)


def best_value(study: optuna.Study) -> float | None:
    """The primary value of the study's best trial (:func:`search.api.best_trial`): the most
    throughput, or the best first objective, among completed trials that fit memory."""
    objectives = study.user_attrs.get("objectives") or []
    i = list(objectives).index("throughput") if "throughput" in objectives else 0
    sign = 1.0 if study.directions[i] == StudyDirection.MAXIMIZE else -1.0
    values = [
        t.values[i]
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values and not is_overflow(t) and math.isfinite(t.values[i])
    ]
    return max(values, key=lambda v: sign * v) if values else None


def _size(stream: TextIO) -> tuple[int, int]:
    """(columns, rows) of the terminal behind ``stream`` ((0, 0): unknown)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return 0, 0
    return size.columns, size.lines


def _finished(study: optuna.Study) -> set[int]:
    return {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}


class Progress:
    """The bar of a run on ``study`` with a budget of ``budget`` event simulations (None:
    a run bounded by time). ``ours`` gives the run's workers (``host:pid``). Call it as an
    Optuna callback (``study.optimize(callbacks=[...])``) or :meth:`update` it."""

    def __init__(
        self,
        study: optuna.Study,
        *,
        budget: int | None,
        ours: Callable[[], set[str]],
        stream: TextIO,
    ) -> None:
        self.before = _finished(study)
        self.budget, self.ours, self.stream = budget, ours, stream
        self.tty = stream.isatty()
        self.counts = RunCounts(before=len(self.before))
        start = len(self.before)
        # a terminal that reports no size (a pty without one: script, some CI runners) made
        # tqdm draw an empty bar (no width) or none at all (no rows): a fixed size then
        width, rows = _size(stream) if self.tty else (0, 0)
        self.bar = tqdm(
            total=None if budget is None else start + budget,
            initial=start,
            desc=study.study_name,
            unit="trial",
            file=stream if self.tty else io.StringIO(),
            dynamic_ncols=width > 0,  # not a terminal: no width limit, one line per trial
            ncols=_FALLBACK_COLUMNS if self.tty and width <= 0 else None,
            nrows=_FALLBACK_ROWS if self.tty and rows <= 0 else None,
            mininterval=0.2,
            smoothing=0.1,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} trials "
            "[{elapsed}<{remaining}, {rate_fmt}]{postfix}"
            if budget is not None
            else "{desc}: {n_fmt} trials [{elapsed}, {rate_fmt}]{postfix}",
        )
        self.bar.set_postfix_str(self._postfix(study), refresh=True)

    def __call__(self, study: optuna.Study, trial: FrozenTrial | None = None) -> None:
        self.update(study)

    def _postfix(self, study: optuna.Study) -> str:
        best = best_value(study)
        return self.counts.kinds(short=True) + ("" if best is None else f"; best {best:,.4g}")

    def update(self, study: optuna.Study) -> None:
        """Redraw from the storage: every worker's finished trials since the run started."""
        self.counts = run_counts(study, self.ours(), before=self.before)
        n = len(self.before) + self.counts.done
        if self.budget is not None:
            # each trial that simulated nothing is one more to ask: the budget counts
            # event simulations
            self.bar.total = max(n, len(self.before) + self.budget + self.counts.extra)
        self.bar.set_postfix_str(self._postfix(study), refresh=False)
        if n == self.bar.n:
            self.bar.refresh()
            return
        self.bar.update(n - self.bar.n)
        if not self.tty:
            self.stream.write(str(self.bar) + "\n")
            self.stream.flush()

    def close(self, study: optuna.Study | None = None) -> None:
        """Last update (with ``study``), then the bar ends at the trials the run did (a run
        that stopped before its budget asked for no more)."""
        if study is not None:
            self.update(study)
        if self.bar.total is not None and self.bar.n < self.bar.total:
            self.bar.total = self.bar.n
            self.bar.refresh()
            if not self.tty:
                self.stream.write(str(self.bar) + "\n")
        self.bar.close()


@contextmanager
def watch(
    study: optuna.Study, *, budget: int | None, ours: Callable[[], set[str]], stream: TextIO
) -> Iterator[Progress]:
    """Show :class:`Progress` of ``study`` from a thread of this process while the body runs
    (workers in other processes add the trials)."""
    progress = Progress(study, budget=budget, ours=ours, stream=stream)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(_POLL_S):
            try:
                progress.update(study)
            except Exception:  # noqa: BLE001 - a busy storage: try again next second
                continue

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()
        try:
            progress.close(study)
        except Exception:  # noqa: BLE001 - never hide why the run ended (an interrupt...)
            progress.bar.close()
