"""How the simulator's cost scales: tile count, GPU count, micro-batches, layers, pipeline
stages, and the two engines side by side.

Usage:
    python benchmarks/scaling.py [--repeats 3] [--write-docs]

Pins itself to one core and reports the least wall time of ``palm.simulate`` over ``--repeats``
runs (plan + engine; on a shared machine the least disturbed run is the best estimate of the
code's own cost) and the number of events; the tile-count table also gives the least CPU time
(``time.process_time``), which leaves out the time spent waiting for a core. With --write-docs
the tables go to docs/benchmarks.md between their markers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import palm
from palm.validation import load_cases

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"

GPT_1B = {
    "name": "gpt-1.3b",
    "family": "gpt",
    "layers": 24,
    "hidden": 2048,
    "heads": 16,
    "ffn_hidden": 8192,
    "seq_len": 1024,
    "vocab": 51200,
}


def _timed(
    config: palm.SimConfig, repeats: int, engine: str = "event"
) -> tuple[palm.Result, float, float]:
    """The result, and the least wall and CPU seconds of ``repeats`` simulations."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        result = palm.simulate(config, engine=engine)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    assert result is not None
    return result, min(walls), min(cpus)


def _time(config: palm.SimConfig, repeats: int, engine: str = "event") -> tuple[palm.Result, float]:
    result, wall, _cpu = _timed(config, repeats, engine)
    return result, wall


def _table(header: str, rows: Iterable[tuple[Any, ...]]) -> str:
    cols = header.count("|") - 1
    return "\n".join(
        [header, "|" + "---|" * cols] + ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    )


def tiles(repeats: int) -> str:
    """A 1.3B GPT, layer-wise (PP = 1), one replica per core, on square meshes of 4 x 4 to
    633 x 633 cores (paper sec. III-A), one DRAM channel per outer core side, 64 micro-batches."""
    rows = []
    base = 0.0
    for n in (4, 16, 64, 211, 633):
        cfg = palm.parse_config(
            {
                "model": GPT_1B,
                "hardware": {
                    "preset": "wafer-palm",
                    "tiles": [n, n],
                    "cores_per_tile": [1, 1],
                    "dram_channels": 4 * n,
                    "dram_capacity_gib": 512.0 * 4 * n,
                },
                "training": {
                    "global_batch": 64 * n * n,
                    "micro_batch": 1,
                    "precision": "fp16",
                    "recompute": "full",
                },
                "parallelism": {"tp": 1, "pp": 1, "dp": n * n},
            }
        )
        result, wall, cpu = _timed(cfg, repeats)
        base = base or cpu
        rows.append(
            (
                f"{n} x {n}",
                n * n,
                result.events_simulated,
                f"{wall:.4f}",
                f"{cpu:.4f}",
                f"{cpu / base:.2f}",
            )
        )
    return _table("| cores | count | events | wall (s) | CPU (s) | CPU vs 4 x 4 |", rows)


def _wafer(overrides: list[str]) -> palm.SimConfig:
    return palm.load_config(ROOT / "examples" / "wafer-t18b.toml", overrides=overrides)


#: a Llama-3.1-405B-shaped model (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3)
LLAMA_405B = {
    "name": "llama-405b-shaped",
    "family": "llama",
    "layers": 126,
    "hidden": 16384,
    "heads": 128,
    "kv_heads": 8,
    "ffn_hidden": 53248,
    "seq_len": 8192,
    "vocab": 128256,
}


def _gpus_case(gpus: int) -> palm.SimConfig:
    """The 405B-shaped model at TP 8, PP 16 on ``gpus`` H100s, 16 micro-batches per pipeline
    at every size, so that the events are the same and only the GPU count grows."""
    dp = gpus // (8 * 16)
    return palm.parse_config(
        {
            "model": LLAMA_405B,
            "hardware": {"preset": "dgx-h100", "gpus": gpus},
            "training": {
                "global_batch": 16 * dp,
                "micro_batch": 1,
                "precision": "bf16",
                "recompute": "full",
                "zero": 1,
            },
            "parallelism": {"tp": 8, "pp": 16, "dp": dp, "sequence_parallel": True},
        }
    )


def gpus(repeats: int) -> str:
    rows, base = [], 0.0
    for n in (1024, 4096, 16384, 98304):
        result, _wall, cpu = _timed(_gpus_case(n), repeats)
        base = base or cpu
        rows.append((f"{n:,}", result.events_simulated, f"{cpu:.4f}", f"{cpu / base:.2f}"))
    return _table("| H100s (TP 8, PP 16) | events | CPU (s) | CPU / 1,024 GPUs |", rows)


def microbatches(repeats: int) -> str:
    rows = []
    for m in (8, 32, 128, 512):
        result, wall = _time(_wafer([f"training.global_batch={2 * m}"]), repeats)
        rows.append((m, result.events_simulated, f"{wall:.3f}", f"{wall / m * 1e3:.2f}"))
    return _table("| micro-batches | events | wall (s) | wall per micro-batch (ms) |", rows)


def _cluster(layers: int, pp: int, m: int) -> palm.SimConfig:
    return palm.parse_config(
        {
            "model": {
                **GPT_1B,
                "name": f"gpt-{layers}l",
                "layers": layers,
                "hidden": 4096,
                "heads": 32,
                "ffn_hidden": 16384,
                "seq_len": 2048,
            },
            "hardware": {"preset": "dgx-a100"},
            "training": {
                "global_batch": 4 * m,
                "micro_batch": 1,
                "precision": "fp16",
                "recompute": "full",
            },
            "parallelism": {"tp": 8, "pp": pp, "dp": 4},
        }
    )


def layers(repeats: int) -> str:
    rows = []
    for n in (24, 48, 96, 192):
        result, wall = _time(_cluster(n, 8, 64), repeats)
        rows.append((n, result.events_simulated, f"{wall:.3f}"))
    return _table("| layers (PP = 8, 64 micro-batches) | events | wall (s) |", rows)


def stages(repeats: int) -> str:
    rows = []
    for pp in (1, 2, 4, 8, 16, 32, 64):
        result, wall = _time(_cluster(64, pp, 64), repeats)
        rows.append((pp, result.events_simulated, f"{wall:.3f}"))
    return _table("| pipeline stages (64 layers, 64 micro-batches) | events | wall (s) |", rows)


def engines(repeats: int) -> str:
    rows = []
    for case in load_cases():
        ev, w_ev = _time(case.config, repeats, "event")
        an, w_an = _time(case.config, repeats, "analytical")
        rows.append(
            (
                case.case_id,
                f"{w_an * 1e3:.1f}",
                f"{w_ev * 1e3:.1f}",
                f"{ev.iteration_time_s / an.iteration_time_s - 1:+.2%}",
            )
        )
    return _table("| case | analytical wall (ms) | event wall (ms) | event vs analytical |", rows)


SECTIONS: dict[str, Callable[[int], str]] = {
    "scaling-tiles": tiles,
    "scaling-gpus": gpus,
    "scaling-microbatches": microbatches,
    "scaling-layers": layers,
    "scaling-stages": stages,
    "engines": engines,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs per point (least reported)")
    ap.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument(
        "--only", choices=sorted(SECTIONS), action="append", help="run this section only"
    )
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    for name, fn in SECTIONS.items():
        if args.only and name not in args.only:
            continue
        text = fn(args.repeats)
        print(f"## {name}\n\n{text}\n")
        if args.write_docs:
            write_section(DOC, name, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
