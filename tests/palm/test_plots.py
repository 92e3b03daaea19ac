"""Plots: files are real PNGs of a sensible size, the Gantt chart draws every pass, the heat
map's values follow the per-link results, and a missing matplotlib is a ConfigError."""

from __future__ import annotations

import dataclasses
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from mesh_toys import simulate_with_timeline, toy_mesh

import palm
from palm.engines.event.fabric import mesh_link_endpoints
from palm.hardware.spec import Mesh2DHardware
from palm.network.placement import make_placement
from palm.plots import link_utilisation_grid, plot_all, plot_gantt, plot_link_heatmap

pytest.importorskip("matplotlib")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk of a PNG file (checking the signature)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    length, chunk = struct.unpack(">I4s", data[8:16])
    assert chunk == b"IHDR" and length == 13
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _assert_picture(path: Path) -> None:
    assert path.is_file()
    width, height = _png_size(path)
    assert width > 300 and height > 200


def test_plot_all_writes_two_pngs(tmp_path: Path) -> None:
    out = tmp_path / "new" / "plots"
    paths = plot_all(out, config=toy_mesh("group"))
    assert paths == [out / "gantt.png", out / "links.png"]
    for path in paths:
        _assert_picture(path)


def test_plot_all_needs_the_event_engine(tmp_path: Path) -> None:
    with pytest.raises(palm.ConfigError) as info:
        plot_all(tmp_path, config=toy_mesh("group"), engine="analytical")
    assert info.value.field == "engine"


def test_gantt_draws_every_pass_on_its_stage_row(tmp_path: Path) -> None:
    from palm.plots import _gantt_figure

    config = toy_mesh("link", schedule="interleaved-1f1b", interleave=2, pp=2, dp=4)
    result, timeline = simulate_with_timeline(config)
    assert {p.chunk for p in timeline.phases} == {0, 1}
    fig = _gantt_figure(timeline=timeline, result=result, config=config)
    ax = fig.axes[0]
    bars = [path for c in ax.collections for path in c.get_paths()]
    assert len(bars) == len(timeline.phases)
    # every bar sits on its stage's row: its vertical centre is the stage number
    centres = sorted(round(float(p.get_extents().intervaly.mean()), 6) for p in bars)
    assert centres == sorted(float(p.stage) for p in timeline.phases)
    assert ax.get_ylim() == (1.5, -0.5)  # two rows, stage 0 on top
    assert "toy" in ax.get_title() and "TP=2 PP=2 DP=4" in ax.get_title()
    # micro-batch numbers are written in (some of) the bars
    texts = {t.get_text() for t in ax.texts}
    assert texts and texts <= {str(p.micro_batch) for p in timeline.phases}
    path = tmp_path / "gantt.png"
    plot_gantt(path, timeline=timeline, result=result, config=config)
    _assert_picture(path)


def _few_busy_links() -> palm.SimConfig:
    """Inference with one stage and no tensor parallelism: the only traffic is the input read
    from DRAM, each core from its nearest channel, so only the links leaving the cores next to
    the DRAM channels are busy."""
    config = toy_mesh("link", training={"mode": "inference", "global_batch": 16}, tp=1, pp=1, dp=16)
    hw = dataclasses.replace(config.hardware, dram_placement="nearest")
    return dataclasses.replace(config, hardware=hw)


@pytest.mark.parametrize("few", [False, True])
def test_link_grid_follows_the_links_leaving_each_core(few: bool) -> None:
    config = _few_busy_links() if few else toy_mesh("link")
    result, _ = simulate_with_timeline(config)
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware) and result.links is not None
    grid = link_utilisation_grid(result=result, config=config)
    assert grid.shape == hw.core_grid == (4, 4)
    expected = np.zeros(hw.core_grid)
    for link in result.links:
        assert link.name.startswith("link[")
        (r, c), _ = mesh_link_endpoints(hw, int(link.name[5:-1]))
        expected[r, c] = max(expected[r, c], link.busy_fraction)
    assert np.array_equal(grid, expected)
    assert 0.0 < grid.max() <= 1.0 and grid.min() >= 0.0
    if few:
        idle = grid == 0.0
        assert idle.sum() >= grid.size // 2  # a few busy links, the other cores at 0


def test_group_grid_colours_each_stage_by_its_busiest_resource() -> None:
    config = toy_mesh("group")
    result, _ = simulate_with_timeline(config)
    assert result.links is not None
    fractions = {x.name: x.busy_fraction for x in result.links}
    grid = link_utilisation_grid(result=result, config=config)
    placement = make_placement(config)
    for s in range(config.parallelism.pp):
        own = [v for k, v in fractions.items() if k in (f"tp[{s}]", f"dp[{s}]", f"noc[{s}]")]
        own += [v for k, v in fractions.items() if k.startswith(f"p2p[{s}->")]
        cores = placement.stage_array(s).reshape(-1, 2)
        assert np.all(grid[cores[:, 0], cores[:, 1]] == max(own))
    assert not np.isnan(grid).any()  # every core belongs to a stage


def test_heatmap_colours_busy_and_idle_cells_differently(tmp_path: Path) -> None:
    from palm.plots import _heatmap_figure

    config = _few_busy_links()
    result, timeline = simulate_with_timeline(config)
    grid = link_utilisation_grid(result=result, config=config)
    busiest = tuple(int(i) for i in np.unravel_index(int(np.argmax(grid)), grid.shape))
    idle = tuple(int(i) for i in np.argwhere(grid == 0.0)[0])

    fig = _heatmap_figure(result=result, config=config)
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())  # type: ignore[attr-defined]
    ax = fig.axes[0]
    image = ax.images[0]

    def pixel(cell: tuple[int, ...]) -> np.ndarray:
        # cell centre -> display pixel (origin bottom left) -> row of the buffer (top down)
        x, y = ax.transData.transform((cell[1], cell[0]))
        return pixels[pixels.shape[0] - 1 - int(round(y)), int(round(x)), :3].astype(int)

    hot, cold = pixel(busiest), pixel(idle)
    # the colour scale is utilisation 0..1, fixed: a nearly idle link is not drawn bright
    assert (image.norm.vmin, image.norm.vmax) == (0.0, 1.0)
    assert np.abs(hot - cold).sum() > 0 if grid.max() > 0.05 else True
    ends = np.asarray(image.cmap(image.norm(np.array([0.0, grid.max()]))))[:, :3] * 255
    expected_cold, expected_hot = ends
    assert np.abs(cold - expected_cold).max() <= 3
    assert np.abs(hot - expected_hot).max() <= 3

    path = tmp_path / "links.png"
    plot_link_heatmap(path, result=result, timeline=timeline, config=config)
    _assert_picture(path)


def test_gpu_cluster_bar_chart(tmp_path: Path) -> None:
    config = palm.load_config(EXAMPLES / "t18b-dgx-a100.toml")
    result, timeline = simulate_with_timeline(config)
    path = tmp_path / "links.png"
    plot_link_heatmap(path, result=result, timeline=timeline, config=config)
    _assert_picture(path)
    with pytest.raises(palm.ConfigError):
        link_utilisation_grid(result=result, config=config)


def test_heatmap_needs_per_link_results(tmp_path: Path) -> None:
    config = toy_mesh("group")
    result = palm.simulate(config, engine="analytical")
    assert result.links is None
    with pytest.raises(palm.ConfigError) as info:
        plot_link_heatmap(tmp_path / "x.png", result=result, config=config)
    assert info.value.field == "engine"


def test_missing_matplotlib_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = toy_mesh("group")
    result, timeline = simulate_with_timeline(config)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(palm.ConfigError) as info:
        plot_gantt(tmp_path / "g.png", timeline=timeline, result=result, config=config)
    assert info.value.field == "plot"
    assert "palm-tune[plot]" in str(info.value)
    with pytest.raises(palm.ConfigError):
        plot_all(tmp_path / "out", config=config)
    assert not (tmp_path / "out").exists()


def test_nice_ceiling_is_a_round_bound_at_most_one() -> None:
    from palm.plots import nice_ceiling

    assert [nice_ceiling(x) for x in (0.0, 0.021, 0.025, 0.03, 0.07, 0.3, 0.9, 1.0, 1.7)] == [
        1.0,
        0.025,
        0.025,
        0.05,
        0.1,
        0.5,
        1.0,
        1.0,
        1.0,
    ]


def test_gpu_cluster_colours_span_the_data() -> None:
    # A100 DGX at TP=8 DP=32: the busiest link is busy about 2% of the iteration; a fixed
    # 0..1 scale drew every bar in the same dark colour
    from palm.plots import _cluster_figure, nice_ceiling

    config = palm.load_config(EXAMPLES / "t18b-dgx-a100.toml")
    result = palm.simulate(config)
    assert result.links is not None
    top = max(x.busy_fraction for x in result.links)
    assert 0 < top < 0.5
    fig = _cluster_figure(result=result, config=config)
    ax = fig.axes[0]
    assert ax.get_xlim() == (0.0, nice_ceiling(top))
    colorbar = fig.axes[-1]
    assert colorbar.get_ylim() == (0.0, nice_ceiling(top)) or colorbar.get_xlim() == (
        0.0,
        nice_ceiling(top),
    )
    widths = [p.get_width() for p in ax.patches]
    busiest = ax.patches[widths.index(max(widths))]
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    # the busiest bar is drawn at least 40% up the colour scale (a round bound <= 2.5 x top)
    level = top / nice_ceiling(top)
    assert level >= 0.4
    assert np.allclose(busiest.get_facecolor(), cmap(level), atol=1e-6)


def test_each_chip_draws_its_channels_round_its_own_border() -> None:
    """wormhole-n300 (per-tile DRAM): chip 0's right-side channels sit on the edge between the
    chips (x = 7.5) and are drawn inward (to the left), chip 1's left-side ones on the same
    edge drawn to the right; the outer sides are drawn outward as on one chip."""
    from palm.hardware import HARDWARE_PRESETS
    from palm.network.loads import dram_channel_cores
    from palm.plot_mesh import dram_marker_sides

    hw = HARDWARE_PRESETS["wormhole-n300"]
    assert isinstance(hw, Mesh2DHardware)
    cores = dram_channel_cores(hw)
    rows, cols = hw.core_grid
    sides = dram_marker_sides(cores, [0.5] * len(cores), rows=rows, cols=cols, tile=(8, 8))
    assert sum(len(v) for v in sides.values()) == 24
    left = {x for x, _, _ in sides[(-1.0, 0.0)]}
    right = {x for x, _, _ in sides[(1.0, 0.0)]}
    assert left == {-0.5, 7.5} and right == {7.5, 15.5}
    assert {y for _, y, _ in sides[(0.0, 1.0)]} == {-0.5}  # both chips' top channels
