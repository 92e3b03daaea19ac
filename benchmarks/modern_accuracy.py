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


def _spread(data: ModernCases, results: list[CaseResult]) -> list[str]:
    """Rows the simulator cannot tell apart (the same configuration but for the name, e.g.
    one plan measured in several software releases): the ratio of their measured times is an
    error floor no constant can remove."""
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for case, res in zip(data.cases, results, strict=True):
        cfg = dataclasses.replace(
            case.config, model=dataclasses.replace(case.config.model, name="")
        )
        groups[repr(cfg)].append(res)
    out = []
    for members in groups.values():
        times = [r.published_iteration_time_s for r in members]
        if len(members) > 1 and max(times) / min(times) > 1.2:
            out.append(
                f"- same configuration, measured {min(times):.2f}-{max(times):.2f} s "
                f"(x{max(times) / min(times):.2f}): " + ", ".join(r.case_id for r in members)
            )
    if out:
        out.insert(0, "")
        out.insert(1, "Rows the simulator cannot tell apart, measured more than 20% apart:")
        out.insert(2, "")
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
