"""What attaching the best trials' trace and plots costs a study (docs/tuning.md).

    python benchmarks/artifact_cost.py           # about a minute on two cores

Runs the quickstart (40 trials, TPE, seed 0) through ``search.optimize`` into a temporary
SQLite storage and prints: how many trials were a new best (each gets its artifacts attached,
as recipes), the sum of the trials' durations, and the time to draw one best trial's files
(``search.artifacts.materialize``: an event simulation with its timeline, the trace and two
plots) beside the mean trial's duration. Wall times on a shared machine are noisy.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import optuna
from optuna.artifacts import get_all_artifact_meta

import search
from search.artifacts import materialize

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the counts below say it
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/q.db"
        study = search.create_study(REPO / "studies" / "quickstart.toml", storage=url)
        search.optimize(study)
        trials = study.trials
        bests = [t for t in trials if get_all_artifact_meta(t, storage=study._storage)]
        durations = [t.duration.total_seconds() for t in trials if t.duration is not None]
        started = time.perf_counter()
        materialize(study, study.artifacts, search.best_trial(study))
        draw_s = time.perf_counter() - started
    mean = sum(durations) / len(durations)
    print(f"trials                 {len(trials)}, of which a new best when run: {len(bests)}")
    print(f"trial durations        sum {sum(durations):.1f} s, mean {mean:.2f} s")
    print(f"drawing one best trial {draw_s:.1f} s ({draw_s / mean:.1f} mean trials)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
