"""Case study 2 (PALM paper sec. V-B, Fig. 10): stage layout and TP placement of T-18B, T-76B
and T-145B on the paper's wafer.

Usage:
    python benchmarks/case_wafer_mapping.py [--quick] [--out docs/figures] [--write-docs]

``examples/wafer-t18b.toml`` (``wafer-palm``, PP=20, one 16-core tile per stage, 1F1B, full
recompute, micro-batch 1) with ``model.preset`` set to each model and (TP, DP) in (1, 16),
(2, 8), (4, 4), (8, 2), (16, 1), 32 micro-batches per pipeline (``global_batch = 32 DP``), stage
layout ``line`` or ``s-shape`` and TP placement ``compact`` or ``strided``. Every point is run
by the event engine with palm's default physics (blocked DRAM traffic per matrix product,
interleaved DRAM placement) under three network models (``NETWORKS``): palm's default
``fair/group`` (max-min fair sharing of aggregated per-stage resources), ``fair/link`` (the same
on every mesh link) and ``exclusive/link`` (every mesh link an exclusive resource: the paper's
model, sec. IV-C).

Also reported: the paper's baseline (TP=8, DP=2, line, compact) against the paper's own
simulator outputs (``paper_simulator_outputs`` of the validation file), the same under the
paper's SRAM rule (``hardware.sram_model = "algorithm1"``), what dominates the baseline (with
the busiest mesh links of the ``fair/link`` run), and a *diagnostic* rerun of the baseline
with the DRAM traffic of the SRAM allocation scaled by 0.005, the factor the PALM
paper's public reference code applies to wafers. The diagnostic is not palm's answer; it only
shows where the gap to the paper comes from. Writes ``wafer_mapping.png`` and
``wafer_crosscheck.png`` into ``--out`` and, with ``--write-docs``, the tables into
``docs/case-studies.md`` between its ``case_wafer_mapping`` markers.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import palm
from palm.engines.event.engine import run_event
from palm.engines.event.fabric import mesh_link_endpoints
from palm.hardware import Mesh2DHardware
from palm.plan import Plan, build_plan
from palm.validation import default_validation_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import (  # noqa: E402 - a sibling module of this script
    ROOT,
    case_main,
    grouped_bars,
    markdown_table,
    pyplot,
    save_figure,
)

DOC = ROOT / "docs" / "case-studies.md"
BASE = ROOT / "examples" / "wafer-t18b.toml"
NAME = "case_wafer_mapping"

MODELS: tuple[str, ...] = ("t-18b", "t-76b", "t-145b")
SPLITS: tuple[tuple[int, int], ...] = ((1, 16), (2, 8), (4, 4), (8, 2), (16, 1))
MAPPINGS: tuple[tuple[str, str], ...] = (
    ("line", "compact"),
    ("line", "strided"),
    ("s-shape", "compact"),
    ("s-shape", "strided"),
)
#: how the event engine shares the network: ``noc_model/noc_granularity``. palm's default
#: (fair sharing of aggregated per-stage resources), the same on every mesh link (the check of
#: the aggregation), and the paper's exclusive holds of every link (sec. IV-C)
NETWORKS: tuple[str, ...] = ("fair/group", "fair/link", "exclusive/link")
BASELINE = (8, 2)
REFERENCE_DRAM_FACTOR = 0.005  # the paper's reference code, for wafers
QUICK_MODELS: tuple[str, ...] = ("t-18b",)
QUICK_SPLITS: tuple[tuple[int, int], ...] = ((2, 8), (8, 2))


def config(
    model: str,
    tp: int,
    dp: int,
    layout: str,
    tp_group: str,
    network: str = NETWORKS[0],
    *extra: str,
) -> palm.SimConfig:
    noc_model, granularity = network.split("/")
    return palm.load_config(
        BASE,
        overrides=[
            f'model.preset="{model}"',
            f"parallelism.tp={tp}",
            f"parallelism.dp={dp}",
            f"training.global_batch={32 * dp}",
            f'placement.layout="{layout}"',
            f'placement.tp_group="{tp_group}"',
            f'communication.noc_granularity="{granularity}"',
            f'communication.noc_model="{noc_model}"',
            *extra,
        ],
    )


@dataclass(frozen=True)
class Point:
    model: str
    tp: int
    dp: int
    layout: str
    tp_group: str
    network: str
    throughput: float
    fits: bool

    @property
    def mapping(self) -> tuple[str, str]:
        return (self.layout, self.tp_group)


def sweep(models: Sequence[str], splits: Sequence[tuple[int, int]]) -> list[Point]:
    points = []
    for model in models:
        for tp, dp in splits:
            for layout, group in MAPPINGS:
                for gran in NETWORKS:
                    r = palm.simulate(config(model, tp, dp, layout, group, gran), engine="event")
                    points.append(
                        Point(
                            model,
                            tp,
                            dp,
                            layout,
                            group,
                            gran,
                            r.throughput_samples_per_s,
                            r.fits_memory,
                        )
                    )
    return points


def paper_numbers() -> dict[str, float]:
    data = json.loads(default_validation_file().read_text(encoding="utf-8"))
    out: dict[str, float] = data["paper_simulator_outputs"]["wafer_samples_per_s"]
    return out


def scaled_dram(plan: Plan, factor: float) -> Plan:
    """``plan`` with the DRAM bytes of the SRAM allocation (weight streams and the optimizer
    step) times ``factor``, re-priced by each stage's own :class:`~palm.plan.DramAccess`.
    A diagnostic of the reference code's wafer factor, not a model change."""
    assert plan.dram is not None
    chunks = []
    for ch in plan.chunks:
        access = plan.dram[ch.stage]
        f_bytes = ch.stream_bytes_forward * factor
        b_bytes = ch.stream_bytes_backward * factor
        chunks.append(
            dataclasses.replace(
                ch,
                stream_bytes_forward=f_bytes,
                stream_bytes_backward=b_bytes,
                stream_forward_s=access.time(f_bytes),
                stream_backward_s=access.time(b_bytes),
            )
        )
    stages = []
    for st in plan.stages:
        opt_bytes = st.optimizer_bytes * factor
        opt_s = plan.dram[st.stage].time(opt_bytes) if st.optimizer_in_dram else st.optimizer_s
        stages.append(
            dataclasses.replace(
                st,
                chunks=tuple(c for c in chunks if c.stage == st.stage),
                optimizer_bytes=opt_bytes if st.optimizer_in_dram else st.optimizer_bytes,
                optimizer_s=opt_s,
            )
        )
    return dataclasses.replace(plan, chunks=tuple(chunks), stages=tuple(stages))


@dataclass(frozen=True)
class Anatomy:
    """What the baseline of one model spends its time on."""

    model: str
    throughput: float
    throughput_link: float
    throughput_exclusive: float
    throughput_algorithm1: float
    diagnostic: float
    diagnostic_s_shape: float
    diagnostic_strided: float
    paper: float
    iteration_s: float
    mfu: float
    bubble: float
    strategies: str
    compute_ms: float
    stream_ms: float
    multicast_ms: float
    tp_ms: float
    tp_strided_ms: float
    hand_off_ms: float
    slowest_hand_off_ms: tuple[float, float]
    dram_gb: float
    channel_max: float
    channel_mean: float
    busy_min_s: float
    busy_median_s: float
    busy_max_s: float
    busiest: int
    busiest_dram: str
    busiest_links: str


def busiest_links(hw: Mesh2DHardware, result: palm.Result, count: int = 3) -> str:
    """The ``count`` busiest mesh links of a ``link``-granularity run: where they are (tile
    of each end), the fraction of the iteration they carry a flow, and the bytes they carry."""
    links = [x for x in result.links or () if x.name.startswith("link[")]
    top = sorted(links, key=lambda x: (-x.busy_fraction, x.name))[:count]
    cells = []
    for x in top:
        a, b = mesh_link_endpoints(hw, int(x.name[5:-1]))
        ta = (a[0] // hw.cores_per_tile[0], a[1] // hw.cores_per_tile[1])
        tb = (b[0] // hw.cores_per_tile[0], b[1] // hw.cores_per_tile[1])
        where = f"tile {ta}" if ta == tb else f"tiles {ta}->{tb}"
        cells.append(f"{a}->{b} ({where}): {100 * x.busy_fraction:.0f}%, {x.bytes / 1e12:.2f} TB")
    return "; ".join(cells)


def anatomy(model: str, paper: float) -> Anatomy:
    tp, dp = BASELINE
    cfg = config(model, tp, dp, "line", "compact")
    hw = cfg.hardware
    assert isinstance(hw, Mesh2DHardware)
    plan = build_plan(cfg)
    result, _ = run_event(plan)
    link = palm.simulate(config(model, tp, dp, "line", "compact", "fair/link"))
    exclusive = palm.simulate(config(model, tp, dp, "line", "compact", "exclusive/link"))
    algorithm1 = palm.simulate(
        config(model, tp, dp, "line", "compact", NETWORKS[0], 'hardware.sram_model="algorithm1"')
    )
    diag, _ = run_event(scaled_dram(plan, REFERENCE_DRAM_FACTOR))
    strided = build_plan(config(model, tp, dp, "line", "strided"))
    s_shape = build_plan(config(model, tp, dp, "s-shape", "compact"))
    diag_strided, _ = run_event(scaled_dram(strided, REFERENCE_DRAM_FACTOR))
    diag_s_shape, _ = run_event(scaled_dram(s_shape, REFERENCE_DRAM_FACTOR))
    mid = plan.chunks[len(plan.chunks) // 2]
    mid_strided = strided.chunks[len(plan.chunks) // 2]
    counts = collections.Counter(o.strategy for o in result.operators or ())
    busy = [s.busy_s for s in result.stages]
    busiest = int(np.argmax(busy))
    channels = result.dram_channel_utilisation or (0.0,)
    where = ""
    if plan.dram is not None:
        access = plan.dram[busiest]
        core = plan.placement.stage_array(busiest).reshape(-1, 2)[0]
        tile = (int(core[0]) // hw.cores_per_tile[0], int(core[1]) // hw.cores_per_tile[1])
        where = (
            f"tile {tile}; {len(access.channels)} of {hw.dram_channels} channels "
            f"({hw.dram_placement}), {access.cores:g} cores, NoC "
            f"{access.noc.bandwidth_Bps / 1e9:.0f} GB/s per core"
        )
    return Anatomy(
        model=model,
        throughput=result.throughput_samples_per_s,
        throughput_link=link.throughput_samples_per_s,
        throughput_exclusive=exclusive.throughput_samples_per_s,
        throughput_algorithm1=algorithm1.throughput_samples_per_s,
        diagnostic=diag.throughput_samples_per_s,
        diagnostic_s_shape=diag_s_shape.throughput_samples_per_s,
        diagnostic_strided=diag_strided.throughput_samples_per_s,
        paper=paper,
        iteration_s=result.iteration_time_s,
        mfu=result.mfu,
        bubble=result.bubble_fraction,
        strategies=", ".join(f"{k} x{v}" for k, v in sorted(counts.items())),
        compute_ms=1e3 * (mid.forward_compute_s + mid.backward_compute_s + mid.recompute_s),
        stream_ms=1e3 * (mid.stream_forward_s + mid.stream_backward_s),
        multicast_ms=1e3 * (mid.multicast_forward_s + mid.multicast_backward_s),
        tp_ms=1e3 * (mid.tp_forward_s + mid.tp_backward_s),
        tp_strided_ms=1e3 * (mid_strided.tp_forward_s + mid_strided.tp_backward_s),
        hand_off_ms=1e3 * (mid.send_s + mid.grad_send_s),
        slowest_hand_off_ms=(
            1e3 * max(c.send_s for c in plan.chunks),
            1e3 * max(c.send_s for c in s_shape.chunks),
        ),
        dram_gb=(mid.stream_bytes_forward + mid.stream_bytes_backward) / 1e9,
        channel_max=max(channels),
        channel_mean=statistics.fmean(channels),
        busy_min_s=min(busy),
        busy_median_s=statistics.median(busy),
        busy_max_s=max(busy),
        busiest=busiest,
        busiest_dram=where,
        busiest_links=busiest_links(hw, link),
    )


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------


def _label(model: str) -> str:
    return model.upper()


def throughput_table(points: Sequence[Point], network: str) -> str:
    mine = [p for p in points if p.network == network]
    by = {(p.model, p.tp, p.dp, p.mapping): p for p in mine}
    head = " | ".join(f"{lay} / {grp}" for lay, grp in MAPPINGS)
    rows = [
        f"| model | TP, DP | {head} | fits memory | best mapping | spread |",
        "|---|---|" + "---|" * len(MAPPINGS) + "---|---|---|",
    ]
    models = list(dict.fromkeys(p.model for p in mine))
    splits = list(dict.fromkeys((p.tp, p.dp) for p in mine))
    for model in models:
        for tp, dp in splits:
            row = [by[(model, tp, dp, m)] for m in MAPPINGS]
            values = [p.throughput for p in row]
            best = MAPPINGS[int(np.argmax(values))]
            spread = (max(values) - min(values)) / min(values)
            cells = " | ".join(f"{v:.4f}" for v in values)
            fits = "yes" if all(p.fits for p in row) else "**no**"
            rows.append(
                f"| {_label(model)} | {tp}, {dp} | {cells} | {fits} | "
                f"{best[0]} / {best[1]} | {100 * spread:.2f}% |"
            )
    return "\n".join(rows)


def best_split_table(points: Sequence[Point]) -> str:
    rows = [
        "| model | network | best (TP, DP), any | best (TP, DP) that fits | paper's best |",
        "|---|---|---|---|---|",
    ]
    paper_best = {"t-18b": "(2, 8)", "t-76b": "(2, 8)", "t-145b": "(4, 4)"}
    for model in dict.fromkeys(p.model for p in points):
        for gran in NETWORKS:
            mine = [p for p in points if p.model == model and p.network == gran]
            top = max(mine, key=lambda p: p.throughput)
            fitting = [p for p in mine if p.fits]
            fit = max(fitting, key=lambda p: p.throughput) if fitting else None
            fit_text = (
                f"({fit.tp}, {fit.dp}) {fit.layout} / {fit.tp_group}: {fit.throughput:.4f}"
                if fit
                else "none"
            )
            rows.append(
                f"| {_label(model)} | {gran} | ({top.tp}, {top.dp}) {top.layout} / "
                f"{top.tp_group}: {top.throughput:.4f} | {fit_text} | "
                f"{paper_best.get(model, '?')} |"
            )
    return "\n".join(rows)


def ordering_table(points: Sequence[Point]) -> str:
    """How often s-shape beats line and compact beats strided (same everything else)."""
    by = {(p.model, p.tp, p.dp, p.mapping, p.network): p.throughput for p in points}
    rows = [
        "| network | comparison | wins | ties (< 0.01%) | losses | median change | range |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(p.model, p.tp, p.dp) for p in points})
    for gran in NETWORKS:
        for name, pairs in (
            (
                "s-shape vs line",
                [(("s-shape", g), ("line", g)) for g in ("compact", "strided")],
            ),
            (
                "compact vs strided (TP = 2, 4, 8)",
                [((lay, "compact"), (lay, "strided")) for lay in ("line", "s-shape")],
            ),
        ):
            changes = []
            for model, tp, dp in keys:
                if "compact" in name and (tp == 1 or dp == 1):
                    continue  # one TP group per stage or TP = 1: the two placements coincide
                for a, b in pairs:
                    x, y = by[(model, tp, dp, a, gran)], by[(model, tp, dp, b, gran)]
                    changes.append((x - y) / y)
            if not changes:
                continue
            wins = sum(c > 1e-4 for c in changes)
            losses = sum(c < -1e-4 for c in changes)
            ties = len(changes) - wins - losses
            rows.append(
                f"| {gran} | {name} | {wins} | {ties} | {losses} | "
                f"{100 * statistics.median(changes):+.2f}% | "
                f"{100 * min(changes):+.2f}% .. {100 * max(changes):+.2f}% |"
            )
    return "\n".join(rows)


def split_table(models: Sequence[str], splits: Sequence[tuple[int, int]]) -> str:
    """Per (TP, DP), line / compact: what a middle stage's core does per sample."""
    rows = [
        "| model | TP, DP | DRAM bytes per core per sample (GB) | DRAM stream / compute, one pass "
        "| TP collectives per micro-batch (ms) | DP all-reduce per iteration (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for model in models:
        for tp, dp in splits:
            plan = build_plan(config(model, tp, dp, "line", "compact"))
            ch = plan.chunks[len(plan.chunks) // 2]
            per_mb = ch.stream_bytes_forward + ch.stream_bytes_backward
            per_sample = per_mb * plan.micro_batches / plan.samples_per_iteration
            stream = ch.stream_forward_s + ch.stream_backward_s
            compute = ch.forward_compute_s + ch.backward_compute_s + ch.recompute_s
            tp_ms = 1e3 * (ch.tp_forward_s + ch.tp_backward_s)
            dp_ms = 1e3 * plan.stages[ch.stage].dp_allreduce_s
            rows.append(
                f"| {_label(model)} | {tp}, {dp} | {per_sample / 1e9:.3f} | "
                f"{stream / compute:.2f} | {tp_ms:.2f} | {dp_ms:.1f} |"
            )
    return "\n".join(rows)


def crosscheck_table(anatomies: Sequence[Anatomy]) -> str:
    f = REFERENCE_DRAM_FACTOR
    head = [
        "model",
        "palm, fair/group (samples/s)",
        "palm, fair/link",
        "palm, exclusive/link",
        'palm, `sram_model = "algorithm1"`',
        "paper",
        "palm / paper",
        "algorithm1 / paper",
        f"diagnostic: DRAM traffic x {f}",
        "diagnostic / paper",
        "diagnostic: s-shape vs line",
        "diagnostic: strided vs compact",
    ]
    rows = (
        [
            _label(a.model),
            f"{a.throughput:.4f}",
            f"{a.throughput_link:.4f}",
            f"{a.throughput_exclusive:.4f}",
            f"{a.throughput_algorithm1:.4f}",
            f"{a.paper:.4f}",
            f"{a.throughput / a.paper:.3f}",
            f"{a.throughput_algorithm1 / a.paper:.3f}",
            f"{a.diagnostic:.4f}",
            f"{a.diagnostic / a.paper:.3f}",
            f"{100 * (a.diagnostic_s_shape / a.diagnostic - 1):+.3f}%",
            f"{100 * (a.diagnostic_strided / a.diagnostic - 1):+.3f}%",
        ]
        for a in anatomies
    )
    return markdown_table(head, rows)


#: the rows of the anatomy table: (label, cell of one model's baseline)
_ANATOMY_ROWS: tuple[tuple[str, Callable[[Anatomy], str]], ...] = (
    ("iteration (s)", lambda a: f"{a.iteration_s:.2f}"),
    ("MFU", lambda a: f"{100 * a.mfu:.1f}%"),
    ("bubble fraction", lambda a: f"{100 * a.bubble:.0f}%"),
    ("SRAM strategies of the operators", lambda a: a.strategies),
    ("middle stage, one micro-batch: compute F+B+recompute (ms)", lambda a: f"{a.compute_ms:.1f}"),
    ("middle stage, one micro-batch: DRAM stream F+B (ms)", lambda a: f"{a.stream_ms:.1f}"),
    ("middle stage, one micro-batch: DRAM bytes per core F+B (GB)", lambda a: f"{a.dram_gb:.2f}"),
    (
        "middle stage, one micro-batch: operand multicast F+B (ms)",
        lambda a: f"{a.multicast_ms:.1f}",
    ),
    (
        "middle stage, one micro-batch: TP collectives compact / strided (ms)",
        lambda a: f"{a.tp_ms:.2f} / {a.tp_strided_ms:.2f}",
    ),
    ("middle stage, one micro-batch: hand-offs F+B (ms)", lambda a: f"{a.hand_off_ms:.2f}"),
    (
        "slowest forward hand-off, line / s-shape (ms)",
        lambda a: f"{a.slowest_hand_off_ms[0]:.3f} / {a.slowest_hand_off_ms[1]:.3f}",
    ),
    (
        "DRAM channel utilisation, max / mean",
        lambda a: f"{100 * a.channel_max:.0f}% / {100 * a.channel_mean:.0f}%",
    ),
    (
        "stage busy time min / median / max (s)",
        lambda a: f"{a.busy_min_s:.1f} / {a.busy_median_s:.1f} / {a.busy_max_s:.1f}",
    ),
    ("busiest stage and its DRAM", lambda a: f"stage {a.busiest}: {a.busiest_dram}"),
    ("busiest mesh links (`fair/link`): busy, bytes", lambda a: a.busiest_links),
)


def anatomy_table(anatomies: Sequence[Anatomy]) -> str:
    head = ["baseline (TP=8, DP=2, line, compact)", *(_label(a.model) for a in anatomies)]
    return markdown_table(
        head, ([name, *(cell(a) for a in anatomies)] for name, cell in _ANATOMY_ROWS)
    )


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------

_COLOURS = ("#1f77b4", "#9ecae1", "#d62728", "#fcae91")


def plot_mapping(points: Sequence[Point], out: Path) -> Path:
    plt = pyplot()
    from matplotlib.patches import Patch

    models = list(dict.fromkeys(p.model for p in points))
    splits = list(dict.fromkeys((p.tp, p.dp) for p in points))
    by = {(p.model, p.tp, p.dp, p.mapping, p.network): p for p in points}
    rows = 1 + len(NETWORKS)
    fig, axes = plt.subplots(
        rows,
        len(models),
        figsize=(max(4.9 * len(models), 10.0), 3.3 * rows),
        dpi=110,
        squeeze=False,
    )
    x = np.arange(len(splits))
    ticks = [f"TP={tp}\nDP={dp}" for tp, dp in splits]
    for col, model in enumerate(models):
        ax = axes[0, col]
        pts = [[by[(model, tp, dp, m, NETWORKS[0])] for tp, dp in splits] for m in MAPPINGS]
        grouped_bars(
            ax,
            x,
            [([p.throughput for p in row], c) for row, c in zip(pts, _COLOURS, strict=True)],
            width=0.2,
            offset=-1.5,
            hatch=lambda k, i, pts=pts: None if pts[k][i].fits else "xxx",
        )
        ax.set_title(f"{_label(model)}: throughput ({NETWORKS[0]}, default)", fontsize=10)
        ax.set_ylabel("samples/s")
        for row, network in enumerate(NETWORKS, start=1):
            ax = axes[row, col]
            change = [
                [
                    100
                    * (
                        by[(model, tp, dp, m, network)].throughput
                        / by[(model, tp, dp, MAPPINGS[0], network)].throughput
                        - 1
                    )
                    for tp, dp in splits
                ]
                for m in MAPPINGS[1:]
            ]
            grouped_bars(
                ax, x, list(zip(change, _COLOURS[1:], strict=True)), width=0.2, offset=-1.0
            )
            ax.axhline(0.0, color="black", linewidth=0.8)
            ax.set_title(f"{_label(model)}: change vs line / compact ({network})", fontsize=10)
            ax.set_ylabel("throughput change [%]")
        for ax in axes[:, col]:
            ax.set_xticks(x, ticks, fontsize=8)
            ax.grid(True, axis="y", alpha=0.3)
    handles = [
        Patch(facecolor=_COLOURS[k], edgecolor="black", label=f"{lay} / {grp}")
        for k, (lay, grp) in enumerate(MAPPINGS)
    ]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="xxx", label="does not fit"))
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - 0.14 / rows),
        ncol=len(handles),
        fontsize=9,
        frameon=False,
    )
    fig.suptitle(
        "wafer-palm, PP=20, 32 micro-batches: layout / TP placement (cf. paper Fig. 10)",
        fontsize=11,
        y=0.99,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.26 / rows))
    return save_figure(fig, out, "wafer_mapping.png")


def plot_crosscheck(anatomies: Sequence[Anatomy], out: Path) -> Path:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.6, 4.6), dpi=120)
    x = np.arange(len(anatomies))
    series = (
        ("palm default (fair/group)", [a.throughput for a in anatomies], "#1f77b4"),
        ("palm, fair/link", [a.throughput_link for a in anatomies], "#9ecae1"),
        ("palm, exclusive/link", [a.throughput_exclusive for a in anatomies], "#c6dbef"),
        ('palm, sram_model="algorithm1"', [a.throughput_algorithm1 for a in anatomies], "#d62728"),
        (
            f"diagnostic: DRAM traffic x {REFERENCE_DRAM_FACTOR}",
            [a.diagnostic for a in anatomies],
            "#bbbbbb",
        ),
        ("paper (its simulator)", [a.paper for a in anatomies], "#ff7f0e"),
    )
    width = 0.8 / len(series)
    containers = grouped_bars(
        ax,
        x,
        [(values, colour) for _, values, colour in series],
        width=width,
        offset=-(len(series) - 1) / 2,
    )
    for bars, (label, values, _) in zip(containers, series, strict=True):
        bars.set_label(label)
        for bar, v in zip(bars, values, strict=True):
            ax.annotate(
                f"{v:.2f}",
                (bar.get_x() + bar.get_width() / 2, v),
                ha="center",
                va="bottom",
                fontsize=6,
                xytext=(0, 1),
                textcoords="offset points",
            )
    ax.set_yscale("log")
    ticks = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(0.08, 14.0)
    ax.set_xticks(x, [_label(a.model) for a in anatomies])
    ax.set_ylabel("samples/s (log)")
    ax.set_title("Baseline TP=8, DP=2, PP=20, line, compact vs the paper (Table VII)", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out, "wafer_crosscheck.png")


# --------------------------------------------------------------------------------------------


def report(points: Sequence[Point], anatomies: Sequence[Anatomy]) -> str:
    models = list(dict.fromkeys(p.model for p in points))
    splits = list(dict.fromkeys((p.tp, p.dp) for p in points))
    return "\n\n".join(
        (
            "Throughput (samples/s), event engine, `fair/group` (palm's default: max-min fair "
            "sharing of each stage's aggregated NoC resources and of the DRAM channels). "
            "**no**: some stage needs more memory than its cores have (simulated all the same).",
            throughput_table(points, "fair/group"),
            "The same with `fair/link` (every mesh link a resource of its own, fair-shared):",
            throughput_table(points, "fair/link"),
            "The same with `exclusive/link` (the paper's model: every mesh link held exclusively "
            "by one flow at a time, first come first served):",
            throughput_table(points, "exclusive/link"),
            "Best parallel split per model:",
            best_split_table(points),
            "What a middle stage's core does, per split (line / compact):",
            split_table(models, splits),
            "Does the paper's ordering hold? One comparison per (model, TP, DP) and the other "
            "mapping choice; change = throughput ratio - 1:",
            ordering_table(points),
            "Cross-check of the baseline against the paper's own simulator (Table VII):",
            crosscheck_table(anatomies),
            "What the baseline spends its time on (event engine, `fair/group` unless noted):",
            anatomy_table(anatomies),
        )
    )


def run(quick: bool, out: Path) -> tuple[str, list[Path]]:
    """The study's tables and its figures in ``out``."""
    models = QUICK_MODELS if quick else MODELS
    splits = QUICK_SPLITS if quick else SPLITS
    points = sweep(models, splits)
    paper = paper_numbers()
    anatomies = [anatomy(m, paper[_label(m)]) for m in models]
    figures = [plot_mapping(points, out), plot_crosscheck(anatomies, out)]
    return report(points, anatomies), figures


main = case_main(
    description=__doc__ or "",
    quick_help="T-18B, two (TP, DP) splits only",
    doc=DOC,
    name=NAME,
    run=run,
)


if __name__ == "__main__":
    sys.exit(main())
