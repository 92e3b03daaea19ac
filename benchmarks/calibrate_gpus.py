"""Fit the achievable-efficiency constants of each GPU generation on the modern visible set.

Usage:
    python benchmarks/calibrate_gpus.py [--generation H100] [--no-loo] [--epochs-only]
                                        [--write-docs] [--write [--adopt]]

Per generation (H100: dgx-h100, dgx-h200; Blackwell: dgx-b200, gb200-nvl72; Blackwell Ultra:
dgx-b300, gb300-nvl72; A100: dgx-a100) at most six physically meaningful constants, shared
by every preset of the generation:

* ``matmul_efficiency``: fraction of the BF16 peak that large products reach;
* ``fp8_matmul_efficiency``: the same for products run in FP8;
* ``attention_efficiency``: fraction of the BF16 peak the FlashAttention kernels reach;
* ``grouped_gemm_efficiency``: the extra loss of the mixture-of-experts grouped GEMMs (many
  small expert products in one kernel), on top of the shape rule;
* ``grouped_gemm_expert_us``: the fixed time each local expert's product adds to a grouped
  GEMM in each pass (one kernel per expert, Transformer Engine ``GroupedLinear``);
* ``overlap_interference``: compute time lost per second of ZeRO-3 / FSDP collective hidden
  behind it (NCCL's SMs and HBM traffic; fitted where a generation has FSDP rows).

A constant is fitted only if at least ``MIN_ROWS`` (3) of the generation's rows depend on it
(no dense BF16 row, no BF16 fit: the prior, the A100's Megatron fit, stays; one FSDP row, no
``overlap_interference``: one row fits any value exactly and leaving it out checks nothing).
For the A100 only ``attention_efficiency`` and ``overlap_interference`` are fitted: its
``matmul_efficiency`` stays the value fitted on the Megatron SC21 cases
(benchmarks/calibrate.py), which this set must not move. The loss is the mean squared log error
of the iteration time over the rows; it is minimised by coordinate descent with a golden-
section search per constant, in two stages: the dense constants on the dense rows, then the two
grouped-GEMM constants on the MoE rows with the dense ones fixed. Every expressible row is
fitted on; leave-one-out refits on all rows but one (warm-started from the full fit) and
predicts it. The fit uses the analytical engine; the event engine's errors with the fitted
constants are printed beside it.

Software releases (:mod:`palm.software`, docs/validation.md, "The software stack as a
calibration input"): a row whose stated release sets a hardware constant of its own (NeMo
before 25.04 on Blackwell: ``attention_efficiency``) depends on that release's value, fitted
as its own constant ``name@release`` under the same rules (at least ``MIN_ROWS`` rows depend on
it; dense stage on dense rows), while the generation's constants are fitted on every row of
the generation. ``--epochs-only`` fits the releases' constants alone, the generation's held at
their preset values.

With ``--write`` each generation's fit goes into its fit set, ``palm/data/fitted/gpu-<generation>
.toml`` (command, rows, errors; benchmarks/_fitted.py), which the presets of the generation take,
and the docs' preset and constant tables are regenerated. The stored constants are replaced
only where the refit lowers the in-sample mean error of the fitted rows by more than 0.1 point
(or with ``--adopt``); a software release's constant is recorded in the fit, not stored (the
releases keep theirs in :mod:`palm.software`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import palm
from palm.validation import ValidationCase
from palm.validation_modern import load_modern_cases, software_constants
from palm.validation_report import generation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script
from _fit import golden, leave_one_out  # noqa: E402 - likewise
from _fitted import write_fit  # noqa: E402 - likewise
from preset_docs import write_docs  # noqa: E402 - likewise

#: golden-section tolerance of one constant (coarser than _fit's default: 5 constants x rounds)
_GOLDEN_TOL = 2e-3
ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"
BOUNDS = {
    "matmul_efficiency": (0.3, 1.0),
    "fp8_matmul_efficiency": (0.2, 1.0),
    "attention_efficiency": (0.15, 1.0),
    "grouped_gemm_efficiency": (0.15, 1.0),
    "grouped_gemm_expert_us": (0.0, 100.0),
    "overlap_interference": (0.0, 2.0),
}
#: the constants of the mixture-of-experts grouped GEMMs, fitted on the MoE rows
GROUPED = ("grouped_gemm_efficiency", "grouped_gemm_expert_us")


#: no row of an older stack: every case takes the generation's constants
NO_EPOCHS: Mapping[str, str] = {}


def epoch_key(name: str, epoch: str) -> str:
    """The fitted constant ``name`` of stack epoch ``epoch``: ``"name@epoch"``."""
    return f"{name}@{epoch}"


def case_constants(
    case: ValidationCase, consts: Mapping[str, float], epochs: Mapping[str, str]
) -> dict[str, float]:
    """The hardware constants ``case`` takes from ``consts``: the generation's (plain names),
    except those its software release sets, which take the release's (``name@release``) if
    fitted and otherwise stay the release's stored value (already in the case's hardware)."""
    epoch = epochs.get(case.case_id)
    own = set(software_constants(case.config)) if epoch is not None else set()
    out = {k: v for k, v in consts.items() if "@" not in k and k not in own}
    for name in own:
        key = epoch_key(name, epoch)  # type: ignore[arg-type] - own is empty without epoch
        if key in consts:
            out[name] = consts[key]
    return out


def _with(case: ValidationCase, consts: dict[str, float]) -> palm.SimConfig:
    hardware = dataclasses.replace(case.config.hardware, **consts)  # type: ignore[arg-type]
    return dataclasses.replace(case.config, hardware=hardware)


def errors(
    cases: Sequence[ValidationCase],
    consts: Mapping[str, float],
    engine: str,
    epochs: Mapping[str, str] = NO_EPOCHS,
) -> list[float]:
    return [
        palm.simulate(_with(c, case_constants(c, consts, epochs)), engine=engine).iteration_time_s
        / c.published_iteration_time_s
        - 1.0
        for c in cases
    ]


def loss(
    cases: Sequence[ValidationCase],
    consts: Mapping[str, float],
    epochs: Mapping[str, str] = NO_EPOCHS,
) -> float:
    errs = errors(cases, consts, "analytical", epochs)
    return sum(math.log1p(e) ** 2 for e in errs) / len(cases)


def fit(
    cases: Sequence[ValidationCase],
    start: dict[str, float],
    *,
    rounds: int = 3,
    free: Sequence[str] | None = None,
    epochs: Mapping[str, str] = NO_EPOCHS,
) -> dict[str, float]:
    """Coordinate descent over the constants in ``start`` (those in ``free`` only, if given;
    the others stay fixed)."""
    consts = dict(start)
    for _ in range(rounds):
        before = dict(consts)
        for name in free if free is not None else list(consts):
            lo, hi = BOUNDS[name.split("@")[0]]
            consts[name] = golden(
                lambda x, n=name: loss(cases, {**consts, n: x}, epochs), lo, hi, tol=_GOLDEN_TOL
            )
        if all(abs(consts[k] - before[k]) < 5e-3 for k in consts):
            break
    return consts


def _is_moe(case: ValidationCase) -> bool:
    return bool(getattr(case.config.model, "experts", 0))


def two_stage_fit(
    cases: Sequence[ValidationCase],
    start: dict[str, float],
    *,
    rounds: int = 3,
    epochs: Mapping[str, str] = NO_EPOCHS,
) -> dict[str, float]:
    """The dense kernels' constants on the dense rows, then the grouped-GEMM efficiency on
    the mixture-of-experts rows with those fixed: MoE rows (whose releases disagree most) do
    not move the dense constants."""
    dense = [c for c in cases if not _is_moe(c)]
    moe = [c for c in cases if _is_moe(c)]
    first = {k: v for k, v in start.items() if k not in GROUPED}
    fitted = fit(dense, first, rounds=rounds, epochs=epochs) if dense and first else first
    grouped = [k for k in GROUPED if k in start]
    if grouped and moe:
        both = {**fitted, **{k: start[k] for k in grouped}}
        fitted = fit(moe, both, rounds=rounds, free=grouped, epochs=epochs)
    return fitted


def _uses(case: ValidationCase, epoch: str | None = None) -> set[str]:
    """The constants a row's prediction depends on (those its stack ``epoch`` names as
    ``name@epoch``)."""
    cfg = case.config
    used = {"attention_efficiency"}
    used.add("fp8_matmul_efficiency" if cfg.training.precision == "fp8" else "matmul_efficiency")
    if cfg.training.precision == "fp8":
        used.add("matmul_efficiency")  # the logits stay in BF16
    if getattr(cfg.model, "experts", 0):
        used.update(GROUPED)  # the experts' grouped GEMMs
    per_layer = cfg.training.zero_stage >= 3 or cfg.training.fsdp  # fsdp: also SHARD_GRAD_OP
    if per_layer and cfg.parallelism.data_ranks > 1:
        used.add("overlap_interference")  # FSDP collectives hidden behind compute
    if epoch is not None:  # the older release's own kernels
        own = software_constants(cfg)
        used = {epoch_key(n, epoch) if n in own else n for n in used}
    return used


def _summary(errs: Sequence[float]) -> str:
    a = [abs(e) for e in errs]
    return f"mean {sum(a) / len(a):.1%}, max {max(a):.1%}" if a else "-"


#: a constant is fitted only on at least this many rows that depend on it: fewer cannot be
#: checked by leaving one out, and one row fits any value exactly
MIN_ROWS = 3


def _start(
    names: Sequence[str], cases: Sequence[ValidationCase], epochs: Mapping[str, str]
) -> dict[str, float]:
    """The prior of each constant: the preset's (of a row of the current stack) for the
    generation's, the release's stored value (in its rows' hardware) for a release's."""
    current = [c for c in cases if c.case_id not in epochs] or list(cases)
    prior = current[0].config.hardware
    start = {}
    for n in names:
        name, _, epoch = n.partition("@")
        own = [c for c in cases if epochs.get(c.case_id) == epoch] if epoch else current
        start[n] = getattr(own[0].config.hardware if epoch else prior, name)
    return start


def fitted_names(
    gen: str,
    cases: Sequence[ValidationCase],
    *,
    epochs: Mapping[str, str] = NO_EPOCHS,
    epochs_only: bool = False,
) -> list[str]:
    """The constants fitted on a generation's rows: each that at least ``MIN_ROWS`` rows
    depend on (a software release's as ``name@release``), less the A100's
    BF16 efficiency (the Megatron SC21 fit), the BF16 efficiency without a dense BF16 row,
    and, with ``epochs_only``, every constant of the generation's own."""
    counted = [_uses(c, epochs.get(c.case_id)) for c in cases]
    names = sorted(n for n in set().union(*counted) if sum(n in u for u in counted) >= MIN_ROWS)
    if gen == "A100":  # matmul_efficiency is the Megatron SC21 fit
        names = [
            n for n in names if n.split("@")[0] in ("attention_efficiency", "overlap_interference")
        ]
    if not any(c.config.training.precision != "fp8" and not _is_moe(c) for c in cases):
        # no dense BF16 row: the BF16 efficiency would be fitted through the logits alone
        names = [n for n in names if n != "matmul_efficiency"]
    if epochs_only:  # the generation's constants stay at the preset values
        names = [n for n in names if "@" in n]
    return names


def calibrate(
    gen: str,
    cases: Sequence[ValidationCase],
    *,
    loo: bool,
    epochs: Mapping[str, str] = NO_EPOCHS,
    epochs_only: bool = False,
) -> tuple[str, dict[str, float], dict[str, list[float]]]:
    """The report, the fit, and the errors by row (``stored``: the presets' constants,
    ``fitted``, ``loo``, ``event``)."""
    names = fitted_names(gen, cases, epochs=epochs, epochs_only=epochs_only)
    start = _start(names, cases, epochs)
    fitted = two_stage_fit(cases, start, epochs=epochs)
    before = errors(cases, {}, "analytical", epochs)
    inside = errors(cases, fitted, "analytical", epochs)
    event = errors(cases, fitted, "event", epochs)
    held: list[float] = []
    if loo:
        held = leave_one_out(
            cases,
            lambda rest: two_stage_fit(rest, fitted, rounds=1, epochs=epochs),
            lambda case, consts: errors([case], consts, "analytical", epochs)[0],
        )
    lines = [
        f"### {gen}: {len(cases)} rows",
        "",
        "Fitted: "
        + ", ".join(f"`{k}` = {v:.3f} (prior {start[k]:.3f})" for k, v in fitted.items())
        + ".",
        "",
        "| case | preset | prior constants | fitted | leave-one-out | event engine, fitted |",
        "|---|---|---|---|---|---|",
    ]
    for i, case in enumerate(cases):
        loo_text = f"{held[i]:+.1%}" if held else "-"
        lines.append(
            f"| {case.case_id} | {case.config.hardware.name} | {before[i]:+.1%} | "
            f"{inside[i]:+.1%} | {loo_text} | {event[i]:+.1%} |"
        )
    lines.append(
        f"| **mean / max abs** | | {_summary(before)} | {_summary(inside)} | "
        f"{_summary(held)} | {_summary(event)} |"
    )
    errs = {"stored": before, "fitted": inside, "loo": held, "event": event}
    return "\n".join(lines), fitted, errs


def fit_set_name(gen: str) -> str:
    """The fit set of a generation: ``gpu-h100``, ``gpu-blackwell-ultra``."""
    return "gpu-" + gen.lower().replace(" ", "-")


def write(
    gen: str,
    cases: Sequence[ValidationCase],
    fitted: Mapping[str, float],
    errs: Mapping[str, list[float]],
    adopt: bool,
) -> bool:
    """Write the generation's fit set (benchmarks/_fitted.py); the errors are over every row
    of the generation (the fit uses them all). Returns whether the fit was adopted."""
    used = range(len(cases))
    return write_fit(
        fit_set_name(gen),
        script="calibrate_gpus.py",
        data="palm/data/visible_modern.json",
        rows=[c.case_id for c in cases],
        left_out=[],
        method=f"the {gen} rows (palm.validation_report.generation); coordinate descent with "
        "golden-section search on the mean squared log error of the iteration time (analytical "
        "engine): the dense constants on the dense rows, then the grouped-GEMM constants on the "
        f"MoE rows; a constant only where {MIN_ROWS} or more rows depend on it",
        fitted=dict(fitted),
        rounded={k: round(v, 3) for k, v in fitted.items() if "@" not in k},
        in_sample_stored=[errs["stored"][i] for i in used],
        in_sample_fitted=[errs["fitted"][i] for i in used],
        leave_one_out=[errs["loo"][i] for i in used],
        event_fitted=[errs["event"][i] for i in used],
        adopt=adopt,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--generation", choices=("A100", "H100", "Blackwell", "Blackwell Ultra"), action="append"
    )
    ap.add_argument("--no-loo", action="store_true", help="skip leave-one-out (faster)")
    ap.add_argument(
        "--epochs-only",
        action="store_true",
        help="fit only the stack epochs' constants; the generation's stay at the preset's",
    )
    ap.add_argument("--write-docs", action="store_true", help="update docs/validation.md")
    ap.add_argument(
        "--write", action="store_true", help="write palm/data/fitted/gpu-<generation>.toml"
    )
    ap.add_argument("--adopt", action="store_true", help="with --write: store the fit even "
                    "if it does not lower the in-sample error")  # fmt: skip
    args = ap.parse_args()
    if args.write and (args.no_loo or args.epochs_only):
        ap.error("--write records leave-one-out beside in-sample: not with --no-loo, --epochs-only")
    data = load_modern_cases()
    gens = args.generation or ["H100", "Blackwell", "Blackwell Ultra", "A100"]
    for gen in gens:
        cases = [c for c in data.cases if generation(c.config.hardware.name) == gen]
        text, fitted, errs = calibrate(
            gen, cases, loo=not args.no_loo, epochs=data.epochs, epochs_only=args.epochs_only
        )
        print(text, flush=True)
        print(flush=True)
        if args.write_docs:  # one block per generation, so generations can run in parallel
            write_section(DOC, "gpu-calibration-" + gen.lower().replace(" ", "-"), text)
        if args.write:  # one file per generation, likewise
            adopted = write(gen, cases, fitted, errs, args.adopt)
            kept = "adopted" if adopted else "recorded; the stored constants kept"
            print(f"wrote palm/data/fitted/{fit_set_name(gen)}.toml (fit {kept})", flush=True)
    if args.write:
        write_docs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
