"""Shared by the calibration scripts: write a fit set, ``palm/data/fitted/<name>.toml``.

The calibration scripts are the only writers of these files (``--write``); the presets take
their ``[constants]`` (palm/hardware/preset_data.py) and the docs' constant tables are generated
from them (``benchmarks/preset_docs.py``). A file holds::

    [fit]        script, command, data file, rows (count and ids), rows left out of the fit,
                 what is fitted and how, the adoption rule, at_1ghz (per-cycle constants)
    [constants]  what the presets take (the stored set)
    [fitted]     this run's fit, rounded as the constants would be
    [errors]     mean / max absolute error of the rows: in-sample with the stored constants,
                 in-sample with this run's fit, leave-one-out, and (where the script reports
                 it) the event engine with the fit; ``adopted`` says whether this run's fit
                 replaced the stored constants

The adoption rule (docs/validation.md): a run's fit replaces the stored constants only where it
lowers the in-sample mean absolute error of the rows it was fitted on by more than
``MIN_GAIN`` (0.1 point), or with ``--adopt``; otherwise the stored constants stay and the
file records the run beside them. A simulator constant therefore moves only when a refit
earns it, and never silently: the file says which values the presets hold and why.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from palm.hardware.preset_data import (  # noqa: E402
    FITTED_DIR,
    fit_sets,
    preset_hardware,
    preset_records,
)

__all__ = ["MIN_GAIN", "Errors", "command_line", "stored_constants", "write_fit"]

#: a refit replaces the stored constants only if it lowers the in-sample mean absolute error
#: by more than this (0.1 point)
MIN_GAIN = 1e-3

#: (mean, max) absolute error of a group of rows, or None where not computed
Errors = tuple[float, float] | None


def stored_constants(name: str) -> dict[str, float]:
    """The constants the presets take from the fit set ``name``."""
    return dict(fit_sets()[name].constants)


def command_line(script: str) -> str:
    """The command this process was started with, as a user would type it."""
    args = " ".join(json.dumps(a) if " " in a else a for a in sys.argv[1:])
    return f"python benchmarks/{script} {args}".strip()


def _mean_max(errs: Sequence[float]) -> Errors:
    if not errs:
        return None
    a = [abs(e) for e in errs]
    return (sum(a) / len(a), max(a))


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # TOML basic strings take JSON's escapes
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    items = [_value(x) for x in v]
    if sum(len(i) for i in items) < 80:
        return "[" + ", ".join(items) + "]"
    return "[\n" + "".join(f"    {i},\n" for i in items) + "]"


def _key(k: str) -> str:
    return k if all(c.isalnum() or c in "_-" for c in k) else json.dumps(k)


def _toml(tables: Mapping[str, Mapping[str, Any]], header: str) -> str:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for name, table in tables.items():
        lines += ["", f"[{name}]"]
        lines += [f"{_key(k)} = {_value(v)}" for k, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"


def write_fit(
    name: str,
    *,
    script: str,
    data: str,
    rows: Sequence[str],
    left_out: Sequence[str],
    method: str,
    fitted: Mapping[str, float],
    rounded: Mapping[str, float],
    in_sample_stored: Sequence[float],
    in_sample_fitted: Sequence[float],
    leave_one_out: Sequence[float],
    event_fitted: Sequence[float] = (),
    adopt: bool = False,
    at_1ghz: Sequence[str] = (),
    extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> bool:
    """Write ``palm/data/fitted/<name>.toml`` for one run; return whether the run's fit
    (``rounded``, the constants the presets would take) replaced the stored constants.

    The three error lists are over the rows the fit used (``rows`` less ``left_out``);
    ``extra`` adds tables of the script's own (e.g. per-group errors) after ``[errors]``."""
    stored = stored_constants(name) if name in fit_sets() else {}
    before, after = _mean_max(in_sample_stored), _mean_max(in_sample_fitted)
    gain = (before[0] - after[0]) if before and after else 0.0
    adopted = adopt or not stored or gain > MIN_GAIN
    constants = dict(rounded) if adopted else stored
    fit_table: dict[str, Any] = {
        "script": f"benchmarks/{script}",
        "command": command_line(script),
        "data": data,
        "rows": len(rows),
        "fitted_on": len(rows) - len(left_out),
        "method": method,
        "rule": f"a run's fit replaces [constants] only if it lowers the in-sample mean "
        f"absolute error by more than {MIN_GAIN * 100:g} point (or with --adopt)",
        "at_1ghz": list(at_1ghz) or None,
        "left_out": list(left_out),
        "row_ids": list(rows),
    }
    errors: dict[str, Any] = {"adopted": adopted}
    for key, errs in (
        ("in_sample_stored", in_sample_stored),
        ("in_sample_fitted", in_sample_fitted),
        ("leave_one_out", leave_one_out),
        ("event_fitted", event_fitted),
    ):
        mm = _mean_max(errs)
        if mm is not None:
            errors[key] = {"mean": round(mm[0], 4), "max": round(mm[1], 4)}
    header = (
        f"Fit set {name}: written by benchmarks/{script} --write. Do not edit by hand: run the\n"
        "script (palm/hardware/preset_data.py reads [constants]; benchmarks/_fitted.py the layout)."
    )
    fitted_out = {k: float(f"{v:.6g}") for k, v in fitted.items()}
    text = _toml(
        {
            "fit": fit_table,
            "constants": constants,
            "fitted": fitted_out,
            "errors": errors,
            **(extra or {}),
        },
        header,
    )
    (FITTED_DIR / f"{name}.toml").write_text(text, encoding="utf-8")
    fit_sets.cache_clear()
    preset_records.cache_clear()
    preset_hardware.cache_clear()
    return adopted
