"""What an analytical screening costs per configuration, alone and in a batch.

Usage:
    python benchmarks/screening_cost.py [--configs 100] [--spaces a,b] [--repeats 2]

For each space of ``benchmarks/sampler_spaces`` (default: the two wafer spaces), the same
``--configs`` configurations (a seeded sample, as ``search.screen`` draws them) are priced
with the analytical engine (memory check and plan sharing one context,
``palm.api.analytical_if_fits``) twice in the same process: each alone, and as one batch
inside ``palm.network.memo.shared_geometry`` (the plans share their routes). Both passes
must give the same values bit for bit; the script prints the wall time per configuration of
each pass (min of ``--repeats``, alternating, so that the machine's load hits both alike) and
their ratio.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampler_spaces import spec_of  # noqa: E402

from palm.api import analytical_if_fits  # noqa: E402
from palm.config import parse_config  # noqa: E402
from palm.network.memo import memo_stats, shared_geometry  # noqa: E402
from palm.strategy import SimConfig  # noqa: E402
from spaces import enumerate_space  # noqa: E402


def _sample(space: str, n: int) -> list[SimConfig]:
    spec = spec_of(space)
    drafts = [d.draft for d in enumerate_space(spec.space, spec.context) if d.draft is not None]
    chosen = drafts if len(drafts) <= n else random.Random(0).sample(drafts, n)
    return [parse_config(d) for d in chosen]


def _values(configs: list[SimConfig]) -> tuple[list[float | None], float]:
    started = time.perf_counter()
    values = []
    for c in configs:
        result = analytical_if_fits(c)
        values.append(None if result is None else result.throughput_samples_per_s)
    return values, time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", type=int, default=100)
    ap.add_argument("--spaces", default="wafer-t18b-mapping,wafer-t18b-whatif")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    cols = ["space", "configurations", "alone (ms each)", "batch (ms each)", "alone / batch"]
    print("| " + " | ".join([*cols, "memo hits / misses"]) + " |")
    print("|---|---|---|---|---|---|")
    for space in args.spaces.split(","):
        configs = _sample(space, args.configs)
        _values(configs[:1])  # warm up (imports, first-call caches)
        alone_s = batch_s = float("inf")
        for _ in range(args.repeats):
            alone, t = _values(configs)
            alone_s = min(alone_s, t)
            with shared_geometry():
                batch, t = _values(configs)
            batch_s = min(batch_s, t)
            if alone != batch:
                raise SystemExit(f"{space}: a batch changed a value")
        hits, misses = memo_stats()
        n = len(configs)
        print(
            f"| {space} | {n} | {1e3 * alone_s / n:.1f} | {1e3 * batch_s / n:.1f} | "
            f"{alone_s / batch_s:.1f}x | {hits} / {misses} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
