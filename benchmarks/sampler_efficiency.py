"""How many event simulations the samplers need to come within 1% of a space's optimum.

Usage:
    python benchmarks/sampler_efficiency.py [--seeds 5] [--spaces a,b] [--samplers x,y]
                                            [--write-docs]

1. Every configuration of each space (``benchmarks/sampler_spaces``: GPU-cluster plan spaces
   of a dense model (GPT-3 175B; a Llama-3-70B shape with context parallelism, interleaving
   and ZeRO 3) and of a mixture of experts (Mixtral 8x22B with EP / ETP and fp8), wafer
   mapping, hardware what-if and design spaces) is evaluated once, with the memory check,
   the analytical engine and the event engine; the values are kept in
   ``benchmarks/sampler_spaces/<space>.jsonl`` (``benchmarks/sampler_tables.py`` completes,
   redoes or checks them), so the exhaustive optimum is computed once and the benchmark is
   re-runnable.
2. Each sampler runs the real objective (``search.objective.Objective``: invalid draws and
   memory overflows pruned, duplicates answered from the study's storage) with the event
   engine replaced by a look-up of the stored value, until 100 event simulations. The
   guided sampler's pricing (memory check and analytical engine) runs live and is checked
   against the table; a ``+screen`` sampler first runs ``search.screen`` live and its best
   configurations are enqueued. Times measured live are scaled to the load under which the
   table's times were stored (:func:`load_factor`).
3. Reported per space and sampler, over ``--seeds`` seeds: event simulations until one is
   within 1% of the exhaustive optimum (per seed and median; ">100" when none), the best
   value after 20 / 50 / 100 simulations as a fraction of the optimum (median over seeds),
   the study's time until then, the trials that simulated nothing (overflows, duplicates,
   invalid draws), the wall time of the simulations the study would have run (the stored
   event wall times), the screening's or pricing's and the sampler's own (sampling,
   modelling and storage, measured here), and their total. A first table gives each space
   in one line and names the default's worst space.

Target: the default's median at most 50 event simulations on every space (no seed above
120), and better than TPE alone and random at 20, 50 and 100. With --write-docs the tables
go into docs/results.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sampler_spaces  # noqa: E402
from _docblock import write_section  # noqa: E402 - a sibling module of this script
from sampler_spaces import SPACES, Row, exhaustive, spec_of, stored  # noqa: E402

from palm.api import MemoryCheck  # noqa: E402
from palm.config import config_to_dict, parse_config  # noqa: E402
from search.dedup import (  # noqa: E402
    DUPLICATE_ATTR,
    STALL_AFTER,
    Unrepeating,
    config_key,
    configuration_counts,
)
from search.guided import GuidedSampler, Pricing, price_config  # noqa: E402
from search.metrics import report_overflow  # noqa: E402
from search.objective import RESULT_FIELDS, Objective, run_engine  # noqa: E402
from search.samplers import learns_from_pruned, make_sampler  # noqa: E402
from search.screen import Screening, screen  # noqa: E402
from search.study_file import StudySpec, default_sampler  # noqa: E402
from spaces import enumerate_space  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results.md"
BUDGET = 100  # event simulations per run
CHECKPOINTS = (20, 50, 100)

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


_LIVE_PRICE = price_config("throughput")


def _tpe(seed: int, **kw: Any) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(seed=seed, **kw)


#: a sampler made for one seed and space (the study's spec, and the pricing that replays the
#: table's memory checks and analytical values for the guided sampler)
Factory = Callable[[int, StudySpec, Pricing], optuna.samplers.BaseSampler]

#: name -> (sampler factory, screening budget: 0 none, -1 the whole space)
SAMPLERS: dict[str, tuple[Factory, int]] = {
    "guided": (lambda s, spec, price: GuidedSampler(spec, seed=s, price=price), 0),
    "tpe-plain": (lambda s, *_: _tpe(s), 0),
    "tpe-multivariate": (lambda s, *_: _tpe(s, multivariate=True, group=True), 0),
    "tpe-plain+screen50": (lambda s, *_: _tpe(s), 50),
    "tpe-plain+screen100": (lambda s, *_: _tpe(s), 100),
    "tpe-plain+screen200": (lambda s, *_: _tpe(s), 200),
    "tpe-multivariate+screen200": (lambda s, *_: _tpe(s, multivariate=True, group=True), 200),
    "tpe-plain+screen-all": (lambda s, *_: _tpe(s), -1),
    "random": (lambda s, *_: optuna.samplers.RandomSampler(seed=s), 0),
    "nsga2": (lambda s, *_: optuna.samplers.NSGAIISampler(seed=s), 0),
    "gp": (lambda s, *_: optuna.samplers.GPSampler(seed=s), 0),
}


def default_name(space: str) -> str:
    """The entry of :data:`SAMPLERS` that ``palm-tune tune`` uses by default on ``space``
    (the guided sampler for one objective; else the TPE settings and the study's screening
    budget)."""
    spec = spec_of(space, sampler=default_sampler(1))
    if spec.sampler == "guided":
        return "guided"
    tpe = make_sampler("tpe", seed=0, objectives=1)
    kind = "tpe-multivariate" if getattr(tpe, "_group", False) else "tpe-plain"
    return kind + (f"+screen{spec.screen}" if spec.screen else "")


class _Replay:
    """Stands in for a Result: the stored throughput and wall time, the other fields zero."""

    def __init__(self, value: float, wall_s: float = 0.0) -> None:
        self.throughput_samples_per_s = value
        self.peak_memory_bytes = 0.0
        self.sim_wall_s = wall_s

    def to_dict(self) -> dict[str, Any]:
        return {
            **dict.fromkeys(RESULT_FIELDS, 0.0),
            "throughput_samples_per_s": self.value,
            "sim_wall_s": self.sim_wall_s,
        }

    @property
    def value(self) -> float:
        return self.throughput_samples_per_s


class _Lookup:
    """The engines replaced by the exhaustive table; adds up the stored wall times. Called
    with an engine it replays a simulation; :meth:`price` replays the guided sampler's
    pricing (memory check and analytical value)."""

    def __init__(self, table: dict[str, Row], factor: float = 1.0) -> None:
        self.table, self.event_s, self.screen_s = table, 0.0, 0.0
        self.factor = factor  # scales the live (sampler) time to the table's load
        self.values: list[float] = []
        self.keys: list[str] = []
        #: per simulation: stored event and pricing time so far + the sampler's own
        self.elapsed: list[float] = []
        self.priced = 0
        self.live_s = 0.0  # of the live pricing (counted in screen_s, scaled)
        self.started = time.perf_counter()

    def _row(self, config: Any) -> tuple[str, Row]:
        key = config_key(config_to_dict(config))
        row = self.table.get(key)
        if row is None:  # not stored yet (a table still being completed): evaluate it now
            row = self.table[key] = sampler_spaces.evaluate(config)
        return key, row

    def __call__(self, config: Any, engine: str) -> Any:
        key, row = self._row(config)
        if engine == "analytical":
            self.screen_s += row["analytical_s"]
            return _Replay(row["analytical"])
        self.event_s += row["event_s"]
        self.values.append(row["event"])
        self.keys.append(key)
        live = self.factor * (time.perf_counter() - self.started - self.live_s)
        self.elapsed.append(self.event_s + self.screen_s + live)
        return _Replay(row["event"], row["event_s"])

    def price(self, config: Any) -> tuple[MemoryCheck, float | None, float]:
        """The guided sampler's pricing, run live (its cost depends on what the sampler
        priced before: the plans share their routes, palm/network/memo.py) and timed live,
        scaled by the load factor; its values must be the table's (else the table is stale:
        ``python benchmarks/sampler_tables.py --redo``)."""
        key, row = self._row(config)
        memory, value, seconds = _LIVE_PRICE(config)
        if (memory.overflow_bytes, value) != (row["overflow"], row.get("analytical")):
            raise SystemExit(
                f"stored row {key} is stale ({row['overflow']}, {row.get('analytical')} "
                f"against {memory.overflow_bytes}, {value} now): run "
                "python benchmarks/sampler_tables.py --redo"
            )
        self.priced += 1
        self.live_s += seconds
        self.screen_s += seconds * self.factor
        return memory, value, seconds


_SCREENINGS: dict[tuple[str, int, int], tuple[Screening, float]] = {}
_FACTORS: dict[str, list[float]] = {}
CALIBRATION = 10  # configurations timed live and from the table for the load factor


def live_screening(
    space: str, table: dict[str, Row], budget: int, seed: int
) -> tuple[Screening, float]:
    """``search.screen`` of ``budget`` configurations of ``space`` with the real analytical
    engine, timed live (its cost depends on the batch: plans share their routes, see
    palm/network/memo.py), and its wall time scaled to the table's load
    (:func:`load_factor`, measured just before); run once per space, budget and seed (the
    samplers share it)."""
    key = (space, budget, seed)
    if key not in _SCREENINGS:
        factor = load_factor(space, table)
        study = optuna.create_study(direction="maximize")
        record = screen(study, spec_of(space, seed=seed), budget=budget, top=10, seed=seed)
        _SCREENINGS[key] = (record, record.wall_s * factor)
    return _SCREENINGS[key]


def load_factor(space: str, table: dict[str, Row]) -> float:
    """Stored / live analytical wall time of the first :data:`CALIBRATION` feasible
    configurations of ``space`` (each simulated alone, no shared routes): scales the times
    measured live (screening, the sampler's own time) to the machine load under which the
    table's event times were stored (the machine is shared; the load changes, so it is
    measured again before each sampler and each screening)."""
    spec = spec_of(space)
    stored_s = live_s = 0.0
    found = 0
    for draw in enumerate_space(spec.space, spec.context):
        if draw.draft is None:
            continue
        config = parse_config(draw.draft)
        row = table.get(config_key(config_to_dict(config)), {})
        if "analytical" not in row:
            continue
        if found == 0:
            run_engine(config, "analytical")  # warm up (imports, first-call caches)
        started = time.perf_counter()
        run_engine(config, "analytical")
        live_s += time.perf_counter() - started
        stored_s += row["analytical_s"]
        found += 1
        if found >= CALIBRATION:
            break
    _FACTORS.setdefault(space, []).append(stored_s / live_s)
    return stored_s / live_s


@dataclass
class Run:
    values: list[float]  # event-simulated values, in order
    keys: list[str]  # their configurations
    elapsed: list[float]  # study time at each simulation, a screening before it excluded
    trials: int
    duplicates: int
    overflows: int
    invalid: int
    event_s: float
    screen_s: float  # memory checks and analytical runs: before the study and during it
    upfront_s: float  # the screening before the study
    screened: int  # configurations priced analytically (memory checked)
    sampler_s: float


def run_one(
    space: str,
    table: dict[str, Row],
    sampler: str,
    seed: int,
    *,
    budget_sims: int = BUDGET,
    factor: float = 1.0,
) -> Run:
    """One study of ``sampler`` on ``space`` until ``budget_sims`` event simulations; the
    sampler's own (live) time is scaled by ``factor`` (:func:`load_factor`)."""
    factory, budget = SAMPLERS[sampler]
    spec = spec_of(space, seed=seed)
    lookup = _Lookup(table, factor)
    made = factory(seed, spec, lookup.price)
    # as `palm-tune tune` runs it (search.api): the guided sampler steers itself off what
    # the study has, the others are steered off duplicates by search.dedup.Unrepeating
    wrapped_sampler = made if isinstance(made, GuidedSampler) else Unrepeating(made, seed=seed)
    study = optuna.create_study(direction="maximize", sampler=wrapped_sampler)
    screened, screen_wall = 0, 0.0
    if budget:
        record, screen_wall = live_screening(
            space, table, len(table) if budget < 0 else budget, seed
        )
        for params in record.enqueued:
            study.enqueue_trial(params, skip_if_exists=True)
        screened = record.drawn
    objective = Objective(spec, simulate=lookup)
    # as `palm-tune tune` runs it (search.api): an overflow reaches the samplers that read
    # COMPLETE trials only (NSGA-II, GP) as a COMPLETE, infeasible trial
    wrapped = report_overflow(
        objective, spec.objectives, complete=not learns_from_pruned(study.sampler)
    )
    in_row, trials = [0], [0]

    def stop(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        in_row[0] = in_row[0] + 1 if DUPLICATE_ATTR in trial.user_attrs else 0
        trials[0] += 1
        if objective.simulations >= budget_sims or in_row[0] >= STALL_AFTER or trials[0] > 5000:
            study.stop()

    started = lookup.started = time.perf_counter()
    study.optimize(wrapped, callbacks=[stop], gc_after_trial=False)
    wall = time.perf_counter() - started
    counted = configuration_counts(study)
    return Run(
        values=lookup.values,
        keys=lookup.keys,
        elapsed=lookup.elapsed,
        trials=len(study.trials),
        duplicates=counted["duplicate"],
        overflows=counted["overflow"],
        invalid=counted["invalid"],
        event_s=lookup.event_s,
        screen_s=lookup.screen_s + screen_wall,
        upfront_s=screen_wall,
        screened=screened + lookup.priced,
        sampler_s=(wall - lookup.live_s) * factor,
    )


def _to_target(values: list[float], target: float) -> int | None:
    return next((i + 1 for i, v in enumerate(values) if v >= target), None)


def _best_at(values: list[float], n: int, opt: float) -> float:
    return max(values[:n], default=0.0) / opt


def _median_hits(hits: list[int | None]) -> str:
    # a miss counts as more than the budget, so the median is exact or "> 100"
    keyed = sorted(h if h is not None else BUDGET + 1 for h in hits)
    m = statistics.median(keyed)
    return f"> {BUDGET}" if m > BUDGET else f"{m:g}"


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    for r, i in enumerate(order):
        out[i] = float(r)
    return out


def rank_agreement(feasible: dict[str, Row]) -> dict[str, float]:
    """How well the analytical engine ranks what the event engine measures, over the
    configurations that fit: Spearman's rho, the share of the event top 1% inside the
    analytical top 1% and top 5%, and the best event value among the analytical top 10 (as a
    fraction of the optimum)."""
    rows = list(feasible.values())
    ra, re_ = _ranks([r["analytical"] for r in rows]), _ranks([r["event"] for r in rows])
    n = len(rows)
    mean = (n - 1) / 2
    cov = sum((a - mean) * (b - mean) for a, b in zip(ra, re_, strict=True))
    var = sum((a - mean) ** 2 for a in ra)
    by_event = sorted(range(n), key=lambda i: -rows[i]["event"])
    by_analytical = sorted(range(n), key=lambda i: -rows[i]["analytical"])
    top = set(by_event[: max(1, n // 100)])
    opt = rows[by_event[0]]["event"]
    return {
        "spearman": cov / var,
        "top1_in_1": len(top & set(by_analytical[: max(1, n // 100)])) / len(top),
        "top1_in_5": len(top & set(by_analytical[: max(1, n // 20)])) / len(top),
        "top10_best": max(rows[i]["event"] for i in by_analytical[:10]) / opt,
    }


def _fidelity(feasible: dict[str, Row]) -> str:
    a = rank_agreement(feasible)
    return (
        f"Analytical vs event ranks: Spearman {a['spearman']:.3f}; of the event top 1%, "
        f"{a['top1_in_1']:.0%} are in the analytical top 1% and {a['top1_in_5']:.0%} in its "
        f"top 5%; the analytical top 10 holds {a['top10_best']:.1%} of the event optimum."
    )


def space_header(space: str, table: dict[str, Row]) -> tuple[list[str], float, float]:
    """The space's line (size, overflows, optimum, engine costs and fidelity), the 1%
    target and the optimum."""
    title, _ = SPACES[space]
    feasible = {k: r for k, r in table.items() if "event" in r}
    opt = max(r["event"] for r in feasible.values())
    target = 0.99 * opt
    near = sum(1 for r in feasible.values() if r["event"] >= target)
    event_all = sum(r["event_s"] for r in feasible.values())
    analytical_all = sum(r["analytical_s"] for r in feasible.values())
    memory_all = sum(r["memory_s"] for r in table.values())
    lines = [
        f"**{space}** ({title}): {len(table)} configurations, "
        f"{len(table) - len(feasible)} ({(len(table) - len(feasible)) / len(table):.0%}) "
        f"overflow memory, {near} within 1% of the optimum {opt:.4g} samples/s. Exhaustive: "
        f"{event_all:.0f} s of event simulation (plan included), {analytical_all:.0f} s "
        f"analytical ({event_all / analytical_all:.1f}x cheaper), {memory_all:.1f} s of memory "
        f"checks for all {len(table)}. {_fidelity(feasible)}",
        "",
    ]
    return lines, target, opt


def previous_default(space: str) -> str:
    """The entry of :data:`SAMPLERS` that ``palm-tune tune`` used by default before the
    guided sampler: TPE after a screening of 200 on a GPU cluster, 100 on a mesh."""
    return "tpe-plain+screen100" if spec_of(space).context.mesh else "tpe-plain+screen200"


#: per space and sampler: (sims to within 1% per seed, best at the checkpoints, s to 1%)
Summary = dict[str, tuple[list[int | None], list[float], float]]


def space_report(
    space: str, seeds: int, samplers: list[str], *, complete: bool = True
) -> tuple[str, Summary]:
    """The table of ``space`` and its per-sampler summary; ``complete = False`` uses the rows
    stored so far (evaluating a missing configuration when a study proposes it) instead of
    completing the table."""
    table = exhaustive(space) if complete else stored(space)
    lines, target, opt = space_header(space, table)
    summary: Summary = {}
    lines += [
        "| sampler | sims to within 1% (seeds) | median | best at 20 / 50 / 100 | "
        "s to within 1% (median) | trials: overflow / duplicate / invalid | "
        "screening (configs, s) | event sims (s) | "
        "sampler (s) | total (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for asked in samplers:
        sampler = previous_default(space) if asked == "previous" else asked
        factor = load_factor(space, table)
        runs = [run_one(space, table, sampler, seed, factor=factor) for seed in range(seeds)]
        hits = [_to_target(r.values, target) for r in runs]
        at = [statistics.median(_best_at(r.values, n, opt) for r in runs) for n in CHECKPOINTS]
        per_seed = ", ".join("-" if h is None else str(h) for h in hits)

        def mean(f: Callable[[Run], float], runs: list[Run] = runs) -> float:
            return statistics.mean(f(r) for r in runs)

        total = mean(lambda r: r.screen_s + r.event_s + r.sampler_s)
        secs = [
            r.upfront_s + r.elapsed[h - 1] if h is not None else float("inf")
            for r, h in zip(runs, hits, strict=True)
        ]
        summary[sampler] = (hits, at, statistics.median(secs))
        label = f"**default**: {sampler}" if sampler == default_name(space) else sampler
        if sampler == previous_default(space):
            label = f"previous default: {sampler}"
        lines.append(
            f"| {label} | {per_seed} | {_median_hits(hits)} | "
            f"{' / '.join(f'{a:.1%}' for a in at)} | {statistics.median(secs):.1f} | "
            f"{mean(lambda r: r.trials):.0f}: {mean(lambda r: r.overflows):.0f} / "
            f"{mean(lambda r: r.duplicates):.0f} / {mean(lambda r: r.invalid):.0f} | "
            f"{mean(lambda r: r.screened):.0f}, {mean(lambda r: r.screen_s):.1f} | "
            f"{mean(lambda r: r.event_s):.1f} | {mean(lambda r: r.sampler_s):.1f} | {total:.1f} |"
        )
        print(lines[-1], flush=True)
    factors = _FACTORS.get(space, [])
    if factors:
        lines += [
            "",
            f"Screenings and the samplers' own time were timed live in this run and scaled by "
            f"{min(factors):.2f}-{max(factors):.2f} (stored / live analytical time of "
            f"{CALIBRATION} configurations simulated alone, measured before each sampler and "
            "each screening) to the machine load under which the table's times were stored.",
        ]
    return "\n".join(lines), summary


def _median_of(hits: list[int | None]) -> float:
    return float(statistics.median(h if h is not None else BUDGET + 1 for h in hits))


def overview(results: dict[str, Summary]) -> str:
    """One line per space: the default against the previous default, TPE alone and random
    (median sims to within 1%, the worst seed, the median best at 20 / 50 / 100), and the
    worst space of the default."""
    names = ["guided", "previous", "tpe-plain", "random"]
    lines = [
        "| space | default: sims to 1%, median (worst seed) | previous default | TPE alone | "
        "random | best at 20 / 50 / 100: default | TPE alone | random |",
        "|---|---|---|---|---|---|---|---|",
    ]
    worst: tuple[float, str] = (-1.0, "")
    for space, summary in results.items():
        cells, at = [], []
        for name in names:
            key = previous_default(space) if name == "previous" else name
            if key not in summary:
                cells.append("-")
                at.append("-")
                continue
            hits, best_at, _ = summary[key]
            known = [h for h in hits if h is not None]
            tail = max(known) if len(known) == len(hits) else f"> {BUDGET}"
            cells.append(f"{_median_hits(hits)} ({tail})")
            at.append(" / ".join(f"{a:.1%}" for a in best_at))
        if "guided" in summary:
            worst = max(worst, (_median_of(summary["guided"][0]), space))
        lines.append(f"| {space} | {' | '.join(cells)} | {at[0]} | {at[2]} | {at[3]} |")
    if worst[1]:
        lines += ["", f"Worst space for the default: {worst[1]} (median {worst[0]:g})."]
    return "\n".join(lines)


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        # string hashing is randomised per process, and a study's proposals depend on the
        # order of a set of parameter names (search.dedup.Unrepeating): pin it, so that a
        # seed gives the same study in every run
        os.execve(
            sys.executable,
            [sys.executable, *sys.argv],
            # one BLAS thread, as palm-tune runs (search/cli.py)
            {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"},
        )
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--spaces", default=",".join(SPACES))
    # gp fits a Gaussian process per trial; screen-all screens the whole space live (2880
    # configurations on the GPU space): both on request only
    ap.add_argument(
        "--samplers",
        default="guided,tpe-plain,previous,random",
        help="names of SAMPLERS, or 'previous': the previous default of each space",
    )
    ap.add_argument("--write-docs", action="store_true", help="update docs/results.md")
    ap.add_argument(
        "--stored-only",
        action="store_true",
        help="use the rows stored so far (another process completes the table)",
    )
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spaces, samplers = args.spaces.split(","), args.samplers.split(",")
    for name in (*spaces, *samplers):
        if name not in SPACES and name not in SAMPLERS and name != "previous":
            raise SystemExit(f"unknown space or sampler {name!r}")
    results: dict[str, Summary] = {}
    parts = []
    for space in spaces:
        text, results[space] = space_report(
            space, args.seeds, samplers, complete=not args.stored_only
        )
        parts.append(text)
    text = "\n\n".join([overview(results), *parts])
    print(text)
    if args.write_docs:
        write_section(DOC, "samplers", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
