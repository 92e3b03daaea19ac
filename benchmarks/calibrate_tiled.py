"""Fit the Tensix constants of the wormhole-n150 preset on the visible Wormhole measurements.

Usage:
    python benchmarks/calibrate_tiled.py [--file visible_tiled.json] [--write-docs]
                                         [--write [--adopt]]

Six physically meaningful constants, each with one job (palm/engines/gemm.py):

* ``memory_efficiency``: the achievable fraction of a GDDR6 channel's 24 GB/s, fitted on the
  one-channel transfers that the channel alone limits (reads, static-VC writes, the lone
  dynamic-VC writer), where the prediction is ``24 GB/s x memory_efficiency``: the least-squares
  log fit is the geometric mean of measured / 24 GB/s. The multi-channel transfers then test
  the routing and max-min sharing with no constant of their own; the multicast senders of the
  matrix products read at this one-core rate too (no constant of their own either);
* ``matmul_efficiency`` (the achievable fraction of the matrix engine's pipeline),
  ``operand_feed_gbps`` (the rate the unpackers feed operand tiles, which binds below HiFi3),
  ``launch_us`` (device cost of one program launch; with ``dispatch = "trace"``),
  ``host_dispatch_us`` (host cost of enqueueing one untraced program, overlapping the device)
  and ``host_sharded_output_us`` (its extra cost when the output is an L1-sharded tensor):
  fitted together on the matrix products by Nelder-Mead on the mean squared log error of the
  time, with ``memory_efficiency`` fixed from the first fit. Rows slower than their HiFi4 twin
  (:func:`palm.validation_tiled.fidelity_conflicts`) are reported and not fitted.

The products' time is piecewise affine in ``1 / matmul_efficiency``, ``1 / operand_feed``, the
launch and host costs once the simulator has given each case its math time, operand bytes,
NoC, sender, DRAM and output-tail times (the tail's rate comes from the NoC model, no
constant), so the fit evaluates that closed form on arrays; the end of the
script checks it against ``palm.simulate`` with the fitted constants (to 1e-9). Leave-one-out:
refit without each case and predict it. With --write-docs the tables go into
docs/validation.md (block ``tiled``); with --write the constants go into their fit set,
``palm/data/fitted/tensix-wormhole.toml`` (command, rows, errors; benchmarks/_fitted.py), which
the Wormhole and Blackhole presets take (``operand_feed_gbps`` per cycle, at 1 GHz), and the
docs' preset and constant tables are regenerated. The stored constants are replaced only where
the refit lowers the in-sample mean error of the fitted rows (the consistent products and the
channel-bound transfers) by more than 0.1 point (or with --adopt).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import palm
from palm.engines.gemm import gemm_times
from palm.hardware.preset_data import preset_records
from palm.hardware.presets import hardware_preset
from palm.hardware.spec import Mesh2DHardware
from palm.validation_tiled import (
    DramCase,
    GemmCase,
    fidelity_conflicts,
    load_tiled_cases,
    predict_dram,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script
from _fit import leave_one_out, mean_max, nelder_mead, with_hardware  # noqa: E402 - likewise
from _fitted import write_fit  # noqa: E402 - likewise
from preset_docs import write_docs  # noqa: E402 - likewise

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"
GEMM_PARAMS = (
    "matmul_efficiency",
    "operand_feed_gbps",
    "launch_us",
    "host_dispatch_us",
    "host_sharded_output_us",
)
START = (0.9, 50.0, 8.0, 60.0, 40.0)
#: the fit set this script writes (palm/data/fitted/)
FIT_SET = "tensix-wormhole"


def _with(case: GemmCase, **hw: float) -> palm.SimConfig:
    return with_hardware(case.config, **hw)


# -------------------------------------------------------------------------------------------
# DRAM: memory_efficiency


def _channel_bound(case: DramCase) -> bool:
    """One-channel transfers that the channel alone limits: reads, static-VC writes and the
    lone dynamic-VC writer (many dynamic-VC writers collapse, which the model does not claim)."""
    t = case.transfer
    return t.channels == 1 and (not t.write or "staticvc" in case.case_id or t.cores == 1)


def dram_errors(cases: Sequence[DramCase], efficiency: float) -> list[float]:
    hw = hardware_preset("wormhole-n150")
    assert isinstance(hw, Mesh2DHardware)
    hw = dataclasses.replace(hw, memory_efficiency=efficiency)
    return [predict_dram(c, hardware=hw) / c.measured_Bps - 1 for c in cases]


def fit_dram(cases: Sequence[DramCase]) -> float:
    """Where only the channel binds the prediction is ``channel x efficiency``: the least
    squares log fit is the geometric mean of measured / channel."""
    hw = hardware_preset("wormhole-n150")
    assert isinstance(hw, Mesh2DHardware)
    channel = hw.dram_channel_bandwidth_gbps * 1e9
    return math.exp(sum(math.log(c.measured_Bps / channel) for c in cases) / len(cases))


# -------------------------------------------------------------------------------------------
# matrix products: the five gemm constants


@dataclasses.dataclass(frozen=True)
class Basis:
    """Per case: the terms of the time that do not depend on the fitted constants."""

    math_s: np.ndarray  # at matmul_efficiency 1
    feed_bytes: np.ndarray  # operand bytes through the unpackers of the busiest core
    noc_s: np.ndarray  # NoC (not scaled)
    send_s: np.ndarray  # the busiest multicast sender, at the fitted memory_efficiency
    reduce_s: np.ndarray  # depth-split reduction (not scaled)
    dram_s: np.ndarray  # streamed under the compute, at the fitted memory_efficiency
    tail_s: np.ndarray  # the last output block's write after the math (no constant)
    host: np.ndarray  # 1 where dispatch = "host"
    sharded: np.ndarray  # 1 where the output is L1-sharded
    measured_s: np.ndarray


def basis(cases: Sequence[GemmCase], memory_efficiency: float) -> Basis:
    rows = []
    for c in cases:
        unit = {"matmul_efficiency": 1.0, "operand_feed_gbps": 1.0, "launch_us": 0.0}
        t = gemm_times(_with(c, **unit, host_dispatch_us=0.0, memory_efficiency=memory_efficiency))
        hw = c.config.hardware
        assert isinstance(hw, Mesh2DHardware)
        rows.append((t.math_s, t.feed_s * 1e9, t.noc_s, t.send_s, t.reduce_s, t.dram_s,
                     t.tail_s, float(hw.dispatch == "host"),
                     float("c" in c.config.model.sram_resident), c.measured_time_s))  # fmt: skip
    cols = np.array(rows).T
    return Basis(*cols)


def _core(b: Basis, eta: float, feed_gbps: float) -> np.ndarray:
    engine = np.maximum(b.math_s, b.feed_bytes / (feed_gbps * 1e9)) / eta
    return np.maximum(np.maximum(engine, b.noc_s), b.send_s) + b.reduce_s


def times(b: Basis, p: Sequence[float]) -> np.ndarray:
    """The closed form of palm/engines/gemm.py for constants ``p`` (GEMM_PARAMS order)."""
    eta, feed, launch_us, host_us, shard_us = p
    device = launch_us * 1e-6 + np.maximum(_core(b, eta, feed), b.dram_s) + b.tail_s
    host = (host_us + shard_us * b.sharded) * 1e-6
    return np.where(b.host > 0, np.maximum(host, device), device)


def _valid(p: Sequence[float]) -> bool:
    return 0.05 < p[0] <= 1.0 and p[1] > 1.0 and min(p[2:5]) >= 0


def overlap_check(b: Basis, p: Sequence[float]) -> tuple[float, float]:
    """The DRAM-compute overlap the data supports: refit with a sixth constant ``w`` (time
    ``launch + core + dram - w min(core, dram) + tail``; the model takes ``w = 1``, streaming
    hidden under the compute); returns ``w`` and the in-sample mean error."""

    def timed(q: np.ndarray) -> np.ndarray:
        core = _core(b, q[0], q[1])
        device = q[2] * 1e-6 + core + b.dram_s - q[5] * np.minimum(core, b.dram_s) + b.tail_s
        host = (q[3] + q[4] * b.sharded) * 1e-6
        return np.where(b.host > 0, np.maximum(host, device), device)

    def f(q: np.ndarray) -> float:
        if not (_valid(q) and 0 <= q[5] <= 1):
            return 1e9
        return float(np.mean(np.log(timed(q) / b.measured_s) ** 2))

    best = nelder_mead(f, [*p, 0.5])
    best = nelder_mead(f, best)
    return float(best[5]), float(np.mean(np.abs(timed(best) / b.measured_s - 1)))


def _loss(b: Basis, keep: np.ndarray) -> Callable[[np.ndarray], float]:
    def f(p: np.ndarray) -> float:
        if not _valid(p):
            return 1e9
        return float(np.mean(np.log(times(b, p)[keep] / b.measured_s[keep]) ** 2))

    return f


def fit_gemm(b: Basis, keep: np.ndarray, x0: Sequence[float] = START) -> np.ndarray:
    best = nelder_mead(_loss(b, keep), x0)
    return nelder_mead(_loss(b, keep), best)  # a restart to leave a collapsed simplex


def gemm_loo(b: Basis, full: np.ndarray, fitted_on: np.ndarray) -> np.ndarray:
    """Leave-one-out errors, each refit warm-started from the full fit; a row outside the fit
    (``fitted_on`` false) is already held out, so its error is the full fit's."""
    n = len(b.measured_s)
    inside = [i for i in range(n) if fitted_on[i]]

    def fit(rest: list[int]) -> np.ndarray:
        keep = np.zeros(n, bool)
        keep[rest] = True
        return nelder_mead(_loss(b, keep), full, iters=800)

    def error(i: int, p: np.ndarray) -> float:
        return float(times(b, p)[i] / b.measured_s[i] - 1)

    errors = times(b, full) / b.measured_s - 1
    errors[inside] = leave_one_out(inside, fit, error)
    return errors


# -------------------------------------------------------------------------------------------
# report


def _stats(errs: Sequence[float]) -> str:
    if not len(errs):
        return "-"
    mean, worst = mean_max(errs)
    return f"{mean:.1%} / {worst:.1%}"


def _groups(cases: Sequence[GemmCase], consistent: np.ndarray) -> dict[str, np.ndarray]:
    tuned = np.array([c.tuned for c in cases])
    traced = np.array([c.traced for c in cases])
    masks = {
        "all products": np.ones(len(cases), bool),
        "all but the fidelity conflicts": consistent,
        "hand-tuned": tuned,
        "out-of-box": ~tuned,
        "traced": traced,
        "hand-tuned, traced": tuned & traced,
    }
    return {f"{name} ({int(mask.sum())})": mask for name, mask in masks.items()}


def run(file: str | None) -> tuple[str, dict[str, float]]:
    """The report and the fitted constants."""
    text, fitted, _ = run_detailed(file)
    return text, fitted


def run_detailed(file: str | None) -> tuple[str, dict[str, float], dict[str, Any]]:
    """The report, the fitted constants and, for the rows the fit used (the consistent
    products, then the channel-bound transfers), their ids and errors: ``stored`` (the
    preset's constants), ``fitted``, ``loo``; ``ids``: those rows, ``rows``: every row."""
    cases = load_tiled_cases(file)
    bound = [c for c in cases.dram if _channel_bound(c)]
    mem_eff = fit_dram(bound)
    dram_in = dram_errors(cases.dram, mem_eff)
    # leave-one-out: only the channel-bound cases take part in the fit
    held = iter(leave_one_out(bound, fit_dram, lambda c, eff: dram_errors([c], eff)[0]))
    dram_loo = [next(held) if _channel_bound(c) else dram_in[i] for i, c in enumerate(cases.dram)]
    b = basis(cases.gemm, mem_eff)
    # rows that contradict the hardware (slower than their HiFi4 twin) carry no information a
    # physical model can use: reported, not fitted (palm.validation_tiled.fidelity_conflicts)
    conflicts = fidelity_conflicts(cases.gemm)
    consistent = np.array([c.case_id not in conflicts for c in cases.gemm])
    full = fit_gemm(b, consistent)
    fitted = dict(zip(GEMM_PARAMS, (float(x) for x in full), strict=True))
    fitted["memory_efficiency"] = mem_eff
    # the closed form is the simulator's: check it with palm.simulate
    sim = np.array([palm.simulate(_with(c, **fitted)).iteration_time_s for c in cases.gemm])
    assert np.allclose(sim, times(b, full), rtol=1e-9), "closed form and simulator disagree"
    insample = sim / b.measured_s - 1
    loo = gemm_loo(b, full, consistent)
    lines = [
        "Fitted constants (in the wormhole-n150 preset): "
        + ", ".join(f"`{k}` = {v:.4g}" for k, v in fitted.items())
        + ".",
        "",
        "| matrix products | in-sample mean / max abs error | leave-one-out mean / max |",
        "|---|---|---|",
    ]
    for name, mask in _groups(cases.gemm, consistent).items():
        lines.append(f"| {name} | {_stats(insample[mask])} | {_stats(loo[mask])} |")
    dram_groups = {
        "all transfers": lambda c: True,
        "reads": lambda c: not c.transfer.write,
        "static-VC writes": lambda c: c.transfer.write and "staticvc" in c.case_id,
        "dynamic-VC writes": lambda c: c.transfer.write and "dynamicvc" in c.case_id,
    }
    lines += ["", "| DRAM bandwidth | in-sample mean / max abs error | leave-one-out mean / max |",
              "|---|---|---|"]  # fmt: skip
    for name, keep in dram_groups.items():
        idx = [i for i, c in enumerate(cases.dram) if keep(c)]
        lines.append(f"| {name} ({len(idx)}) | {_stats([dram_in[i] for i in idx])} | "
                     f"{_stats([dram_loo[i] for i in idx])} |")  # fmt: skip
    w, w_err = overlap_check(b, full)
    lines += ["", f"Overlap of DRAM streaming with compute, fitted as a sixth constant: "
              f"{w:.2f} (0 = none, 1 = fully hidden), in-sample mean error {w_err:.1%}; "
              "the model takes 1 (double-buffered operands)."]  # fmt: skip
    if conflicts:
        lines += ["", "Rows that no model whose time never falls as the fidelity rises can meet "
                  "within 25% (with their HiFi4 twins), reported and not fitted:", ""]  # fmt: skip
        by_id = {c.case_id: c for c in cases.gemm}
        lines += [f"- `{k}` measured {by_id[k].measured_time_s * 1e6:.1f} us, "
                  f"{by_id[k].measured_time_s / t.measured_time_s:.2f} x its HiFi4 twin "
                  f"({t.measured_time_s * 1e6:.1f} us)" for k, t in conflicts.items()]  # fmt: skip
    worst = sorted(range(len(cases.gemm)), key=lambda i: -abs(insample[i]))[:8]
    lines += ["", "Largest matrix-product errors (in-sample; leave-one-out):", ""]
    for i in worst:
        c = cases.gemm[i]
        lines.append(f"- `{c.case_id}` ({c.config.hardware.matmul_config}): "  # type: ignore[union-attr]
                     f"{insample[i]:+.1%}; {loo[i]:+.1%}")  # fmt: skip
    stored = [palm.simulate(c.config).iteration_time_s / c.measured_time_s - 1
              for c in cases.gemm]  # fmt: skip
    dram_stored = dram_errors(cases.dram, _preset().memory_efficiency)
    used = [i for i in range(len(cases.gemm)) if consistent[i]]
    bound_idx = [i for i, c in enumerate(cases.dram) if _channel_bound(c)]
    errs = {
        "ids": [cases.gemm[i].case_id for i in used] + [cases.dram[i].case_id for i in bound_idx],
        "rows": [c.case_id for c in cases.gemm] + [c.case_id for c in cases.dram],
        "stored": [stored[i] for i in used] + [dram_stored[i] for i in bound_idx],
        "fitted": [float(insample[i]) for i in used] + [dram_in[i] for i in bound_idx],
        "loo": [float(loo[i]) for i in used] + [dram_loo[i] for i in bound_idx],
    }
    return "\n".join(lines), fitted, errs


def _preset() -> Mesh2DHardware:
    hw = hardware_preset("wormhole-n150")
    assert isinstance(hw, Mesh2DHardware)
    return hw


def write(file: str | None, fitted: dict[str, float], errs: dict[str, Any], adopt: bool) -> bool:
    """Write the fit set (benchmarks/_fitted.py); ``operand_feed_gbps`` is stored per cycle,
    as its rate at 1 GHz. Returns whether the fit was adopted."""
    clock = preset_records()["wormhole-n150"].figures["clock_ghz"]
    per_cycle = {k: v / clock if k == "operand_feed_gbps" else v for k, v in fitted.items()}
    return write_fit(
        FIT_SET,
        script="calibrate_tiled.py",
        data=file or "palm/data/visible_tiled.json",
        rows=errs["rows"],
        left_out=[r for r in errs["rows"] if r not in set(errs["ids"])],
        method="memory_efficiency: the geometric mean of measured / channel rate of the "
        "one-channel transfers the channel alone limits; the five product constants: "
        "Nelder-Mead on the mean squared log error of the products' time (the closed form of "
        "palm/engines/gemm.py, checked against palm.simulate), rows slower than their HiFi4 "
        "twin left out",
        fitted=per_cycle,
        rounded={k: float(f"{v:.4g}") for k, v in per_cycle.items()},
        in_sample_stored=errs["stored"],
        in_sample_fitted=errs["fitted"],
        leave_one_out=errs["loo"],
        adopt=adopt,
        at_1ghz=["operand_feed_gbps"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=None, help="tiled validation JSON (default: visible)")
    parser.add_argument("--write-docs", action="store_true", help="update docs/validation.md")
    parser.add_argument("--write", action="store_true", help=f"write palm/data/fitted/{FIT_SET}")
    parser.add_argument("--adopt", action="store_true", help="with --write: store the fit even "
                        "if it does not lower the in-sample error")  # fmt: skip
    args = parser.parse_args(argv)
    text, fitted, errs = run_detailed(args.file)
    print(text)
    if args.write_docs:
        write_section(DOC, "tiled", text)
        print(f"\nwrote {DOC.relative_to(ROOT)} (block tiled)")
    if args.write:
        adopted = write(args.file, fitted, errs, args.adopt)
        write_docs()
        kept = "adopted" if adopted else "recorded; the stored constants kept"
        print(f"wrote palm/data/fitted/{FIT_SET}.toml (fit {kept})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
