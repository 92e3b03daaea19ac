"""``palm-tune validate --suite inference`` (and ``validate FILE`` on a file of the inference
rows' shape): predicted against measured for every expressible row, the signed error, a summary
per source and per kind of device, and the rows left out with their reason. The JSON keys are
those of the other suites (``cases`` with ``id`` and ``error``; ``left_out`` with ``id`` and
``reason``)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, TextIO

from palm.api import simulate
from palm.serving.validation import InferenceCase, load_inference_cases, predicted_value
from palm.validation_report import write_left_out

__all__ = ["inference_report", "report_inference", "write_inference", "evaluate_case"]


def _throughput(case: InferenceCase, data: dict[str, Any]) -> float:
    """What a tuned plan maximises: the predicted figure when it is a rate, else output
    tokens per second."""
    if case.predicted_key == "ttft_s":
        return -float(data["ttft_s"] or float("inf"))
    return float(data.get(case.predicted_key) or 0.0)


def evaluate_case(case: InferenceCase) -> tuple[float, dict[str, Any]]:
    """The predicted figure of ``case`` (its fastest candidate plan) and the plan."""
    best: tuple[float, float, dict[str, Any]] | None = None
    for config in case.configs:
        data = simulate(config).to_dict()
        if not data["fits_memory"] and len(case.configs) > 1:
            continue
        value = predicted_value(data, case, devices=int(data["devices"]))
        if value is None:
            continue
        score = _throughput(case, data)
        if best is None or score > best[0]:
            par, sv = config.parallelism, config.serving
            plan = {
                "tp": par.tp,
                "pp": par.pp,
                "dp": par.dp,
                "batch": sv.batch,
                "batching": sv.batching,
                "chunk_tokens": sv.chunk_tokens,
                "precision": config.training.precision,
                "fits_memory": data["fits_memory"],
            }
            best = (score, value, plan)
    if best is None:
        return float("nan"), {}
    return best[1], best[2]


def _stats(errors: list[float]) -> dict[str, float]:
    a = [abs(e) for e in errors]
    return {"count": len(a), "mean_abs_error": sum(a) / len(a), "max_abs_error": max(a)}


def inference_report(path: str | Path | None) -> dict[str, Any]:
    """Every expressible row's predicted and measured figure, as plain data."""
    data = load_inference_cases(path)
    rows: list[dict[str, Any]] = []
    by_source: dict[str, list[float]] = defaultdict(list)
    by_device: dict[str, list[float]] = defaultdict(list)
    left = [{"id": x.case_id, "reason": x.reason} for x in data.left_out]
    for case in data.cases:
        predicted, plan = evaluate_case(case)
        if predicted != predicted:  # nan: no plan fits
            left.append({"id": case.case_id, "reason": "no candidate plan fits in memory"})
            continue
        error = predicted / case.measured - 1.0
        kind = "tenstorrent" if case.hardware.startswith("Wormhole") else "gpu"
        by_source[case.source].append(error)
        by_device[kind].append(error)
        rows.append(
            {
                "id": case.case_id,
                "hardware": case.hardware,
                "measured_key": case.measured_key,
                "measured": case.measured,
                "predicted_key": case.predicted_key,
                "predicted": predicted,
                "error": error,
                "plan": plan,
                "assumptions": list(case.assumptions),
                "source": case.source,
            }
        )
    errors = [r["error"] for r in rows]
    return {
        "engine": "serving",
        "cases": rows,
        **(_stats(errors) if errors else {"count": 0}),
        "by_source": {k: _stats(v) for k, v in sorted(by_source.items())},
        "by_device": {k: _stats(v) for k, v in sorted(by_device.items())},
        "left_out": left,
    }


def report_inference(path: str | Path | None, *, as_json: bool, out: TextIO) -> int:
    """Print the inference report (a table, or JSON); exit code 0 whatever the errors."""
    report = inference_report(path)
    if as_json:
        out.write(json.dumps(report, indent=2) + "\n")
        return 0
    write_inference(report, out=out)
    return 0


def write_inference(report: dict[str, Any], *, out: TextIO) -> None:
    """The inference report as a table, summaries by source and device, and the left out."""
    out.write(
        f"{'inference case':<58} {'TP':>3} {'batch':>6} {'measured':>12} {'predicted':>12} "
        f"{'error':>7}\n"
    )
    for r in report["cases"]:
        out.write(
            f"{r['id'][:58]:<58} {r['plan'].get('tp', 0):>3} {r['plan'].get('batch', 0):>6} "
            f"{r['measured']:>12.4g} {r['predicted']:>12.4g} {r['error']:>+7.1%}\n"
        )
    out.write("\n")
    for name, group in (("source", "by_source"), ("device", "by_device")):
        for key, st in report[group].items():
            out.write(
                f"{name} {key}: {st['count']} cases, mean absolute error "
                f"{st['mean_abs_error']:.1%}, max {st['max_abs_error']:.1%}\n"
            )
    if report["cases"]:
        out.write(
            f"{len(report['cases'])} inference cases: mean absolute error "
            f"{report['mean_abs_error']:.1%}, max {report['max_abs_error']:.1%}\n"
        )
    write_left_out(report["left_out"], out=out, shown=2)
