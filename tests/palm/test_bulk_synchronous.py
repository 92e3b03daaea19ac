"""Bulk-synchronous execution (``hardware.execution = "bulk-synchronous"``, docs/model.md sec.
7e): every pass computes, then exchanges; the iteration is the sum of its phases worked by hand,
never shorter than the overlapped one of the same plan, monotone in the bandwidths; the
graphcore-pod16 preset's figures; overlapping options refused in one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import palm
from palm.api import plan_for
from palm.errors import ConfigError
from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from palm.plan.chunks import OpPricer
from palm.plan.context import plan_context
from tests.palm.mesh_toys import linear_toy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _config(execution: str = "bulk-synchronous", **hardware: Any) -> palm.SimConfig:
    return linear_toy(hardware={"execution": execution, **hardware})


def _op_compute(config: palm.SimConfig) -> tuple[float, float]:
    """Sum of the four layers' priced forward and backward compute (one micro-batch)."""
    ctx = plan_context(config, with_links=False)
    priced = OpPricer(ctx, "none")
    times = [priced(op) for op in ctx.ops(0)]
    return sum(t.forward_s for t in times), sum(t.backward_s for t in times)


def test_iteration_is_the_sum_of_its_phases_by_hand() -> None:
    """Everything fits a 64 MiB SRAM (no streams): a pass is its compute plus its exchanges,
    and the gradient all-reduce follows the last backward pass in full (one bucket)."""
    config = _config(sram_per_core_mib=64.0)
    plan = plan_for(config)
    (ch,), (st,) = plan.chunks, plan.stages
    fwd, bwd = _op_compute(config)
    assert ch.stream_forward_s == ch.stream_backward_s == 0.0
    assert ch.forward_compute_s == fwd + ch.multicast_forward_s
    assert ch.backward_compute_s == bwd + ch.multicast_backward_s
    assert st.dp_buckets == 1 and st.dp_allreduce_s > 0
    forward = ch.fetch_s + ch.forward_compute_s + ch.forward_comm_s
    backward = ch.backward_compute_s + ch.recompute_s + ch.backward_comm_s
    hand = forward + backward + st.dp_allreduce_s + st.optimizer_s  # one micro-batch
    r = palm.simulate(config, engine="analytical")
    assert r.iteration_time_s == pytest.approx(hand, rel=1e-12)
    assert palm.simulate(config, engine="event").iteration_time_s == pytest.approx(hand, rel=1e-9)


def test_streams_follow_the_compute() -> None:
    """A core of 0.05 MiB keeps nothing: every pass streams its weights from DRAM after its
    compute and multicast, not under them."""
    config = _config(sram_per_core_mib=0.05)
    (ch,) = plan_for(config).chunks
    fwd, bwd = _op_compute(config)
    assert ch.stream_forward_s > 0 and ch.stream_backward_s > 0
    assert ch.forward_compute_s == fwd + ch.multicast_forward_s + ch.stream_forward_s
    assert ch.backward_compute_s == bwd + ch.multicast_backward_s + ch.stream_backward_s


@pytest.mark.parametrize("sram", [64.0, 0.05])
@pytest.mark.parametrize("engine", ["analytical", "event"])
def test_never_faster_than_the_overlapped_plan(sram: float, engine: str) -> None:
    bsp = palm.simulate(_config(sram_per_core_mib=sram), engine=engine).iteration_time_s
    ovl = palm.simulate(
        _config("overlapped", sram_per_core_mib=sram), engine=engine
    ).iteration_time_s
    assert bsp >= ovl


@pytest.mark.parametrize("engine", ["analytical", "event"])
@pytest.mark.parametrize(
    "knob", ["dram_channel_bandwidth_gbps", "intra_tile_link_gbps", "inter_tile_link_gbps"]
)
def test_monotone_in_every_bandwidth(engine: str, knob: str) -> None:
    times = [
        palm.simulate(_config(sram_per_core_mib=0.05, **{knob: g}), engine=engine).iteration_time_s
        for g in (1.0, 10.0, 100.0, 1000.0)
    ]
    assert all(a >= b for a, b in zip(times, times[1:], strict=False)), times


def test_graphcore_pod16_matches_its_sources() -> None:
    hw = HARDWARE_PRESETS["graphcore-pod16"]
    assert isinstance(hw, Mesh2DHardware) and hw.bulk_synchronous
    ipus, per_ipu = hw.tile_count, hw.cores_per_tile_count
    assert ipus == 16 and per_ipu * 92 == 1472  # 16 blocks of 92 IPU-tiles
    assert hw.core_peak_tflops.fp16 * per_ipu == 250.0
    assert hw.sram_per_core_mib * 2**20 * per_ipu == pytest.approx(900e6)
    assert hw.sram_bandwidth_per_core_gbps * per_ipu == pytest.approx(47.5e3)
    assert hw.intra_tile_link_gbps * per_ipu * 4 == 8000.0  # IPU-Exchange 8 TB/s
    assert hw.inter_tile_link_gbps * 10 == 320.0  # 10 IPU-Links, 320 GB/s
    assert hw.dram_capacity_gib * 2**30 == pytest.approx(4 * 448e9)


def test_example_runs_in_both_styles() -> None:
    config = palm.load_config(EXAMPLES / "graphcore-pod16-bert-large.toml")
    bsp = palm.simulate(config, engine="analytical").iteration_time_s
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    overlapped = dataclasses.replace(
        config, hardware=dataclasses.replace(hw, execution="overlapped")
    )
    assert bsp >= palm.simulate(overlapped, engine="analytical").iteration_time_s


@pytest.mark.parametrize(
    ("parallelism", "field"),
    [
        ({"tp_comm_overlap": True, "tp": 2, "dp": 8}, "parallelism.tp_comm_overlap"),
        ({"tp_async_backward": True}, "parallelism.tp_async_backward"),
    ],
)
def test_overlaps_are_refused(parallelism: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        plan_for(linear_toy(hardware={"execution": "bulk-synchronous"}, parallelism=parallelism))
    assert err.value.field == field
