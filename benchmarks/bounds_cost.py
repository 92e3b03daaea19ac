"""What the bounds of docs/config.md ("Bounds") cost: the time of ``palm-tune`` on each
hostile value (refused) and at each largest allowed value (run), as a user runs it.

Usage:
    python benchmarks/bounds_cost.py [--repeats 3]

Each case is a fresh ``python -m search.cli`` process; the table gives the least wall time
and the least CPU time (user + system of the child, ``os.wait4``) over ``--repeats`` runs, and
the exit code. The robustness tests (tests/robustness/test_unbounded.py) check the same
cases for their outcome only: no test asserts on time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from palm.config import MAX_DRAM_CHANNELS, MAX_LAYERS  # noqa: E402
from palm.workload.gemm import MAX_GEMM_DIM  # noqa: E402

DGX = str(ROOT / "examples" / "t18b-dgx-a100.toml")
WAFER = str(ROOT / "examples" / "wafer-t18b.toml")
GEMM = str(ROOT / "examples" / "wormhole-gemm.toml")


def _graph(folder: Path, operators: int) -> str:
    path = folder / f"graph-{operators}.toml"
    op = '[[model.ops]]\ntype = "linear"\nin_features = 1024\nout_features = 1024\ntokens = 512\n'
    path.write_text(
        '[model]\nfamily = "graph"\n[hardware]\npreset = "wafer-palm"\n'
        "[training]\nglobal_batch = 16\nmicro_batch = 1\n"
        "[parallelism]\ntp = 1\npp = 20\ndp = 16\n" + op * operators
    )
    return str(path)


def _cases(folder: Path) -> list[tuple[str, list[str]]]:
    gemm_max = [a for d in "mkn" for a in ("--set", f"model.{d}={MAX_GEMM_DIM}")]
    return [
        ("layers 1e9 (refused)", ["simulate", DGX, "--set", "model.layers=1000000000"]),
        (
            f"layers {MAX_LAYERS:,} (largest, analytical)",
            ["simulate", DGX, "--set", f"model.layers={MAX_LAYERS}", "--engine", "analytical"],
        ),
        ("gemm m = 2^53 (refused)", ["simulate", GEMM, "--set", "model.m=9007199254740992"]),
        ("gemm m = n = k = 2^24 (largest)", ["simulate", GEMM, *gemm_max]),
        ("graph 200,000 operators (refused)", ["simulate", _graph(folder, 200_000)]),
        (f"graph {MAX_LAYERS:,} operators (largest)", ["simulate", _graph(folder, MAX_LAYERS)]),
        (
            f"dram_channels {MAX_DRAM_CHANNELS:,} plot (largest)",
            [
                "plot",
                WAFER,
                "--set",
                f"hardware.dram_channels={MAX_DRAM_CHANNELS}",
                "--set",
                "training.global_batch=32",
                "--out",
                str(folder / "plots"),
            ],
        ),
        ("vocab 1e15 (buckets capped)", ["simulate", DGX, "--set", "model.vocab=1000000000000000"]),
    ]


def _time(args: list[str]) -> tuple[float, float, int]:
    """Wall time, CPU time of the child and its exit code."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "search.cli", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'case':<44} {'exit':>4} {'wall (s)':>9} {'CPU (s)':>8}")
        for name, argv in _cases(Path(tmp)):
            runs = [_time(argv) for _ in range(args.repeats)]
            print(
                f"{name:<44} {runs[0][2]:>4} {min(r[0] for r in runs):>9.2f} "
                f"{min(r[1] for r in runs):>8.2f}"
            )


if __name__ == "__main__":
    main()
