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
* the *event* makespan runs the same tasks together through the event engine's machinery,
  in each of two settings (``SETTINGS``): the paper's model (a collective is one ``Flow``
  holding the links of its ring on a ``Fabric``, first come first served; a DRAM access from
  each core's nearest channel is a fair-shared transfer on a ``DramSystem`` plus a hold of the
  mesh links its reads cross: ``noc_model = "exclusive"``, link granularity), and palm's default
  (every task one flow with a max-min fair share of each link and channel it loads, on a
  ``FairNetwork``; DRAM data interleaved over every channel: ``noc_model = "fair"``,
  ``dram_placement = "interleaved"``).

The error is ``(event - analytical) / event``, as in Fig. 7. Writes the figure
``congestion.png`` into ``--out`` and, with ``--write-docs``, the tables into
``docs/case-studies.md`` between its ``case_congestion`` markers.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import simpy

from palm.cost.collectives import bytes_sent_per_member, collective_time
from palm.engines.event.dram_system import DramSystem
from palm.engines.event.fabric import Fabric, Flow
from palm.engines.event.fair import FairNetwork, FlowEnvironment
from palm.engines.event.shared import Arrival
from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from palm.network.dram import (
    DramAccess,
    dram_access_per_core,
    interleaved_access_per_core,
)
from palm.network.loads import (
    EAST,
    WEST,
    LinkLoad,
    dram_channel_cores,
    link_bandwidth_Bps,
    mesh_profile,
    ring_order,
)
from palm.workload.ops import Collective

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import ROOT, case_main, markdown_table, pyplot, save_figure  # noqa: E402

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
class Setting:
    """How the event engine shares the network, and where a tile's DRAM data lives."""

    name: str
    noc_model: str  # "exclusive" (paper sec. IV-C) or "fair" (palm's default)
    dram_placement: str  # "nearest" (each core its nearest channel) or "interleaved"


#: the paper's model, and palm's default (docs/model.md sec. 6-7)
SETTINGS: tuple[Setting, ...] = (
    Setting("paper: exclusive links, nearest channel", "exclusive", "nearest"),
    Setting("palm default: fair sharing, interleaved DRAM", "fair", "interleaved"),
)


@dataclass(frozen=True)
class Task:
    """One task: its uncontended (closed-form) time and the links (id: bytes per byte a
    transfer moves) and DRAM channels it loads when run with others."""

    label: str
    alone_s: float
    links: dict[int, float]  # whole collective, or the NoC part of a DRAM access
    hold_s: float  # how long the exclusive model holds ``links``
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


def _loads(links: LinkLoad | None) -> dict[int, float]:
    """Load per link id (repeated ids summed)."""
    out: dict[int, float] = {}
    if links is not None:
        for i, x in zip(links.ids.tolist(), links.loads.tolist(), strict=True):
            out[int(i)] = out.get(int(i), 0.0) + float(x)
    return dict(sorted(out.items()))


def dram_access(hw: Mesh2DHardware, cores: np.ndarray, *, write: bool) -> DramAccess:
    """The tile's access under the hardware's ``dram_placement``, with every link's load."""
    channels_at = dram_channel_cores(hw)
    if hw.dram_placement == "nearest":
        return dram_access_per_core(hw, cores, channels_at, with_links=True, write=write)
    return interleaved_access_per_core(hw, cores, channels_at, with_links=True, write=write)


def make_task(hw: Mesh2DHardware, kind: str, tile: tuple[int, int], nbytes: float) -> Task:
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
        return Task(label, t, _loads(step.links), t, sent)
    access = dram_access(hw, cores, write=kind == "dram-write")
    per_core = nbytes / len(cores)
    return Task(
        label,
        access.time(per_core),
        _loads(access.noc.links),
        per_core / access.noc.bandwidth_Bps,
        per_core,
        dram=access,
        bytes_per_core=per_core,
    )


def _channel_Bps(hw: Mesh2DHardware) -> float:
    return hw.dram_channel_bandwidth_gbps * 1e9 * hw.memory_efficiency


def run_exclusive(hw: Mesh2DHardware, tasks: Sequence[Task]) -> list[float]:
    """End time of every task when all start at t = 0 under the paper's model: every link
    held exclusively, first come first served in task order; DRAM channels fair-shared
    (``communication.noc_model = "exclusive"``, link granularity)."""
    env = simpy.Environment()
    fabric = Fabric()
    patterns = [
        (t.dram.channels, t.dram.cores_per_channel) if t.dram is not None else ((), ())
        for t in tasks
    ]
    dram = DramSystem(env, [_channel_Bps(hw)] * hw.dram_channels, patterns)
    ends = [0.0] * len(tasks)
    pending: list[tuple[int, simpy.Event]] = []
    for i, task in enumerate(tasks):
        flow = Flow(
            tuple(fabric.resource(("link", r), "link") for r in task.links),
            tuple(task.links.values()),
            "task",
        )
        if flow.resources and task.hold_s > 0:
            ends[i] = fabric.reserve(flow, 0.0, task.hold_s, task.sent_bytes)
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


def link_Bps(hw: Mesh2DHardware, link: int) -> float:
    """Bandwidth of mesh link ``link`` (id ``(row * cols + col) * 4 + direction``)."""
    node, direction = divmod(link, 4)
    r, c = divmod(node, hw.core_grid[1])
    return float(link_bandwidth_Bps(hw, direction, c if direction in (EAST, WEST) else r))


def run_fair(hw: Mesh2DHardware, tasks: Sequence[Task]) -> list[float]:
    """End time of every task when all start at t = 0 as palm's default event engine runs
    them (``noc_model = "fair"``, link granularity): every task is one flow with a max-min
    fair share of each link and DRAM channel it loads (``FairNetwork``). A collective moves
    its lone time times its lone rate; a DRAM access moves its bytes per core, loading each
    channel with the cores' worth of bytes it serves, and adds its latencies at the end."""
    env = FlowEnvironment()
    links = sorted({r for t in tasks for r in t.links})
    index = {r: k for k, r in enumerate(links)}
    capacity = [link_Bps(hw, r) for r in links] + [_channel_Bps(hw)] * hw.dram_channels
    net = FairNetwork(env, capacity)
    ends = [0.0] * len(tasks)
    for i, task in enumerate(tasks):
        resources = [index[r] for r in task.links]
        loads = list(task.links.values())
        done = Arrival(env)
        done.callbacks.append(lambda _e, i=i: ends.__setitem__(i, float(env.now)))
        if task.dram is None:
            net.transfer(net.route(resources, loads), task.alone_s, done=done)
            continue
        access = task.dram
        resources += [len(links) + c for c in access.channels]
        loads += list(access.cores_per_channel)
        net.start(
            net.route(resources, loads),
            task.bytes_per_core,
            latency_s=access.response_s + access.noc.latency_s,
            done=done,
        )
    env.run()
    return ends


def run_together(setting: Setting, hw: Mesh2DHardware, tasks: Sequence[Task]) -> list[float]:
    return (run_fair if setting.noc_model == "fair" else run_exclusive)(hw, tasks)


@dataclass(frozen=True)
class Point:
    setting: str
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


def wafer(setting: Setting = SETTINGS[-1]) -> Mesh2DHardware:
    hw = HARDWARE_PRESETS["wafer-palm"]
    assert isinstance(hw, Mesh2DHardware)
    return dataclasses.replace(hw, dram_placement=setting.dram_placement)


def study(sizes_mb: Sequence[float] = SIZES_MB, max_tasks: int = MAX_TASKS) -> list[Point]:
    """Every (setting, scenario, number of tasks, size) point of the study."""
    points = []
    for setting in SETTINGS:
        hw = wafer(setting)
        for scenario in SCENARIOS:
            for size in sizes_mb:
                all_tasks = [
                    make_task(hw, k, t, size * MB) for k, t in scenario_tasks(scenario, max_tasks)
                ]
                for n in range(1, max_tasks + 1):
                    tasks = all_tasks[:n]
                    ends = run_together(setting, hw, tasks)
                    slowest = tasks[int(np.argmax(ends))].label
                    analytical = max(t.alone_s for t in tasks)
                    points.append(
                        Point(setting.name, scenario, n, size, analytical, max(ends), slowest)
                    )
    return points


def alone_table(size_mb: float, max_tasks: int) -> str:
    """Where each task runs and its uncontended time at ``size_mb`` (what the analytical
    model sees), per setting and scenario."""
    rows = []
    for setting in SETTINGS:
        hw = wafer(setting)
        channels_at = dram_channel_cores(hw).tolist()
        for scenario in SCENARIOS:
            for k, (kind, tile) in enumerate(scenario_tasks(scenario, max_tasks), start=1):
                task = make_task(hw, kind, tile, size_mb * MB)
                channels = "-"
                if task.dram is not None and setting.dram_placement == "interleaved":
                    channels = f"all {len(task.dram.channels)}"
                elif task.dram is not None:
                    channels = ", ".join(
                        f"{tuple(channels_at[c])}: {n:g}"
                        for c, n in zip(
                            task.dram.channels, task.dram.cores_per_channel, strict=True
                        )
                    )
                rows.append(
                    [
                        setting.dram_placement,
                        scenario,
                        k,
                        kind,
                        tile,
                        channels,
                        len(task.links),
                        f"{task.alone_s * 1e6:.1f}",
                    ]
                )
    head = [
        "DRAM placement",
        "scenario",
        "task",
        "kind",
        "tile",
        "DRAM channels (router: cores)",
        "mesh links loaded",
        f"alone at {size_label(size_mb)} (us)",
    ]
    return markdown_table(head, rows)


def _percent(x: float) -> str:
    """``x`` in percent to 0.1 (rounding noise of -0.0 shown as 0.0)."""
    return f"{100 * x:.1f}%".replace("-0.0%", "0.0%")


def error_table(points: Sequence[Point], setting: str, scenario: str) -> str:
    mine = [p for p in points if p.scenario == scenario and p.setting == setting]
    sizes = sorted({p.size_mb for p in mine})
    tasks = sorted({p.tasks for p in mine})
    by = {(p.tasks, p.size_mb): p for p in mine}
    head = "| tasks | " + " | ".join(size_label(s) for s in sizes) + " | last to finish |"
    rows = [head, "|" + "---|" * (len(sizes) + 2)]
    for n in tasks:
        cells = " | ".join(_percent(by[(n, s)].error) for s in sizes)
        rows.append(f"| {n} | {cells} | {by[(n, sizes[-1])].slowest} |")
    return "\n".join(rows)


def plot(points: Sequence[Point], out: Path) -> Path:
    plt = pyplot()
    scenarios = [s for s in SCENARIOS if any(p.scenario == s for p in points)]
    sizes = sorted({p.size_mb for p in points})
    fig, axes = plt.subplots(
        len(SETTINGS),
        len(scenarios),
        figsize=(5.2 * len(scenarios), 3.9 * len(SETTINGS)),
        dpi=120,
        sharey=True,
        squeeze=False,
    )
    markers = "osD^v<>p"
    top = max(100 * p.error for p in points)
    letters = iter("abcdefgh")
    for row, setting in enumerate(SETTINGS):
        for ax, scenario in zip(axes[row], scenarios, strict=True):
            for k, size in enumerate(sizes):
                pts = sorted(
                    (
                        p
                        for p in points
                        if p.size_mb == size
                        and p.scenario == scenario
                        and p.setting == setting.name
                    ),
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
            ax.set_title(f"({next(letters)}) {scenario}; {setting.name}", fontsize=9)
            ax.set_xticks(sorted({p.tasks for p in points}))
            ax.set_ylim(-2, max(10.0, top * 1.12))
            ax.grid(True, alpha=0.3)
        axes[row, 0].set_ylabel("(event - analytical) / event  [%]")
    for ax in axes[-1]:
        ax.set_xlabel("tasks started together")
    axes[0, 0].legend(title="size per task", fontsize=8, title_fontsize=8, loc="upper left")
    fig.suptitle(
        "Congestion error of the closed forms on wafer-palm (cf. paper Fig. 7)", fontsize=11
    )
    fig.tight_layout()
    return save_figure(fig, out, "congestion.png")


def report(points: Sequence[Point], sizes_mb: Sequence[float], max_tasks: int) -> str:
    parts = []
    letters = iter("abcdefgh")
    for setting in SETTINGS:
        for scenario in SCENARIOS:
            parts.append(
                f"({next(letters)}) {scenario}, {setting.name}: error of the analytical "
                f"makespan, `(event - analytical) / event`\n\n"
                + error_table(points, setting.name, scenario)
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
