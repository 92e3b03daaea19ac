"""Fit the Tensix constants of the wormhole-n150 preset on the visible Wormhole measurements.

Usage:
    python benchmarks/calibrate_tiled.py [--file visible_tiled.json] [--write-docs]

Five physically meaningful constants, each with one job (palm/engines/gemm.py):

* ``memory_efficiency``: the achievable fraction of a GDDR6 channel's 24 GB/s, fitted on the
  one-channel transfers that the channel alone limits (reads, static-VC writes, the lone
  dynamic-VC writer), where the prediction is ``24 GB/s x memory_efficiency``: the least-squares
  log fit is the geometric mean of measured / 24 GB/s. The multi-channel transfers then test
  the routing and max-min sharing with no constant of their own;
* ``matmul_efficiency`` (the achievable fraction of the matrix engine's pipeline),
  ``operand_feed_gbps`` (the rate the unpackers feed operand tiles, which binds below HiFi3),
  ``launch_us`` (device cost of one program launch; with ``dispatch = "trace"``) and
  ``host_dispatch_us`` (host cost of enqueueing one untraced program, overlapping the device):
  fitted together on all 90 matrix products by Nelder-Mead on the mean squared log error of the
  time, with ``memory_efficiency`` fixed from the first fit.

The products' time is affine in ``1 / matmul_efficiency``, ``1 / operand_feed``,
``1 / memory_efficiency`` and ``launch`` once the simulator has given each case its math time,
operand bytes and DRAM bytes, so the fit evaluates that closed form on arrays; the end of the
script checks it against ``palm.simulate`` with the fitted constants (to 1e-9). Leave-one-out:
refit without each case and predict it. With --write-docs the tables go into
docs/validation.md (block ``tiled``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import palm
from palm.engines.gemm import gemm_times
from palm.hardware.presets import hardware_preset
from palm.hardware.spec import Mesh2DHardware
from palm.validation_tiled import DramCase, GemmCase, load_tiled_cases, predict_dram

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"
GEMM_PARAMS = ("matmul_efficiency", "operand_feed_gbps", "launch_us", "host_dispatch_us")
START = (0.9, 50.0, 8.0, 90.0)


def _with(case: GemmCase, **hw: float) -> palm.SimConfig:
    hardware = dataclasses.replace(case.config.hardware, **hw)  # type: ignore[arg-type]
    return dataclasses.replace(case.config, hardware=hardware)


def golden(f: Callable[[float], float], lo: float, hi: float, tol: float = 1e-5) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def nelder_mead(f: Callable[[np.ndarray], float], x0: Sequence[float], iters: int = 2000
                ) -> np.ndarray:  # fmt: skip
    """Minimise ``f`` from ``x0`` (standard reflection/expansion/contraction/shrink)."""
    n = len(x0)
    simplex = [np.array(x0, float)]
    simplex += [simplex[0] + np.eye(n)[i] * 0.2 * max(abs(x0[i]), 1e-3) for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centre = np.mean(simplex[:-1], axis=0)
        reflected = 2 * centre - simplex[-1]
        fr = f(reflected)
        if fr < values[0]:
            expanded = 3 * centre - 2 * simplex[-1]
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = (centre + simplex[-1]) / 2
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0]] + [(s + simplex[0]) / 2 for s in simplex[1:]]
                values = [values[0]] + [f(s) for s in simplex[1:]]
    return simplex[int(np.argmin(values))]


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
# matrix products: the four gemm constants


@dataclasses.dataclass(frozen=True)
class Basis:
    """Per case: the terms of the time that do not depend on the fitted constants."""

    math_s: np.ndarray  # at matmul_efficiency 1
    feed_bytes: np.ndarray  # operand bytes through the unpackers of the busiest core
    other_s: np.ndarray  # NoC and reduction (not scaled)
    dram_s: np.ndarray  # at the fitted memory_efficiency
    host: np.ndarray  # 1 where dispatch = "host"
    measured_s: np.ndarray


def basis(cases: Sequence[GemmCase], memory_efficiency: float) -> Basis:
    rows = []
    for c in cases:
        unit = {"matmul_efficiency": 1.0, "operand_feed_gbps": 1.0, "launch_us": 0.0}
        t = gemm_times(_with(c, **unit, host_dispatch_us=0.0, memory_efficiency=memory_efficiency))
        hw = c.config.hardware
        assert isinstance(hw, Mesh2DHardware)
        rows.append((t.math_s, t.feed_s * 1e9, t.noc_s + t.reduce_s, t.dram_s,
                     float(hw.dispatch == "host"), c.measured_time_s))  # fmt: skip
    cols = np.array(rows).T
    return Basis(*cols)


def times(b: Basis, p: Sequence[float]) -> np.ndarray:
    """The closed form of palm/engines/gemm.py for constants ``p`` (GEMM_PARAMS order)."""
    eta, feed, launch_us, host_us = p
    core = np.maximum(np.maximum(b.math_s, b.feed_bytes / (feed * 1e9)) / eta, b.other_s)
    device = launch_us * 1e-6 + core + b.dram_s
    return np.where(b.host > 0, np.maximum(host_us * 1e-6, device), device)


def overlap_check(b: Basis, p: Sequence[float]) -> tuple[float, float]:
    """The DRAM-compute overlap the data supports: refit with a fifth constant ``w`` (time
    ``launch + core + dram - w min(core, dram)``); returns ``w`` and the in-sample mean error."""

    def timed(q: np.ndarray) -> np.ndarray:
        full = times(b, q[:4])
        core = np.maximum(np.maximum(b.math_s, b.feed_bytes / (q[1] * 1e9)) / q[0], b.other_s)
        overlapped = full - q[4] * np.minimum(core, b.dram_s)
        device = np.maximum(overlapped, q[2] * 1e-6 + np.maximum(core, b.dram_s))
        return np.where(b.host > 0, np.maximum(q[3] * 1e-6, device), device)

    def f(q: np.ndarray) -> float:
        if not (0.05 < q[0] <= 1.0 and q[1] > 1.0 and q[2] >= 0 and q[3] >= 0 and 0 <= q[4] <= 1):
            return 1e9
        return float(np.mean(np.log(timed(q) / b.measured_s) ** 2))

    best = nelder_mead(f, [*p, 0.5])
    best = nelder_mead(f, best)
    return float(best[4]), float(np.mean(np.abs(timed(best) / b.measured_s - 1)))


def _loss(b: Basis, keep: np.ndarray) -> Callable[[np.ndarray], float]:
    def f(p: np.ndarray) -> float:
        if not (0.05 < p[0] <= 1.0 and p[1] > 1.0 and p[2] >= 0 and p[3] >= 0):
            return 1e9
        return float(np.mean(np.log(times(b, p)[keep] / b.measured_s[keep]) ** 2))

    return f


def fit_gemm(b: Basis, keep: np.ndarray, x0: Sequence[float] = START) -> np.ndarray:
    best = nelder_mead(_loss(b, keep), x0)
    return nelder_mead(_loss(b, keep), best)  # a restart to leave a collapsed simplex


def gemm_loo(b: Basis, full: np.ndarray) -> np.ndarray:
    n = len(b.measured_s)
    out = np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        p = nelder_mead(_loss(b, keep), full, iters=800)
        out[i] = times(b, p)[i] / b.measured_s[i] - 1
    return out


# -------------------------------------------------------------------------------------------
# report


def _stats(errs: Sequence[float]) -> str:
    a = [abs(e) for e in errs]
    return f"{sum(a) / len(a):.1%} / {max(a):.1%}" if a else "-"


def _groups(cases: Sequence[GemmCase]) -> dict[str, np.ndarray]:
    tuned = np.array([c.tuned for c in cases])
    traced = np.array([c.traced for c in cases])
    masks = {
        "all products": np.ones(len(cases), bool),
        "hand-tuned": tuned,
        "out-of-box": ~tuned,
        "traced": traced,
        "hand-tuned, traced": tuned & traced,
    }
    return {f"{name} ({int(mask.sum())})": mask for name, mask in masks.items()}


def run(file: str | None) -> tuple[str, dict[str, float]]:
    cases = load_tiled_cases(file)
    bound = [c for c in cases.dram if _channel_bound(c)]
    mem_eff = fit_dram(bound)
    dram_in = dram_errors(cases.dram, mem_eff)
    # leave-one-out: only the channel-bound cases take part in the fit
    dram_loo = [
        dram_in[i]
        if not _channel_bound(c)
        else (1 + dram_in[i]) * fit_dram([d for d in bound if d is not c]) / mem_eff - 1
        for i, c in enumerate(cases.dram)
    ]
    b = basis(cases.gemm, mem_eff)
    full = fit_gemm(b, np.ones(len(cases.gemm), bool))
    fitted = dict(zip(GEMM_PARAMS, (float(x) for x in full), strict=True))
    fitted["memory_efficiency"] = mem_eff
    # the closed form is the simulator's: check it with palm.simulate
    sim = np.array([palm.simulate(_with(c, **fitted)).iteration_time_s for c in cases.gemm])
    assert np.allclose(sim, times(b, full), rtol=1e-9), "closed form and simulator disagree"
    insample = sim / b.measured_s - 1
    loo = gemm_loo(b, full)
    lines = [
        "Fitted constants (in the wormhole-n150 preset): "
        + ", ".join(f"`{k}` = {v:.4g}" for k, v in fitted.items())
        + ".",
        "",
        "| matrix products | in-sample mean / max abs error | leave-one-out mean / max |",
        "|---|---|---|",
    ]
    for name, mask in _groups(cases.gemm).items():
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
    lines += ["", f"Overlap of DRAM streaming with compute, fitted as a fifth constant: "
              f"{w:.2f} (0 = none, 1 = fully hidden), in-sample mean error {w_err:.1%}; "
              "the model keeps none."]  # fmt: skip
    worst = sorted(range(len(cases.gemm)), key=lambda i: -abs(insample[i]))[:8]
    lines += ["", "Largest matrix-product errors (in-sample; leave-one-out):", ""]
    for i in worst:
        lines.append(f"- `{cases.gemm[i].case_id}`: {insample[i]:+.1%}; {loo[i]:+.1%}")
    return "\n".join(lines), fitted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=None, help="tiled validation JSON (default: visible)")
    parser.add_argument("--write-docs", action="store_true", help="update docs/validation.md")
    args = parser.parse_args(argv)
    text, fitted = run(args.file)
    print(text)
    if args.write_docs:
        write_section(DOC, "tiled", text)
        print(f"\nwrote {DOC.relative_to(ROOT)} (block tiled)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
