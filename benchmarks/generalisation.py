"""How the GPU constants generalise: leave-one-source-out and leave-one-generation-out.

Usage:
    python benchmarks/generalisation.py [--rounds 2] [--write-docs]

Leave-one-out (``calibrate_gpus.py``) refits without one row; rows of one source share a
software stack, a measurement method and often a plan family, so a row's siblings can carry
what the constants should not. Two harder splits, beside it in docs/validation.md:

* **leave-one-source-out**: for each source of the modern set (NeMo / Megatron-Bridge
  performance tables, llm-foundry's benchmark README, torchtitan's benchmark notes, the
  Megatron-LM README), every generation's constants are refitted (``calibrate_gpus``'s
  rules: at least three dependent rows, two stages) on that generation's rows of the *other*
  sources, and the source's rows are predicted; a generation with no row from another source
  cannot be held out this way (its presets were fitted on these very rows) and is left to
  the next split;
* **leave-one-generation-out**: for each GPU generation, the constants are fitted once, shared
  by every preset, on the rows of the *other* generations, and the generation's rows are
  predicted with them: what a constant claimed to be a property of the software and not of
  the GPU would give on a GPU it was not fitted on.

The source of a row is the family its data set records (``source_family``); the split is the
evaluation protocol, never a rule of the translation, which does not read it
(``tests/palm/test_validation_software.py``). Analytical engine, as the fits.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from palm.validation import ValidationCase
from palm.validation_modern import ModernCases, load_modern_cases
from palm.validation_report import generation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script
from _fit import summary  # noqa: E402 - likewise
from calibrate_gpus import (  # noqa: E402 - likewise
    BOUNDS,
    _start,
    errors,
    fitted_names,
    two_stage_fit,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"
GENERATIONS = ("A100", "H100", "Blackwell", "Blackwell Ultra")


def source_of(row: Mapping[str, object]) -> str:
    """The source a row comes from, for the held-out split: its recorded family."""
    family = str(row.get("source_family", ""))
    for key, name in (
        ("NeMo", "NeMo / Megatron-Bridge"),
        ("llm-foundry", "llm-foundry"),
        ("torchtitan", "torchtitan"),
        ("Megatron-LM", "Megatron-LM"),
    ):
        if key in family:
            return name
    return family or "unknown"


def _fit(
    gen: str,
    train: Sequence[ValidationCase],
    epochs: Mapping[str, str],
    rounds: int,
) -> dict[str, float]:
    names = fitted_names(gen, train, epochs=epochs) if train else []
    if not names:
        return {}
    return two_stage_fit(train, _start(names, train, epochs), rounds=rounds, epochs=epochs)


def leave_one_source_out(data: ModernCases, rounds: int) -> dict[str, dict[str, float]]:
    """Case id -> its error when its source is held out, per source."""
    by_gen: dict[str, list[ValidationCase]] = defaultdict(list)
    for case in data.cases:
        by_gen[generation(case.config.hardware.name)].append(case)
    sources = sorted({source_of(data.rows[c.case_id]) for c in data.cases})
    out: dict[str, dict[str, float]] = {s: {} for s in sources}
    for source in sources:
        for gen, cases in by_gen.items():
            test = [c for c in cases if source_of(data.rows[c.case_id]) == source]
            if not test:
                continue
            train = [c for c in cases if source_of(data.rows[c.case_id]) != source]
            if not train:  # nothing else of the generation: only another GPU could predict it
                print(f"  {source} / {gen}: no other source ({len(test)} rows)", flush=True)
                continue
            consts = _fit(gen, train, data.epochs, rounds)
            for case, e in zip(test, errors(test, consts, "analytical", data.epochs), strict=True):
                out[source][case.case_id] = e
            print(
                f"  {source} / {gen}: {len(train)} rows fitted, {len(test)} predicted", flush=True
            )
    return out


def leave_one_generation_out(data: ModernCases, rounds: int) -> dict[str, dict[str, float]]:
    """Generation -> case id -> its error with constants fitted on the other generations."""
    out: dict[str, dict[str, float]] = {}
    for gen in GENERATIONS:
        test = [c for c in data.cases if generation(c.config.hardware.name) == gen]
        train = [c for c in data.cases if generation(c.config.hardware.name) != gen]
        names = [n for n in fitted_names("pooled", train, epochs=data.epochs) if "@" not in n]
        names = [n for n in names if n in BOUNDS]
        consts = (
            two_stage_fit(
                train, _start(names, train, data.epochs), rounds=rounds, epochs=data.epochs
            )
            if names
            else {}
        )
        out[gen] = dict(
            zip(
                (c.case_id for c in test),
                errors(test, consts, "analytical", data.epochs),
                strict=True,
            )
        )
        print(f"  {gen}: {len(train)} rows fitted, {len(test)} predicted", flush=True)
    return out


def table(loso: dict[str, dict[str, float]], logo: dict[str, dict[str, float]]) -> str:
    lines = [
        "| held out | rows | error when held out (mean, max abs) |",
        "|---|---|---|",
    ]
    every: list[float] = []
    for source, errs in sorted(loso.items()):
        every += list(errs.values())
        lines.append(f"| source: {source} | {len(errs)} | {summary(list(errs.values()))} |")
    lines.append(f"| **every source in turn** | {len(every)} | {summary(every)} |")
    missing = len(set().union(*(set(e) for e in logo.values()))) - len(every) if logo else 0
    if missing > 0:
        lines.append(
            f"| (rows of a generation measured by one source only, held out by generation "
            f"below) | {missing} | - |"
        )
    pooled: list[float] = []
    for gen, errs in logo.items():
        pooled += list(errs.values())
        lines.append(f"| generation: {gen} | {len(errs)} | {summary(list(errs.values()))} |")
    lines.append(f"| **every generation in turn** | {len(pooled)} | {summary(pooled)} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="coordinate-descent rounds per fit")
    ap.add_argument("--no-logo", action="store_true", help="skip leave-one-generation-out")
    ap.add_argument("--write-docs", action="store_true", help="update docs/validation.md")
    args = ap.parse_args()
    data = load_modern_cases()
    print("leave-one-source-out", flush=True)
    loso = leave_one_source_out(data, args.rounds)
    logo: dict[str, dict[str, float]] = {}
    if not args.no_logo:
        print("leave-one-generation-out", flush=True)
        logo = leave_one_generation_out(data, args.rounds)
    text = table(loso, logo)
    print(text)
    if args.write_docs:
        write_section(DOC, "generalisation", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
