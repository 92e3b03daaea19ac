"""Case study 1 (PALM paper sec. V-A1, Fig. 7): error of the analytical model when tasks
share the NoC and the DRAM channels of a tiled accelerator.

Usage:
    python benchmarks/case_congestion.py [--quick] [--out docs/figures] [--write-docs]

On the ``wafer-palm`` preset (5 x 4 tiles of 4 x 4 cores, 20 x 16 cores) we start ``N`` tasks at
once, ``N = 1 .. 8``, cycling through a ring all-reduce on a tile, an all-to-all on a tile, a DRAM
read by a tile and a DRAM write by a tile, in two scenarios (``SCENARIOS``): on the four
neighbouring tiles of the wafer's top-left corner, and all on its corner tile. A collective
moves a buffer of the task size per member; a DRAM access moves the task size in all, a
sixteenth per core. For each per-task size:

* the *analytical* makespan is the longest of the tasks' uncontended times, each priced by
  palm's closed forms (``collective_time`` over the ``mesh_profile`` of the tile's ring, and
  ``DramAccess.time`` for Eq. 4, 5);
* the *event* makespan runs the same tasks together through the event engine's machinery: a
  collective is one ``Flow`` holding the links of its ring (link granularity) on a ``Fabric``;
  a DRAM access is a fair-shared transfer on a ``DramSystem`` in a SimPy environment plus a hold
  of the mesh links its reads cross, as ``palm.engines.event.engine`` does in link mode.

The error is ``(event - analytical) / event``, as in Fig. 7. Writes the figure
``congestion.png`` into ``--out`` and, with ``--write-docs``, the tables into
``docs/case-studies.md`` between its ``case_congestion`` markers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import simpy

from palm.cost.collectives import bytes_sent_per_member, collective_time
from palm.engines.event.fabric import Fabric, Flow
from palm.engines.event.shared import DramSystem
from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from palm.network.dram import DramAccess, dram_access_per_core
from palm.network.loads import LinkLoad, dram_channel_cores, mesh_profile, ring_order
from palm.workload.ops import Collective

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import ROOT, case_main, pyplot, save_figure  # noqa: E402

DOC = ROOT / "docs" / "case-studies.md"
NAME = "case_congestion"
MB = 1e6

#: per-task sizes: the paper's range of megabytes, and below it, where latencies matter
SIZES_MB: tuple[float, ...] = (0.016, 0.064, 0.256, 1, 2, 4, 8, 16, 32)
QUICK_SIZES_MB: tuple[float, ...] = (0.064, 8)
MAX_TASKS = 8
QUICK_MAX_TASKS = 4

#: The order in which the task kinds join, cycling.
KINDS: tuple[str, ...] = ("all-reduce", "all-to-all", "dram-read", "dram-write")

#: Where task ``k`` runs, per scenario. "neighbouring tiles": the 2 x 2 block of tiles in the
#: wafer's top-left corner, as four neighbouring pipeline stages would hold it; the corner tile
#: (0, 0) and the edge tiles (0, 1), (1, 0) sit next to DRAM channels, the inner tile (1, 1)
#: reaches DRAM through their links and shares their channels. "one tile": every task on the
#: corner tile (0, 0), the most overlap one tile group can have (a stage running its
#: collectives while it streams weights in and gradients out).
SCENARIOS: dict[str, tuple[tuple[int, int], ...]] = {
    "neighbouring tiles": ((0, 0), (0, 1), (1, 1), (1, 0), (1, 1), (1, 0), (0, 0), (0, 1)),
    "one tile": ((0, 0),) * 8,
}


def scenario_tasks(scenario: str, n: int) -> list[tuple[str, tuple[int, int]]]:
    """The first ``n`` (kind, tile) pairs of ``scenario``."""
    tiles = SCENARIOS[scenario]
    return [(KINDS[k % len(KINDS)], tiles[k]) for k in range(n)]


@dataclass(frozen=True)
class Task:
    """One task: its uncontended (closed-form) time and what it holds when run with others."""

    label: str
    alone_s: float
    links: Flow  # mesh links held (whole collective, or the NoC part of a DRAM access)
    hold_s: float  # how long ``links`` are held
    sent_bytes: float  # bytes per unit load, for the fabric's accounting
    dram: DramAccess | None = None
    bytes_per_core: float = 0.0


def tile_cores(hw: Mesh2DHardware, tile: tuple[int, int]) -> np.ndarray:
    """Core coordinates of ``tile``, row by row."""
    cr, cc = hw.cores_per_tile
    return np.array(
        [(tile[0] * cr + r, tile[1] * cc + c) for r in range(cr) for c in range(cc)],
        dtype=np.int64,
    )


def _flow(fabric: Fabric, links: LinkLoad | None, kind: str) -> Flow:
    if links is None:
        return Flow((), (), kind)
    keys: dict[int, float] = {}
    for i, x in zip(links.ids.tolist(), links.loads.tolist(), strict=True):
        keys[int(i)] = keys.get(int(i), 0.0) + float(x)
    items = sorted(keys.items())
    res = tuple(fabric.resource(("link", i), "link") for i, _ in items)
    return Flow(res, tuple(x for _, x in items), kind)


def make_task(
    hw: Mesh2DHardware, fabric: Fabric, kind: str, tile: tuple[int, int], nbytes: float
) -> Task:
    """A collective with a buffer of ``nbytes`` per member, or a DRAM access of ``nbytes`` in
    all (``nbytes / 16`` per core)."""
    cores = tile_cores(hw, tile)
    label = f"{kind} {tile}"
    if kind in ("all-reduce", "all-to-all"):
        ring = ring_order(cores)
        step = mesh_profile(hw, ring, np.roll(ring, -1, axis=0), with_links=True)
        coll = Collective(kind, nbytes)  # type: ignore[arg-type]
        t = collective_time(coll, n=len(ring), step=step)
        sent = bytes_sent_per_member(coll, n=len(ring))
        return Task(label, t, _flow(fabric, step.links, kind), t, sent)
    access = dram_access_per_core(
        hw, cores, dram_channel_cores(hw), with_links=True, write=kind == "dram-write"
    )
    per_core = nbytes / len(cores)
    return Task(
        label,
        access.time(per_core),
        _flow(fabric, access.noc.links, "dram-noc"),
        per_core / access.noc.bandwidth_Bps,
        per_core,
        dram=access,
        bytes_per_core=per_core,
    )


def run_together(hw: Mesh2DHardware, fabric: Fabric, tasks: Sequence[Task]) -> list[float]:
    """End time of every task when all start at t = 0 (first come, first served in task
    order on the links; DRAM channels fair-shared), as the event engine runs its flows."""
    env = simpy.Environment()
    channel_bw = hw.dram_channel_bandwidth_gbps * 1e9 * hw.memory_efficiency
    patterns = [
        (t.dram.channels, t.dram.cores_per_channel) if t.dram is not None else ((), ())
        for t in tasks
    ]
    dram = DramSystem(env, [channel_bw] * hw.dram_channels, patterns)
    ends = [0.0] * len(tasks)
    pending: list[tuple[int, simpy.Event]] = []
    for i, task in enumerate(tasks):
        link_end = 0.0
        if task.links.resources and task.hold_s > 0:
            link_end = fabric.reserve(task.links, 0.0, task.hold_s, task.sent_bytes)
        ends[i] = link_end
        if task.dram is not None:
            access = task.dram
            event = dram.read(
                task.bytes_per_core,
                pattern=i,
                noc_bandwidth_Bps=access.noc.bandwidth_Bps,
                latency_s=access.response_s + access.noc.latency_s,
            )
            pending.append((i, event))

    def watch(i: int, event: simpy.Event) -> simpy.events.ProcessGenerator:
        yield event
        ends[i] = max(ends[i], float(env.now))

    for i, event in pending:
        env.process(watch(i, event))
    env.run()
    return ends


@dataclass(frozen=True)
class Point:
    scenario: str
    tasks: int
    size_mb: float
    analytical_s: float
    event_s: float
    slowest: str

    @property
    def error(self) -> float:
        return (self.event_s - self.analytical_s) / self.event_s


def size_label(size_mb: float) -> str:
    return f"{size_mb * 1000:g} KB" if size_mb < 1 else f"{size_mb:g} MB"


def wafer() -> Mesh2DHardware:
    hw = HARDWARE_PRESETS["wafer-palm"]
    assert isinstance(hw, Mesh2DHardware)
    return hw


def study(sizes_mb: Sequence[float] = SIZES_MB, max_tasks: int = MAX_TASKS) -> list[Point]:
    """Every (scenario, number of tasks, size) point of the study."""
    hw = wafer()
    points = []
    for scenario in SCENARIOS:
        for size in sizes_mb:
            for n in range(1, max_tasks + 1):
                fabric = Fabric()
                tasks = [
                    make_task(hw, fabric, k, t, size * MB) for k, t in scenario_tasks(scenario, n)
                ]
                ends = run_together(hw, fabric, tasks)
                slowest = tasks[int(np.argmax(ends))].label
                analytical = max(t.alone_s for t in tasks)
                points.append(Point(scenario, n, size, analytical, max(ends), slowest))
    return points


def alone_table(size_mb: float, max_tasks: int) -> str:
    """Where each task runs and its uncontended time at ``size_mb`` (what the analytical
    model sees), per scenario."""
    hw = wafer()
    channels_at = dram_channel_cores(hw).tolist()
    rows = [
        "| scenario | task | kind | tile | DRAM channels (router: cores) | mesh links held "
        f"| alone at {size_label(size_mb)} (us) |",
        "|---|---|---|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        for k, (kind, tile) in enumerate(scenario_tasks(scenario, max_tasks), start=1):
            task = make_task(hw, Fabric(), kind, tile, size_mb * MB)
            channels = "-"
            if task.dram is not None:
                channels = ", ".join(
                    f"{tuple(channels_at[c])}: {n}"
                    for c, n in zip(task.dram.channels, task.dram.cores_per_channel, strict=True)
                )
            rows.append(
                f"| {scenario} | {k} | {kind} | {tile} | {channels} | "
                f"{len(task.links.resources)} | {task.alone_s * 1e6:.1f} |"
            )
    return "\n".join(rows)


def error_table(points: Sequence[Point], scenario: str) -> str:
    mine = [p for p in points if p.scenario == scenario]
    sizes = sorted({p.size_mb for p in mine})
    tasks = sorted({p.tasks for p in mine})
    by = {(p.tasks, p.size_mb): p for p in mine}
    head = "| tasks | " + " | ".join(size_label(s) for s in sizes) + " | last to finish |"
    rows = [head, "|" + "---|" * (len(sizes) + 2)]
    for n in tasks:
        cells = " | ".join(f"{100 * by[(n, s)].error:.1f}%" for s in sizes)
        rows.append(f"| {n} | {cells} | {by[(n, sizes[-1])].slowest} |")
    return "\n".join(rows)


def plot(points: Sequence[Point], out: Path) -> Path:
    plt = pyplot()

    scenarios = [s for s in SCENARIOS if any(p.scenario == s for p in points)]
    sizes = sorted({p.size_mb for p in points})
    fig, axes = plt.subplots(
        1, len(scenarios), figsize=(5.2 * len(scenarios), 4.2), dpi=120, sharey=True
    )
    markers = "osD^v<>p"
    top = max(100 * p.error for p in points)
    for ax, scenario, letter in zip(np.atleast_1d(axes), scenarios, "abcd", strict=False):
        for k, size in enumerate(sizes):
            pts = sorted(
                (p for p in points if p.size_mb == size and p.scenario == scenario),
                key=lambda p: p.tasks,
            )
            ax.plot(
                [p.tasks for p in pts],
                [100 * p.error for p in pts],
                marker=markers[k % len(markers)],
                label=size_label(size),
                color=plt.cm.viridis(k / max(1, len(sizes) - 1)),
                linewidth=1.3,
                markersize=4.5,
                alpha=0.85,
            )
        ax.set_title(f"({letter}) {scenario}", fontsize=10)
        ax.set_xlabel("tasks started together")
        ax.set_xticks(sorted({p.tasks for p in points}))
        ax.set_ylim(-2, max(10.0, top * 1.12))
        ax.grid(True, alpha=0.3)
    for ax in np.atleast_1d(axes):
        ax.text(
            0.98,
            0.03,
            "sizes >= 1 MB overlap:\nlatencies (2-100 ns) are negligible there",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=7.5,
            color="0.35",
        )
    first = np.atleast_1d(axes)[0]
    first.set_ylabel("(event - analytical) / event  [%]")
    first.legend(title="size per task", fontsize=8, title_fontsize=8, loc="upper left")
    fig.suptitle(
        "Congestion error of the closed forms on wafer-palm (cf. paper Fig. 7)", fontsize=11
    )
    fig.tight_layout()
    return save_figure(fig, out, "congestion.png")


def report(points: Sequence[Point], sizes_mb: Sequence[float], max_tasks: int) -> str:
    parts = []
    for letter, scenario in zip("abcd", SCENARIOS, strict=False):
        parts.append(
            f"({letter}) {scenario}: error of the analytical makespan, "
            f"`(event - analytical) / event`\n\n" + error_table(points, scenario)
        )
    parts.append("The tasks, in the order they join:\n\n" + alone_table(max(sizes_mb), max_tasks))
    return "\n\n".join(parts)


def run(quick: bool, out: Path) -> tuple[str, list[Path]]:
    """The study's tables and its figure in ``out``."""
    sizes = QUICK_SIZES_MB if quick else SIZES_MB
    max_tasks = QUICK_MAX_TASKS if quick else MAX_TASKS
    points = study(sizes, max_tasks)
    return report(points, sizes, max_tasks), [plot(points, out)]


main = case_main(
    description=__doc__ or "", quick_help="two sizes, up to four tasks", doc=DOC, name=NAME, run=run
)


if __name__ == "__main__":
    sys.exit(main())
