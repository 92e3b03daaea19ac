"""The tuner's own cost per trial (sampling and storage) beside the simulator's.

Usage:
    python benchmarks/tuner_overhead.py [--study studies/quickstart.toml] [--trials 40]
                                        [--storage sqlite] [--repeats 3] [--workers 1]

Runs ``search.optimize`` on a fresh storage (SQLite or a journal file in a temporary
directory) and times, inside the same process, the simulator's share of every trial
(``palm.api.evaluate``: the memory check, the plan and the engine) and the analytical
screening that runs once before the first trial (``search.screen``; on a mesh the default
screens ``min(100, trials)`` configurations) against the whole run; the rest is the
tuner's: sampling, storage reads and writes, the duplicate look-up. CPU time is reported
beside wall time (on a shared machine wall time also counts other processes). Min over
``--repeats``. With ``--workers N`` (journal storage) only the wall time of the whole study
is reported.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import optuna

import search
import search.api as api
import search.objective as objective

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn: object, box: list[float]) -> object:
    """``fn`` adding its wall time to ``box[0]`` and its CPU time to ``box[1]``."""

    def run(*args: object, **kwargs: object) -> object:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)  # type: ignore[operator]
        finally:
            box[0] += time.perf_counter() - t0
            box[1] += time.process_time() - c0

    return run


def once(study: Path, trials: int, storage: str, workers: int) -> dict[str, float]:
    sim, scr = [0.0, 0.0], [0.0, 0.0]
    names = vars(objective)  # the objective module's globals, patched for this run
    real_evaluate = names["evaluate"]
    names["evaluate"] = _timed(real_evaluate, sim)
    real_screen = api.screen
    api.screen = _timed(real_screen, scr)  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/t.db" if storage == "sqlite" else f"journal:///{tmp}/t.journal"
            tuning = search.create_study(study, storage=url)
            wall0, cpu0 = time.perf_counter(), time.process_time()
            search.optimize(tuning, n_trials=trials, workers=workers)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            n = len(tuning.study.trials)
    finally:
        names["evaluate"] = real_evaluate
        api.screen = real_screen  # type: ignore[assignment]
    return {"trials": n, "wall": wall, "cpu": cpu, "sim": sim[0], "sim_cpu": sim[1],
            "screen": scr[0], "screen_cpu": scr[1]}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--study", default=str(ROOT / "studies" / "quickstart.toml"))
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--storage", choices=("sqlite", "journal"), default="sqlite")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runs = [  # min of wall over repeats
        once(Path(args.study), args.trials, args.storage, args.workers) for _ in range(args.repeats)
    ]
    best = min(runs, key=lambda r: r["wall"])
    print(
        f"{args.study}: {args.trials} new configurations, {args.storage}, {args.workers} worker(s)"
    )
    print(f"trials {best['trials']:.0f}, wall {best['wall']:.2f} s, CPU {best['cpu']:.2f} s")
    if args.workers == 1:
        per = best["trials"]
        for what, total, simulator, screening in (
            ("wall", best["wall"], best["sim"], best["screen"]),
            ("CPU", best["cpu"], best["sim_cpu"], best["screen_cpu"]),
        ):
            tuner = total - simulator - screening
            print(
                f"{what:4}: simulator {simulator:.2f} s ({simulator / per * 1e3:.1f} ms a "
                f"trial), screening {screening:.2f} s, tuner {tuner:.2f} s "
                f"({tuner / per * 1e3:.1f} ms a trial): tuner / simulator = "
                f"{tuner / simulator:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
