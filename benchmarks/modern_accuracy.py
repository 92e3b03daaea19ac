"""Predicted vs published iteration time of the modern GPU validation set.

Usage:
    python benchmarks/modern_accuracy.py [--engine analytical] [--file VALIDATION.json]
        [--write-docs]

One row per expressible case (GPU, plan, predicted and derived iteration time, signed error),
the mean and max absolute error by GPU generation and overall, then the rows left out and why.
With --write-docs the table replaces the ``modern`` block of docs/validation.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path

from palm.api import ENGINES
from palm.validation import CaseResult, ValidationCase, run_cases
from palm.validation_modern import ModernCases, load_modern_cases
from palm.validation_report import generation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"


def summary(results: list[CaseResult]) -> str:
    if not results:
        return "no cases"
    errs = [abs(r.error) for r in results]
    return f"mean {sum(errs) / len(errs):.1%}, max {max(errs):.1%} over {len(errs)}"


def _moe(case: ValidationCase) -> bool:
    return bool(getattr(case.config.model, "experts", 0))


def _plan_key(case: ValidationCase) -> str:
    """The configuration but for the name and the routing mode (token drop with capacity
    factor 1 and forced-balanced dropless routing price the same load)."""
    model = dataclasses.replace(case.config.model, name="", capacity_factor=0.0)
    return repr(dataclasses.replace(case.config, model=model))


def _routing(case: ValidationCase) -> str:
    return "token drop" if getattr(case.config.model, "capacity_factor", 0) else "dropless"


def _spread(data: ModernCases, results: list[CaseResult]) -> list[str]:
    """Rows with the same plan (one plan measured in several software releases, possibly with
    token drop in one and dropless routing in the other) measured more than 20% apart: the
    ratio of their measured times is an error floor no constant can remove."""
    groups: dict[str, list[tuple[ValidationCase, CaseResult]]] = defaultdict(list)
    for case, res in zip(data.cases, results, strict=True):
        groups[_plan_key(case)].append((case, res))
    out = []
    for members in groups.values():
        times = [r.published_iteration_time_s for _, r in members]
        if len(members) > 1 and max(times) / min(times) > 1.2:
            labels = [
                f"{c.case_id} ({_routing(c)}, {r.published_iteration_time_s:.2f} s)"
                for c, r in members
            ]
            out.append(f"- same plan, x{max(times) / min(times):.2f}: " + ", ".join(labels))
    if out:
        out[:0] = ["", "Same plan measured in two releases, more than 20% apart:", ""]
    return out


def table(engine: str, data: ModernCases) -> str:
    results = run_cases(data.cases, engine=engine)
    rows = [
        "| case | GPU | TP, PP, CP, DP | ZeRO | mb x count | predicted (s) | derived (s) | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for case, res in zip(data.cases, results, strict=True):
        cfg = case.config
        par, tr = cfg.parallelism, cfg.training
        cp = getattr(par, "cp", 1)
        m = tr.global_batch // (par.dp * tr.micro_batch)
        groups[generation(cfg.hardware.name)].append(res)
        note = " *" if case.case_id in data.assumptions else ""
        rows.append(
            f"| {case.case_id}{note} | {cfg.hardware.name} | {par.tp}, {par.pp}, {cp}, {par.dp} | "
            f"{tr.zero} | {tr.micro_batch} x {m} | {res.predicted_iteration_time_s:.3f} | "
            f"{res.published_iteration_time_s:.3f} | {res.error:+.1%} |"
        )
    rows.append("")
    for name in sorted(groups):
        rows.append(f"- {name}: {summary(groups[name])}")
    rows.append(f"- all expressible rows, engine `{engine}`: {summary(results)}")
    dense = [r for c, r in zip(data.cases, results, strict=True) if not _moe(c)]
    moe = [r for c, r in zip(data.cases, results, strict=True) if _moe(c)]
    rows.append(f"- dense rows: {summary(dense)}; mixture-of-experts rows: {summary(moe)}")
    rows.extend(_spread(data, results))
    rows.append("")
    rows.append(
        "`*` assumes a field the source does not state: "
        + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(data.assumptions.items()))
        if data.assumptions
        else ""
    )
    rows.append("")
    reasons: dict[str, list[str]] = defaultdict(list)
    for left in data.left_out:
        reasons[left.reason].append(left.case_id)
    rows.append(f"Left out ({len(data.left_out)} rows):")
    rows.append("")
    for reason, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        rows.append(f"- {reason} ({len(ids)}): {', '.join(ids)}")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=ENGINES, default="analytical")
    ap.add_argument("--file", default=None, help="validation JSON (default: packaged set)")
    ap.add_argument("--write-docs", action="store_true", help="update docs/validation.md")
    args = ap.parse_args()
    text = table(args.engine, load_modern_cases(args.file))
    print(text)
    if args.write_docs:
        write_section(DOC, "modern", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
