"""CPU of the simulator's part of one tuner trial: parsing the trial's tables, then
``palm.api.evaluate`` (the memory check and the result from one plan context), beside the
two-step path trials took before it (``memory_check``, then a plan built again by
``search.objective.run_engine``). On a tree without ``palm.api.evaluate`` only the two-step
path is timed, so that two trees can be compared:

    python benchmarks/trial_cost.py [--repeats 10]
    PYTHONPATH=OTHER_TREE python benchmarks/trial_cost.py

Least CPU time (``time.process_time``) over ``--repeats``, in milliseconds, per example.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import palm.api
from palm.api import memory_check
from palm.config import config_to_dict, load_config, parse_config
from search.objective import run_engine

ROOT = Path(__file__).resolve().parents[1]
CASES: tuple[tuple[str, list[str]], ...] = (
    ("wafer-t18b.toml", ["training.global_batch=32"]),  # the quickstart's base
    ("t18b-dgx-a100.toml", []),
    ("llama3-70b-h100.toml", []),
)


def _least(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm up (imports, first-call caches)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    evaluate = getattr(palm.api, "evaluate", None)
    print("| example | two steps (ms CPU) | evaluate (ms CPU) |\n|---|---|---|")
    for name, overrides in CASES:
        tables = config_to_dict(load_config(ROOT / "examples" / name, overrides=overrides))

        def two_steps(tables: dict[str, Any] = tables) -> None:
            config = parse_config(tables)
            memory_check(config)
            run_engine(config, "event")

        def one_context(tables: dict[str, Any] = tables) -> None:
            assert evaluate is not None
            evaluate(parse_config(tables), engine="event")

        old = _least(two_steps, args.repeats) * 1e3
        new = f"{_least(one_context, args.repeats) * 1e3:.1f}" if evaluate else "-"
        print(f"| {name} | {old:.1f} | {new} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
