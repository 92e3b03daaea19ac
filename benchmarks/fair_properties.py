"""The fair network's property tests (tests/palm/test_fair_properties.py) on many more random
cases than CI runs: every run ends, rates max-min fair against an exact water-filling after
every start and end, bytes conserved, a flow alone at its analytical time, sorted rates
lexicographically monotone in every capacity, one class's ends monotone, and the filling beside
a class; on the pure-Python module and on the compiled build.

Usage:
    python benchmarks/fair_properties.py [--scale 10] [--seed N]

``--scale`` multiplies each test's examples (CI: 10,000 cases in all, a fixed seed; scale 10 is
100,000 per build); ``--seed`` fixes hypothesis's seed (default: a random one, printed, so that
a failure can be run again). Prints the cases, the outcome and the CPU time of each build.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the property tests and how many cases each runs at scale 1 (their ``examples(n)``)
TESTS = {
    "test_every_run_ends_max_min_fair_and_moves_every_byte": 4000,
    "test_sorted_rates_grow_lexicographically_with_any_capacity": 2500,
    "test_filling_beside_a_class_takes_what_the_class_leaves": 1000,
    "test_flows_of_one_class_starting_at_given_times_end_no_later_with_more_capacity": 2500,
}
FILES = {
    "pure Python": "tests/palm/test_fair_properties.py",
    "compiled": "tests/palm/test_fair_properties_compiled.py",
}


def run(build: str, scale: float, seed: int) -> tuple[int, str, float]:
    """Run the property tests of ``build`` at ``scale`` with hypothesis seed ``seed``: the
    pytest exit code, its last line and the CPU time of the child."""
    env = dict(
        os.environ,
        PALM_HYPOTHESIS_PROFILE="palm-bench",
        PALM_PROPERTY_SCALE=str(scale),
        PYTHONPATH=str(ROOT),
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            FILES[build],
            "-p",
            "no:cacheprovider",
            f"--hypothesis-seed={seed}",
            "-k",
            " or ".join(TESTS),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0:
        print(done.stdout[-4000:], file=sys.stderr)
    return done.returncode, lines[-1] if lines else done.stderr.strip(), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    cases = sum(max(1, round(n * args.scale)) for n in TESTS.values())
    print(f"hypothesis seed {seed}, {cases} cases per build (scale {args.scale:g})")
    print("| build | cases | outcome | CPU s |")
    print("|---|---|---|---|")
    failed = False
    for build in FILES:
        code, last, cpu = run(build, args.scale, seed)
        failed = failed or code != 0
        print(f"| {build} | {cases} | {last} | {cpu:.1f} |", flush=True)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
