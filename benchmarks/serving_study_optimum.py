"""The true optimum of a serving study: every configuration of its space simulated once, the
ones that fit memory and keep to the base's latency limits (``serving.tpot_limit_s``,
``ttft_limit_s``) ranked by the study's first objective, to check what ``palm-tune tune``
finds against (docs/serving.md, "Tuning a serving plan").

    python benchmarks/serving_study_optimum.py studies/serve-llama31-70b-h100.toml --top 5
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from palm.api import memory_check, simulate
from palm.config import config_to_dict, parse_config
from search.dedup import config_key
from search.objective import over_latency_limits
from search.study_file import load_study
from spaces import enumerate_space


def _value(objective: str, result: Any) -> float:
    """The objective as the tuner records it (tpot in ms; larger is better after the sign)."""
    if objective == "throughput":
        return float(result.throughput_samples_per_s)
    if objective == "tpot":
        return -float(result.serving.tpot_s) * 1e3
    if objective == "memory":
        return -float(result.peak_memory_bytes)
    raise SystemExit(f"objective {objective!r}: not ranked here")


def optimum(path: str) -> tuple[list[tuple[float, dict[str, Any], Any]], dict[str, int]]:
    """Every valid configuration of the study at ``path`` with its objective value, best
    first, and the counts of configurations by outcome."""
    spec = load_study(path)
    objective = spec.objectives[0]
    seen: set[str] = set()
    ranked: list[tuple[float, dict[str, Any], Any]] = []
    counts = {"configurations": 0, "over memory": 0, "over a latency limit": 0, "valid": 0}
    for draw in enumerate_space(spec.space, spec.context):
        if draw.draft is None:
            continue
        config = parse_config(draw.draft)
        key = config_key(config_to_dict(config))
        if key in seen:
            continue
        seen.add(key)
        counts["configurations"] += 1
        if memory_check(config).overflow_bytes > 0:
            counts["over memory"] += 1
            continue
        result = simulate(config, engine="analytical")
        if over_latency_limits(config, result):
            counts["over a latency limit"] += 1
            continue
        counts["valid"] += 1
        ranked.append((_value(objective, result), draw.params, result))
    ranked.sort(key=lambda r: -r[0])
    return ranked, counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", help="a study file whose base is served (training.mode = serve)")
    ap.add_argument("--top", type=int, default=5, help="configurations to list")
    args = ap.parse_args(argv)
    ranked, counts = optimum(args.study)
    print(", ".join(f"{k} {v}" for k, v in counts.items()))
    for value, params, result in ranked[: args.top]:
        s = result.serving
        print(
            f"{value:10.3f}  {params}  tokens/s {result.tokens_per_s:,.0f}  "
            f"tpot {s.tpot_s * 1e3:.1f} ms  ttft {s.ttft_s:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
