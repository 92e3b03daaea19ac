"""Does more SRAM slow a product down, and which output block do the measured programs use?

Usage:
    python benchmarks/output_blocks.py

For every visible tiled product (palm/data/visible_tiled*.json), with the chip's preset and
with twice its SRAM, under two rules for the output block a core computes before packing it
(docs/model.md sec. 7b, "The output tail"):

* ``largest``: the largest block that fits half the SRAM (the model's rule,
  :func:`palm.engines.gemm.output_tail_bytes`; tt-metal's default ``out_block`` is the whole
  ``per_core_M x per_core_N`` share);
* ``fastest``: the block of least time among those that fit, its operands streamed once per
  block (:func:`palm.engines.gemm.fastest_output_block`; monotone in SRAM by construction).

Prints how many products each rule makes slower with twice the SRAM and by how much, and the
error of each rule on the measured hand-tuned products whose C goes to DRAM (the only ones the
rules price differently), per chip. The measured times decide which rule the programs follow.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from palm.engines.gemm import fastest_output_block, gemm_times  # noqa: E402
from palm.hardware.spec import Mesh2DHardware  # noqa: E402
from palm.strategy import SimConfig  # noqa: E402
from palm.validation_tiled import load_tiled_cases  # noqa: E402


def _doubled(config: SimConfig) -> SimConfig:
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    return dataclasses.replace(
        config, hardware=dataclasses.replace(hw, sram_per_core_mib=2 * hw.sram_per_core_mib)
    )


def _time(config: SimConfig, rule: str) -> float:
    block = fastest_output_block(config) if rule == "fastest" else None
    return gemm_times(config, out_block=block).total_s


def main() -> int:
    cases = load_tiled_cases().gemm
    named = [c for c in cases if fastest_output_block(c.config) is not None]
    groups = {
        "hand-tuned, C in DRAM": named,
        "the others (ttnn's own block, or C in L1)": [c for c in cases if c not in named],
    }
    for name, group in groups.items():
        for rule in ("largest", "fastest"):
            ratios = [_time(_doubled(c.config), rule) / _time(c.config, rule) for c in group]
            slower = [r for r in ratios if r > 1 + 1e-12]
            print(f"{name}, {rule} block, twice the SRAM: {len(slower)} of {len(group)} "
                  f"slower (worst {max(ratios) - 1:+.2%})")  # fmt: skip
    print()
    for chip in dict.fromkeys(c.chip for c in cases):
        rows = [c for c in cases if c.chip == chip and fastest_output_block(c.config)]
        print(f"{chip}: {len(rows)} hand-tuned products with C in DRAM, error of each rule")
        for rule in ("largest", "fastest"):
            errs = [_time(c.config, rule) / c.measured_time_s - 1 for c in rows]
            mean = sum(abs(x) for x in errs) / len(errs)
            print(f"  {rule:>8}: mean {mean:.1%}, from {min(errs):+.1%} to {max(errs):+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
