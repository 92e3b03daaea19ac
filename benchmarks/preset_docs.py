"""Generate the docs' preset and fitted-constant tables from the data files.

Usage:
    python benchmarks/preset_docs.py            # print the blocks that differ from the docs
    python benchmarks/preset_docs.py --write    # rewrite them
    python benchmarks/preset_docs.py --check    # exit 1 if any differs (tests/palm run it)

Blocks (``<!-- BEGIN name -->`` / ``<!-- END name -->``, benchmarks/_docblock.py):

* ``docs/hardware.md``, ``preset-<name>``: one per preset of ``palm/data/hardware/*.toml``: its
  title and a table of every figure as written in the data, with its source, then one row per
  fit set it takes (``palm/data/fitted/*.toml``) with the fit's command and errors;
* ``docs/model.md``, ``fitted-constants``: every fitted constant, its value and the presets
  that take it;
* ``docs/validation.md``, ``fit-sets``: each fit set's record: rows, the stored constants
  beside the last run's fit, in-sample and leave-one-out errors, whether the run was adopted.

A new preset needs its block in docs/hardware.md (the two marker lines where it belongs);
then ``--write`` fills it. The calibration scripts call :func:`write_docs` after ``--write``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import read_section, write_section  # noqa: E402 - a sibling module

from palm.hardware.preset_data import FitSet, PresetRecord, fit_sets, preset_records  # noqa: E402

__all__ = ["blocks", "check_docs", "write_docs"]

DOCS = ROOT / "docs"


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _figure(v: Any) -> str:
    if isinstance(v, Mapping):
        return ", ".join(f"{k} {_num(x)}" for k, x in v.items())
    if isinstance(v, list):
        return " x ".join(_num(x) for x in v)
    return f"`{v}`" if isinstance(v, str) else _num(v)


def _at_clock(v: Any, clock: float) -> str:
    if clock == 1.0:
        return _figure(v) + " (per cycle at 1 GHz)"
    return _figure(v) + f" at 1 GHz, scaled to {_num(clock)} GHz"


def _pct(errors: Mapping[str, Any], key: str) -> str:
    e = errors.get(key)
    return f"{e['mean']:.1%} / {e['max']:.1%}" if e else "-"


def _fit_origin(fit: FitSet) -> str:
    meta, errors = fit.record.get("fit", {}), fit.record.get("errors", {})
    if not meta.get("command"):
        return f"fit set `{fit.name}` (palm/data/fitted/{fit.name}.toml)"
    return (
        f"fitted by `{meta['command']}` on {meta['fitted_on']} rows of {meta['data']}: in-sample "
        f"mean / max {_pct(errors, 'in_sample_stored')}, leave-one-out of the fit "
        f"{_pct(errors, 'leave_one_out')} (palm/data/fitted/{fit.name}.toml)"
    )


def preset_table(rec: PresetRecord) -> str:
    """The docs/hardware.md block of one preset."""
    hw = rec.hardware
    clock = rec.figures.get("clock_ghz", 1.0)
    lines = [f"## {rec.name} ({hw.topology})", "", rec.title + ".", "",
             "| field | value | source |", "|---|---|---|"]  # fmt: skip
    order = list(rec.figures) + list(rec.at_1ghz)
    for fields, text in sorted(rec.sources, key=lambda group: order.index(group[0][0])):
        values = [
            _at_clock(rec.at_1ghz[f], clock) if f in rec.at_1ghz else _figure(rec.figures[f])
            for f in fields
        ]
        names = ", ".join(f"`{f}`" for f in fields)
        lines.append(f"| {names} | {'; '.join(values)} | {text} |")
    fits = fit_sets()
    taken: dict[str, str] = {}  # constant -> the fit set it comes from (later sets win)
    for name in rec.fitted:
        taken.update({k: name for k in fits[name].constants})
    for name in rec.fitted:
        fit = fits[name]
        mine = [k for k in fit.constants if taken[k] == name]
        if not mine:
            continue
        values = [_fit_value(fit, k, clock) for k in mine]
        names = ", ".join(f"`{k}`" for k in mine)
        lines.append(f"| {names} | {', '.join(values)} | {_fit_origin(fit)} |")
    return "\n".join(lines)


def _fit_value(fit: FitSet, key: str, clock: float) -> str:
    value = _num(fit.constants[key])
    if key in fit.at_1ghz and clock != 1.0:
        return f"{value} at 1 GHz, scaled to {_num(clock)} GHz"
    return value


def _takers(fit_name: str, key: str) -> list[str]:
    """The presets that take constant ``key`` from fit set ``fit_name``: those naming the set
    where no later set they name (later sets win) has the constant too."""
    sets = fit_sets()
    out = []
    for rec in preset_records().values():
        if fit_name in rec.fitted:
            later = rec.fitted[rec.fitted.index(fit_name) + 1 :]
            if not any(key in sets[name].constants for name in later):
                out.append(rec.name)
    return out


def model_table() -> str:
    """docs/model.md, block fitted-constants."""
    lines = ["| fit set | constant | value | presets |", "|---|---|---|---|"]
    for fit in fit_sets().values():
        for key, value in fit.constants.items():
            presets = ", ".join(f"`{p}`" for p in _takers(fit.name, key)) or "none"
            unit = " (per cycle, at 1 GHz)" if key in fit.at_1ghz else ""
            lines.append(f"| `{fit.name}` | `{key}` | {_num(value)}{unit} | {presets} |")
    return "\n".join(lines)


def validation_table() -> str:
    """docs/validation.md, block fit-sets."""
    lines = [
        "| fit set | command | rows (fitted on) | stored constants | the run's fit | in-sample, "
        "stored | in-sample, fit | leave-one-out | event engine, fit | adopted |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fit in fit_sets().values():
        meta, errors = fit.record.get("fit", {}), fit.record.get("errors", {})
        stored = ", ".join(f"{k} {_num(v)}" for k, v in fit.constants.items())
        run = ", ".join(f"{k} {_num(v)}" for k, v in fit.record.get("fitted", {}).items())
        lines.append(
            f"| `{fit.name}` | `{meta.get('command', '-')}` | {meta.get('rows', '-')} "
            f"({meta.get('fitted_on', '-')}) | {stored} | {run or '-'} | "
            f"{_pct(errors, 'in_sample_stored')} | {_pct(errors, 'in_sample_fitted')} | "
            f"{_pct(errors, 'leave_one_out')} | {_pct(errors, 'event_fitted')} | "
            f"{'yes' if errors.get('adopted') else 'no'} |"
        )
    return "\n".join(lines)


def blocks() -> dict[tuple[str, str], str]:
    """(document, block name) -> the generated text."""
    out = {("hardware.md", f"preset-{r.name}"): preset_table(r) for r in preset_records().values()}
    out[("model.md", "fitted-constants")] = model_table()
    out[("validation.md", "fit-sets")] = validation_table()
    return out


def check_docs() -> list[str]:
    """One line per block that is missing from the docs or differs from the data."""
    problems = []
    for (doc, name), text in blocks().items():
        found = read_section(DOCS / doc, name)
        if found is None:
            problems.append(f"docs/{doc}: no block {name} (add its BEGIN / END marker lines)")
        elif found != text:
            problems.append(f"docs/{doc}: block {name} differs from the data")
    return problems


def write_docs() -> None:
    """Rewrite every generated block (each must have its markers)."""
    for (doc, name), text in blocks().items():
        write_section(DOCS / doc, name, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    ap.add_argument("--check", action="store_true", help="exit 1 if a block differs")
    args = ap.parse_args(argv)
    if args.write:
        write_docs()
    problems = check_docs()
    print("\n".join(problems) or "docs match the data")
    return 1 if problems and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
