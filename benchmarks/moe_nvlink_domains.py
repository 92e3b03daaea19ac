"""How much the expert all-to-all of the modern set's MoE rows depends on where the NVLink
domains cut the ranks.

Usage:
    python benchmarks/moe_nvlink_domains.py [--domain 64]

For every MoE row of ``visible_modern.json`` on an NVL72 system (``gb200-nvl72``,
``gb300-nvl72``) it prints the predicted iteration time with the preset's NVLink domain of 72
GPUs and with ``--domain`` GPUs (64 by default: a job of 256 GPUs placed as four segments of 16
four-GPU trays, one per rack, so that power-of-two groups never straddle a rack), beside the
published time. With 72, an expert-parallel group of 32 or 64 consecutive ranks can span two
racks and its all-to-all runs on the NICs (docs/model.md, "Mixture of experts").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from palm.api import simulate
from palm.config import parse_config
from palm.validation_modern import load_modern_cases, modern_case_tables

NVL_PRESETS = ("gb200-nvl72", "gb300-nvl72")


def rows(domain: int) -> list[tuple[str, float, float, float]]:
    """(case id, predicted with 72, predicted with ``domain``, published) per MoE NVL72 row."""
    cases = load_modern_cases()
    out = []
    for case in cases.cases:
        row = cases.rows[case.case_id]
        if not row["model"].get("experts"):
            continue
        tables, _ = modern_case_tables(row)
        if tables["hardware"]["preset"] not in NVL_PRESETS:
            continue
        times = []
        for gpus in (72, domain):
            tables["hardware"]["gpus_per_node"] = gpus
            result = simulate(parse_config(tables), engine="analytical")
            times.append(result.iteration_time_s)
        out.append((case.case_id, times[0], times[1], row["derived"]["iteration_time_s"]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", type=int, default=64, help="NVLink domain size to compare")
    args = parser.parse_args(argv)
    print(f"| case | 72 GPUs (s) | err | {args.domain} GPUs (s) | err | published (s) |")
    print("|---|---|---|---|---|---|")
    for cid, t72, td, meas in rows(args.domain):
        e72, ed = 100 * (t72 / meas - 1), 100 * (td / meas - 1)
        print(f"| {cid} | {t72:.2f} | {e72:+.1f}% | {td:.2f} | {ed:+.1f}% | {meas:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
