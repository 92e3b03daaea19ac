"""Interleaved before/after of the event engine's cost per event: the per-event table's cases
(``engine_speed.py``) timed on two source trees alternately, each in a child process pinned to
one core, so that both trees see the same machine state (a figure measured earlier on a shared
machine is not comparable).

Usage:
    python benchmarks/per_event_ab.py OLD_TREE NEW_TREE [--rounds 2] [--repeats 7]

``OLD_TREE`` and ``NEW_TREE`` are checkouts of this repository (``git worktree add``); each child
imports ``palm`` and ``benchmarks/engine_speed.py`` from its tree. Prints, per case and tree, a
plan's first and second run in microseconds per event (least of ``--repeats``) and the ratio of
the first run to plain SimPy's own per event, over the rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _child(repeats: int) -> list[dict[str, object]]:
    """This process's tree: the first and second run of every case, and SimPy's baseline."""
    import engine_speed as es

    from palm.api import plan_for
    from palm.engines.event import run_event
    from palm.validation import load_cases

    es._pin_one_core()  # noqa: SLF001 - the benchmark's own helper
    visible = load_cases()
    cases = [(visible[0].case_id, visible[0].config)]
    cases += [(f"wafer-palm {p}", es.wafer_config(p)) for p in ("t-18b", "t-145b")]
    cases += [("wafer-palm t-145b TP4 PP20 DP4", es.T145B_TP4)]
    out = []
    for name, cfg in cases:
        for model in ("fair", "exclusive"):
            comm = dataclasses.replace(cfg.communication, noc_model=model)
            plan = plan_for(dataclasses.replace(cfg, communication=comm))
            firsts, seconds = [], []
            for _ in range(repeats):
                fresh = dataclasses.replace(plan)  # no engine tables: the first run builds them
                start = time.process_time()
                run_event(fresh, record=False)
                firsts.append(time.process_time() - start)
                start = time.process_time()
                result, _ = run_event(fresh, record=False)
                seconds.append(time.process_time() - start)
            events = result.events_simulated or 1
            simpy = min(
                es.simpy_per_event_us(events, cfg.parallelism.pp)[0] for _ in range(repeats)
            )
            out.append(
                {
                    "case": name,
                    "model": model,
                    "first": 1e6 * min(firsts) / events,
                    "second": 1e6 * min(seconds) / events,
                    "simpy": simpy,
                }
            )
    return out


def _run_tree(tree: Path, repeats: int) -> list[dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); "
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
        "import per_event_ab as ab; print(json.dumps(ab._child(int(sys.argv[2]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tree / "benchmarks"), str(repeats)],
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
