"""The link utilisation of a ``mesh2d`` run drawn over its core grid (for
:func:`palm.plots.plot_link_heatmap`): each core coloured by the busy fraction of its busiest
link or stage resource (:func:`palm.plots.link_utilisation_grid`), tile boundaries, stage
numbers, and the DRAM channels as squares round the border coloured by their own
utilisation. Sizes are in points so that the squares and labels stay legible at any grid
size."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from palm.hardware.spec import Mesh2DHardware
from palm.network.loads import dram_channel_cores
from palm.network.placement import make_placement
from palm.plots import (
    _DRAM_CMAP,
    _DRAM_GAP_PT,
    _DRAM_LABEL_MAX,
    _HEAT_CMAP,
    _LINK_RE,
    _UNUSED_COLOR,
    STAGE_LABEL_MAX_STAGES,
    _figure,
    _links,
    _matplotlib,
    _title,
    link_utilisation_grid,
)
from palm.result import Result
from palm.strategy import SimConfig

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap, Normalize
    from matplotlib.figure import Figure

__all__ = ["mesh_heatmap_figure", "dram_marker_sides"]


def mesh_heatmap_figure(*, result: Result, config: SimConfig) -> Figure:
    """The link utilisation of a ``mesh2d`` run (:func:`palm.plots.plot_link_heatmap`)."""
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    mpl = _matplotlib()
    from matplotlib.colors import Normalize

    grid = link_utilisation_grid(result=result, config=config)
    unused = bool(np.isnan(grid).any())
    link_mode = any(_LINK_RE.match(x.name) for x in _links(result))
    rows, cols = hw.core_grid
    dram = [min(1.0, max(0.0, float(u))) for u in result.dram_channel_utilisation or ()]
    labelled = 0 < len(dram) <= _DRAM_LABEL_MAX

    norm = Normalize(vmin=0.0, vmax=1.0)  # utilisation: fixed 0..1, never autoscaled
    cmap = mpl.colormaps[_HEAT_CMAP].with_extremes(bad=_UNUSED_COLOR)
    dram_norm = Normalize(vmin=0.0, vmax=1.0)
    dram_cmap = mpl.colormaps[_DRAM_CMAP]

    # size: the axes keep square cells; leave room round the grid for the DRAM squares
    width_in = 10.0 if dram else 9.0

    def margin_pt(cell_pt: float) -> tuple[float, float]:
        return _margin_pt(cell_pt, dram=bool(dram), labelled=labelled)

    cell_pt, room_pt = _first_cell_pt(
        rows, cols, width_in=width_in, dram=bool(dram), margin_pt=margin_pt
    )
    axes_h_in = (rows * cell_pt + 2 * room_pt) / 72.0
    legend = (not link_mode and unused) or bool(dram)
    fig = _figure(width_in, axes_h_in + 0.85 + (0.3 if legend else 0.0))
    ax = fig.add_subplot()
    image = ax.imshow(
        np.ma.masked_invalid(grid),
        cmap=cmap,
        norm=norm,
        interpolation="nearest",
        origin="upper",
        extent=(-0.5, cols - 0.5, rows - 0.5, -0.5),
    )
    _heatmap_colorbars(fig, ax, image, dram=bool(dram), dram_norm=dram_norm, dram_cmap=dram_cmap)

    def set_limits(cell: float, room: float) -> None:
        m = room / cell
        ax.set_xlim(-0.5 - m, cols - 0.5 + m)
        ax.set_ylim(rows - 0.5 + m, -0.5 - m)

    set_limits(cell_pt, room_pt)
    fig.canvas.draw()
    cell_pt = max(
        0.5, ax.get_window_extent().width * 72.0 / fig.dpi / (cols + 2 * room_pt / cell_pt)
    )
    marker_pt, room_pt = margin_pt(cell_pt)
    set_limits(cell_pt, room_pt)

    _tile_lines(ax, hw, cell_pt=cell_pt)
    _stage_labels(ax, config, cell_pt=cell_pt)

    if dram:
        _draw_dram(
            fig,
            ax,
            dram_channel_cores(hw),
            dram,
            rows=rows,
            cols=cols,
            cmap=dram_cmap,
            norm=dram_norm,
            marker_pt=marker_pt,
            labelled=labelled,
            tile=hw.cores_per_tile if hw.dram_placement == "per-tile" else None,
        )

    _heatmap_legend(fig, dram=bool(dram), dram_cmap=dram_cmap, unused=not link_mode and unused)
    _heatmap_title(fig, ax, config=config, result=result, link_mode=link_mode)
    return fig


def _heatmap_title(
    fig: Figure, ax: Any, *, config: SimConfig, result: Result, link_mode: bool
) -> None:
    """The heat map's frame off, and its title: the run, the grid and what a colour means."""
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    rows, cols = hw.core_grid
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    how = (
        "colour: busiest link leaving each core"
        if link_mode
        else "colour: busiest tp / dp / outgoing p2p resource of each stage group"
    )
    stages = "; white numbers: stages" if config.parallelism.pp <= STAGE_LABEL_MAX_STAGES else ""
    fig.suptitle(
        f"{_title(config, result, 'link utilisation')}\n"
        f"{rows}x{cols} cores in {hw.tiles[0]}x{hw.tiles[1]} tiles; {how}{stages}",
        fontsize=9.5,
    )


def _margin_pt(cell_pt: float, *, dram: bool, labelled: bool) -> tuple[float, float]:
    """The DRAM squares' size and the room round the grid, in points, for cells of
    ``cell_pt``."""
    marker = min(13.0, max(5.0, 0.8 * cell_pt))
    room = _DRAM_GAP_PT + marker + (26.0 if labelled else 4.0) if dram else 6.0
    return marker, room


def _first_cell_pt(
    rows: int,
    cols: int,
    *,
    width_in: float,
    dram: bool,
    margin_pt: Callable[[float], tuple[float, float]],
) -> tuple[float, float]:
    """The cell size and room round the grid (points) before the figure is drawn: the grid
    and its margin fit the axes' width (the figure's less the colour bars) and 10 inches of
    height."""
    axes_w_in = width_in - (2.3 if dram else 1.3)
    axes_h_max_in = 10.0
    cell_pt = min(axes_w_in * 72.0 / (cols + 3), axes_h_max_in * 72.0 / (rows + 3))
    _, room_pt = margin_pt(cell_pt)
    cell_pt = min(
        (axes_w_in * 72.0 - 2 * room_pt) / cols, (axes_h_max_in * 72.0 - 2 * room_pt) / rows
    )
    cell_pt = max(cell_pt, 0.5)
    return cell_pt, margin_pt(cell_pt)[1]


def _heatmap_colorbars(
    fig: Figure, ax: Any, image: Any, *, dram: bool, dram_norm: Any, dram_cmap: Any
) -> None:
    """The links' colour bar and, with DRAM channels, theirs. Constrained layout puts the
    first colour bar outermost: the DRAM one goes first so that the links' bar sits next to
    the grid."""
    if dram:
        from matplotlib.cm import ScalarMappable

        dbar = fig.colorbar(
            ScalarMappable(norm=dram_norm, cmap=dram_cmap),
            ax=ax,
            shrink=0.8,
            pad=0.02,
            fraction=0.05,
        )
        dbar.set_label("DRAM channel busy fraction (squares)")
    cbar = fig.colorbar(image, ax=ax, shrink=0.8, pad=0.02, fraction=0.05)
    cbar.set_label("busy fraction")


def _tile_lines(ax: Any, hw: Mesh2DHardware, *, cell_pt: float) -> None:
    """Tile boundaries over the core grid, unless the cells are too small to see between the
    lines."""
    rows, cols = hw.core_grid
    tr, tc = hw.cores_per_tile
    if cell_pt * min(tr, tc) < 3.0:
        return
    lw = 1.5 if cell_pt >= 8.0 else 0.7
    ax.vlines(
        [k * tc - 0.5 for k in range(hw.tiles[1] + 1)],
        -0.5,
        rows - 0.5,
        colors="white",
        linewidth=lw,
    )
    ax.hlines(
        [k * tr - 0.5 for k in range(hw.tiles[0] + 1)],
        -0.5,
        cols - 0.5,
        colors="white",
        linewidth=lw,
    )


def _stage_labels(ax: Any, config: SimConfig, *, cell_pt: float) -> None:
    """Each stage's number at the centre of its cores (up to STAGE_LABEL_MAX_STAGES stages),
    sized by how far apart the centres are."""
    from matplotlib.patheffects import withStroke

    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    rows, cols = hw.core_grid
    pp = config.parallelism.pp
    if pp > STAGE_LABEL_MAX_STAGES:
        return
    placement = make_placement(config)
    centres = [placement.stage_array(s).reshape(-1, 2).mean(axis=0) for s in range(pp)]
    spread = min(
        (float(np.hypot(*(a - b))) for i, a in enumerate(centres) for b in centres[:i]),
        default=float(max(rows, cols)),
    )
    size = min(11.0, max(5.0, 0.45 * spread * cell_pt))
    for s, (r, c) in enumerate(centres):
        ax.text(
            float(c),
            float(r),
            str(s),
            ha="center",
            va="center",
            fontsize=size,
            color="white",
            fontweight="bold",
            path_effects=[withStroke(linewidth=2.0, foreground="black")],
        )


def _heatmap_legend(fig: Figure, *, dram: bool, dram_cmap: Any, unused: bool) -> None:
    """The legend below the heat map: the DRAM squares and the cores of no stage."""
    from matplotlib.lines import Line2D

    handles: list[Any] = []
    if dram:
        handles.append(
            Line2D(
                [],
                [],
                marker="s",
                linestyle="none",
                markerfacecolor=dram_cmap(0.6),
                markeredgecolor="black",
                label="DRAM channel at its router (% busy)",
            )
        )
    if unused:
        handles.append(
            Line2D(
                [],
                [],
                marker="s",
                linestyle="none",
                markerfacecolor=_UNUSED_COLOR,
                markeredgecolor=_UNUSED_COLOR,
                label="core of no stage",
            )
        )
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)


def _draw_dram(
    fig: Figure,
    ax: Axes,
    cores: np.ndarray,
    utilisation: Sequence[float],
    *,
    rows: int,
    cols: int,
    cmap: Colormap,
    norm: Normalize,
    marker_pt: float,
    labelled: bool,
    tile: tuple[int, int] | None = None,
) -> None:
    """DRAM channels as squares just outside the border next to their router core, with their
    utilisation in per cent beyond them (offsets in points, so independent of the cell size);
    ``tile``: chips with channels round their own border (:func:`dram_marker_sides`)."""
    from matplotlib.transforms import offset_copy

    centre = _DRAM_GAP_PT + marker_pt / 2
    # one scatter per side of the mesh (the offset transform is per side), so that drawing
    # costs the same few artists whatever the channel count
    sides = dram_marker_sides(cores, utilisation, rows=rows, cols=cols, tile=tile)
    for (dx, dy), points in sides.items():
        xs, ys, us = zip(*points, strict=True)
        at = offset_copy(ax.transData, fig=fig, x=dx * centre, y=dy * centre, units="points")
        ax.scatter(
            list(xs),
            list(ys),
            c=list(us),
            cmap=cmap,
            norm=norm,
            marker="s",
            s=marker_pt**2,
            edgecolors="black",
            linewidths=0.8,
            transform=at,
            clip_on=False,
            zorder=3,
        )
        if not labelled:
            continue
        out = centre + marker_pt / 2 + (3.0 if dx == 0 else 12.0)
        label_at = offset_copy(
            ax.transData, fig=fig, x=dx * out, y=dy * (out + 2.0), units="points"
        )
        for x, y, u in points:
            ax.text(
                x,
                y,
                f"{100 * u:.0f}%",
                ha="center",
                va="center",
                fontsize=7.5,
                transform=label_at,
                clip_on=False,
            )


def dram_marker_sides(
    cores: np.ndarray,
    utilisation: Sequence[float],
    *,
    rows: int,
    cols: int,
    tile: tuple[int, int] | None = None,
) -> dict[tuple[float, float], list[tuple[float, float, float]]]:
    """Where :func:`_draw_dram` puts each channel: by the direction ``(dx, dy)`` its square is
    moved in (display points: ``dy > 0`` is up), the edge point ``(x, y)`` of its router's
    cell (data coordinates) and its utilisation. A channel sits on the side of its chip
    (``tile`` rows and columns; the whole mesh without one) nearest its router and is drawn
    outside that side, or inside it when the side faces another chip."""
    tr, tc = tile if tile is not None else (rows, cols)
    sides: dict[tuple[float, float], list[tuple[float, float, float]]] = {}
    for (r, c), u in zip(cores.tolist(), utilisation, strict=True):
        top, left = r - r % tr, c - c % tc
        r, c = r % tr, c % tc
        if r == 0 and tr > 1:
            x, y, dx, dy = float(c), -0.5, 0.0, 1.0
        elif c == tc - 1 and tc > 1:
            x, y, dx, dy = tc - 0.5, float(r), 1.0, 0.0
        elif r == tr - 1 and tr > 1:
            x, y, dx, dy = float(c), tr - 0.5, 0.0, -1.0
        elif tr > 1 or tc == 1:
            x, y, dx, dy = -0.5, float(r), -1.0, 0.0
        else:
            x, y, dx, dy = float(c), -0.5, 0.0, 1.0
        x, y = x + left, y + top
        beyond = x + dx * 0.5 if dx else y - dy * 0.5  # the cell across the edge
        if 0 <= beyond <= (cols if dx else rows) - 1:
            dx, dy = -dx, -dy  # an edge between two chips: drawn inside the channel's own
        sides.setdefault((dx, dy), []).append((x, y, u))
    return sides
