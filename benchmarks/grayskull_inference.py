"""Predicted vs published inference throughput on the Grayskull preset (docs/tiled-inference.md).

Usage:
    python benchmarks/grayskull_inference.py [--quick] [--write-docs]

For ResNet-50 (fp16 and int8), BERT-Large (seq 384) and BERT-Base (seq 128) on the 120 cores
of the ``grayskull`` preset, with no constant, preset or simulator change:

1. the documented default plan of the example TOML (``examples/grayskull-*.toml``);
2. every valid mapping ``tp x pp x dp = 120`` with micro-batches 1, 2, 4, 8, 16 that divide
   the published batch (invalid ones raise ``palm.ConfigError`` and are skipped), keeping the
   best throughput that fits in memory.

Throughput is palm's steady state (event engine, ``training.mode = "inference"``) of a stream
of published batches long enough for the pipeline to carry at least STREAM_MICRO_BATCHES
micro-batches: palm measures the spacing of micro-batches leaving the pipeline, which with a
handful of micro-batches is taken before the pipeline is full and before its stages contend
for DRAM (see the doc). The plans are ranked by that steady state. A second table gives, for
one published batch alone, palm's own figure (what a plain ``palm.simulate`` at the published
batch reports), the plan that this figure would rank first, and the batch's end-to-end rate
including pipeline fill and drain.

``--quick`` keeps the example's micro-batch and tensor-parallel degree (a handful of plans).
``--write-docs`` rewrites the table between the ``grayskull`` markers of the doc.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import palm
from palm.api import simulate_timeline
from palm.plan import build_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import ROOT, parse_case_args, publish  # noqa: E402 - a sibling module

DOC = ROOT / "docs" / "tiled-inference.md"
EXAMPLES = ROOT / "examples"
MARKER = "grayskull"
CORES = 120
MICRO_BATCHES = (1, 2, 4, 8, 16)
#: micro-batches per pipeline in the simulated stream (palm's steady state is within ~1% of
#: its limit from about 128 on; see the doc)
STREAM_MICRO_BATCHES = 128
SATURATED = 0.95


@dataclass(frozen=True)
class Case:
    """One comparison: a model (its example TOML), a precision and a published figure."""

    model: str
    example: str
    precision: str
    published: float
    source: str
    #: tensor-parallel degrees tried (ResNet: powers of two, which divide every channel count)
    tp_choices: tuple[int, ...]
    #: counted in the mean and max error (one row per published figure)
    primary: bool = True


CASES: tuple[Case, ...] = (
    Case("ResNet-50", "grayskull-resnet50.toml", "fp16", 1410.0, "TT-Buda", (1, 2, 4, 8)),
    Case("ResNet-50", "grayskull-resnet50.toml", "int8", 22431.0, "PALM Table V", (1, 2, 4, 8)),
    Case(
        "BERT-Large s384",
        "grayskull-bert-large.toml",
        "fp16",
        99.0,
        "TT-Buda",
        (1, 2, 4, 8, 16),
    ),
    Case(
        "BERT-Large s384",
        "grayskull-bert-large.toml",
        "fp8",
        99.0,
        "TT-Buda",
        (1, 2, 4, 8, 16),
        primary=False,
    ),
    Case(
        "BERT-Base s128",
        "grayskull-bert-base.toml",
        "fp16",
        2830.0,
        "PALM Table V",
        (1, 2, 3, 4, 6, 12),
    ),
)


@dataclass(frozen=True)
class Mapping:
    tp: int
    pp: int
    dp: int
    micro_batch: int

    def text(self) -> str:
        return f"{self.tp}, {self.pp}, {self.dp}, {self.micro_batch}"


@dataclass(frozen=True)
class Outcome:
    """One simulated mapping: the stream result, the config it came from, and one published
    batch alone (palm's own figure, and the batch over its makespan, fill and drain included)."""

    mapping: Mapping
    batch: int
    micro_batches: int
    config: palm.SimConfig
    result: palm.Result
    one_batch: float
    one_batch_filled: float

    @property
    def throughput(self) -> float:
        return self.result.throughput_samples_per_s

    @property
    def dram_bytes_per_sample(self) -> float:
        """DRAM traffic of the SRAM allocation per sample: every core of a stage moves its
        operators' bytes per micro-batch, and a stage's tp x dp cores carry dp x mb samples."""
        ops = self.result.operators or ()
        per_core = sum(o.dram_forward_bytes for o in ops)
        return per_core * self.mapping.tp / self.mapping.micro_batch


@dataclass(frozen=True)
class Row:
    case: Case
    kind: str  # "default", "best" or "best one batch"
    outcome: Outcome
    valid: int
    fitting: int

    @property
    def error(self) -> float:
        return self.outcome.throughput / self.case.published - 1.0

    @property
    def one_batch_error(self) -> float:
        return self.outcome.one_batch / self.case.published - 1.0


def _overrides(case: Case, m: Mapping, batch: int) -> list[str]:
    return [
        f'training.precision="{case.precision}"',
        f"training.global_batch={batch}",
        f"training.micro_batch={m.micro_batch}",
        f"parallelism.tp={m.tp}",
        f"parallelism.pp={m.pp}",
        f"parallelism.dp={m.dp}",
    ]


def _config(case: Case, m: Mapping, batch: int) -> palm.SimConfig:
    return palm.load_config(EXAMPLES / case.example, overrides=_overrides(case, m, batch))


def stream_batch(batch: int, mapping: Mapping) -> tuple[int, int]:
    """The published batch repeated until the pipeline carries STREAM_MICRO_BATCHES
    micro-batches: (stream global batch, micro-batches of one published batch)."""
    m = batch // (mapping.dp * mapping.micro_batch)
    return batch * math.ceil(STREAM_MICRO_BATCHES / m), m


def simulate_mapping(case: Case, mapping: Mapping, batch: int) -> Outcome:
    """Simulate ``mapping`` for one published batch (raises ConfigError when invalid) and for
    the stream."""
    result, timeline = simulate_timeline(_config(case, mapping, batch))
    assert timeline is not None
    stream, m = stream_batch(batch, mapping)
    makespan = one_batch_makespan(timeline.raw_phases, m)
    config = _config(case, mapping, stream)
    return Outcome(
        mapping,
        batch,
        m,
        config,
        palm.simulate(config),
        one_batch=result.throughput_samples_per_s,
        one_batch_filled=batch / makespan,
    )


def one_batch_makespan(phases: Sequence[tuple[int, int, int, str, float, float]], m: int) -> float:
    """When the last of the first ``m`` micro-batches (one published batch) leaves its last
    pass. The inference engine simulates more micro-batches than a batch holds, to reach its
    steady state; the later ones can only delay these (they contend for DRAM), never speed
    them up. ``phases`` are the timeline's ``(stage, chunk, micro-batch, kind, start, end)``."""
    return max(end for _stage, _chunk, mb, _kind, _start, end in phases if mb < m)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def mappings(case: Case, default: Mapping, *, quick: bool) -> Iterator[Mapping]:
    """The default plan first, then every ``tp x pp x dp = 120`` with the micro-batches."""
    yield default
    tps = (default.tp,) if quick else case.tp_choices
    micro = (default.micro_batch,) if quick else MICRO_BATCHES
    for tp in tps:
        if CORES % tp:
            continue
        for pp in _divisors(CORES // tp):
            for mb in micro:
                m = Mapping(tp, pp, CORES // (tp * pp), mb)
                if m != default:
                    yield m


def evaluate(case: Case, *, quick: bool) -> list[Row]:
    """The default plan, the best plan by steady state and the best by palm's figure for one
    published batch (plans that fit in memory; all plans if none fits)."""
    base = palm.load_config(EXAMPLES / case.example)
    par, batch = base.parallelism, base.training.global_batch
    default = Mapping(par.tp, par.pp, par.dp, base.training.micro_batch)
    outcomes: list[Outcome] = []
    for mapping in mappings(case, default, quick=quick):
        try:
            outcomes.append(simulate_mapping(case, mapping, batch))
        except palm.ConfigError:
            if mapping == default:
                raise
    fitting = [o for o in outcomes if o.result.fits_memory]
    pool = fitting or outcomes
    best = max(pool, key=lambda o: o.throughput)
    naive = max(pool, key=lambda o: o.one_batch)
    n, f = len(outcomes), len(fitting)
    return [
        Row(case, "default", outcomes[0], n, f),
        Row(case, "best", best, n, f),
        Row(case, "best one batch", naive, n, f),
    ]


def bound(outcome: Outcome) -> str:
    """What limits the plan: saturated DRAM channels, the SRAM strategies of its operators, its
    busiest stage (with that stage's compute and DRAM time per micro-batch when alone) and the
    busiest NoC resource."""
    r = outcome.result
    assert r.operators is not None and r.dram_channel_utilisation is not None
    dram = r.dram_channel_utilisation
    saturated = sum(1 for u in dram if u >= SATURATED)
    strategies = Counter(o.strategy for o in r.operators)
    ops = ", ".join(f"{n} {s}" for s, n in strategies.most_common())
    stage = max(r.stages, key=lambda s: s.busy_fraction)
    plan = build_plan(outcome.config)
    chunks = [c for c in plan.chunks if c.stage == stage.stage]
    compute = sum(c.forward_compute_s for c in chunks) * 1e3
    stream = sum(c.stream_forward_s for c in chunks) * 1e3
    noc = max((link.busy_fraction for link in r.links or ()), default=0.0)
    mean = sum(dram) / len(dram)
    if saturated:
        head = f"DRAM ({saturated}/{len(dram)} channels >= {SATURATED:.0%}, mean {mean:.0%})"
    elif compute >= stream:
        head = f"compute of stage {stage.stage} (DRAM channels mean {mean:.0%})"
    else:
        head = f"DRAM reads of stage {stage.stage} (DRAM channels mean {mean:.0%})"
    return (
        f"{head}; SRAM: {ops}; busiest stage "
        f"{stage.stage}/{len(r.stages)} {stage.busy_fraction:.0%}, alone {compute:.1f} ms "
        f"compute, {stream:.1f} ms DRAM; NoC max {noc:.0%}"
    )


def _mean_max(rows: Sequence[Row], kind: str, *, tt_only: bool = False) -> str:
    errors = [
        abs(r.error)
        for r in rows
        if r.kind == kind and r.case.primary and (not tt_only or r.case.source == "TT-Buda")
    ]
    if not errors:
        return "-"
    return f"mean {sum(errors) / len(errors):.1%}, max {max(errors):.1%} ({len(errors)} figures)"


def table(rows: Sequence[Row], *, quick: bool) -> str:
    lines = [
        "| model | precision | batch | plan | TP, PP, DP, micro-batch | palm samples/s "
        "| published | error | MFU | DRAM MB/sample | plans fit / valid | what bounds it |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        o, c = row.outcome, row.case
        if row.kind == "best one batch":
            continue
        note = "" if c.primary else " (extra)"
        lines.append(
            f"| {c.model} | {c.precision}{note} | {o.batch} ({o.micro_batches} micro-batches)"
            f" | {row.kind} | {o.mapping.text()} | {o.throughput:,.0f} | {c.published:,.0f}"
            f" ({c.source}) | {row.error:+.1%} | {o.result.mfu:.1%} | "
            f"{o.dram_bytes_per_sample / 1e6:.1f} | {row.fitting} / "
            f"{row.valid} | {bound(o)} |"
        )
    lines.append("")
    for kind in ("best", "default"):
        lines.append(
            f"- {kind} plans, absolute error: {_mean_max(rows, kind)}; "
            f"TT-Buda figures only: {_mean_max(rows, kind, tt_only=True)}"
        )
    lines.append("")
    lines.append(
        "One published batch alone, for the same plans and for the plan that palm's figure for "
        "one batch ranks first:"
    )
    lines.append("")
    lines.append(
        "| model | precision | plan | TP, PP, DP, micro-batch | steady state | one batch: "
        "palm's figure | error of that figure | one batch with fill and drain |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    for row in rows:
        o, c = row.outcome, row.case
        lines.append(
            f"| {c.model} | {c.precision} | {row.kind} | {o.mapping.text()} | "
            f"{o.throughput:,.0f} | {o.one_batch:,.0f} | {row.one_batch_error:+.1%} | "
            f"{o.one_batch_filled:,.0f} |"
        )
    lines.append("")
    lines.append(
        f"Steady state: a stream of published batches, >= {STREAM_MICRO_BATCHES} micro-batches "
        f"per pipeline; event engine; "
        f"{'--quick: the example tp and micro-batch only' if quick else 'full search'}."
    )
    return "\n".join(lines)


def run(*, quick: bool) -> tuple[str, list[Row]]:
    rows: list[Row] = []
    for case in CASES:
        rows.extend(evaluate(case, quick=quick))
    return table(rows, quick=quick), rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_case_args(
        argv,
        description=__doc__ or "",
        quick_help="a handful of plans per case",
        doc=DOC,
        figures=False,
    )
    start = time.perf_counter()
    text, _ = run(quick=args.quick)
    print(f"({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return publish(args, MARKER, text)


if __name__ == "__main__":
    sys.exit(main())
