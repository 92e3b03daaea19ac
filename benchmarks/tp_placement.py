"""T-145B on wafer-palm, TP=16 PP=10 DP=2: compact against strided tensor-parallel groups, with
the hand calculation docs/model.md sec. 7 quotes.

Usage:
    python benchmarks/tp_placement.py

A compact TP group of 16 fills one tile of 4 x 4 cores and its ring is a Hamiltonian cycle of
one-hop intra-tile links (1024 GB/s); a strided one takes every other core of the stage's two
tiles, so its ring crosses tile edges and its slowest links are inter-tile (256 GB/s). The
bandwidth term of every TP collective is then 4 times longer. In a 1F1B pipeline every stage's
forward and backward of every micro-batch are on the critical path once per slot, so the
iteration grows by about ``(m + p - 1) x`` (extra TP and hand-off time of one micro-batch on
one stage).
"""

from __future__ import annotations

import argparse
import sys

import palm
from palm.api import plan_for

BASE = [
    'model.preset="t-145b"',
    "parallelism.tp=16",
    "parallelism.pp=10",
    "parallelism.dp=2",
    "training.global_batch=64",
]


def measure() -> dict[str, tuple[float, float, float, float, float]]:
    """Per placement: event and analytical iteration (s), the ring's bandwidth (GB/s), extra
    per-micro-batch TP time and hand-off time of the middle stage (s)."""
    out = {}
    for tp_group in ("compact", "strided"):
        cfg = palm.load_config(
            "examples/wafer-t18b.toml", overrides=[*BASE, f'placement.tp_group="{tp_group}"']
        )
        plan = plan_for(cfg)
        mid = plan.chunks[len(plan.chunks) // 2]
        out[tp_group] = (
            palm.simulate(cfg).iteration_time_s,
            palm.simulate(cfg, engine="analytical").iteration_time_s,
            plan.tp_profiles[mid.stage].bandwidth_Bps / 1e9,
            mid.tp_forward_s + mid.tp_backward_s,
            mid.send_s + mid.grad_send_s,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)
    got = measure()
    slots = 32 + 10 - 1  # m + p - 1 of 1F1B with 32 micro-batches on 10 stages
    print(
        "| TP group | ring GB/s | TP per micro-batch (ms) | hand-offs (ms) | event (s) |"
        " analytical (s) |"
    )
    print("|---|---|---|---|---|---|")
    for name, (event, analytical, bw, tp, hand) in got.items():
        print(
            f"| {name} | {bw:.0f} | {tp * 1e3:.2f} | {hand * 1e3:.3f} | {event:.3f} |"
            f" {analytical:.3f} |"
        )
    c, s = got["compact"], got["strided"]
    hand_calc = slots * ((s[3] - c[3]) + (s[4] - c[4]))
    print(
        f"\nhand calculation: {slots} x ({(s[3] - c[3]) * 1e3:.2f} + {(s[4] - c[4]) * 1e3:.3f})"
        f" ms = {hand_calc:.3f} s; analytical {s[1] - c[1]:.3f} s; event {s[0] - c[0]:.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
