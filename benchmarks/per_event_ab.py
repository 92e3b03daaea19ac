"""Interleaved before/after of the event engine's cost per event: the per-event table's cases
(``engine_speed.py``) timed on two source trees alternately, each in a child process pinned to
one core, so that both trees see the same machine state (a figure measured earlier on a shared
machine is not comparable).

Usage:
    python benchmarks/per_event_ab.py OLD_TREE NEW_TREE [--rounds 2] [--repeats 7]

``OLD_TREE`` and ``NEW_TREE`` are checkouts of this repository (``git worktree add``); each child
imports ``palm`` from its tree, and the cases and their timing from this script's
``engine_speed.py`` (the same for both trees). Prints, per case and tree, a
plan's first and second run in microseconds per event (least of at least ``--repeats``,
more for a short run: ``engine_speed.per_event_runs``) and the ratio of
the first run to plain SimPy's own per event, over the rounds, and which networks each tree
ran (``palm-tune --version``'s: the compiled builds or the .py modules; ``PALM_PURE_PYTHON=1`` in
the environment makes both trees run the .py modules).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def _child(repeats: int) -> list[dict[str, object]]:
    """This process's tree (its ``palm``; the cases and timing of this script's
    ``engine_speed.py``): the first and second run of every case, and SimPy's baseline."""
    import engine_speed as es

    es._pin_one_core()  # noqa: SLF001 - the benchmark's own helper
    out = []
    network = es.IMPLEMENTATION  # which networks this tree runs
    for name, cfg, model in es.per_event_cases(visible=(0,)):
        x = es.per_event_runs(cfg, model, repeats)
        out.append(
            {
                "case": name,
                "model": model,
                "first": x.first_us,
                "second": x.second_us,
                "simpy": x.simpy_us,
                "network": network,
            }
        )
    return out


def _run_tree(tree: Path, repeats: int) -> list[dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); "
        "import per_event_ab as ab; print(json.dumps(ab._child(int(sys.argv[2]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).resolve().parent), str(repeats)],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    rows: list[dict[str, object]] = json.loads(out.stdout.strip().splitlines()[-1])
    return rows


def _span(values: list[float], digits: int = 2) -> str:
    lo, hi = min(values), max(values)
    return (
        f"{lo:.{digits}f}"
        if round(lo, digits) == round(hi, digits)
        else f"{lo:.{digits}f}-{hi:.{digits}f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    got: dict[str, list[list[dict[str, object]]]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for which in ("old", "new"):
            got[which].append(_run_tree(getattr(args, which).resolve(), args.repeats))
    for which in ("old", "new"):
        print(f"{which} ({getattr(args, which)}): networks {got[which][0][0]['network']}")
    print()
    print(
        "| case | model | first run before | first run after | second run before "
        "| second run after |\n|---|---|---|---|---|---|"
    )
    for i, row in enumerate(got["old"][0]):
        cells = []
        for which in ("old", "new"):
            rounds = [r[i] for r in got[which]]
            first = [float(r["first"]) for r in rounds]  # type: ignore[arg-type]
            ratio = [float(r["first"]) / float(r["simpy"]) for r in rounds]  # type: ignore[arg-type]
            cells.append(f"{_span(first)} ({_span(ratio)})")
        for which in ("old", "new"):
            cells.append(_span([float(r[i]["second"]) for r in got[which]]))  # type: ignore[arg-type]
        print(f"| {row['case']} | {row['model']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
