"""Speed of the event-driven engine: wall time and events for the visible Megatron cases and
the PALM paper's wafer cases, and the event count as the wafer grows.

Usage:
    python benchmarks/engine_speed.py [--repeats 5] [--write-docs]

Pins itself to one CPU core (where the OS allows), simulates every case ``--repeats`` times and
reports the median wall time of ``palm.simulate`` (plan + engine). With --write-docs it rewrites
the tables in docs/benchmarks.md between their BEGIN/END markers.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import palm
from palm.validation import load_cases

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
WAFER = ROOT / "examples" / "wafer-t18b.toml"


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    return "not pinned (no sched_setaffinity)"


def _time(config: palm.SimConfig, repeats: int) -> tuple[palm.Result, float]:
    walls = []
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = palm.simulate(config, engine="event")
        walls.append(time.perf_counter() - start)
    assert result is not None
    return result, statistics.median(walls)


def wafer_config(
    preset: str, *, tiles: tuple[int, int] = (5, 4), dp: int = 2, channels: int = 18
) -> palm.SimConfig:
    """The paper's wafer baseline (sec. V-B): TP=8, DP=2, PP=20, line layout, 32 micro-batches
    of one sequence per pipeline; larger wafers grow DP (each stage's tile group) to match and
    keep one DRAM channel per outer tile side."""
    return palm.load_config(
        WAFER,
        overrides=[
            f'model.preset="{preset}"',
            f"hardware.tiles=[{tiles[0]}, {tiles[1]}]",
            f"parallelism.dp={dp}",
            f"training.global_batch={32 * dp}",
            f"hardware.dram_channels={channels}",
            f"hardware.dram_capacity_gib={512.0 * channels}",
        ],
    )


def cases_table(repeats: int) -> str:
    rows = [
        "| case | plan (TP, PP, DP) | micro-batches | iteration (s) | events | wall (s) |",
        "|---|---|---|---|---|---|",
    ]
    for case in load_cases():
        par = case.config.parallelism
        result, wall = _time(case.config, repeats)
        rows.append(
            f"| {case.case_id} | {par.tp}, {par.pp}, {par.dp} | {result.micro_batches} | "
            f"{result.iteration_time_s:.3f} | {result.events_simulated} | {wall:.3f} |"
        )
    for preset in ("t-18b", "t-76b", "t-145b"):
        cfg = wafer_config(preset)
        result, wall = _time(cfg, repeats)
        rows.append(
            f"| wafer-palm {preset} | 8, 20, 2 | {result.micro_batches} | "
            f"{result.iteration_time_s:.3f} | {result.events_simulated} | {wall:.3f} |"
        )
    return "\n".join(rows)


def scaling_table(repeats: int) -> str:
    rows = [
        "| wafer (tiles) | cores | DP | DRAM channels | iteration (s) | events | wall (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for tiles, dp in (((5, 4), 2), ((10, 8), 8), ((20, 16), 32), ((50, 40), 200)):
        channels = 2 * (tiles[0] + tiles[1])
        cfg = wafer_config("t-18b", tiles=tiles, dp=dp, channels=channels)
        result, wall = _time(cfg, repeats)
        cores = cfg.hardware.device_count  # type: ignore[union-attr]
        rows.append(
            f"| {tiles[0]} x {tiles[1]} | {cores} | {dp} | {channels} | "
            f"{result.iteration_time_s:.3f} | {result.events_simulated} | {wall:.3f} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per case (median reported)")
    ap.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    pinned = _pin_one_core()
    machine = f"{platform.python_implementation()} {platform.python_version()}, {pinned}"
    cases = cases_table(args.repeats)
    scaling = scaling_table(args.repeats)
    print(f"# event engine, median of {args.repeats}; {machine}\n")
    print(cases + "\n\n" + scaling)
    if args.write_docs:
        write_section(DOC, "speed", cases + f"\n\nMedian of {args.repeats} runs; {machine}.")
        write_section(DOC, "scaling", scaling)
    return 0


if __name__ == "__main__":
    sys.exit(main())
