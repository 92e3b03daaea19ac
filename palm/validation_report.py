"""``palm-tune validate`` for the modern GPU set: per-case errors, a summary by GPU generation,
and the rows left out with their reason (:mod:`palm.validation_modern`)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, TextIO

from palm.errors import ConfigError
from palm.validation import run_cases
from palm.validation_modern import load_modern_cases

__all__ = [
    "is_modern_file",
    "modern_report",
    "report_modern",
    "write_modern",
    "write_left_out",
    "generation",
]


def generation(preset: str) -> str:
    """The GPU generation of a hardware preset: the unit the efficiency constants are fitted
    per (docs/validation.md)."""
    if "a100" in preset:
        return "A100"
    if "h100" in preset or "h200" in preset:
        return "H100"
    if "b300" in preset:
        return "Blackwell Ultra"
    return "Blackwell"


def is_modern_file(path: str | Path) -> bool:
    """Whether ``path`` has the modern set's shape (recognised in
    :mod:`palm.validation_files`); unreadable files are not."""
    from palm.validation_files import validation_file_kind

    try:
        return validation_file_kind(path) == "modern"
    except ConfigError:
        return False


def _stats(errors: list[float]) -> dict[str, float]:
    a = [abs(e) for e in errors]
    return {"count": len(a), "mean_abs_error": sum(a) / len(a), "max_abs_error": max(a)}


def modern_report(path: str | Path | None, *, engine: str) -> dict[str, Any]:
    """Predicted vs published iteration time of every expressible row, as plain data."""
    data = load_modern_cases(path)
    results = run_cases(data.cases, engine=engine)
    rows: list[dict[str, Any]] = []
    errors: list[float] = []
    by_gen: dict[str, list[float]] = defaultdict(list)
    for case, res in zip(data.cases, results, strict=True):
        errors.append(res.error)
        gen = generation(case.config.hardware.name)
        by_gen[gen].append(res.error)
        rows.append(
            {
                "id": case.case_id,
                "hardware": case.config.hardware.name,
                "predicted_iteration_time_s": res.predicted_iteration_time_s,
                "published_iteration_time_s": res.published_iteration_time_s,
                "error": res.error,
                "assumptions": list(data.assumptions.get(case.case_id, ())),
                "source": case.source,
            }
        )
    return {
        "engine": engine,
        "cases": rows,
        **(_stats(errors) if errors else {"count": 0}),
        "by_generation": {g: _stats(e) for g, e in sorted(by_gen.items())},
        "left_out": [{"id": x.case_id, "reason": x.reason} for x in data.left_out],
    }


def report_modern(path: str | Path | None, *, engine: str, as_json: bool, out: TextIO) -> int:
    """Print the modern report (a table, or JSON); exit code 0 whatever the errors."""
    report = modern_report(path, engine=engine)
    if as_json:
        out.write(json.dumps(report, indent=2) + "\n")
        return 0
    write_modern(report, engine=engine, out=out)
    return 0


def write_modern(report: dict[str, Any], *, engine: str, out: TextIO) -> None:
    """The modern report as a table, a summary by GPU generation and the rows left out."""
    out.write(
        f"{'modern case':<60} {'hardware':<12} {'predicted (s)':>13} "
        f"{'published (s)':>13} {'error':>7}\n"
    )
    for r in report["cases"]:
        out.write(
            f"{r['id'][:60]:<60} {r['hardware']:<12} {r['predicted_iteration_time_s']:>13.3f} "
            f"{r['published_iteration_time_s']:>13.3f} {r['error']:>+7.1%}\n"
        )
    out.write("\n")
    for gen, st in report["by_generation"].items():
        out.write(
            f"{gen}: {st['count']} cases, mean absolute error {st['mean_abs_error']:.1%}, "
            f"max {st['max_abs_error']:.1%}\n"
        )
    if report["cases"]:
        out.write(
            f"{len(report['cases'])} modern cases, engine {engine}: mean absolute error "
            f"{report['mean_abs_error']:.1%}, max {report['max_abs_error']:.1%}\n"
        )
    write_left_out(report["left_out"], out=out)


def write_left_out(left_out: list[dict[str, Any]], *, out: TextIO, shown: int = 3) -> None:
    """The rows left out, grouped by reason, most common first, ``shown`` ids of each."""
    reasons: dict[str, list[str]] = defaultdict(list)
    for x in left_out:
        reasons[x["reason"]].append(x["id"])
    if reasons:
        out.write(f"left out ({len(left_out)} rows):\n")
        for reason, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            more = ", ..." if len(ids) > shown else ""
            out.write(f"  {reason}: {len(ids)} ({', '.join(ids[:shown])}{more})\n")
