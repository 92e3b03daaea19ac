"""Predicted vs published iteration time of the visible Megatron SC21 cases.

Usage:
    python benchmarks/megatron_accuracy.py [--engine analytical] [--file VALIDATION.json]
        [--write-docs]

Prints one row per case (plan, predicted and derived iteration time, signed error) and the
mean and max absolute error. With --write-docs it also rewrites the table in
docs/validation.md between its BEGIN/END markers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from palm.api import ENGINES
from palm.validation import load_cases, run_cases

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"


def table(engine: str, file: str | None) -> str:
    cases = load_cases(file)
    results = run_cases(cases, engine=engine)
    rows = [
        "| case | TP, PP, DP | schedule | micro-batch x count | predicted (s) | derived (s) "
        "| error |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, res in zip(cases, results, strict=True):
        par, tr = case.config.parallelism, case.config.training
        sched = par.schedule if par.pp > 1 else "-"
        if par.chunks > 1:
            sched += f" x{par.chunks}"
        m = tr.global_batch // (par.dp * tr.micro_batch)
        rows.append(
            f"| {case.case_id} | {par.tp}, {par.pp}, {par.dp} | {sched} | {tr.micro_batch} x {m} | "
            f"{res.predicted_iteration_time_s:.3f} | {res.published_iteration_time_s:.3f} | "
            f"{res.error:+.1%} |"
        )
    errors = [abs(r.error) for r in results]
    rows.append("")
    rows.append(
        f"engine `{engine}`: mean absolute error {sum(errors) / len(errors):.1%}, "
        f"max {max(errors):.1%} over {len(errors)} cases"
    )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=ENGINES, default="analytical")
    ap.add_argument(
        "--file", default=None, help="validation JSON (default: packaged visible cases)"
    )
    ap.add_argument("--write-docs", action="store_true", help="update docs/validation.md")
    args = ap.parse_args()
    text = table(args.engine, args.file)
    print(text)
    if args.write_docs:
        write_section(DOC, args.engine, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
