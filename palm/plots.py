"""Pictures of one simulated iteration: a pipeline Gantt chart and a map of link utilisation.

matplotlib is an optional dependency (the ``plot`` extra): it is imported inside the functions,
and a missing matplotlib raises :class:`~palm.errors.ConfigError` (field ``plot``). Figures are
drawn on matplotlib's Agg canvas directly, without :mod:`matplotlib.pyplot`, so plotting neither
needs a display nor changes the caller's pyplot backend or state.

* :func:`plot_gantt`: one row per pipeline stage, a bar per forward (blue) and backward (orange)
  pass and per optimizer step (grey), labelled with its micro-batch when the bars are few and
  wide enough; chunks of an interleaved schedule are shades of the same colour.
* :func:`plot_link_heatmap`: on a ``mesh2d``, the core grid coloured by link busy fraction
  (:func:`link_utilisation_grid`), tile boundaries, stage numbers, and the DRAM channels as
  squares round the border coloured by their utilisation (a scale of their own); on a
  ``gpu-cluster``, a bar chart of the busiest resources and a summary by kind of resource.
* :func:`plot_all`: simulate a configuration and write both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from palm.api import simulate_timeline
from palm.engines.event.engine import Timeline
from palm.engines.event.fabric import mesh_link_endpoints
from palm.errors import ConfigError
from palm.hardware.spec import Mesh2DHardware
from palm.network.placement import make_placement
from palm.result import LinkResult, Result
from palm.strategy import SimConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "plot_gantt",
    "plot_link_heatmap",
    "plot_all",
    "link_utilisation_grid",
    "GANTT_LABEL_MAX_BARS",
    "STAGE_LABEL_MAX_STAGES",
    "CLUSTER_MAX_BARS",
]

GANTT_LABEL_MAX_BARS = 200
"""Micro-batch numbers are written in the bars only when no stage row has more bars."""
STAGE_LABEL_MAX_STAGES = 64
"""Stage numbers are drawn on the heat map only up to this many stages."""
CLUSTER_MAX_BARS = 40
"""Resources shown in the bar chart of a GPU cluster (the busiest)."""

_DPI = 120
_FORWARD_CMAP = "Blues"
_BACKWARD_CMAP = "Oranges"
_OPTIMIZER_COLOR = "#8c8c8c"
_HEAT_CMAP = "viridis"
_DRAM_CMAP = "Reds"
_DRAM_GAP_PT = 3.0
_DRAM_LABEL_MAX = 40
_UNUSED_COLOR = "#d9d9d9"

_LINK_RE = re.compile(r"^link\[(\d+)\]$")
_GROUP_RE = re.compile(r"^(tp|dp|noc)\[(\d+)\]$")
_P2P_RE = re.compile(r"^p2p\[(\d+)->(\d+)\]$")
_KIND_RE = re.compile(r"^([A-Za-z_]+)\[")


# --------------------------------------------------------------------------- entry points


def plot_gantt(path: str | Path, *, timeline: Timeline, result: Result, config: SimConfig) -> None:
    """Write the pipeline Gantt chart of ``timeline`` to ``path`` (format from the suffix,
    e.g. ``.png``, ``.svg``, ``.pdf``; parent directory created).

    Rows are stages (stage 0 on top); forward passes are blue, backward passes orange (later
    chunks of an interleaved schedule in lighter shades), optimizer steps grey. A pass shows its
    micro-batch number when no row has more than :data:`GANTT_LABEL_MAX_BARS` bars and the
    number fits in the bar. The x axis is time from the start of the iteration in µs, ms or s,
    whichever suits ``result.iteration_time_s``. The title names the model, the hardware, the
    plan, the iteration time and the throughput. Raises :class:`~palm.errors.ConfigError` if
    matplotlib is missing.
    """
    _save(_gantt_figure(timeline=timeline, result=result, config=config), path)


def plot_link_heatmap(
    path: str | Path,
    *,
    result: Result,
    timeline: Timeline | None = None,
    config: SimConfig,
) -> None:
    """Write the link-utilisation picture of ``result`` to ``path`` (parent directory created).

    On a ``mesh2d``: the grid of :func:`link_utilisation_grid` with tile boundaries, stage
    numbers at the centroids of the stage groups (up to :data:`STAGE_LABEL_MAX_STAGES` stages)
    and the DRAM channels as squares just outside the border next to their router core,
    coloured by ``result.dram_channel_utilisation`` on a 0-1 scale of their own (and labelled
    in per cent when there are at most 40). On a ``gpu-cluster``: a bar chart of the
    :data:`CLUSTER_MAX_BARS` busiest resources, beside a mean/max summary per kind of resource
    when some are left out. The links' colour scale runs from 0 to the largest busy fraction
    shown (1 if nothing is busy); its colour bar is labelled "busy fraction".

    ``timeline`` is accepted for symmetry with :func:`plot_gantt` and not needed: busy
    fractions come from ``result.links``. Raises :class:`~palm.errors.ConfigError` if
    matplotlib is missing or ``result`` has no per-link results (the analytical engine).
    """
    del timeline
    _save(_heatmap_figure(result=result, config=config), path)


def plot_all(out_dir: str | Path, *, config: SimConfig, engine: str = "event") -> list[Path]:
    """Simulate ``config`` with ``engine`` and write ``gantt.png`` and ``links.png`` into
    ``out_dir`` (created if needed); returns their paths in that order.

    Only the event engine records a timeline: any other ``engine`` raises
    :class:`~palm.errors.ConfigError`, as does a missing matplotlib (checked before simulating).
    """
    _matplotlib()
    if config.training.mode == "serve":  # prefill and decode steps (palm.serving.timeline)
        from palm.serving.plot import plot_serving_gantt

        return [plot_serving_gantt(Path(out_dir), config=config)]
    if engine != "event":
        raise ConfigError("engine", engine, "'event' (plots need the event engine's timeline)")
    result, timeline = simulate_timeline(config, engine=engine)
    assert timeline is not None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gantt, links = out / "gantt.png", out / "links.png"
    plot_gantt(gantt, timeline=timeline, result=result, config=config)
    plot_link_heatmap(links, result=result, timeline=timeline, config=config)
    return [gantt, links]


def link_utilisation_grid(*, result: Result, config: SimConfig) -> np.ndarray:
    """The values :func:`plot_link_heatmap` draws on a ``mesh2d``: a float array of shape
    ``hardware.core_grid`` (rows, cols) of busy fractions in [0, 1].

    * ``link`` granularity (resources named ``link[id]``): each core gets the largest busy
      fraction of the links leaving it (:func:`~palm.engines.event.fabric.mesh_link_endpoints`);
      a core with no busy outgoing link is 0.
    * ``group`` granularity: each core of stage ``s`` gets the largest busy fraction of the
      stage's resources ``tp[s]``, ``dp[s]`` and ``p2p[s->t]`` (hand-offs it sends), or
      ``noc[s]`` (the ``fair`` NoC model's one aggregate per stage); cores of no
      stage are NaN.

    The granularity is read from the resource names in ``result.links``. DRAM channels are not
    in the grid (see ``result.dram_channel_utilisation``). Raises
    :class:`~palm.errors.ConfigError` for a non-mesh hardware or a result without links.
    """
    hw = config.hardware
    if not isinstance(hw, Mesh2DHardware):
        raise ConfigError("hardware.topology", hw.topology, "mesh2d (a grid of cores)")
    links = _links(result)
    rows, cols = hw.core_grid
    if any(_LINK_RE.match(x.name) for x in links):
        grid = np.zeros((rows, cols), dtype=np.float64)
        for x in links:
            m = _LINK_RE.match(x.name)
            if m is None:
                continue
            (r, c), _ = mesh_link_endpoints(hw, int(m.group(1)))
            if 0 <= r < rows and 0 <= c < cols:
                grid[r, c] = max(grid[r, c], _fraction(x))
        return grid
    pp = config.parallelism.pp
    per_stage = np.zeros(pp, dtype=np.float64)
    for x in links:
        stage: int | None = None
        if m := _GROUP_RE.match(x.name):
            stage = int(m.group(2))
        elif m := _P2P_RE.match(x.name):
            stage = int(m.group(1))
        if stage is not None and 0 <= stage < pp:
            per_stage[stage] = max(per_stage[stage], _fraction(x))
    grid = np.full((rows, cols), np.nan, dtype=np.float64)
    placement = make_placement(config)
    for s in range(pp):
        cores = placement.stage_array(s).reshape(-1, 2)
        grid[cores[:, 0], cores[:, 1]] = per_stage[s]
    return grid


# --------------------------------------------------------------------------- Gantt chart


def _gantt_figure(*, timeline: Timeline, result: Result, config: SimConfig) -> Figure:
    mpl = _matplotlib()
    pp = config.parallelism.pp
    chunks = max(1, config.parallelism.chunks)
    phases = timeline.raw_phases
    span_s = max([float(result.iteration_time_s)] + [float(p[5]) for p in phases])
    unit, scale = _time_unit(span_s)

    # bars per (stage, kind, chunk): (start, width) in display units, and the bar labels
    bars: dict[tuple[int, str, int], list[tuple[float, float]]] = {}
    labels: list[tuple[int, float, float, str, str, int]] = []
    per_row: dict[int, int] = {}
    for stage, chunk, mb, kind, start, end in phases:
        x0, w = float(start) * scale, (float(end) - float(start)) * scale
        c = chunk if kind in ("F", "B") else 0
        bars.setdefault((stage, kind, c), []).append((x0, w))
        per_row[stage] = per_row.get(stage, 0) + 1
        if kind in ("F", "B"):
            labels.append((stage, x0, w, str(mb), kind, c))

    row_in = 0.32 if pp <= 32 else max(0.05, 10.0 / pp)
    fig = _figure(12.0, min(24.0, max(3.4, 1.7 + row_in * pp)))
    ax = fig.add_subplot()

    def color(kind: str, chunk: int) -> tuple[float, float, float, float]:
        return _pass_color(mpl, kind, chunk, chunks)

    bar_h = 0.8
    for (stage, kind, chunk), spans in sorted(bars.items()):
        ax.broken_barh(
            spans,
            (stage - bar_h / 2, bar_h),
            facecolors=color(kind, chunk),
            edgecolors="white" if pp <= 64 else "none",
            linewidth=0.4,
        )

    ax.set_xlim(0.0, span_s * scale)
    ax.set_ylim(pp - 0.5, -0.5)  # stage 0 on top
    ax.set_ylabel("pipeline stage")
    ax.set_yticks(list(range(0, pp, max(1, math.ceil(pp / 40)))))
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    if config.training.mode == "inference":
        # the engine streams micro-batches until the pipeline is in steady state: the chart
        # draws that whole stream, not one iteration (whose time is the steady-state rate)
        streamed = len({p[2] for p in phases})
        ax.set_xlabel(f"time from the start of the stream ({unit})")
        what = (
            f"steady-state stream of {streamed} micro-batches over {_format_time(span_s)} "
            "(not one iteration)"
        )
    else:
        ax.set_xlabel(f"time from the start of the iteration ({unit})")
        what = "pipeline timeline"
    ax.set_title(_title(config, result, what), fontsize=10)

    _gantt_legend(fig, {k for (_, k, _) in bars}, chunks=chunks, color=color)
    if labels and max(per_row.values()) <= GANTT_LABEL_MAX_BARS:
        _gantt_labels(fig, ax, labels, x_span=span_s * scale, row_in=row_in, color=color)
    return fig


def _pass_color(mpl: Any, kind: str, chunk: int, chunks: int) -> tuple[float, float, float, float]:
    """A bar's colour: forward blue, backward orange, chunk 0 darkest and later chunks
    lighter (never near white); the optimizer step grey."""
    if kind not in ("F", "B"):
        rgba: tuple[float, float, float, float] = mpl.colors.to_rgba(_OPTIMIZER_COLOR)
        return rgba
    cmap = mpl.colormaps[_FORWARD_CMAP if kind == "F" else _BACKWARD_CMAP]
    level = 0.78 - 0.43 * chunk / (chunks - 1) if chunks > 1 else 0.7
    out: tuple[float, float, float, float] = cmap(level)
    return out


def _gantt_legend(
    fig: Figure,
    kinds: set[str],
    *,
    chunks: int,
    color: Callable[[str, int], tuple[float, float, float, float]],
) -> None:
    """The legend below the chart: the kinds of bar drawn (each chunk when there are few)."""
    from matplotlib.patches import Patch

    handles: list[Any] = []
    for kind, name in (("F", "forward"), ("B", "backward")):
        if kind not in kinds:
            continue
        if chunks > 1 and chunks <= 4:
            handles += [
                Patch(facecolor=color(kind, c), label=f"{name} chunk {c}") for c in range(chunks)
            ]
        else:
            handles.append(Patch(facecolor=color(kind, 0), label=name))
    if "optimizer" in kinds:
        handles.append(Patch(facecolor=_OPTIMIZER_COLOR, label="optimizer step"))
    if handles:
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncols=min(len(handles), 5),
            frameon=False,
            fontsize=9,
        )


def _gantt_labels(
    fig: Figure,
    ax: Any,
    labels: list[tuple[int, float, float, str, str, int]],
    *,
    x_span: float,
    row_in: float,
    color: Callable[[str, int], tuple[float, float, float, float]],
) -> None:
    """Each bar's micro-batch, where the bar is wide enough for a legible label, in black or
    white by the bar's luminance."""
    fig.canvas.draw()  # settle the layout: the axes' size in points is then known
    ax_w_pt = ax.get_window_extent().width * 72.0 / fig.dpi
    max_font = min(7.5, row_in * 72.0 * 0.5)
    for stage, x0, w, text, kind, chunk in labels:
        w_pt = w / x_span * ax_w_pt if x_span > 0 else 0.0
        size = min(max_font, (w_pt - 2.0) / (0.64 * len(text)))
        if size < 4.5:
            continue
        r, g, b, _ = color(kind, chunk)
        ax.text(
            x0 + w / 2,
            stage,
            text,
            ha="center",
            va="center",
            fontsize=size,
            color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.6 else "white",
            clip_on=True,
        )


# --------------------------------------------------------------------------- heat map


def _heatmap_figure(*, result: Result, config: SimConfig) -> Figure:
    """The link utilisation figure: the core grid of a mesh (:mod:`palm.plot_mesh`), the
    busiest resources of a GPU cluster."""
    if not isinstance(config.hardware, Mesh2DHardware):
        return _cluster_figure(result=result, config=config)
    from palm.plot_mesh import mesh_heatmap_figure  # imports this module's helpers

    return mesh_heatmap_figure(result=result, config=config)


def _cluster_figure(*, result: Result, config: SimConfig) -> Figure:
    mpl = _matplotlib()
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    links = sorted(_links(result), key=lambda x: (-_fraction(x), _natural(x.name)))
    shown = sorted(links[:CLUSTER_MAX_BARS], key=lambda x: _natural(x.name))
    values = [_fraction(x) for x in shown]
    top = max((_fraction(x) for x in links), default=0.0)
    # the colours span 0 to a round number just above the busiest resource (at most 1), so
    # that a cluster whose links are busy 2.5% of the iteration is not one dark colour
    norm = Normalize(vmin=0.0, vmax=nice_ceiling(top))
    cmap = mpl.colormaps[_HEAT_CMAP]

    by_kind: dict[str, list[float]] = {}
    for x in links:
        m = _KIND_RE.match(x.name)
        by_kind.setdefault(m.group(1) if m else x.name, []).append(_fraction(x))
    summary = len(links) > len(shown) and len(by_kind) <= 12

    n = max(1, len(shown))
    fig = _figure(10.0 if summary else 9.0, min(12.0, 2.0 + 0.22 * n))
    if summary:
        ax, side = fig.subplots(1, 2, width_ratios=(3, 1))
    else:
        ax, side = fig.add_subplot(), None
    positions = list(range(len(shown)))
    ax.barh(positions, values, color=[cmap(norm(v)) for v in values], height=0.75)
    ax.set_yticks(positions, [x.name for x in shown], fontsize=8)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlim(0.0, norm.vmax)
    ax.set_xlabel("busy fraction of the iteration")
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    note = (
        f"the {len(shown)} busiest of {len(links)} resources"
        if len(links) > len(shown)
        else f"all {len(links)} resources"
    )
    ax.set_title(note, fontsize=9)
    if side is not None:
        kinds = sorted(by_kind)
        means = [float(np.mean(by_kind[k])) for k in kinds]
        maxima = [max(by_kind[k]) for k in kinds]
        ypos = list(range(len(kinds)))
        side.barh(ypos, means, color=[cmap(norm(v)) for v in means], height=0.6, label="mean")
        side.scatter(maxima, ypos, marker="|", s=200, color="black", zorder=3, label="max")
        side.set_yticks(ypos, [f"{k} ({len(by_kind[k])})" for k in kinds], fontsize=8)
        side.set_ylim(len(kinds) - 0.5, -0.5)
        side.set_xlim(0.0, norm.vmax)
        side.set_xlabel("busy fraction")
        side.set_title("by kind (count): mean bar, max tick", fontsize=9)
        side.grid(axis="x", color="#e0e0e0", linewidth=0.6)
        side.set_axisbelow(True)
    fig.suptitle(_title(config, result, "network utilisation"), fontsize=10)
    cbar = fig.colorbar(
        ScalarMappable(norm=norm, cmap=cmap),
        ax=[ax] if side is None else [ax, side],
        shrink=0.8,
        pad=0.02,
    )
    cbar.set_label("busy fraction" + ("" if norm.vmax == 1.0 else f" (scale 0 to {norm.vmax:g})"))
    return fig


# --------------------------------------------------------------------------- helpers


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is >= ``x``, at most 1 (a busy
    fraction); 1 for ``x <= 0``."""
    if not x > 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(x))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * power >= x * (1 - 1e-12):
            return min(1.0, step * power)
    return 1.0  # pragma: no cover


def _matplotlib() -> Any:
    """The matplotlib module, or a ConfigError naming the extra that installs it."""
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401 (the submodules the figures need)
    except ImportError as exc:
        raise ConfigError(
            "plot", "matplotlib", "the plot extra: pip install 'palm-tune[plot]'"
        ) from exc
    return matplotlib


def _figure(width_in: float, height_in: float) -> Figure:
    """A figure on its own Agg canvas (no pyplot, no global backend)."""
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | Path) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=_DPI)


def _links(result: Result) -> tuple[LinkResult, ...]:
    if result.links is None:
        raise ConfigError(
            "engine", result.engine, "the event engine (this result has no per-link results)"
        )
    return result.links


def _fraction(link: LinkResult) -> float:
    value = float(link.busy_fraction)
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0


def _time_unit(span_s: float) -> tuple[str, float]:
    if span_s < 1e-3:
        return "µs", 1e6
    if span_s < 1.0:
        return "ms", 1e3
    return "s", 1.0


def _natural(name: str) -> tuple[tuple[int, Any], ...]:
    """Sort key putting ``port[2]`` before ``port[10]``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)
    )


def _format_rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"


def _format_time(t_s: float) -> str:
    unit, scale = _time_unit(t_s)
    return f"{t_s * scale:.4g} {unit}"


def _title(config: SimConfig, result: Result, what: str) -> str:
    par = config.parallelism
    plan = f"TP={par.tp} PP={par.pp} DP={par.dp}, {par.schedule}"
    if par.chunks > 1:
        plan += f" x{par.chunks} chunks"
    mode = "inference" if config.training.mode == "inference" else "training"
    return (
        f"{config.model.name} on {config.hardware.name} ({mode}, {plan}): {what}\n"
        f"{'steady-state ' if mode == 'inference' else ''}iteration "
        f"{_format_time(result.iteration_time_s)}, "
        f"{_format_rate(result.throughput_samples_per_s)} {result.sample_unit}/s, "
        f"{result.micro_batches} micro-batches"
    )
