"""How the simulator's cost grows with the chip count of a multi-chip Tenstorrent system
(docs/model.md sec. 7c): the same per-chip plan (BERT-Base inference, TP 4, 16 replicas per
chip, per-chip DRAM) on wormhole-n300, wormhole-t3000 and wormhole-galaxy (2, 8, 32 chips),
and the T3000 prefill example with the Ethernet link bandwidth swept.

Usage:
    python benchmarks/multichip_scaling.py [--repeats 3]

Prints, per system, the events the engine simulated, the least wall time of ``palm.simulate``
over ``--repeats`` runs (plan + engine) and the throughput; then the prefill's iteration time
per link bandwidth (never larger for a faster link).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import palm

ROOT = Path(__file__).resolve().parents[1]
BERT = ROOT / "examples" / "wormhole-n300-bert-base.toml"
PREFILL = ROOT / "examples" / "wormhole-t3000-llama2-7b-prefill.toml"
SYSTEMS = (("wormhole-n300", 2), ("wormhole-t3000", 8), ("wormhole-galaxy", 32))


def _least(path: Path, overrides: list[str], repeats: int) -> tuple[palm.Result, float]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = palm.simulate(path, overrides=overrides)
        best = min(best, time.perf_counter() - start)
    assert result is not None
    return result, best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    palm.simulate(BERT)  # warm-up: presets read, modules imported
    print("| system | chips | cores | events | wall (ms) | samples/s |")
    print("|---|---|---|---|---|---|")
    for name, chips in SYSTEMS:
        dp = 16 * chips
        over = [
            f'hardware.preset="{name}"',
            f"parallelism.dp={dp}",
            f"training.global_batch={16 * dp}",
        ]
        result, wall = _least(BERT, over, args.repeats)
        print(
            f"| {name} | {chips} | {64 * chips} | {result.events_simulated} | {wall * 1e3:.1f} "
            f"| {result.throughput_samples_per_s:.1f} |"
        )
    print()
    print("| Ethernet link (GB/s) | iteration (s) | tokens/s |")
    print("|---|---|---|")
    for gbps in (6.25, 12.5, 25.0, 50.0):
        result, _ = _least(PREFILL, [f"hardware.inter_tile_link_gbps={gbps}"], 1)
        print(f"| {gbps:g} | {result.iteration_time_s:.4f} | {result.tokens_per_s or 0:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
