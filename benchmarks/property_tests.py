"""The property tests on many more random cases than CI runs:

* ``fair`` (tests/palm/test_fair_properties.py, docs/model.md sec. 7): every run of the fair
  network ends, its rates are max-min fair against an exact water-filling after every start
  and end, bytes are conserved, a flow alone takes its analytical time, the sorted rates are
  lexicographically monotone in every capacity, one class's ends are monotone, and the filling
  beside a class is right; on the pure-Python module and on the compiled build.
* ``monotone`` (tests/palm/test_monotone_hardware.py, docs/model.md sec. 7b): more of every
  hardware knob never slows a product or a plan beyond the documented mechanisms.

Usage:
    python benchmarks/property_tests.py [--suite fair|monotone|all] [--scale 10] [--seed N]

``--scale`` multiplies each test's examples (CI runs scale 1: 10,000 cases per suite and
build, under a fixed seed); ``--seed`` fixes hypothesis's seed (default: a random one,
printed, so that a failure can be run again). Prints, per suite and build, the cases, pytest's
outcome and the CPU time.
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
#: per suite: its property tests with their examples at scale 1 (their ``examples(n)``), and
#: the test file of each build it runs on
SUITES: dict[str, tuple[dict[str, int], dict[str, str]]] = {
    "fair": (
        {
            "test_every_run_ends_max_min_fair_and_moves_every_byte": 4000,
            "test_sorted_rates_grow_lexicographically_with_any_capacity": 2500,
            "test_filling_beside_a_class_takes_what_the_class_leaves": 1000,
            "test_flows_of_one_class_starting_at_given_times_end_no_later_with_more_capacity": (
                2500
            ),
        },
        {
            "pure Python": "tests/palm/test_fair_properties.py",
            "compiled": "tests/palm/test_fair_properties_compiled.py",
        },
    ),
    "monotone": (
        {
            "test_a_product_is_never_slower_with_more_hardware_but_for_its_output_tail": 9600,
            "test_a_plan_is_never_slower_with_more_hardware": 400,
        },
        {"as installed": "tests/palm/test_monotone_hardware.py"},
    ),
}


def run(suite: str, build: str, scale: float, seed: int) -> tuple[int, str, float]:
    """Run ``suite``'s property tests on ``build`` at ``scale`` with hypothesis seed ``seed``:
    the pytest exit code, its last line and the CPU time of the child."""
    tests, files = SUITES[suite]
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
            files[build],
            "-p",
            "no:cacheprovider",
            f"--hypothesis-seed={seed}",
            "-k",
            " or ".join(tests),
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


def cases(suite: str, scale: float) -> int:
    """How many random cases ``suite`` runs per build at ``scale``."""
    return sum(max(1, round(n * scale)) for n in SUITES[suite][0].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    parser.add_argument("--scale", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    suites = list(SUITES) if args.suite == "all" else [args.suite]
    print(f"hypothesis seed {seed}, scale {args.scale:g}")
    print("| suite | build | cases | outcome | CPU s |")
    print("|---|---|---|---|---|")
    failed = False
    for suite in suites:
        for build in SUITES[suite][1]:
            code, last, cpu = run(suite, build, args.scale, seed)
            failed = failed or code != 0
            n = cases(suite, args.scale)
            print(f"| {suite} | {build} | {n} | {last} | {cpu:.1f} |", flush=True)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
