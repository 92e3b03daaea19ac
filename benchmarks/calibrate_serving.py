"""Fit the serving runtime's constants on the visible inference rows and report the errors
in-sample, leave-one-out and leave-one-source-out (docs/validation.md, "LLM inference").

Six constants per kind of device (``gpu``, ``mesh``; :class:`palm.serving.step.RuntimeCosts`):
``kernel_us`` (fixed device time per kernel), ``step_us`` and ``sequence_us`` (the host's work
per step and per sequence in it, overlapped with the devices': a step takes ``max(device,
host)``), ``grouped_efficiency`` (fraction of the shape rule's rate a fused mixture-of-experts
kernel reaches), ``attention_efficiency`` and ``matmul_efficiency`` (the forward kernels'
fractions of peak; the three efficiencies on a grid, and only on GPUs: the Tenstorrent rows fit
``kernel_us`` and the host terms alone; there, where one source covers every row,
leave-one-system-out, n150 / n300 / T3000 / Galaxy, as well). For fixed efficiencies each row
is simulated twice (``kernel_us`` 0 and 1) to get its decode and prefill steps' device time as
``a + b kernel_us``, and its figure is then recombined in closed form (static batching: ``n O /
(steps S_p + (O - 1) S_d)``, ``ttft = steps S_p``; continuous: ``n / S_d``; with ``S = max(a +
b k, step_us + sequence_us x sequences)``), so the fit is an exhaustive grid, exact, and cheap
enough to refit for every row left out. The objective is the mean absolute relative error.

    python benchmarks/calibrate_serving.py            # fit and report, GPU and Tenstorrent
    python benchmarks/calibrate_serving.py --write    # also store the constants
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from palm.serving.runtime import constants_override
from palm.serving.scenario import step_sequences
from palm.serving.simulate import serving_run
from palm.serving.validation import InferenceCase, load_inference_cases

GROUPED = (0.0, 0.3, 0.5)
ATTENTION = (0.4, 0.5, 0.6, 0.7)
MATMUL = (0.0, 0.6, 0.7, 0.8)
KERNEL_US = np.linspace(0.0, 40.0, 21)
STEP_US = np.linspace(0.0, 5000.0, 26)
SEQUENCE_US = np.linspace(0.0, 40.0, 21)
CONSTANTS = Path(__file__).resolve().parents[1] / "palm" / "data" / "serving_constants.json"


@dataclass
class Row:
    """A row's figure as a function of the constants (module docstring)."""

    d0: float
    dk: float
    p0: float
    pk: float
    n_d: int
    n_p: int
    steps: int
    sequences: int
    output: int
    replicas: int
    devices: int
    static: bool
    key: str
    scale: str
    measured: float

    def predict(self, k: np.ndarray, h0: np.ndarray, h1: np.ndarray) -> np.ndarray:
        """The figure at ``kernel_us = k`` (microseconds), ``step_us`` and ``sequence_us``
        as ``h0`` and ``h1`` (seconds)."""
        s_d = np.maximum(self.d0 + self.dk * k, h0 + h1 * self.n_d)
        s_p = np.maximum(self.p0 + self.pk * k, h0 + h1 * self.n_p)
        n, o = self.sequences, self.output
        if self.key == "ttft_s":
            value = self.steps * s_p if self.static else 0.5 * s_d + self.steps * s_p
        elif self.key == "output_tokens_per_s_per_user":
            value = 1.0 / s_d
        else:
            total = self.steps * s_p + (o - 1) * s_d if self.static else o * s_d
            value = n * o * self.replicas / total
            if self.key == "throughput_samples_per_s":
                value = value / o
        if self.scale == "per_device":
            value = value / self.devices
        elif self.scale == "ms":
            value = value * 1e3
        return value


def _runtime(kind: str, k: float, e: tuple[float, ...]) -> dict[str, dict[str, float]]:
    zero = {"kernel_us": 0.0, "step_us": 0.0}
    table = {"gpu": dict(zero), "mesh": dict(zero)}
    table[kind] = {
        "kernel_us": k,
        "step_us": 0.0,
        "grouped_efficiency": e[0],
        "attention_efficiency": e[1],
        "matmul_efficiency": e[2],
    }
    return table


def row_forms(cases: list[InferenceCase], kind: str, e: tuple[float, ...]) -> list[Row]:
    rows = []
    for case in cases:
        config = case.configs[0]
        with constants_override(_runtime(kind, 0.0, e)):
            run0 = serving_run(config)
        with constants_override(_runtime(kind, 1.0, e)):
            run1 = serving_run(config)
        out0, out1 = run0.outcome, run1.outcome
        n = out0.sequences
        d0 = run0.pipeline.device_time(out0.decode_load, n)[0]
        d1 = run1.pipeline.device_time(out1.decode_load, n)[0]
        p0 = run0.pipeline.device_time(out0.prefill_load, n)[0]
        p1 = run1.pipeline.device_time(out1.prefill_load, n)[0]
        par = config.parallelism
        rows.append(
            Row(
                d0=d0,
                dk=d1 - d0,
                p0=p0,
                pk=p1 - p0,
                n_d=step_sequences(out0.decode_load),
                n_p=step_sequences(out0.prefill_load),
                steps=out0.prefill_steps,
                sequences=n,
                output=config.serving.output_tokens,
                replicas=par.dp,
                devices=par.tp * par.pp * par.dp,
                static=config.serving.batching == "static",
                key=case.predicted_key,
                scale=case.scale,
                measured=case.measured,
            )
        )
    return rows


def _point(index: int) -> tuple[float, float, float]:
    i, j, m = np.unravel_index(index, (len(KERNEL_US), len(STEP_US), len(SEQUENCE_US)))
    return float(KERNEL_US[i]), float(STEP_US[j]), float(SEQUENCE_US[m])


def _summary(errs: list[float]) -> str:
    a = np.abs(np.array(errs))
    return f"{len(a)} rows, mean {a.mean():.1%}, max {a.max():.1%}" if len(a) else "no rows"


def calibrate(kind: str, cases: list[InferenceCase]) -> dict[str, float]:
    """Fit, print in-sample / leave-one-out / leave-one-source-out per source, return."""
    print(f"== {kind}: {len(cases)} rows", flush=True)
    if not cases:
        return {
            "kernel_us": 0.0,
            "step_us": 0.0,
            "sequence_us": 0.0,
            "grouped_efficiency": 0.0,
            "attention_efficiency": 0.0,
            "matmul_efficiency": 0.0,
        }
    Eff = tuple[float, float, float]
    signed: dict[Eff, np.ndarray] = {}
    absolute: dict[Eff, np.ndarray] = {}
    moe = any(c.configs[0].model.experts > 0 for c in cases)
    # Tenstorrent: the fixed cost per kernel and the host terms alone (no efficiency grid)
    grid = (GROUPED if moe else (0.0,), ATTENTION, MATMUL) if kind == "gpu" else ((0.0,),) * 3
    for e in itertools.product(*grid):
        rows = row_forms(cases, kind, e)
        # dk is seconds per microsecond of kernel_us: k stays in microseconds
        kg, h0g, h1g = np.meshgrid(KERNEL_US, STEP_US * 1e-6, SEQUENCE_US * 1e-6, indexing="ij")
        signed[e] = np.stack(
            [(r.predict(kg, h0g, h1g) / r.measured - 1.0).ravel() for r in rows]
        ).astype(np.float32)
        absolute[e] = np.abs(signed[e])

    def fit(mask: np.ndarray) -> tuple[Eff, int]:
        best: tuple[float, Eff, int] = (np.inf, (0.0, 0.0, 0.0), 0)
        for g, err in absolute.items():
            mean = err[mask].mean(axis=0)
            j = int(np.argmin(mean))
            if mean[j] < best[0]:
                best = (float(mean[j]), g, j)
        return best[1], best[2]

    everything = np.ones(len(cases), dtype=bool)
    g, j = fit(everything)
    k, h0, h1 = _point(j)
    print(
        f"fit: kernel_us {k}, step_us {h0}, sequence_us {h1}, grouped_efficiency {g[0]}, "
        f"attention_efficiency {g[1]}, matmul_efficiency {g[2]}"
    )
    report: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i, case in enumerate(cases):
        report[case.source]["in-sample"].append(float(signed[g][i, j]))
        mask = everything.copy()
        mask[i] = False
        gi, ji = fit(mask)
        report[case.source]["leave-one-out"].append(float(signed[gi][i, ji]))
    sources = sorted(report)
    for src in sources:
        mask = np.array([c.source != src for c in cases])
        if mask.any():
            gs, js = fit(mask)
            for i, c in enumerate(cases):
                if c.source == src:
                    report[src]["leave-one-source-out"].append(float(signed[gs][i, js]))
        print(f"  {src}:")
        for what in ("in-sample", "leave-one-out", "leave-one-source-out"):
            print(f"    {what:<22} {_summary(report[src][what])}")
    _by_system(cases, signed, g, j, fit)
    for what in ("in-sample", "leave-one-out"):
        print(f"  all {what}: {_summary([e for s in sources for e in report[s][what]])}")
    return {
        "kernel_us": k,
        "step_us": h0,
        "sequence_us": h1,
        "grouped_efficiency": g[0],
        "attention_efficiency": g[1],
        "matmul_efficiency": g[2],
    }


def _by_system(
    cases: list[InferenceCase],
    signed: dict[Any, np.ndarray],
    g: Any,
    j: int,
    fit: Callable[[np.ndarray], tuple[Any, int]],
) -> None:
    """In-sample and leave-one-system-out errors per accelerator type (the fit without that
    type's rows: whether the constants carry from one system size to another)."""
    systems = sorted({c.hardware for c in cases})
    if len(systems) < 2 or len(systems) > 8:
        return
    for system in systems:
        mask = np.array([c.hardware != system for c in cases])
        gs, js = fit(mask)
        ins = [float(signed[g][i, j]) for i, c in enumerate(cases) if c.hardware == system]
        out = [float(signed[gs][i, js]) for i, c in enumerate(cases) if c.hardware == system]
        print(f"  {system}: in-sample {_summary(ins)}; leave-one-system-out {_summary(out)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="store the fitted constants")
    args = ap.parse_args(argv)
    data = load_inference_cases(None)
    gpu = [c for c in data.cases if not c.hardware.startswith("Wormhole")]
    mesh = [c for c in data.cases if c.hardware.startswith("Wormhole")]
    result = {"gpu": calibrate("gpu", gpu), "mesh": calibrate("mesh", mesh)}
    if args.write:
        stored = json.loads(CONSTANTS.read_text())
        stored["runtime"] = result
        CONSTANTS.write_text(json.dumps(stored, indent=2) + "\n")
        print(f"wrote {CONSTANTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
