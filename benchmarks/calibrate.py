"""Fit the compute-efficiency constants of the A100 on the visible Megatron cases.

Usage:
    python benchmarks/calibrate.py [--file VALIDATION.json] [--write-docs] [--write [--adopt]]

Two candidate models, with as few parameters as the data can support:

* **1 parameter**: ``matmul_efficiency`` (fraction of peak that large products reach);
  ``matmul_half_dim`` and ``memory_efficiency`` keep their priors;
* **2 parameters**: ``matmul_efficiency`` and ``matmul_half_dim`` (how fast efficiency falls for
  small dimensions).

Each is fitted by minimising the mean squared log error of the iteration time over the cases
(golden-section search on the efficiency, a grid on the half dimension). Leave-one-out: fit on
all cases but one and predict the one left out, for every case, so that overfitting shows.
The fit uses the analytical engine, the closed form of the same cost model (on these
uncontended cases the engines agree within 0.35%); the chosen constants are then checked
with the event engine. With --write-docs the tables go into docs/validation.md; with --write
the fit goes into its fit set, ``palm/data/fitted/megatron-a100.toml`` (with its command, rows
and errors; benchmarks/_fitted.py), which the A100 and Blackwell presets take, and the docs'
preset and constant tables are regenerated. The stored constant is replaced only where the
refit lowers the in-sample mean error by more than 0.1 point (or with --adopt).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import palm
from palm.validation import ValidationCase, load_cases

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script
from _fit import golden, leave_one_out, summary, with_hardware  # noqa: E402 - likewise
from _fitted import write_fit  # noqa: E402 - likewise
from preset_docs import write_docs  # noqa: E402 - likewise

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"
HALF_DIMS = (0.0, 16.0, 32.0, 64.0, 128.0, 256.0)
#: the fit set this script writes (palm/data/fitted/)
FIT_SET = "megatron-a100"


def _with(case: ValidationCase, **hw: float) -> palm.SimConfig:
    return with_hardware(case.config, **hw)


def predict(
    cases: Sequence[ValidationCase], engine: str = "analytical", **hw: float
) -> list[float]:
    return [palm.simulate(_with(c, **hw), engine=engine).iteration_time_s for c in cases]


def loss(cases: Sequence[ValidationCase], **hw: float) -> float:
    preds = predict(cases, **hw)
    return sum(
        math.log(p / c.published_iteration_time_s) ** 2 for p, c in zip(preds, cases, strict=True)
    ) / len(cases)


def fit(cases: Sequence[ValidationCase], params: int) -> dict[str, float]:
    half_dims = HALF_DIMS if params == 2 else (cases[0].config.hardware.matmul_half_dim,)
    best: tuple[float, dict[str, float]] | None = None
    for half in half_dims:
        eff = golden(
            lambda e, h=half: loss(cases, matmul_efficiency=e, matmul_half_dim=h), 0.3, 1.0
        )
        value = loss(cases, matmul_efficiency=eff, matmul_half_dim=half)
        if best is None or value < best[0]:
            best = (value, {"matmul_efficiency": eff, "matmul_half_dim": half})
    assert best is not None
    return best[1]


def errors(cases: Sequence[ValidationCase], engine: str, **hw: float) -> list[float]:
    return [
        p / c.published_iteration_time_s - 1
        for p, c in zip(predict(cases, engine, **hw), cases, strict=True)
    ]


def _loo(cases: Sequence[ValidationCase], params: int) -> list[float]:
    return leave_one_out(
        cases,
        lambda rest: fit(rest, params),
        lambda case, hw: errors([case], "analytical", **hw)[0],
    )


def run(file: str | None) -> tuple[str, dict[str, float], dict[str, list[float]]]:
    """The report, the chosen fit, and the errors of the chosen model by row: ``stored``
    (the preset's constants), ``fitted``, ``loo`` and ``event``."""
    cases = load_cases(file)
    prior = cases[0].config.hardware
    lines = [
        f"Constants in the preset now: matmul_efficiency {prior.matmul_efficiency}, "
        f"matmul_half_dim {prior.matmul_half_dim:g}, memory_efficiency "
        f"{prior.memory_efficiency}; before any fit, matmul_efficiency was the engineering "
        "prior 0.8 (13% too fast on every case, mean error 12.8%).",
        "",
    ]
    fits = {p: fit(cases, p) for p in (1, 2)}
    loo = {p: _loo(cases, p) for p in (1, 2)}
    insample = {p: errors(cases, "analytical", **fits[p]) for p in (1, 2)}
    prior_err = errors(cases, "analytical")
    lines.append(
        "| case | preset now | 1-param fit | 1-param leave-one-out | 2-param fit | "
        "2-param leave-one-out |"
    )
    lines.append("|---|---|---|---|---|---|")
    for i, case in enumerate(cases):
        lines.append(
            f"| {case.case_id} | {prior_err[i]:+.1%} | {insample[1][i]:+.1%} | "
            f"{loo[1][i]:+.1%} | {insample[2][i]:+.1%} | {loo[2][i]:+.1%} |"
        )
    lines.append(
        f"| **mean / max abs** | {summary(prior_err)} | {summary(insample[1])} | "
        f"{summary(loo[1])} | {summary(insample[2])} | {summary(loo[2])} |"
    )
    lines.append("")
    for p in (1, 2):
        f = fits[p]
        lines.append(
            f"{p}-parameter fit: matmul_efficiency = {f['matmul_efficiency']:.4f}, "
            f"matmul_half_dim = {f['matmul_half_dim']:g}."
        )
    mean_loo = {p: sum(abs(e) for e in loo[p]) / len(loo[p]) for p in (1, 2)}
    chosen = 2 if mean_loo[2] < 0.9 * mean_loo[1] else 1
    lines.append(
        f"Chosen: the {chosen}-parameter model (leave-one-out mean "
        f"{mean_loo[chosen]:.1%} against {mean_loo[3 - chosen]:.1%}; a second parameter "
        "is kept only if it predicts unseen cases clearly better)."
    )
    event = errors(cases, "event", **fits[chosen])
    lines.append(
        "Event engine with the chosen constants: "
        + ", ".join(
            f"{c.case_id.split('-')[-1]} {e:+.1%}" for c, e in zip(cases, event, strict=True)
        )
        + f"; {summary(event)}."
    )
    errs = {"stored": prior_err, "fitted": insample[chosen], "loo": loo[chosen], "event": event}
    # the 1-parameter model fits matmul_efficiency alone (matmul_half_dim stays the prior)
    fitted = fits[2] if chosen == 2 else {"matmul_efficiency": fits[1]["matmul_efficiency"]}
    return "\n".join(lines), fitted, errs


def write(file: str | None, fitted: dict[str, float], errs: dict[str, list[float]],
          adopt: bool) -> bool:  # fmt: skip
    """Write the fit set (benchmarks/_fitted.py); return whether the fit was adopted."""
    cases = load_cases(file)
    return write_fit(
        FIT_SET,
        script="calibrate.py",
        data=file or "palm/data/visible.json",
        rows=[c.case_id for c in cases],
        left_out=[],
        method="golden-section search of matmul_efficiency on the mean squared log error of "
        "the iteration time (analytical engine); a second parameter (matmul_half_dim) only if "
        "its leave-one-out mean is 10% lower",
        fitted=fitted,
        rounded={k: round(v, 3) for k, v in fitted.items()},
        in_sample_stored=errs["stored"],
        in_sample_fitted=errs["fitted"],
        leave_one_out=errs["loo"],
        event_fitted=errs["event"],
        adopt=adopt,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", default=None, help="validation JSON (default: the visible cases)")
    ap.add_argument("--write-docs", action="store_true", help="update docs/validation.md")
    ap.add_argument("--write", action="store_true", help=f"write palm/data/fitted/{FIT_SET}.toml")
    ap.add_argument("--adopt", action="store_true", help="with --write: store the fit even "
                    "if it does not lower the in-sample error")  # fmt: skip
    args = ap.parse_args()
    text, chosen, errs = run(args.file)
    print(text)
    if args.write_docs:
        write_section(DOC, "calibration", text)
    if args.write:
        adopted = write(args.file, chosen, errs, args.adopt)
        write_docs()
        kept = "adopted" if adopted else "recorded; the stored constants kept"
        print(f"wrote palm/data/fitted/{FIT_SET}.toml (fit {kept})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
