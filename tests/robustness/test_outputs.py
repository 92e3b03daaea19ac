"""Class 9-10: outputs that said something untrue. ``recompute = "auto"`` names a fit only when
there is one; memory prints in a unit that shows it; the inference Gantt chart says it draws a
steady-state stream; the link heat map's colours are utilisation 0..1."""

from __future__ import annotations

import json

import pytest

from tests.cli_run import REPO, assert_clean, run

DGX = str(REPO / "examples" / "t18b-dgx-a100.toml")


@pytest.mark.parametrize("micro_batch", [1, 8, 64, 256])
def test_recompute_auto_note_agrees_with_fits_memory(micro_batch: int) -> None:
    r = run(
        "simulate",
        DGX,
        "--engine",
        "analytical",
        "--json",
        "--set",
        'training.recompute="auto"',
        "--set",
        f"training.micro_batch={micro_batch}",
        "--set",
        "training.global_batch=8192",
    )
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    (note,) = [n for n in data["notes"] if n.startswith("recompute auto")]
    assert ("the least that fits" in note) == data["fits_memory"], (note, data["fits_memory"])
    assert ("does not fit" in note) == (not data["fits_memory"])


@pytest.mark.parametrize(
    ("example", "unit"),
    [("grayskull-bert-base.toml", "MiB"), ("t18b-dgx-a100.toml", "GiB")],
)
def test_memory_is_printed_in_a_unit_that_shows_it(example: str, unit: str) -> None:
    r = run("simulate", str(REPO / "examples" / example), "--engine", "analytical")
    assert r.code == 0, r.stderr
    assert_clean(r)
    memory = next(line for line in r.stdout.splitlines() if line.startswith("memory"))
    assert " 0.0 " not in memory and unit in memory, memory


def test_inference_gantt_is_titled_as_a_stream() -> None:
    pytest.importorskip("matplotlib")
    from palm.api import simulate_timeline
    from palm.config import load_config
    from palm.plots import _gantt_figure

    config = load_config(REPO / "examples" / "grayskull-bert-base.toml")
    assert config.training.mode == "inference"
    result, timeline = simulate_timeline(config, engine="event")
    assert timeline is not None
    title = _gantt_figure(timeline=timeline, result=result, config=config).axes[0].get_title()
    assert "steady-state stream of" in title and "not one iteration" in title
    train = load_config(REPO / "examples" / "wafer-t18b.toml")
    result, timeline = simulate_timeline(train, engine="event")
    assert timeline is not None
    title = _gantt_figure(timeline=timeline, result=result, config=train).axes[0].get_title()
    assert "stream" not in title


def test_heat_map_colour_scale_is_fixed_on_a_mesh_and_fits_a_clusters_links() -> None:
    """The mesh's heat map colours utilisation 0..1 whatever the data; a GPU cluster's bar
    chart colours 0 to a round bound just above its busiest link (palm.plots.nice_ceiling),
    since its links are busy a few percent of the iteration."""
    pytest.importorskip("matplotlib")
    from palm.api import simulate
    from palm.config import load_config
    from palm.plots import _heatmap_figure, nice_ceiling

    for example in ("wafer-t18b.toml", "t18b-dgx-a100.toml"):
        config = load_config(REPO / "examples" / example)
        result = simulate(config)
        fig = _heatmap_figure(result=result, config=config)
        bars = [ax._colorbar for ax in fig.axes if getattr(ax, "_colorbar", None) is not None]
        norms = [im.norm for ax in fig.axes for im in ax.images] + [b.norm for b in bars]
        top = 1.0
        if config.hardware.topology == "gpu-cluster":
            assert result.links is not None
            top = nice_ceiling(max(x.busy_fraction for x in result.links))
            assert top < 1.0
        assert norms and all((n.vmin, n.vmax) == (0.0, top) for n in norms), example


@pytest.mark.parametrize(
    ("act", "expected"),
    [
        ("swish7", "warning"),  # unknown: taken as two matrices, and said so
        (["silu"], "error"),  # not a name
        ("relu", None),  # an ungated element-wise activation: the same products as gelu
    ],
)
def test_hugging_face_activation_is_read_or_named(tmp_path, act: object, expected: str | None):
    config = {
        "model_type": "gpt2",
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_hidden_layers": 4,
        "intermediate_size": 4096,
        "vocab_size": 32000,
        "hidden_act": act,
    }
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "c.toml").write_text(
        '[model]\nhf_config = "config.json"\nseq_len = 1024\n[hardware]\npreset = "dgx-a100"\n'
        "[training]\nglobal_batch = 256\nmicro_batch = 1\n[parallelism]\ntp = 1\ndp = 256\n",
        encoding="utf-8",
    )
    r = run("simulate", str(tmp_path / "c.toml"), "--engine", "analytical", cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    if expected == "error":
        assert r.code == 2 and len(lines) == 1 and "hidden_act" in lines[0], r.stderr
        return
    assert r.code == 0, r.stderr
    assert_clean(r)
    if expected == "warning":
        assert len(lines) == 1 and lines[0].startswith("palm-tune: warning: model.hf_config:")
        assert "swish7" in lines[0]
    else:
        assert lines == [], r.stderr
