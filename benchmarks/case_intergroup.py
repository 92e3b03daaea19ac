"""Case study 3 (PALM paper sec. V-C, Fig. 11, 12, Eq. 7, 8): handing an activation from one
tile group to the next, by all-reduce + broadcast or by reduce to adapters.

Usage:
    python benchmarks/case_intergroup.py [--quick] [--out docs/figures] [--write-docs]

A BERT-base activation (micro-batch 8, sequence 128, hidden 768, 2-byte elements: 1.57 MB),
held as partial sums by every member of a source group, is handed to a destination group on a
mesh of single-core tiles whose links all run at 256 GB/s per direction with 10 ns per hop
(``wafer-palm``'s inter-tile link; with one core per tile every link is an inter-tile link).
The groups sit side by side on a 4 x 8 mesh:

* (a) ring-shaped: two 3 x 4 rectangles of 12 tiles, where ``ring_order`` finds a Hamiltonian
  cycle of one-hop edges;
* (b) non-ring: the same rectangles plus one tile below their outer corners (13 tiles), in
  snake order, the order palm's placement visits cores, closed by a multi-hop edge.

For 1 .. 12 adapters, ``palm.network.intergroup.hand_off`` prices strategy 1
(``allreduce-broadcast``, Eq. 7) and strategy 2 (``reduce-adapters``, Eq. 8) with
``partial=True``. Writes ``intergroup.png`` into ``--out`` and, with ``--write-docs``, the
tables into ``docs/case-studies.md`` between its ``case_intergroup`` markers.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from palm.network.intergroup import HandOff, choose_adapters, hand_off
from palm.network.loads import mesh_profile, ring_order

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import ROOT, case_main, pyplot, save_figure  # noqa: E402

DOC = ROOT / "docs" / "case-studies.md"
NAME = "case_intergroup"

MICRO_BATCH, SEQUENCE, HIDDEN, ELEMENT_BYTES = 8, 128, 768, 2
LINK_GBPS, HOP_NS = 256.0, 10.0
FAST_LINK_GBPS, FAST_HOP_NS = 1024.0, 2.0  # wafer-palm's intra-tile link, for comparison
MESH = (4, 8)
STRATEGIES: tuple[str, ...] = ("allreduce-broadcast", "reduce-adapters")
SHORT = {"allreduce-broadcast": "S1", "reduce-adapters": "S2"}
ADAPTERS = tuple(range(1, 13))
QUICK_ADAPTERS = (1, 2, 4, 12)
#: activation sizes of the size sweep (bytes), 1 KB .. 10 MB
SIZES: tuple[float, ...] = tuple(float(x) for x in np.logspace(3, 7, 17))
QUICK_SIZES: tuple[float, ...] = (1e3, 3e4, 1e6)
PARTS = ("reduce_s", "transfer_s", "adapters_allreduce_s", "broadcast_s")
PART_LABELS = {
    "reduce_s": "source all-reduce (S1) / reduce to adapters (S2)",
    "transfer_s": "transfer between adapters",
    "adapters_allreduce_s": "all-reduce among destination adapters",
    "broadcast_s": "broadcast in the destination",
}


def activation_bytes(micro_batch: int = MICRO_BATCH, sequence: int = SEQUENCE) -> float:
    return float(micro_batch * sequence * HIDDEN * ELEMENT_BYTES)


def single_core_mesh(link_gbps: float = LINK_GBPS, hop_ns: float = HOP_NS) -> Mesh2DHardware:
    """``wafer-palm`` cut into single-core tiles on a ``MESH`` grid, every link at
    ``link_gbps`` and ``hop_ns``. (DRAM and compute fields are not used here.)"""
    base = HARDWARE_PRESETS["wafer-palm"]
    assert isinstance(base, Mesh2DHardware)
    return dataclasses.replace(
        base,
        name="single-core-tiles",
        tiles=MESH,
        cores_per_tile=(1, 1),
        intra_tile_link_gbps=link_gbps,
        inter_tile_link_gbps=link_gbps,
        intra_tile_link_latency_ns=hop_ns,
        inter_tile_link_latency_ns=hop_ns,
        dram_channels=4,
    )


def snake(r0: int, c0: int, rows: int, cols: int) -> np.ndarray:
    """A ``rows x cols`` rectangle from ``(r0, c0)`` in snake order."""
    out: list[tuple[int, int]] = []
    for r in range(rows):
        span = range(cols) if r % 2 == 0 else range(cols - 1, -1, -1)
        out.extend((r0 + r, c0 + c) for c in span)
    return np.asarray(out, dtype=np.int64)


def groups(shape: str) -> tuple[np.ndarray, np.ndarray]:
    """Source and destination members, ``(n, 2)`` each."""
    src, dst = snake(0, 0, 3, 4), snake(0, 4, 3, 4)
    if shape == "ring-shaped (12 tiles)":
        return src, dst
    return np.vstack([src, [(3, 0)]]), np.vstack([dst, [(3, 7)]])


SHAPES: tuple[str, ...] = ("ring-shaped (12 tiles)", "non-ring (13 tiles)")


@dataclass(frozen=True)
class Point:
    shape: str
    strategy: str
    adapters: int
    parts: HandOff

    @property
    def total_s(self) -> float:
        return self.parts.total_s


def study(
    adapters: Sequence[int] = ADAPTERS,
    *,
    nbytes: float | None = None,
    hw: Mesh2DHardware | None = None,
) -> list[Point]:
    hw = hw or single_core_mesh()
    nbytes = activation_bytes() if nbytes is None else nbytes
    points = []
    for shape in SHAPES:
        src, dst = groups(shape)
        for strategy in STRATEGIES:
            for a in adapters:
                h = hand_off(
                    hw,
                    src=src[None],
                    dst=dst[None],
                    nbytes=nbytes,
                    strategy=strategy,
                    adapters=a,
                    partial=True,
                )
                points.append(Point(shape, strategy, a, h))
    return points


def ring_closed_form(n: int, nbytes: float, link_gbps: float = LINK_GBPS) -> float:
    """``2 (n-1)/n B/bw + 2 (n-1) lat`` on one-hop links (sec. 3 of docs/model.md)."""
    return 2 * (n - 1) / n * nbytes / (link_gbps * 1e9) + 2 * (n - 1) * HOP_NS * 1e-9


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------


def _us(x: float) -> str:
    return f"{x * 1e6:.2f}"


def parts_table(points: Sequence[Point], shape: str) -> str:
    by = {(p.strategy, p.adapters): p for p in points if p.shape == shape}
    adapters = sorted({a for _, a in by})
    rows = [
        "| adapters | S1 total | S1 source AR | S1 transfer | S1 broadcast "
        "| S2 total | S2 reduce | S2 transfer | S2 adapters AR | S2 broadcast | S2 / S1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in adapters:
        s1, s2 = by[("allreduce-broadcast", a)], by[("reduce-adapters", a)]
        h1, h2 = s1.parts, s2.parts
        rows.append(
            f"| {a} | **{_us(h1.total_s)}** | {_us(h1.reduce_s)} | {_us(h1.transfer_s)} | "
            f"{_us(h1.broadcast_s)} | **{_us(h2.total_s)}** | {_us(h2.reduce_s)} | "
            f"{_us(h2.transfer_s)} | {_us(h2.adapters_allreduce_s)} | {_us(h2.broadcast_s)} | "
            f"{h2.total_s / h1.total_s:.2f} |"
        )
    return "\n".join(rows)


def summary(points: Sequence[Point]) -> dict[str, tuple[Point, Point]]:
    """Best point of each strategy, per shape."""
    out = {}
    for shape in SHAPES:
        best = [
            min(
                (p for p in points if p.shape == shape and p.strategy == s),
                key=lambda p: p.total_s,
            )
            for s in STRATEGIES
        ]
        out[shape] = (best[0], best[1])
    return out


def summary_table(points: Sequence[Point]) -> str:
    paper = {
        SHAPES[0]: "S1 better, 3.08x; S1 improves with adapters",
        SHAPES[1]: "S2 better, ~1.23x; S2 improves, then declines",
    }
    rows = [
        "| group | best S1 (us, adapters) | best S2 (us, adapters) | better | gap "
        "| S1 at 1 -> 12 adapters | paper |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape, (s1, s2) in summary(points).items():
        better, gap = (
            ("S1", s2.total_s / s1.total_s)
            if s1.total_s <= s2.total_s
            else (
                "S2",
                s1.total_s / s2.total_s,
            )
        )
        mine = sorted(
            (p for p in points if p.shape == shape and p.strategy == STRATEGIES[0]),
            key=lambda p: p.adapters,
        )
        rows.append(
            f"| {shape} | {_us(s1.total_s)} ({s1.adapters}) | {_us(s2.total_s)} "
            f"({s2.adapters}) | {better} | {gap:.2f}x | {_us(mine[0].total_s)} -> "
            f"{_us(mine[-1].total_s)} | {paper[shape]} |"
        )
    return "\n".join(rows)


@dataclass(frozen=True)
class SizePoint:
    nbytes: float
    link_gbps: float
    hop_ns: float
    best: dict[str, tuple[Point, Point]]

    def ratio(self, shape: str) -> float:
        """Best strategy-2 time over best strategy-1 time (< 1: strategy 2 is better)."""
        s1, s2 = self.best[shape]
        return s2.total_s / s1.total_s


def size_sweep(
    sizes: Sequence[float],
    adapters: Sequence[int],
    link_gbps: float = LINK_GBPS,
    hop_ns: float = HOP_NS,
) -> list[SizePoint]:
    """The best of each strategy over ``adapters``, for activations of ``sizes`` bytes."""
    hw = single_core_mesh(link_gbps, hop_ns)
    return [
        SizePoint(n, link_gbps, hop_ns, summary(study(adapters, nbytes=n, hw=hw))) for n in sizes
    ]


def _size(nbytes: float) -> str:
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.2f} MB"
    return f"{nbytes / 1e3:.1f} KB"


def size_table(points: Sequence[SizePoint]) -> str:
    rows = [
        "| activation | links | ring-shaped: best S2 / best S1 (adapters S1, S2) "
        "| non-ring: best S2 / best S1 (adapters S1, S2) | paper's regime? |",
        "|---|---|---|---|---|",
    ]
    for sp in points:
        cells = []
        for shape in SHAPES:
            s1, s2 = sp.best[shape]
            cells.append(f"{sp.ratio(shape):.2f} ({s1.adapters}, {s2.adapters})")
        regime = "yes" if sp.ratio(SHAPES[0]) > 1 and sp.ratio(SHAPES[1]) < 1 else "no"
        rows.append(
            f"| {_size(sp.nbytes)} | {sp.link_gbps:g} GB/s, {sp.hop_ns:g} ns | "
            + " | ".join(cells)
            + f" | {regime} |"
        )
    return "\n".join(rows)


def ring_table() -> str:
    """The source group's all-reduce ring and its cost, per shape."""
    hw = single_core_mesh()
    nbytes = activation_bytes()
    rows = [
        "| group | ring order (source) | longest ring edge (hops) | ring step bandwidth (GB/s) "
        "| ring step latency (ns) | S1 source all-reduce (us) "
        "| closed form, one-hop ring of n (us) |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape in SHAPES:
        src, dst = groups(shape)
        ring = ring_order(src)
        hops = np.abs(np.roll(ring, -1, axis=0) - ring).sum(axis=1).max()
        step = mesh_profile(hw, ring, np.roll(ring, -1, axis=0))
        h = hand_off(
            hw,
            src=src[None],
            dst=dst[None],
            nbytes=nbytes,
            strategy="allreduce-broadcast",
            adapters=1,
            partial=True,
        )
        order = " ".join(f"({r},{c})" for r, c in ring.tolist())
        rows.append(
            f"| {shape} | {order} | {int(hops)} | {step.bandwidth_Bps / 1e9:.0f} | "
            f"{step.latency_s * 1e9:.0f} | {_us(h.reduce_s)} | "
            f"{_us(ring_closed_form(len(src), nbytes))} |"
        )
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------
# figure
# --------------------------------------------------------------------------------------------

_PART_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52")


def plot(points: Sequence[Point], out: Path) -> Path:
    plt = pyplot()
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(
        2, 3, figsize=(16.0, 8.4), dpi=110, gridspec_kw={"width_ratios": [1.0, 1.2, 1.6]}
    )
    adapters = sorted({p.adapters for p in points})
    for row, shape in enumerate(SHAPES):
        src, dst = groups(shape)
        # geometry: the groups, the source ring and the adapters of the best S2 point
        ax = axes[row, 0]
        ax.set_title(f"({'ab'[row]}) {shape}", fontsize=10)
        ring = ring_order(src)
        closed = np.vstack([ring, ring[:1]])
        ax.plot(
            closed[:, 1],
            closed[:, 0],
            "-",
            color="#4c72b0",
            linewidth=1.0,
            zorder=1,
            label="source ring order",
        )
        ax.scatter(src[:, 1], src[:, 0], s=260, marker="s", color="#a1c9f4", label="source")
        ax.scatter(dst[:, 1], dst[:, 0], s=260, marker="s", color="#ffb482", label="destination")
        shown = 3
        picks_s = src[choose_adapters(src, dst, shown)]
        picks_d = dst[choose_adapters(dst, src, shown)]
        ax.scatter(
            np.concatenate([picks_s[:, 1], picks_d[:, 1]]),
            np.concatenate([picks_s[:, 0], picks_d[:, 0]]),
            s=40,
            marker="o",
            color="black",
            label=f"adapters when {shown}",
            zorder=3,
        )
        ax.set_xlim(-0.7, MESH[1] - 0.3)
        ax.set_ylim(MESH[0] - 0.3, -0.7)
        ax.set_aspect("equal")
        ax.set_xticks(range(MESH[1]))
        ax.set_yticks(range(MESH[0]))
        ax.tick_params(labelsize=7)
        ax.legend(
            fontsize=7,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.1),
            ncol=2,
            markerscale=0.5,
            frameon=False,
        )
        # totals
        ax = axes[row, 1]
        for strategy, marker in zip(STRATEGIES, "os", strict=True):
            pts = sorted(
                (p for p in points if p.shape == shape and p.strategy == strategy),
                key=lambda p: p.adapters,
            )
            ax.plot(
                [p.adapters for p in pts],
                [p.total_s * 1e6 for p in pts],
                marker=marker,
                label=f"{SHORT[strategy]}: {strategy}",
            )
        ax.set_title("total hand-off time", fontsize=10)
        ax.set_xlabel("adapters")
        ax.set_ylabel("time (us)")
        ax.set_xticks(adapters)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        # parts, stacked: S1 left, S2 right of each adapter count
        ax = axes[row, 2]
        x = np.arange(len(adapters))
        width = 0.38
        for k, strategy in enumerate(STRATEGIES):
            by = {p.adapters: p for p in points if p.shape == shape and p.strategy == strategy}
            bottom = np.zeros(len(adapters))
            for part, colour in zip(PARTS, _PART_COLOURS, strict=True):
                values = np.array([getattr(by[a].parts, part) * 1e6 for a in adapters])
                ax.bar(
                    x + (k - 0.5) * width,
                    values,
                    width,
                    bottom=bottom,
                    color=colour,
                    edgecolor="black",
                    linewidth=0.3,
                    hatch="//" if k else None,
                )
                bottom += values
        ax.set_xticks(x, [str(a) for a in adapters])
        ax.set_xlabel("adapters (left bar S1, hatched right bar S2)")
        ax.set_ylabel("time (us)")
        ax.set_title("parts (Eq. 7 and 8)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        if row == 0:
            handles = [
                Patch(facecolor=c, edgecolor="black", label=PART_LABELS[p])
                for p, c in zip(PARTS, _PART_COLOURS, strict=True)
            ]
            ax.legend(handles=handles, fontsize=7.5, loc="upper right")
    nbytes = activation_bytes()
    fig.suptitle(
        f"Inter-group hand-off of a BERT-base activation ({nbytes / 1e6:.2f} MB) on single-core "
        f"tiles, {LINK_GBPS:g} GB/s and {HOP_NS:g} ns per link (cf. paper Fig. 12)",
        fontsize=11,
    )
    fig.tight_layout()
    return save_figure(fig, out, "intergroup.png")


# --------------------------------------------------------------------------------------------


def plot_sizes(sweeps: Sequence[SizePoint], out: Path) -> Path:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.6, 5.0), dpi=120)
    links = list(dict.fromkeys((sp.link_gbps, sp.hop_ns) for sp in sweeps))
    styles = ("-", "--")
    for (gbps, ns), style in zip(links, styles, strict=False):
        mine = [sp for sp in sweeps if (sp.link_gbps, sp.hop_ns) == (gbps, ns)]
        for shape, colour, marker in zip(SHAPES, ("#4c72b0", "#c44e52"), "os", strict=True):
            ax.plot(
                [sp.nbytes for sp in mine],
                [sp.ratio(shape) for sp in mine],
                style,
                marker=marker,
                markersize=4,
                color=colour,
                label=f"{shape}, {gbps:g} GB/s, {ns:g} ns",
            )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(3.08, color="#4c72b0", linewidth=0.8, linestyle=":")
    ax.axhline(1 / 1.23, color="#c44e52", linewidth=0.8, linestyle=":")
    ax.text(
        1.1e3, 3.08 * 1.04, "paper, ring-shaped: S1 3.08x better", fontsize=7.5, color="#4c72b0"
    )
    ax.text(1.1e3, 0.813 * 1.04, "paper, non-ring: S2 1.23x better", fontsize=7.5, color="#c44e52")
    for nbytes, label in (
        (activation_bytes(1, 128), "BERT b=1, s=128"),
        (activation_bytes(), "b=8, s=128 (Fig. a, b)"),
        (activation_bytes(8, 512), "b=8, s=512"),
    ):
        ax.axvline(nbytes, color="0.6", linewidth=0.8, linestyle="--")
        ax.text(nbytes * 1.06, 0.11, label, rotation=90, fontsize=7, color="0.35", va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = (0.1, 0.2, 0.5, 1.0, 2.0, 3.0)
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(0.1, 4.0)
    ax.set_xlabel("activation handed off (bytes)")
    ax.set_ylabel("best S2 time / best S1 time")
    ax.set_title("Which strategy wins, by activation size (below 1: S2 better)", fontsize=10)
    ax.grid(True, alpha=0.3)
    main = [sp for sp in sweeps if (sp.link_gbps, sp.hop_ns) == links[0]]
    agree = [sp.nbytes for sp in main if sp.ratio(SHAPES[0]) > 1 > sp.ratio(SHAPES[1])]
    if agree:
        ax.axvspan(min(agree), max(agree), color="#55a868", alpha=0.12, linewidth=0)
        ax.text(
            (min(agree) * max(agree)) ** 0.5,
            0.125,
            "paper's ordering\nholds here",
            ha="center",
            va="center",
            fontsize=7.5,
            color="#2d6a3e",
        )
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.tight_layout()
    return save_figure(fig, out, "intergroup_size.png")


def report(points: Sequence[Point], sweeps: Sequence[SizePoint], fast: Sequence[SizePoint]) -> str:
    parts = [
        "Summary (times in microseconds):",
        summary_table(points),
        "The source group's ring (strategy 1's all-reduce, one adapter):",
        ring_table(),
    ]
    for letter, shape in zip("ab", SHAPES, strict=True):
        parts.append(f"({letter}) {shape}: parts of each strategy (us)")
        parts.append(parts_table(points, shape))
    parts.append(
        "Other activation sizes (best of each strategy over the adapter counts; "
        "S2 / S1 < 1: strategy 2 is better):"
    )
    parts.append(size_table([*sweeps, *fast]))
    return "\n\n".join(parts)


def run(quick: bool, out: Path) -> tuple[str, list[Path]]:
    """The study's tables and its figures in ``out``."""
    adapters = QUICK_ADAPTERS if quick else ADAPTERS
    sizes = QUICK_SIZES if quick else SIZES
    points = study(adapters)
    sweeps = size_sweep(sizes, adapters)
    fast = size_sweep(sizes[:: max(1, len(sizes) // 4)], adapters, FAST_LINK_GBPS, FAST_HOP_NS)
    figures = [plot(points, out), plot_sizes([*sweeps, *fast], out)]
    return report(points, sweeps, fast), figures


main = case_main(
    description=__doc__ or "", quick_help="four adapter counts only", doc=DOC, name=NAME, run=run
)


if __name__ == "__main__":
    sys.exit(main())
