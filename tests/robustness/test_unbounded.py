"""Class 1: no valid-looking value makes the simulator's work grow without bound. Each value
either costs no more than a small one (gradient buckets are capped) or is refused by a
documented bound (docs/config.md, "Bounds") with a one-line error. Every run is a subprocess
limited to 3 GiB of address space (tests/cli_run.py); how long each takes is measured by
benchmarks/bounds_cost.py, not asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from palm.config import (
    MAX_DEVICES,
    MAX_DRAM_CHANNELS,
    MAX_EXPERTS,
    MAX_LAYERS,
    MAX_PIPELINE_PASSES,
)
from palm.plan import MAX_DP_BUCKETS
from tests.cli_run import REPO, assert_clean, assert_usage_error, run

DGX = str(REPO / "examples" / "t18b-dgx-a100.toml")  # TP=8 PP=1 DP=32, gb 1024, mb 8
WAFER = str(REPO / "examples" / "wafer-t18b.toml")  # TP=8 PP=20 DP=2 on 320 cores
MIXTRAL = str(REPO / "examples" / "mixtral-8x7b-h100.toml")  # 8 experts, EP=8, 64 GPUs


@pytest.mark.parametrize(
    ("path", "overrides", "field", "bound"),
    [
        (DGX, ["model.layers=1000000000"], "model.layers", MAX_LAYERS),
        (DGX, [f"model.layers={MAX_LAYERS + 1}"], "model.layers", MAX_LAYERS),
        (DGX, ["training.global_batch=2000000000000000"], "training.global_batch", None),
        (
            WAFER,  # 20 stages x 8192 micro-batches: the bound counts passes, not samples
            ["training.global_batch=16384"],
            "training.global_batch",
            MAX_PIPELINE_PASSES,
        ),
        (
            WAFER,  # interleaving multiplies the passes too
            ["parallelism.schedule='interleaved-1f1b'", "parallelism.interleave=1000000"],
            "training.global_batch",
            MAX_PIPELINE_PASSES,
        ),
        (DGX, ["parallelism.cp=1000000"], "parallelism.tp*pp*dp", MAX_DEVICES),
        (MIXTRAL, [f"model.experts={MAX_EXPERTS + 1}"], "model.experts", MAX_EXPERTS),
        (WAFER, ["hardware.cores_per_tile=[1000, 1000]"], "hardware.tiles", MAX_DEVICES),
        (DGX, ["hardware.gpus=100000000"], "hardware.gpus", MAX_DEVICES),
        (
            DGX,
            ["parallelism.dp=10000000", "training.global_batch=80000000"],
            "parallelism.tp*pp*dp",
            MAX_DEVICES,
        ),
        (WAFER, ["hardware.tiles=[1000, 1000]"], "hardware.tiles", MAX_DEVICES),
        (WAFER, ["hardware.dram_channels=1000000000"], "hardware.dram_channels", MAX_DRAM_CHANNELS),
        (  # a divisor list of a 2^49 head count is not enumerated
            DGX,
            [
                "model.hidden=1125899906842624",
                "model.heads=562949953421312",
                "parallelism.tp=3",
                "model.kv_heads=1",
                "model.ffn_hidden=3",
            ],
            "parallelism.tp",
            None,
        ),
    ],
)
def test_values_beyond_a_bound_are_refused_quickly(
    path: str, overrides: list[str], field: str, bound: int | None
) -> None:
    sets = [a for o in overrides for a in ("--set", o)]
    r = run("simulate", path, *sets, timeout_s=30)
    assert_usage_error(r, field, *([f"{bound:,}"] if bound else []))


@pytest.mark.parametrize(
    "override",
    [
        "model.vocab=1000000000000000",  # 1e15-parameter embedding: 4e10 buckets uncapped
        "model.seq_len=1000000000000000",  # learned positions: the same
        "parallelism.dp_bucket_mib=0.000001",  # one-byte buckets
        "parallelism.dp_bucket_mib=0.001",
    ],
)
def test_gradient_buckets_are_capped(override: str) -> None:
    r = run("simulate", DGX, "--set", override, "--json", timeout_s=30)
    assert r.code == 0, r.stderr
    assert_clean(r)
    assert json.loads(r.stdout)["iteration_time_s"] > 0


@pytest.mark.parametrize(
    ("path", "override"),
    [  # sizes that enter the cost as numbers (flops, bytes), never as counts of objects
        (DGX, "model.seq_len=1000000000000"),
        (DGX, "model.ffn_hidden=1000000000000000"),
        (DGX, "hardware.gpus_per_node=100000000"),
        (MIXTRAL, "model.shared_experts=1000000000"),
        (MIXTRAL, "model.moe_layer_freq=1000000000"),
        (MIXTRAL, f"model.experts={MAX_EXPERTS}"),
        (WAFER, "hardware.sram_per_core_mib=1000000000"),
    ],
)
def test_sizes_that_are_only_numbers_cost_no_more(path: str, override: str) -> None:
    r = run("simulate", path, "--set", override, "--json", timeout_s=30)
    assert r.code == 0, r.stderr
    assert_clean(r)
    assert json.loads(r.stdout)["iteration_time_s"] > 0


def test_a_plot_of_the_most_dram_channels_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heat map draws the DRAM channels as one marker set per side of the mesh (65,536
    channels took 190 s as one scatter each): counted, in process, then run as a user would."""
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from palm.config import load_config
    from palm.plots import plot_all

    calls: list[int] = []
    scatter = Axes.scatter

    def counted(self: Axes, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return scatter(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Axes, "scatter", counted)
    config = load_config(
        WAFER,
        overrides=[f"hardware.dram_channels={MAX_DRAM_CHANNELS}", "training.global_batch=32"],
    )
    plot_all(tmp_path / "in-process", config=config)
    assert 1 <= len(calls) <= 4  # one marker set per side of the mesh, whatever the count
    monkeypatch.undo()
    r = run(
        "plot",
        WAFER,
        "--set",
        f"hardware.dram_channels={MAX_DRAM_CHANNELS}",
        "--set",
        "training.global_batch=32",
        "--out",
        str(tmp_path),
        timeout_s=90,
    )
    assert r.code == 0, r.stderr
    assert_clean(r)


def test_bucket_cap_in_the_plan() -> None:
    from palm.api import plan_for
    from palm.config import load_config

    tiny = load_config(DGX, overrides=["parallelism.dp_bucket_mib=0.000001"])
    plan = plan_for(tiny)
    assert all(st.dp_buckets == MAX_DP_BUCKETS for st in plan.stages)
    usual = plan_for(load_config(DGX))
    assert all(1 <= st.dp_buckets < MAX_DP_BUCKETS for st in usual.stages)


def test_the_largest_allowed_layer_count_stays_fast() -> None:
    r = run(
        "simulate",
        DGX,
        "--set",
        f"model.layers={MAX_LAYERS}",
        "--engine",
        "analytical",
        timeout_s=60,
    )
    assert r.code == 0, r.stderr


@pytest.mark.parametrize("dim", ["m", "k", "n", "mkn"])
@pytest.mark.parametrize("value", [2**53, 10**14])
def test_gemm_dimensions_are_bounded(dim: str, value: int) -> None:
    """``m = n = k = 2^53`` (the largest integer a field takes) ran out of memory: the blocking
    search holds arrays of about sqrt(m) values; 1e14 took 1.2 GB and tens of seconds to act
    on SIGTERM. Refused, naming the bound."""
    from palm.workload.gemm import MAX_GEMM_DIM

    gemm = str(REPO / "examples" / "wormhole-gemm.toml")
    r = run("simulate", gemm, *[a for d in dim for a in ("--set", f"model.{d}={value}")])
    assert_usage_error(r, f"model.{dim[0]}", f"{MAX_GEMM_DIM:,}")


def test_the_largest_gemm_runs_in_bounded_memory() -> None:
    """At the bound every dimension costs arrays of about 2 sqrt(2^24) = 8,193 values: the run
    fits in 1.5 GiB of address space (Python, numpy and the simulator alone need ~1 GiB)."""
    from palm.workload.gemm import MAX_GEMM_DIM

    gemm = str(REPO / "examples" / "wormhole-gemm.toml")
    sets = [a for d in "mkn" for a in ("--set", f"model.{d}={MAX_GEMM_DIM}")]
    r = run("simulate", gemm, *sets, "--json", memory_bytes=3 * 2**29)
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["iteration_time_s"] > 0


def _graph(path: Path, operators: int, *, pp: int = 20) -> Path:
    ops = "".join(
        '[[model.ops]]\ntype = "linear"\nin_features = 1024\nout_features = 1024\ntokens = 512\n'
        for _ in range(operators)
    )
    path.write_text(
        '[model]\nfamily = "graph"\n[hardware]\npreset = "wafer-palm"\n'
        f"[training]\nglobal_batch = {320 // pp}\nmicro_batch = 1\n"
        f"[parallelism]\ntp = 1\npp = {pp}\ndp = {320 // pp}\n" + ops
    )
    return path


@pytest.mark.parametrize("operators", [MAX_LAYERS + 1, 200_000])
def test_graph_operators_are_bounded(tmp_path: Path, operators: int) -> None:
    """200,000 operators (15 MB, under the 16 MiB input cap) ran past 60 s; 12,000 took 183 s.
    Refused before any operator is built, naming the bound."""
    path = _graph(tmp_path / "g.toml", operators)
    r = run("simulate", str(path), cwd=tmp_path)
    assert_usage_error(r, "model.ops", f"{operators:,} operators", f"{MAX_LAYERS:,}")


def test_the_largest_graph_runs() -> None:
    """At the bound a graph runs; its SRAM allocation is linear in the operators (it looked
    for the largest output once per operator: 12,000 operators took 183 s)."""
    import math

    from palm.cost.sram import OpFootprint, allocate_sram

    class Counted(list[OpFootprint]):
        passes = 0

        def __iter__(self):  # type: ignore[no-untyped-def]
            Counted.passes += 1
            return super().__iter__()

    ops = Counted(OpFootprint(f"op{i}", 1e6, 2e6, 1e5, 1e5) for i in range(MAX_LAYERS))
    out = allocate_sram(ops, sram_bytes=1e9, training=True)
    assert len(out) == MAX_LAYERS
    assert Counted.passes <= 5  # a few sums and the loop: not one pass per operator
    assert all(math.isfinite(a.forward_bytes) for a in out)


def test_a_graph_at_the_bound_simulates(tmp_path: Path) -> None:
    path = _graph(tmp_path / "g.toml", MAX_LAYERS)
    r = run("simulate", str(path), "--json", cwd=tmp_path, timeout_s=120)
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["iteration_time_s"] > 0


@pytest.mark.parametrize("screen", [1_000_000_000_000, "MAX + 1"])
def test_the_screening_is_bounded(tmp_path: Path, screen: int | str) -> None:
    """``screen = 1e12`` over a space of 2.6e9 configurations drew 20 x screen drafts into
    memory; refused, naming the bound, before a study is made."""
    from search.study_file import MAX_SCREEN

    size = MAX_SCREEN + 1 if screen == "MAX + 1" else screen
    study = tmp_path / "s.toml"
    study.write_text(
        f'[study]\nbase = "{DGX}"\nscreen = {size}\n[space]\n'
        "parallelism = true\nmicro_batch = [1, 2, 4, 8]\n"
        "hardware = { switch_bandwidth_gbps = { low = 100, high = 900 } }\n"
    )
    r = run("tune", str(study), "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert_usage_error(r, "study.screen", f"{MAX_SCREEN:,}")
    assert not (tmp_path / "s.db").exists()
