"""Fit the Tensix constants of each chip (wormhole-n150, blackhole-p150) on its own visible rows.

Usage:
    python benchmarks/calibrate_tiled.py [--file visible_tiled.json] [--chip wormhole|blackhole]
                                         [--write-docs] [--write [--adopt]]

Each chip is fitted on the rows that state it (``hardware.chip``: :func:`palm.validation_tiled.
chip_of`), never on another chip's: the Wormhole rows are ``palm/data/visible_tiled.json``, the
Blackhole rows ``palm/data/visible_tiled_blackhole.json`` (both are read by default). Six
physically meaningful constants, each with one job (palm/engines/gemm.py):

* ``memory_efficiency``: the achievable fraction of a GDDR6 channel's rate, fitted on the
  one-channel transfers that the channel alone limits (reads, static-VC writes, the lone
  dynamic-VC writer), where the prediction is ``channel x memory_efficiency``: the least-squares
  log fit is the geometric mean of measured / channel. The multi-channel transfers then test
  the routing and max-min sharing with no constant of their own; the multicast senders of the
  matrix products read at this one-core rate too (no constant of their own either);
* ``matmul_efficiency`` (the achievable fraction of the matrix engine's pipeline),
  ``operand_feed_gelems`` (the datums per second the unpackers feed, which binds below HiFi3),
  ``launch_us`` (device cost of one program launch; with ``dispatch = "trace"``),
  ``host_dispatch_us`` (host cost of enqueueing one untraced program, overlapping the device)
  and ``host_sharded_output_us`` (its extra cost when the output is an L1-sharded tensor):
  fitted together on the chip's matrix products by Nelder-Mead on the mean squared log error
  of the time, with ``memory_efficiency`` fixed from the first fit. Rows slower than their
  HiFi4 twin (:func:`palm.validation_tiled.fidelity_conflicts`) are reported and not fitted.

A constant is fitted on a chip only where that chip's rows can bind it: ``memory_efficiency``
where it has channel-bound DRAM transfers, ``operand_feed_gelems`` where it has products below
HiFi3 (at HiFi3 and HiFi4 a tile product's 48 or 64 multiplier cycles exceed the feed's, and
the time does not depend on the feed), a host cost where some untraced row is host-bound
(:func:`pin_unbound_hosts`). An unbound constant is not borrowed from another chip: the feed
and the host costs take their no-effect value, 0 (no limit, no floor). The visible Blackhole
rows are all HiFi4 and none with C in DRAM is host-bound, so Blackhole fits its matrix-engine
fraction, launch and sharded-output host cost on its own rows, and has no feed limit and no
interleaved host floor; having no DRAM transfer either, it keeps the GDDR6 channel
efficiency of the Wormhole fit its preset names first (the same channels).

The products' time is piecewise affine in ``1 / matmul_efficiency``, ``1 / operand_feed``, the
launch and host costs once the simulator has given each case its math time, operand datums,
NoC, sender, DRAM and output-tail times (the tail's rate comes from the NoC model, no
constant), so the fit evaluates that closed form on arrays; the end of the
script checks it against ``palm.simulate`` with the fitted constants (to 1e-9). Leave-one-out:
refit without each case and predict it. With --write-docs the tables go into
docs/validation.md (blocks ``tiled`` and ``tiled-blackhole``); with --write the constants go
into the chip's fit set, ``palm/data/fitted/tensix-<chip>.toml`` (command, rows, errors;
benchmarks/_fitted.py), which its preset takes (``operand_feed_gelems`` per cycle, at 1 GHz),
and the docs' preset and constant tables are regenerated. The stored constants are replaced
only where the refit lowers the in-sample mean error of the fitted rows (the consistent
products and the channel-bound transfers) by more than 0.1 point (or with --adopt).
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
from palm.hardware.preset_data import fit_sets, preset_records
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
    "operand_feed_gelems",
    "launch_us",
    "host_dispatch_us",
    "host_sharded_output_us",
)
START = (0.9, 25.0, 8.0, 60.0, 40.0)
#: per chip: the fit set this script writes (palm/data/fitted/) and the preset that takes it
CHIPS = {
    "wormhole": ("tensix-wormhole", "wormhole-n150", "palm/data/visible_tiled.json"),
    "blackhole": ("tensix-blackhole", "blackhole-p150", "palm/data/visible_tiled_blackhole.json"),
}
#: the fidelities at which a tile product's multiplier cycles (16 or 32) can fall below the
#: feed's, so that a product's time depends on ``operand_feed_gelems``
_FEED_BOUND_FIDELITIES = ("lofi", "hifi2")
_FEED = "operand_feed_gelems"


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
    feed_elems: np.ndarray  # operand datums through the unpackers of the busiest core
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
        unit = {"matmul_efficiency": 1.0, "operand_feed_gelems": 1.0, "launch_us": 0.0}
        t = gemm_times(_with(c, **unit, host_dispatch_us=0.0, memory_efficiency=memory_efficiency))
        hw = c.config.hardware
        assert isinstance(hw, Mesh2DHardware)
        rows.append((t.math_s, t.feed_s * 1e9, t.noc_s, t.send_s, t.reduce_s, t.dram_s,
                     t.tail_s, float(hw.dispatch == "host"),
                     float("c" in c.config.model.sram_resident), c.measured_time_s))  # fmt: skip
    cols = np.array(rows).T.reshape(10, len(rows))
    return Basis(*cols)


@dataclasses.dataclass(frozen=True)
class Space:
    """Which of :data:`GEMM_PARAMS` a chip's rows fit (``free``, their indices) and the values
    the others keep (``base``, the full vector: the chip's preset)."""

    free: tuple[int, ...]
    base: tuple[float, ...]

    def expand(self, x: Sequence[float]) -> np.ndarray:
        p = np.array(self.base, float)
        p[list(self.free)] = x
        return p

    def start(self) -> list[float]:
        return [START[i] for i in self.free]


def _core(b: Basis, eta: float, feed_gelems: float) -> np.ndarray:
    feed_s = b.feed_elems / (feed_gelems * 1e9) if feed_gelems > 0 else 0.0 * b.feed_elems
    engine = np.maximum(b.math_s, feed_s) / eta
    return np.maximum(np.maximum(engine, b.noc_s), b.send_s) + b.reduce_s


def times(b: Basis, p: Sequence[float]) -> np.ndarray:
    """The closed form of palm/engines/gemm.py for constants ``p`` (GEMM_PARAMS order)."""
    eta, feed, launch_us, host_us, shard_us = p
    device = launch_us * 1e-6 + np.maximum(_core(b, eta, feed), b.dram_s) + b.tail_s
    host = (host_us + shard_us * b.sharded) * 1e-6
    return np.where(b.host > 0, np.maximum(host, device), device)


def _valid(p: Sequence[float]) -> bool:
    return 0.05 < p[0] <= 1.0 and (p[1] > 1.0 or p[1] == 0.0) and min(p[2:5]) >= 0


def overlap_check(b: Basis, space: Space, x: Sequence[float]) -> tuple[float, float]:
    """The DRAM-compute overlap the data supports: refit with one more constant ``w`` (time
    ``launch + core + dram - w min(core, dram) + tail``; the model takes ``w = 1``, streaming
    hidden under the compute); returns ``w`` and the in-sample mean error."""

    def timed(q: np.ndarray) -> np.ndarray:
        p = space.expand(q[:-1])
        core = _core(b, p[0], p[1])
        device = p[2] * 1e-6 + core + b.dram_s - q[-1] * np.minimum(core, b.dram_s) + b.tail_s
        host = (p[3] + p[4] * b.sharded) * 1e-6
        return np.where(b.host > 0, np.maximum(host, device), device)

    def f(q: np.ndarray) -> float:
        if not (_valid(space.expand(q[:-1])) and 0 <= q[-1] <= 1):
            return 1e9
        return float(np.mean(np.log(timed(q) / b.measured_s) ** 2))

    best = nelder_mead(f, [*x, 0.5])
    best = nelder_mead(f, best)
    return float(best[-1]), float(np.mean(np.abs(timed(best) / b.measured_s - 1)))


def _loss(b: Basis, keep: np.ndarray, space: Space) -> Callable[[np.ndarray], float]:
    def f(x: np.ndarray) -> float:
        p = space.expand(x)
        if not _valid(p):
            return 1e9
        return float(np.mean(np.log(times(b, p)[keep] / b.measured_s[keep]) ** 2))

    return f


def fit_gemm(b: Basis, keep: np.ndarray, space: Space) -> np.ndarray:
    """The free constants (``space.free`` order) that best fit the rows ``keep``."""
    best = nelder_mead(_loss(b, keep, space), space.start())
    return nelder_mead(_loss(b, keep, space), best)  # a restart to leave a collapsed simplex


#: host costs: a chip's rows may not show them (every untraced row device-bound), and then
#: they are not borrowed from another chip's host but taken as 0 (no host floor)
HOST_PARAMS = ("host_dispatch_us", "host_sharded_output_us")


def pin_unbound_hosts(b: Basis, keep: np.ndarray, space: Space) -> tuple[Space, np.ndarray]:
    """Fit ``space``; then each host cost that the rows do not bind (pinning it at 0 and
    refitting the rest leaves the loss unchanged to 1e-6) is pinned at 0 and left out of the
    free constants. Returns the space and its fit. A host cost is a property of the host
    machine and driver, not of the chip's silicon, so an unbound one is not borrowed from
    another chip's fit (the operand feed and DRAM efficiency, properties of the shared Tensix
    and GDDR6 design, are: :func:`chip_space`)."""
    x = fit_gemm(b, keep, space)
    for name in HOST_PARAMS:
        j = GEMM_PARAMS.index(name)
        if j not in space.free:
            continue
        base = list(space.expand(x))
        base[j] = 0.0
        pinned = Space(tuple(i for i in space.free if i != j), tuple(base))
        y = fit_gemm(b, keep, pinned)
        full_loss = _loss(b, keep, space)(x)
        if _loss(b, keep, pinned)(y) <= full_loss * (1 + 1e-6) + 1e-12:
            space, x = pinned, y
    return space, x


def gemm_loo(b: Basis, full: np.ndarray, fitted_on: np.ndarray, space: Space) -> np.ndarray:
    """Leave-one-out errors, each refit warm-started from the full fit; a row outside the fit
    (``fitted_on`` false) is already held out, so its error is the full fit's."""
    n = len(b.measured_s)
    inside = [i for i in range(n) if fitted_on[i]]

    def fit(rest: list[int]) -> np.ndarray:
        keep = np.zeros(n, bool)
        keep[rest] = True
        return nelder_mead(_loss(b, keep, space), full, iters=800)

    def error(i: int, x: np.ndarray) -> float:
        return float(times(b, space.expand(x))[i] / b.measured_s[i] - 1)

    errors = times(b, space.expand(full)) / b.measured_s - 1
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


def run(file: str | None, chip: str = "wormhole") -> tuple[str, dict[str, float]]:
    """The report and the fitted constants of ``chip``."""
    text, fitted, _ = run_detailed(file, chip)
    return text, fitted


def _preset(chip: str) -> Mesh2DHardware:
    hw = hardware_preset(CHIPS[chip][1])
    assert isinstance(hw, Mesh2DHardware)
    return hw


def chip_space(chip: str, cases: Sequence[GemmCase]) -> Space:
    """The constants ``chip``'s own products can bind (module docstring): the operand feed only
    where some product runs below HiFi3, else 0 (no limit: the unpacker's rate is not taken
    from another chip, whose L1 differs); the others start from the chip's preset."""
    hw = _preset(chip)
    feed_bound = any(
        getattr(c.config.hardware, "math_fidelity", "") in _FEED_BOUND_FIDELITIES for c in cases
    )
    free = tuple(i for i, k in enumerate(GEMM_PARAMS) if feed_bound or k != _FEED)
    base = [0.0 if k == _FEED and not feed_bound else float(getattr(hw, k)) for k in GEMM_PARAMS]
    return Space(free, tuple(base))


def _dram_fit(cases: Sequence[DramCase], chip: str) -> tuple[float, list[float], list[float]]:
    """``memory_efficiency`` from the channel-bound transfers (the chip's preset value when it
    has none), with the in-sample and leave-one-out errors of every transfer."""
    bound = [c for c in cases if _channel_bound(c)]
    if not bound:
        return _preset(chip).memory_efficiency, [], []
    eff = fit_dram(bound)
    errs = dram_errors(cases, eff)
    # leave-one-out: only the channel-bound cases take part in the fit
    held = iter(leave_one_out(bound, fit_dram, lambda c, e: dram_errors([c], e)[0]))
    return eff, errs, [next(held) if _channel_bound(c) else errs[i] for i, c in enumerate(cases)]


def run_detailed(
    file: str | None, chip: str = "wormhole"
) -> tuple[str, dict[str, float], dict[str, Any]]:
    """The report, the fitted constants and, for the rows the fit used (the consistent
    products, then the channel-bound transfers), their ids and errors: ``stored`` (the
    preset's constants), ``fitted``, ``loo``; ``ids``: those rows, ``rows``: every row.
    Only ``chip``'s rows take part (the DRAM transfers are Wormhole's)."""
    everything = load_tiled_cases(file)
    gemm = [c for c in everything.gemm if c.chip == chip]
    dram = list(everything.dram) if chip == "wormhole" else []
    if not gemm:
        raise SystemExit(f"no {chip} matrix products in {file or 'the visible files'}")
    mem_eff, dram_in, dram_loo = _dram_fit(dram, chip)
    b = basis(gemm, mem_eff)
    # rows that contradict the hardware (slower than their HiFi4 twin) carry no information a
    # physical model can use: reported, not fitted (palm.validation_tiled.fidelity_conflicts)
    conflicts = fidelity_conflicts(gemm)
    consistent = np.array([c.case_id not in conflicts for c in gemm])
    space, x = pin_unbound_hosts(b, consistent, chip_space(chip, gemm))
    full = space.expand(x)
    pinned = [k for k in (*HOST_PARAMS, _FEED) if GEMM_PARAMS.index(k) not in space.free]
    fitted = {k: float(full[i]) for i, k in enumerate(GEMM_PARAMS)
              if i in space.free or k in pinned}  # fmt: skip
    if dram:
        fitted["memory_efficiency"] = mem_eff
    # the closed form is the simulator's: check it with palm.simulate
    every = dict(zip(GEMM_PARAMS, (float(v) for v in full), strict=True))
    sim = np.array([palm.simulate(_with(c, **every, memory_efficiency=mem_eff)).iteration_time_s
                    for c in gemm])  # fmt: skip
    assert np.allclose(sim, times(b, full), rtol=1e-9), "closed form and simulator disagree"
    insample = sim / b.measured_s - 1
    loo = gemm_loo(b, x, consistent, space)
    lines = [
        _header(chip, len(gemm), len(dram), fitted, pinned, mem_eff),
        "",
        "| matrix products | in-sample mean / max abs error | leave-one-out mean / max |",
        "|---|---|---|",
    ]  # fmt: skip
    for name, mask in _groups(gemm, consistent).items():
        lines.append(f"| {name} | {_stats(insample[mask])} | {_stats(loo[mask])} |")
    lines += _dram_table(dram, dram_in, dram_loo)
    if chip != "wormhole":
        carried = _carried_errors(gemm, chip)
        lines += [
            "",
            f"With the Wormhole constants carried over unchanged (per cycle at {_clock(chip):g} "
            f"GHz, the preset before this chip had its own fit): {_stats(carried)} (mean / max "
            f"abs error, all {len(gemm)} products).",
        ]
    w, w_err = overlap_check(b, space, x)
    lines += ["", f"Overlap of DRAM streaming with compute, fitted as one more constant: "
              f"{w:.2f} (0 = none, 1 = fully hidden), in-sample mean error {w_err:.1%}; "
              "the model takes 1 (double-buffered operands)."]  # fmt: skip
    lines += _conflict_lines(gemm, conflicts)
    worst = sorted(range(len(gemm)), key=lambda i: -abs(insample[i]))[:8]
    lines += ["", "Largest matrix-product errors (in-sample; leave-one-out):", ""]
    for i in worst:
        c = gemm[i]
        lines.append(f"- `{c.case_id}` ({c.config.hardware.matmul_config}): "  # type: ignore[union-attr]
                     f"{insample[i]:+.1%}; {loo[i]:+.1%}")  # fmt: skip
    stored = [palm.simulate(c.config).iteration_time_s / c.measured_time_s - 1 for c in gemm]
    dram_stored = dram_errors(dram, _preset(chip).memory_efficiency) if dram else []
    used = [i for i in range(len(gemm)) if consistent[i]]
    bound_idx = [i for i, c in enumerate(dram) if _channel_bound(c)]
    errs = {
        "ids": [gemm[i].case_id for i in used] + [dram[i].case_id for i in bound_idx],
        "rows": [c.case_id for c in gemm] + [c.case_id for c in dram],
        "stored": [stored[i] for i in used] + [dram_stored[i] for i in bound_idx],
        "fitted": [float(insample[i]) for i in used] + [dram_in[i] for i in bound_idx],
        "loo": [float(loo[i]) for i in used] + [dram_loo[i] for i in bound_idx],
    }
    return "\n".join(lines), fitted, errs


def _header(
    chip: str, products: int, transfers: int, fitted: dict[str, float], pinned: list[str],
    mem_eff: float,
) -> str:  # fmt: skip
    """The first line of a chip's report: what was fitted, what its rows leave unbound."""
    text = (
        f"Fitted on the {products} {chip} products"
        + (f" and {transfers} DRAM transfers" if transfers else "")
        + f" (in the {CHIPS[chip][1]} preset): "
        + ", ".join(f"`{k}` = {v:.4g}" for k, v in fitted.items() if k not in pinned)
        + "."
    )
    if pinned:
        text += (f" No {chip} row binds " + " or ".join(f"`{k}`" for k in pinned)
                 + ": 0 (no host floor, no feed limit), not another chip's value.")  # fmt: skip
    if not transfers:
        text += (f" No DRAM transfer: `memory_efficiency` = {mem_eff:.4g} from the preset's "
                 "prior fit (the same GDDR6 channels).")  # fmt: skip
    return text


def _clock(chip: str) -> float:
    return float(preset_records()[CHIPS[chip][1]].figures["clock_ghz"])


def _carried_errors(gemm: Sequence[GemmCase], chip: str) -> list[float]:
    """Errors of ``chip``'s products with every Wormhole-fitted constant in place of its own
    (the per-cycle ones at ``chip``'s clock): how far the other chip's fit carries."""
    fit = fit_sets()[CHIPS["wormhole"][0]]
    wh = {k: v * (_clock(chip) if k in fit.at_1ghz else 1.0) for k, v in fit.constants.items()}
    return [palm.simulate(_with(c, **wh)).iteration_time_s / c.measured_time_s - 1 for c in gemm]


def _dram_table(dram: Sequence[DramCase], inside: list[float], loo: list[float]) -> list[str]:
    if not dram:
        return []
    groups = {
        "all transfers": lambda c: True,
        "reads": lambda c: not c.transfer.write,
        "static-VC writes": lambda c: c.transfer.write and "staticvc" in c.case_id,
        "dynamic-VC writes": lambda c: c.transfer.write and "dynamicvc" in c.case_id,
    }
    lines = ["", "| DRAM bandwidth | in-sample mean / max abs error | leave-one-out mean / max |",
             "|---|---|---|"]  # fmt: skip
    for name, keep in groups.items():
        idx = [i for i, c in enumerate(dram) if keep(c)]
        lines.append(f"| {name} ({len(idx)}) | {_stats([inside[i] for i in idx])} | "
                     f"{_stats([loo[i] for i in idx])} |")  # fmt: skip
    return lines


def _conflict_lines(gemm: Sequence[GemmCase], conflicts: dict[str, GemmCase]) -> list[str]:
    if not conflicts:
        return []
    lines = ["", "Rows that no model whose time never falls as the fidelity rises can meet "
             "within 25% (with their HiFi4 twins), reported and not fitted:", ""]  # fmt: skip
    by_id = {c.case_id: c for c in gemm}
    for k, t in conflicts.items():
        c = by_id[k]
        lines.append(f"- `{k}` measured {c.measured_time_s * 1e6:.1f} us, "
                     f"{c.measured_time_s / t.measured_time_s:.2f} x its HiFi4 twin "
                     f"({t.measured_time_s * 1e6:.1f} us)")  # fmt: skip
    return lines


def write(
    file: str | None, chip: str, fitted: dict[str, float], errs: dict[str, Any], adopt: bool
) -> bool:
    """Write ``chip``'s fit set (benchmarks/_fitted.py); ``operand_feed_gelems`` is stored per
    cycle, as its rate at 1 GHz. Returns whether the fit was adopted."""
    fit_set, preset, data = CHIPS[chip]
    clock = preset_records()[preset].figures["clock_ghz"]
    per_cycle = {k: v / clock if k == "operand_feed_gelems" else v for k, v in fitted.items()}
    return write_fit(
        fit_set,
        script="calibrate_tiled.py",
        data=file or data,
        rows=errs["rows"],
        left_out=[r for r in errs["rows"] if r not in set(errs["ids"])],
        method=f"only the {chip} rows; memory_efficiency (where the chip has DRAM transfers): the "
        "geometric mean of measured / channel rate of the one-channel transfers the channel "
        "alone limits; the product constants its rows can bind (the operand feed only where "
        "some row runs below HiFi3): Nelder-Mead on the mean squared log error of the "
        "products' time (the closed form of palm/engines/gemm.py, checked against "
        "palm.simulate), rows slower than their HiFi4 twin left out",
        fitted=per_cycle,
        rounded={k: float(f"{v:.4g}") for k, v in per_cycle.items()},
        in_sample_stored=errs["stored"],
        in_sample_fitted=errs["fitted"],
        leave_one_out=errs["loo"],
        adopt=adopt,
        at_1ghz=[k for k in per_cycle if k == "operand_feed_gelems"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=None, help="tiled validation JSON (default: visible)")
    parser.add_argument("--chip", choices=(*CHIPS, "all"), default="all",
                        help="fit one chip's rows (default: each chip on its own)")  # fmt: skip
    parser.add_argument("--write-docs", action="store_true", help="update docs/validation.md")
    parser.add_argument("--write", action="store_true", help="write palm/data/fitted/tensix-*")
    parser.add_argument("--adopt", action="store_true", help="with --write: store the fit even "
                        "if it does not lower the in-sample error")  # fmt: skip
    args = parser.parse_args(argv)
    cases = load_tiled_cases(args.file).gemm
    chips = [c for c in CHIPS if args.chip in (c, "all") and any(g.chip == c for g in cases)]
    for chip in chips:
        text, fitted, errs = run_detailed(args.file, chip)
        print(f"## {chip}\n\n{text}\n")
        if args.write_docs:
            block = "tiled" if chip == "wormhole" else f"tiled-{chip}"
            write_section(DOC, block, text)
            print(f"wrote {DOC.relative_to(ROOT)} (block {block})")
        if args.write:
            adopted = write(args.file, chip, fitted, errs, args.adopt)
            kept = "adopted" if adopted else "recorded; the stored constants kept"
            print(f"wrote palm/data/fitted/{CHIPS[chip][0]}.toml (fit {kept})")
    if args.write:
        write_docs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
