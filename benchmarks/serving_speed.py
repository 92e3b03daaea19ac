"""How long ``palm-tune simulate`` of a serving configuration takes: the simulation alone
(``palm.simulate`` of the loaded configuration, CPU time, least of ``--repeats``) and the whole
command in a fresh interpreter (wall time, imports included).

    python benchmarks/serving_speed.py --repeats 7
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from palm import load_config, simulate

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "Llama-3.1-70B, 8 H100, TP 8, continuous": ("examples/serve-llama31-70b-h100.toml", []),
    "... static batching": (
        "examples/serve-llama31-70b-h100.toml",
        ["serving.batching=static"],
    ),
    "... server scenario at 5 requests/s": (
        "examples/serve-llama31-70b-h100.toml",
        ["serving.scenario=server", "serving.request_rate_per_s=5.0", "serving.batch=512"],
    ),
    "DeepSeek-V3, 8 B200, EP 8": (
        "examples/serve-llama31-70b-h100.toml",
        [
            'model.preset="deepseek-v3"',
            "model.vocab=129280",
            'hardware.preset="dgx-b200"',
            "parallelism.ep=8",
        ],
    ),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    print(f"{'case':<42} {'simulate CPU (ms)':>18} {'command wall (s)':>17}")
    for name, (path, sets) in CASES.items():
        config = load_config(REPO / path, overrides=sets)
        best = float("inf")
        for _ in range(args.repeats):
            start = time.process_time()
            simulate(config)
            best = min(best, time.process_time() - start)
        cmd = [sys.executable, "-m", "search.cli", "simulate", str(REPO / path), "--json"]
        for s in sets:
            cmd += ["--set", s]
        walls = []
        for _ in range(max(1, args.repeats // 2)):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
            walls.append(time.perf_counter() - start)
        print(f"{name:<42} {best * 1e3:>18.1f} {min(walls):>17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
