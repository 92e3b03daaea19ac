"""The tiled part of ``palm-tune validate``: predicted against measured for every visible
matrix product (Wormhole n150 and Blackhole p150, each chip apart: ``gemm.by_chip``) and
Wormhole DRAM bandwidth, as plain data and as tables, with the mean and max absolute error of
each group (all, and the subsets whose errors have different causes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TextIO

from palm.validation_tiled import TiledCases, fidelity_conflicts, predict_dram, predict_gemm

__all__ = ["tiled_report", "write_tiled_tables", "error_stats"]

Row = dict[str, Any]


def error_stats(rows: Sequence[Row], keep: Callable[[Row], bool] = lambda r: True) -> Row:
    """``{"cases", "mean_abs_error", "max_abs_error"}`` over the rows that ``keep`` accepts."""
    errors = [abs(float(r["error"])) for r in rows if keep(r)]
    if not errors:
        return {"cases": 0, "mean_abs_error": None, "max_abs_error": None}
    return {
        "cases": len(errors),
        "mean_abs_error": sum(errors) / len(errors),
        "max_abs_error": max(errors),
    }


def _gemm_rows(cases: TiledCases, engine: str) -> list[Row]:
    rows = []
    conflicts = fidelity_conflicts(cases.gemm)
    for case in cases.gemm:
        model, hw = case.config.model, case.config.hardware
        predicted = predict_gemm(case, engine=engine)
        rows.append({
            "id": case.case_id, "chip": case.chip,
            "m": model.m, "k": model.k, "n": model.n,
            "precision": case.config.training.precision,
            "math_fidelity": getattr(hw, "math_fidelity", ""),
            "sram_resident": list(model.sram_resident),
            "traced": case.traced, "tuned": case.tuned,
            "predicted_s": predicted, "measured_s": case.measured_time_s,
            "error": predicted / case.measured_time_s - 1.0,
            "fidelity_conflict_with": getattr(conflicts.get(case.case_id), "case_id", None),
            "source": case.source,
        })  # fmt: skip
    return rows


def _dram_rows(cases: TiledCases) -> list[Row]:
    rows = []
    for case in cases.dram:
        t = case.transfer
        predicted = predict_dram(case)
        rows.append({
            "id": case.case_id, "cores": t.cores, "channels": t.channels,
            "pairing": "paired" if t.paired else "random", "noc": t.noc,
            "direction": "write" if t.write else "read",
            "dynamic_vc": "dynamicvc" in case.case_id,
            "predicted_GBps": predicted / 1e9, "measured_GBps": case.measured_Bps / 1e9,
            "error": predicted / case.measured_Bps - 1.0,
            "source": case.source,
        })  # fmt: skip
    return rows


GEMM_GROUPS = ("all", "consistent", "tuned", "out_of_box", "traced")
"""The groups of matrix products reported, overall and per chip."""


def _gemm_stats(rows: Sequence[Row]) -> Row:
    return {
        "all": error_stats(rows),
        "consistent": error_stats(rows, lambda r: r["fidelity_conflict_with"] is None),
        "tuned": error_stats(rows, lambda r: r["tuned"]),
        "out_of_box": error_stats(rows, lambda r: not r["tuned"]),
        "traced": error_stats(rows, lambda r: r["traced"]),
    }


def tiled_report(cases: TiledCases, *, engine: str = "analytical") -> Row:
    """Rows and error statistics of the ``gemm`` and ``dram`` cases; the products' groups
    overall and, under ``by_chip``, for each chip apart (its own fitted constants)."""
    gemm, dram = _gemm_rows(cases, engine), _dram_rows(cases)
    many_dynamic_writes = lambda r: r["dynamic_vc"] and r["direction"] == "write" and r["cores"] > 1  # noqa: E731
    chips = list(dict.fromkeys(r["chip"] for r in gemm))
    return {
        "gemm": {
            "cases": gemm,
            **_gemm_stats(gemm),
            "by_chip": {
                chip: _gemm_stats([r for r in gemm if r["chip"] == chip]) for chip in chips
            },  # fmt: skip
        },
        "dram": {
            "cases": dram,
            "all": error_stats(dram),
            "reads": error_stats(dram, lambda r: r["direction"] == "read"),
            "writes_static_vc": error_stats(
                dram, lambda r: r["direction"] == "write" and not r["dynamic_vc"]
            ),
            "writes_dynamic_vc_many_cores": error_stats(dram, many_dynamic_writes),
        },
    }


def _stat_line(name: str, stats: Row) -> str:
    if not stats["cases"]:
        return f"  {name}: no cases\n"
    return (
        f"  {name:<28} {stats['cases']:>3} cases: mean absolute error "
        f"{stats['mean_abs_error']:.1%}, max {stats['max_abs_error']:.1%}\n"
    )


_CHIP_TITLES = {"wormhole": "Wormhole n150", "blackhole": "Blackhole p150"}


def write_tiled_tables(out: TextIO, report: Row) -> None:
    """The tables and their summaries, for the terminal: one matrix-product table per chip."""
    gemm, dram = report["gemm"], report["dram"]
    for chip, stats in gemm.get("by_chip", {}).items():
        _write_gemm_table(out, chip, [r for r in gemm["cases"] if r["chip"] == chip], stats)
    if dram["cases"]:
        out.write(
            f"\n{'Wormhole n150 DRAM bandwidth':<50} {'predicted (GB/s)':>16} "
            f"{'measured (GB/s)':>16} {'error':>7}\n"
        )
        for r in dram["cases"]:
            label = (
                f"{r['cores']} cores {r['channels']} ch {r['pairing']} NoC{r['noc']} "
                f"{r['direction']}{' dynamic VC' if r['dynamic_vc'] else ''}"
            )
            out.write(
                f"{label:<50} {r['predicted_GBps']:>16.1f} {r['measured_GBps']:>16.1f} "
                f"{r['error']:>+7.1%}\n"
            )
        out.write("\n")
        for name in ("all", "reads", "writes_static_vc", "writes_dynamic_vc_many_cores"):
            out.write(_stat_line(f"DRAM {name}", dram[name]))


def _write_gemm_table(out: TextIO, chip: str, rows: Sequence[Row], stats: Row) -> None:
    title = f"{_CHIP_TITLES.get(chip, chip)} matmul"
    out.write(
        f"\n{title:<50} {'fid':<5} {'trace':<5} "
        f"{'predicted (us)':>14} {'measured (us)':>14} {'error':>7}\n"
    )
    for r in rows:
        shape = f"{r['m']}x{r['k']}x{r['n']} {r['precision']}"
        kind = "tuned" if r["tuned"] else "out-of-box"
        where = "L1:" + "".join(r["sram_resident"]) if r["sram_resident"] else "DRAM"
        out.write(
            f"{kind + ' ' + shape + ' ' + where:<50} {r['math_fidelity']:<5} "
            f"{'yes' if r['traced'] else 'no':<5} {r['predicted_s'] * 1e6:>14.1f} "
            f"{r['measured_s'] * 1e6:>14.1f} {r['error']:>+7.1%}\n"
        )
    out.write("\n")
    for name in GEMM_GROUPS:
        out.write(_stat_line(f"{chip} matmul {name}", stats[name]))
    for r in rows:
        if r["fidelity_conflict_with"]:
            twin = r["fidelity_conflict_with"]
            out.write(f"  not consistent: {r['id']} measured slower than its HiFi4 twin "
                      f"{twin} (docs/validation.md, Wormhole)\n")  # fmt: skip
