"""Which trials NSGA-II learns from in a study whose plans often overflow memory.

    python benchmarks/overflow_to_samplers.py          # about a minute on two cores

A 12-trial NSGA-II study (t-39b on the 5 x 4-tile wafer without recompute, objectives
throughput and memory; the study of tests/search/test_samplers.py) run through
``search.optimize``. NSGA-II reads only COMPLETE trials (``optuna/samplers/_ga/_base.py``): it
prints how many trials overflowed and in which state they ended, and how many of the trials
NSGA-II reads are overflows. Before palm-tune reported an overflow as a COMPLETE, infeasible
trial, that last number was 0.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import optuna
from optuna.trial import TrialState

import search

REPO = Path(__file__).resolve().parents[1]
STUDY = f"""[study]
name = "overflow"
base = "{REPO / "examples" / "wafer-t18b.toml"}"
set = ["model.preset=\\"t-39b\\"", "training.global_batch=32", "training.recompute=\\"none\\""]
objectives = ["throughput", "memory"]
sampler = "nsga2"
trials = 12
seed = 1

[space]
parallelism = true
micro_batch = [1, 2]
"""


def main() -> int:
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the counts below say it
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "overflow.toml"
        path.write_text(STUDY, encoding="utf-8")
        tuning = search.create_study(path, storage=f"sqlite:///{tmp}/s.db")
        search.optimize(tuning)
        trials = tuning.study.trials
    over = [t for t in trials if t.constraints.get("memory_overflow_bytes", 0.0) > 0]
    read = [t for t in trials if t.state == TrialState.COMPLETE]
    states = ", ".join(sorted({t.state.name for t in over}))
    print(f"overflowing trials       {len(over)} of {len(trials)} ({states})")
    both = {t.number for t in read} & {t.number for t in over}
    print(f"trials NSGA-II reads     {len(read)}, of which overflow {len(both)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
