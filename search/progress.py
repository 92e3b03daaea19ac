"""The progress bar of a tuning run: tqdm (an Optuna dependency) over the whole study.

It counts the trials finished in the study's storage since the run started, so with several
workers it shows all of them (the parent process polls the storage, :func:`watch`), and tqdm
gives the rate and the time left. On a terminal it is one live line; otherwise (a log, CI) one
line per update.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import optuna
from optuna.trial import FrozenTrial, TrialState
from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]

from search.metrics import is_overflow

__all__ = ["Progress", "watch"]

_POLL_S = 1.0


class Progress:
    """An Optuna callback (``study.optimize(callbacks=[...])``) and a poller's target."""

    def __init__(self, *, total: int | None, first: int, stream: TextIO) -> None:
        self.first, self.stream = first, stream
        self.tty = stream.isatty()
        self.bar = tqdm(
            total=total,
            unit="trial",
            file=stream if self.tty else io.StringIO(),
            dynamic_ncols=True,
            mininterval=0.2,
            smoothing=0.1,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, "
            "{rate_fmt}]{postfix}"
            if total
            else None,
        )

    def __call__(self, study: optuna.Study, trial: FrozenTrial | None = None) -> None:
        self.update(study)

    def update(self, study: optuna.Study) -> None:
        """Redraw from the storage: every worker's finished trials since the run started."""
        done = complete = overflow = failed = 0
        best: float | None = None
        sign = 1.0 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1.0
        for t in study.get_trials(deepcopy=False):
            if t.number < self.first or not t.state.is_finished():
                continue
            done += 1
            if is_overflow(t):
                overflow += 1
            elif t.state == TrialState.COMPLETE:
                complete += 1
                if t.values and (best is None or sign * t.values[0] > sign * best):
                    best = t.values[0]
            elif t.state == TrialState.FAIL:
                failed += 1
        postfix = f"complete {complete}, over memory {overflow}, failed {failed}"
        if best is not None:
            postfix += f", best {best:,.4g}"
        self.bar.set_postfix_str(postfix, refresh=False)
        if done <= self.bar.n:
            self.bar.refresh()
            return
        self.bar.update(done - self.bar.n)
        if not self.tty:
            self.stream.write(str(self.bar) + "\n")
            self.stream.flush()

    def close(self) -> None:
        self.bar.close()


@contextmanager
def watch(study: optuna.Study, *, total: int | None, first: int, stream: TextIO) -> Iterator[None]:
    """Show :class:`Progress` of ``study`` from a thread of this process while the body runs
    (workers in other processes add the trials)."""
    progress = Progress(total=total, first=first, stream=stream)
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
        yield
    finally:
        stop.set()
        thread.join()
        try:
            progress.update(study)
        except Exception:  # noqa: BLE001 - never hide why the run ended (an interrupt...)
            pass
        finally:
            progress.close()
