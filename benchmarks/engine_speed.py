"""Speed of the event-driven engine: wall time and events for the visible Megatron cases and
the PALM paper's wafer cases, the event count as the wafer grows, and the engine's cost per
event next to SimPy's own for the same pattern (processes that wait on timeouts and on each
other's events, as many events as the engine scheduled).

Usage:
    python benchmarks/engine_speed.py [--repeats 5] [--write-docs]

Pins itself to one CPU core (where the OS allows), simulates every case ``--repeats`` times and
reports the least wall time and the least CPU time (``time.process_time``) of ``palm.simulate``
(plan + engine): on a shared machine the least disturbed run is the best estimate of the code's
own cost, and CPU time leaves out the time spent waiting for a core. The per-event table times
the engine alone, and plain SimPy on the same pattern, in CPU time. With --write-docs it
rewrites the tables in docs/benchmarks.md between their BEGIN/END markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

import simpy

import palm
from palm.api import plan_for
from palm.engines.event import run_event
from palm.validation import load_cases

try:
    from palm.engines.event.accel import IMPLEMENTATION
except ImportError:  # a tree from before the compiled networks (per_event_ab.py runs old trees)
    IMPLEMENTATION = "python (a tree without a compiled build)"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402 - a sibling module of this script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
EXAMPLES = ROOT / "examples"
WAFER = EXAMPLES / "wafer-t18b.toml"


def _t145b_tp4() -> palm.SimConfig:
    """The T-145B plan on the paper's wafer: TP=4, PP=20, DP=4, 32 micro-batches."""
    return palm.load_config(
        WAFER,
        overrides=[
            'model.preset="t-145b"',
            "parallelism.tp=4",
            "parallelism.dp=4",
            "training.global_batch=128",
        ],
    )


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    return "not pinned (no sched_setaffinity)"


def _time(config: palm.SimConfig, repeats: int) -> tuple[palm.Result, float, float]:
    """The result, and the least wall and CPU seconds of ``repeats`` simulations."""
    walls, cpus = [], []
    result = None
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        result = palm.simulate(config, engine="event")
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    assert result is not None
    return result, min(walls), min(cpus)


def wafer_config(
    preset: str, *, tiles: tuple[int, int] = (5, 4), dp: int = 2, channels: int = 20
) -> palm.SimConfig:
    """The paper's wafer baseline (sec. V-B): TP=8, DP=2, PP=20, line layout, 32 micro-batches
    of one sequence per pipeline; larger wafers grow DP (each stage's tile group) to match and
    keep one DRAM channel per outer tile side."""
    return palm.load_config(
        WAFER,
        overrides=[
            f'model.preset="{preset}"',
            f"hardware.tiles=[{tiles[0]}, {tiles[1]}]",
            f"parallelism.dp={dp}",
            f"training.global_batch={32 * dp}",
            f"hardware.dram_channels={channels}",
            f"hardware.dram_capacity_gib={512.0 * channels}",
        ],
    )


T145B_TP4 = _t145b_tp4()


def cases_table(repeats: int) -> str:
    rows = [
        "| case | plan (TP, PP, DP) | micro-batches | iteration (s) | events | wall (s) "
        "| CPU (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    cases = [(c.case_id, c.config) for c in load_cases()]
    cases += [(f"wafer-palm {p}", wafer_config(p)) for p in ("t-18b", "t-76b", "t-145b")]
    cases += [("wafer-palm t-145b", T145B_TP4)]
    cases += [(path.name, palm.load_config(path)) for path in sorted(EXAMPLES.glob("*.toml"))]
    for name, cfg in cases:
        if cfg.model.family == "gemm":  # one product, a closed form: no events
            continue
        par = cfg.parallelism
        result, wall, cpu = _time(cfg, repeats)
        rows.append(
            f"| {name} | {par.tp}, {par.pp}, {par.dp} | {result.micro_batches} | "
            f"{result.iteration_time_s:.3f} | {result.events_simulated} | {wall:.3f} "
            f"| {cpu:.3f} |"
        )
    return "\n".join(rows)


def scaling_table(repeats: int) -> str:
    rows = [
        "| wafer (tiles) | cores | DP | DRAM channels | iteration (s) | events | wall (s) "
        "| CPU (s) | CPU vs 5 x 4 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base = 0.0
    for tiles, dp in (((5, 4), 2), ((10, 8), 8), ((20, 16), 32), ((50, 40), 200)):
        channels = 2 * (tiles[0] + tiles[1])
        cfg = wafer_config("t-18b", tiles=tiles, dp=dp, channels=channels)
        result, wall, cpu = _time(cfg, repeats)
        base = base or cpu
        cores = cfg.hardware.device_count  # type: ignore[union-attr]
        rows.append(
            f"| {tiles[0]} x {tiles[1]} | {cores} | {dp} | {channels} | "
            f"{result.iteration_time_s:.3f} | {result.events_simulated} | {wall:.3f} "
            f"| {cpu:.3f} | {cpu / base:.2f} |"
        )
    return "\n".join(rows)


def simpy_per_event_us(events: int, processes: int) -> tuple[float, int]:
    """Microseconds per event of plain SimPy on the engine's pattern, and its event count:
    ``processes`` actors (one per pipeline rank), each waiting alternately on an event its
    neighbour triggers (a hand-off's or a flow's arrival) and on a timeout (a compute phase or
    a flow's end), about ``events`` events in all (two per actor and round, one for the first
    actor, which waits on no neighbour). Only the run is timed: the events the actors wait on
    are made beforehand, as the engine makes its arrival events beforehand (the engine's
    timing includes its set-up, which only makes it look slower)."""
    env = simpy.Environment()
    rounds = max(1, events // (2 * processes - 1))  # the first actor waits on no inbox
    inbox = [[env.event() for _ in range(rounds)] for _ in range(processes)]

    def actor(i: int):  # type: ignore[no-untyped-def]
        for k in range(rounds):
            if i > 0:
                yield inbox[i][k]
            yield env.timeout(1.0)
            if i + 1 < processes:
                inbox[i + 1][k].succeed()

    for i in range(processes):
        env.process(actor(i))
    start = time.process_time()
    env.run()
    cpu = time.process_time() - start
    scheduled = int(next(env._eid))  # noqa: SLF001 - SimPy's own event counter
    return 1e6 * cpu / scheduled, scheduled


def per_event_cases(*, visible: tuple[int, ...]) -> list[tuple[str, palm.SimConfig, str]]:
    """The per-event table's cases: the visible Megatron cases of index ``visible`` and the
    wafer cases, each under both NoC models."""
    loaded = load_cases()
    cases = [(loaded[i].case_id, loaded[i].config) for i in visible]
    cases += [(f"wafer-palm {p}", wafer_config(p)) for p in ("t-18b", "t-145b")]
    cases += [("wafer-palm t-145b TP4 PP20 DP4", T145B_TP4)]
    return [(name, cfg, model) for name, cfg in cases for model in ("fair", "exclusive")]


#: the per-event table's least CPU time spent on each case's repeats, so that a case of a few
#: hundred events (half a millisecond a run) is timed as many times as a large one needs
MIN_CASE_CPU_S = 0.5
#: at most this many repeats, however short the run
MAX_REPEATS = 400


@dataclasses.dataclass(frozen=True)
class PerEvent:
    """Least CPU microseconds per event of a plan's first run (its engine tables built inside
    the timing, as ``palm.simulate`` pays them), of its second run (the tables built) and of
    plain SimPy on the same pattern; the run's events, SimPy's, and the repeats taken."""

    first_us: float
    second_us: float
    simpy_us: float
    events: int
    simpy_events: int
    repeats: int


def per_event_runs(config: palm.SimConfig, noc_model: str, repeats: int) -> PerEvent:
    """Time the engine alone on ``config``'s plan under ``noc_model`` and SimPy on the same
    pattern, interleaved: every repeat runs the plan's first run, its second run and SimPy's
    baseline one after the other, so that a slow spell of a shared machine (they last seconds
    and move SimPy's own figure by up to 1.7x here) hits both sides of the ratio alike. At least
    ``repeats`` repeats, more for a short run (as ``timeit``'s autorange does), until the
    engine's runs add up to :data:`MIN_CASE_CPU_S`, at most :data:`MAX_REPEATS`."""
    comm = dataclasses.replace(config.communication, noc_model=noc_model)
    plan = plan_for(dataclasses.replace(config, communication=comm))
    firsts: list[float] = []
    seconds: list[float] = []
    simpys: list[tuple[float, int]] = []
    events = 1
    while len(firsts) < MAX_REPEATS and (
        len(firsts) < repeats or sum(firsts) + sum(seconds) < MIN_CASE_CPU_S
    ):
        fresh = dataclasses.replace(plan)  # no engine tables: the first run builds them
        start = time.process_time()
        run_event(fresh, record=False)
        firsts.append(time.process_time() - start)
        start = time.process_time()
        result, _ = run_event(fresh, record=False)
        seconds.append(time.process_time() - start)
        events = result.events_simulated or 1
        simpys.append(simpy_per_event_us(events, config.parallelism.pp))
    simpy_us, simpy_events = min(simpys)
    return PerEvent(
        first_us=1e6 * min(firsts) / events,
        second_us=1e6 * min(seconds) / events,
        simpy_us=simpy_us,
        events=events,
        simpy_events=simpy_events,
        repeats=len(firsts),
    )


def per_event_table(repeats: int) -> str:
    """Engine CPU time alone (the plan built once, outside the timing) per event, beside
    SimPy's on the same pattern, interleaved, least of at least ``repeats`` runs each
    (:func:`per_event_runs`, which takes more for a short run). Two figures per case: a
    plan's second run (what the engine derives from the plan alone, ``Plan.engine_tables``,
    already built, as SimPy's baseline makes its events before its timing starts) and a plan's
    first run (those tables built inside the timing, as ``palm.simulate`` pays them)."""
    rows = [
        "| case | NoC model | events | engine CPU (s) | engine us/event | SimPy events "
        "| SimPy us/event | ratio | first run of a plan: us/event | ratio | repeats |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, cfg, model in per_event_cases(visible=(0, 3, 5)):
        x = per_event_runs(cfg, model, repeats)
        cpu = x.second_us * x.events / 1e6
        rows.append(
            f"| {name} | {model} | {x.events} | {cpu:.3f} | {x.second_us:.1f} | "
            f"{x.simpy_events} | {x.simpy_us:.1f} | {x.second_us / x.simpy_us:.1f} | "
            f"{x.first_us:.1f} | {x.first_us / x.simpy_us:.1f} | {x.repeats} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per case (least reported)")
    ap.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    pinned = _pin_one_core()
    machine = (
        f"{platform.python_implementation()} {platform.python_version()}, {pinned}, "
        f"networks {IMPLEMENTATION}"
    )
    cases = cases_table(args.repeats)
    scaling = scaling_table(args.repeats)
    per_event = per_event_table(args.repeats)
    print(f"# event engine, least of {args.repeats}; {machine}\n")
    print(cases + "\n\n" + scaling + "\n\n" + per_event)
    if args.write_docs:
        write_section(DOC, "speed", cases + f"\n\nLeast of {args.repeats} runs; {machine}.")
        write_section(DOC, "scaling", scaling)
        write_section(DOC, "per-event", per_event)
    return 0


if __name__ == "__main__":
    sys.exit(main())
