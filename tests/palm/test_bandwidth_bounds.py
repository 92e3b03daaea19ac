"""Physical bounds that every simulated iteration obeys: the DRAM bytes the JSON reports are the
bytes the event engine moves, the channels never carry more than their bandwidth allows over
the iteration, and no link carries more than its bandwidth over the run."""

from __future__ import annotations

from pathlib import Path

import pytest

import palm
from palm.api import plan_for
from palm.engines.event.engine import _Run
from palm.hardware.spec import Mesh2DHardware
from palm.plan import Plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: relative rounding allowed on conserved bytes and on a link's bound
TIGHT = 1e-9
#: relative slack on the DRAM bound: the event engine measures an inference period from the
#: exits of a finite window, whose ends jitter by microseconds around a second (5e-6 seen)
STEADY = 1e-4

MESH_CASES = {
    # the case that beat its channels: ResNet-50 fp16 inference on Grayskull, the documented plan
    "grayskull-resnet50-fp16": ("grayskull-resnet50.toml", ['training.precision="fp16"']),
    "grayskull-resnet50-fp16-exclusive-link": (
        "grayskull-resnet50.toml",
        [
            'training.precision="fp16"',
            'communication.noc_model="exclusive"',
            'communication.noc_granularity="link"',
        ],
    ),
    "grayskull-bert-base-train": (
        "grayskull-bert-base.toml",
        ['training.mode="train"', "training.global_batch=80"],
    ),
    "wafer-t18b": ("wafer-t18b.toml", []),
}


def _config(name: str) -> palm.SimConfig:
    example, overrides = MESH_CASES[name]
    return palm.load_config(EXAMPLES / example, overrides=overrides)


def _run(config: palm.SimConfig) -> tuple[Plan, _Run, palm.Result]:
    """The event engine's run, kept so its network can be read."""
    plan = plan_for(config, engine="event")
    comm = config.communication
    run = _Run(plan, granularity=comm.noc_granularity, noc_model=comm.noc_model, record=False)
    for s in range(run.p):
        run.env.process(run.stage(s))
    run.env.run()
    return plan, run, run.result(0.0)


def _reported_bytes(plan: Plan, result: palm.Result, micro_batches: int) -> float:
    """DRAM bytes of ``micro_batches`` micro-batches (and, in training, one optimizer update)
    from the JSON's operators (per device and micro-batch), plus the input fetch."""
    assert result.operators is not None
    par = plan.config.parallelism
    devices = par.tp * par.data_ranks
    per_micro_batch = sum(o.dram_forward_bytes + o.dram_backward_bytes for o in result.operators)
    update = sum(o.dram_update_bytes for o in result.operators)
    return devices * (micro_batches * (per_micro_batch + plan.chunks[0].fetch_bytes) + update)


@pytest.mark.parametrize("name", sorted(MESH_CASES))
def test_reported_dram_bytes_are_the_bytes_the_engine_moves(name: str) -> None:
    plan, run, result = _run(_config(name))
    assert run.net.channels is not None
    moved = float(run.net.channels.nbytes.sum())
    assert moved > 0
    assert moved == pytest.approx(_reported_bytes(plan, result, run.m), rel=TIGHT)


@pytest.mark.parametrize("engine", ["event", "analytical"])
@pytest.mark.parametrize("name", sorted(MESH_CASES))
def test_dram_traffic_never_beats_the_channels(name: str, engine: str) -> None:
    """Bytes per iteration over the iteration time <= channels x channel bandwidth. ResNet-50
    fp16 on Grayskull gave 108.8 GB/s on 106.6 GB/s: the event engine's steady state counted
    the exits of the draining pipeline, the analytical one let every stage have the channels
    to itself."""
    config = _config(name)
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    plan = plan_for(config, engine=engine)
    result = palm.simulate(config, engine=engine)
    assert plan.dram is not None
    bandwidth = plan.dram[0].channel_bandwidth_Bps * hw.dram_channels
    moved = _reported_bytes(plan, result, plan.micro_batches)
    assert moved / result.iteration_time_s <= bandwidth * (1 + STEADY)


def test_dram_bound_pipeline_runs_at_the_channels_bandwidth() -> None:
    """ResNet-50 fp16 on Grayskull is DRAM-bound: its steady state is the channels' bandwidth
    (to 0.1%), not above it, in both engines."""
    config = _config("grayskull-resnet50-fp16")
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)
    for engine in ("event", "analytical"):
        plan = plan_for(config, engine=engine)
        result = palm.simulate(config, engine=engine)
        assert plan.dram is not None
        bandwidth = plan.dram[0].channel_bandwidth_Bps * hw.dram_channels
        rate = _reported_bytes(plan, result, plan.micro_batches) / result.iteration_time_s
        assert rate == pytest.approx(bandwidth, rel=1e-3)


LINK_CASES = {
    "grayskull-bert-base-train-link": (
        "grayskull-bert-base.toml",
        ['training.mode="train"', "training.global_batch=80"],
    ),
    "t18b-dgx-a100-link": (
        "t18b-dgx-a100.toml",
        ["parallelism.dp=4", "parallelism.pp=2", "training.global_batch=64"],
    ),
}


@pytest.mark.parametrize("name", sorted(LINK_CASES))
def test_no_link_carries_more_than_its_bandwidth(name: str) -> None:
    """``link`` granularity: every link's (port's) bytes over the run <= bandwidth x run."""
    example, overrides = LINK_CASES[name]
    config = palm.load_config(
        EXAMPLES / example, overrides=[*overrides, 'communication.noc_granularity="link"']
    )
    _plan, run, _result = _run(config)
    _busy, carried = run.net.link_usage()
    span = float(run.env.now)
    loaded = [(b, c) for b, c in zip(carried, run.fabric.capacity_Bps, strict=True) if b > 0]
    assert loaded
    assert max(b / (c * span) for b, c in loaded) <= 1 + TIGHT
