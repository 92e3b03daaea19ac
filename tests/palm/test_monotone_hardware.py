"""More hardware never makes a plan or a product slower, beyond the mechanisms documented in
docs/model.md sec. 7b (each pinned in test_monotone_mechanisms.py): every hardware knob swept
upward (bandwidths, capacities, rates, channels, cores, efficiencies) or downward (latencies,
launch and host costs) on products of every mesh preset and on plans of the wafer, Grayskull,
Wormhole, Blackhole and DGX presets, under both engines (hypothesis; 10,000 cases under the
``palm-ci`` profile's fixed seed; more with ``python benchmarks/property_tests.py --suite
monotone``).

* A product (``family = "gemm"``): its time without the output tail, ``launch + max(core,
  DRAM)``, never grows; its whole time grows by no more than its tail does (the largest output
  block that fits is written after the math).
* A plan: its iteration time never grows, with three documented exceptions: DRAM channels on
  a mesh are swept with links that never bind (where the channels sit is the mechanism, not
  their number); the event engine's inference throughput may move by 1e-3 (its steady-state
  window; up to 1.7e-4 seen) and its training iterations by 1e-8 (fair sharing in a closed
  loop; up to 1.1e-9 seen)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from water_filling import examples

import palm
from palm.engines.gemm import GemmTimes, gemm_times
from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from palm.hardware.spec import PeakTflops

#: (preset, precisions it runs products in, whether it has math fidelities)
MESHES = {
    "wormhole-n150": ("bf16", "bfp8", "bfp4"),
    "blackhole-p150": ("bf16", "bfp8", "bfp4"),
    "grayskull": ("fp16",),
    "wafer-palm": ("fp16",),
    "dojo-d1": ("fp16",),
}
#: how much a knob grows (bandwidths, capacities, rates) or shrinks (latencies, costs) by
FACTORS = st.sampled_from([1.0 + 1e-9, 1.01, 1.25, 1.5, 2.0, 4.0]) | st.floats(1.0, 8.0)
#: knobs that grow, knobs that shrink (hardware fields; "core_peak_tflops" scales every
#: precision's peak; "compute_grid" adds a row or a column of cores)
UP = (
    "dram_channels",
    "dram_channel_bandwidth_gbps",
    "sram_per_core_mib",
    "sram_bandwidth_per_core_gbps",
    "intra_tile_link_gbps",
    "inter_tile_link_gbps",
    "operand_feed_gelems",
    "memory_efficiency",
    "matmul_efficiency",
    "core_peak_tflops",
)
DOWN = (
    "intra_tile_link_latency_ns",
    "inter_tile_link_latency_ns",
    "dram_response_ns",
    "launch_us",
    "host_dispatch_us",
    "host_sharded_output_us",
)


def _changed(hw: Any, knob: str, factor: float) -> dict[str, Any]:
    """The ``[hardware]`` table entry that moves ``knob`` of ``hw`` by ``factor`` the way
    that is more hardware: up for ``UP`` and ``GPU_UP``, down for ``DOWN`` and ``GPU_DOWN``."""
    if knob == "core_peak_tflops" or knob == "peak_tflops":
        peaks = dataclasses.asdict(getattr(hw, knob))
        return {knob: {p: v * factor for p, v in peaks.items()}}
    value = getattr(hw, knob)
    if knob in DOWN or knob in GPU_DOWN:
        return {knob: value / factor}
    if knob in ("memory_efficiency", "matmul_efficiency"):
        return {knob: min(1.0, value * factor)}
    if knob == "dram_channels":
        return {knob: max(value + 1, round(value * factor))}
    return {knob: value * factor}


# ---------------------------------------------------------------------------------------------
# products


def _dim(rng: random.Random) -> int:
    """A product's side: half the time whole tiles, up to 96 of them, else any up to 3000."""
    return 32 * rng.randint(1, 96) if rng.random() < 0.5 else rng.randint(1, 3000)


# hypothesis draws the preset, the knob and a seed; the rest comes from a generator of that
# seed (hypothesis's own draws would cost more than the products they feed)
@st.composite
def _products(draw: st.DrawFn) -> tuple[palm.SimConfig, dict[str, Any], str, float]:
    """A product on a mesh preset (its configuration and its tables), a knob and a factor."""
    preset = draw(st.sampled_from(sorted(MESHES)))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    hw = HARDWARE_PRESETS[preset]
    assert isinstance(hw, Mesh2DHardware)
    rows, cols = hw.core_grid
    hardware: dict[str, Any] = {"preset": preset}
    if hw.math_fidelity:
        hardware["math_fidelity"] = rng.choice(["lofi", "hifi2", "hifi3", "hifi4"])
        hardware["dispatch"] = rng.choice(["trace", "host"])
        hardware["matmul_config"] = rng.choice(["block2d", "auto"])
    one_tile = hw.tiles == (1, 1)  # a compute grid is a single-tile chip's choice
    if one_tile and rng.random() < 0.5:
        hardware["compute_grid"] = [rng.randint(1, min(rows, 10)), rng.randint(1, min(cols, 10))]
    model = {"family": "gemm", "m": _dim(rng), "k": _dim(rng), "n": _dim(rng)}
    model["sram_resident"] = rng.sample(["a", "b", "c"], rng.choice([0, 0, 1, 2]))
    precision = rng.choice(MESHES[preset])
    tables = {
        "model": model,
        "hardware": hardware,
        "training": {"mode": "inference", "global_batch": 1, "precision": precision},
    }
    knob = draw(st.sampled_from((*UP, *DOWN, *(("compute_grid",) if one_tile else ()))))
    return palm.parse_config(tables), tables, knob, draw(FACTORS)


def _grown(
    config: palm.SimConfig, tables: dict[str, Any], knob: str, factor: float
) -> palm.SimConfig:
    """``config`` with more of ``knob``: its hardware changed, or, for ``compute_grid``, a row
    or a column of cores more (when the chip has one to spare), through its tables."""
    hw = config.hardware
    if knob != "compute_grid":
        (value,) = _changed(hw, knob, factor).values()
        if knob == "core_peak_tflops":
            value = PeakTflops(**value)
        return dataclasses.replace(config, hardware=dataclasses.replace(hw, **{knob: value}))
    hardware = dict(tables["hardware"])
    rows, cols = HARDWARE_PRESETS[hardware["preset"]].core_grid  # type: ignore[union-attr]
    r, c = hardware.get("compute_grid", [rows, cols])
    hardware["compute_grid"] = [min(r + 1, rows), c] if factor < 2 else [r, min(c + 1, cols)]
    return palm.parse_config({**tables, "hardware": hardware})


def _device_s(t: GemmTimes) -> float:
    """The product's time on the device without its output tail."""
    return t.launch_s + max(t.core_s, t.dram_s)


@examples(9600)
@given(_products())
def test_a_product_is_never_slower_with_more_hardware_but_for_its_output_tail(
    drawn: tuple[palm.SimConfig, dict[str, Any], str, float],
) -> None:
    config, tables, knob, factor = drawn
    before = gemm_times(config)
    after = gemm_times(_grown(config, tables, knob, factor))
    assert _device_s(after) <= _device_s(before) * (1 + 1e-12), (knob, before, after)
    allowed = max(0.0, after.tail_s - before.tail_s)
    assert after.total_s <= (before.total_s + allowed) * (1 + 1e-12), (knob, before, after)


# ---------------------------------------------------------------------------------------------
# plans

#: (example, overrides): training and inference pipelines on the mesh presets and GPU clusters
PLANS: dict[str, tuple[str, tuple[str, ...]]] = {
    "wafer T-18B": ("wafer-t18b.toml", ("training.global_batch=8",)),
    "wafer T-18B TP4 DP4": (
        "wafer-t18b.toml",
        ("training.global_batch=8", "parallelism.tp=4", "parallelism.dp=4"),
    ),
    "wafer T-18B inference": ("wafer-t18b.toml", ('training.mode="inference"',)),
    "grayskull BERT-base": ("grayskull-bert-base.toml", ()),
    "grayskull ResNet-50": ("grayskull-resnet50.toml", ()),
    "wormhole BERT-base": (
        "grayskull-bert-base.toml",
        (
            'hardware.preset="wormhole-n150"',
            'training.precision="bf16"',
            "parallelism.tp=2",
            "parallelism.pp=8",
            "parallelism.dp=4",
        ),
    ),
    "blackhole BERT-base": (
        "grayskull-bert-base.toml",
        (
            'hardware.preset="blackhole-p150"',
            'training.precision="bf16"',
            "training.global_batch=1040",
            "parallelism.tp=2",
            "parallelism.pp=5",
            "parallelism.dp=13",
        ),
    ),
    "DGX A100 T-18B": ("t18b-dgx-a100.toml", ()),
    "DGX H100 T-18B": ("t18b-dgx-a100.toml", ('hardware.preset="dgx-h100"',)),
    "DGX A100 145B": ("megatron-145b.toml", ()),
    "DGX A100 T-18B offload": (
        "t18b-dgx-a100.toml",
        ("training.activation_offload=0.5", "hardware.host_link_gbps=8.0"),
    ),
}
GPU_UP = (
    "hbm_bandwidth_gbps",
    "switch_bandwidth_gbps",
    "inter_node_bandwidth_gbps",
    "host_link_gbps",
    "hbm_gib",
    "memory_efficiency",
    "matmul_efficiency",
    "peak_tflops",
)
GPU_DOWN = ("switch_latency_us", "inter_node_latency_us")
_ROOT = palm.__file__.rsplit("/palm/", 1)[0]
#: links that never bind: the DRAM channels' count is swept with these (sec. 7b)
_FAST_LINKS = ("hardware.intra_tile_link_gbps=1e5", "hardware.inter_tile_link_gbps=1e5")


def _load(name: str, extra: tuple[str, ...]) -> palm.SimConfig:
    example, overrides = PLANS[name]
    return palm.load_config(f"{_ROOT}/examples/{example}", overrides=[*overrides, *extra])


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


@st.composite
def _plans(draw: st.DrawFn) -> tuple[str, str, str, float]:
    name = draw(st.sampled_from(sorted(PLANS)))
    gpu = "DGX" in name
    knob = draw(st.sampled_from((*GPU_UP, *GPU_DOWN) if gpu else (*UP, *DOWN)))
    return name, draw(st.sampled_from(["analytical", "event"])), knob, draw(FACTORS)


@examples(400)
@given(_plans())
def test_a_plan_is_never_slower_with_more_hardware(drawn: tuple[str, str, str, float]) -> None:
    name, engine, knob, factor = drawn
    base: tuple[str, ...] = _FAST_LINKS if knob == "dram_channels" else ()
    config = _load(name, base)
    value = _changed(config.hardware, knob, factor)[knob]
    grown = _load(name, (*base, f"hardware.{knob}={_toml(value)}"))
    before = palm.simulate(config, engine=engine).iteration_time_s
    after = palm.simulate(grown, engine=engine).iteration_time_s
    # the event engine's documented slack (docs/model.md sec. 7b): its steady-state window in
    # inference, fair sharing in a closed loop in training; none for the analytical engine
    slack = 0.0 if engine == "analytical" else 1e-3 if config.training.mode == "inference" else 1e-8
    assert after <= before * (1 + slack + 1e-12), (name, engine, knob, value)


def test_every_knob_is_a_field_of_its_hardware() -> None:
    mesh = HARDWARE_PRESETS["wafer-palm"]
    gpu = HARDWARE_PRESETS["dgx-a100"]
    fields: Callable[[Any], set[str]] = lambda hw: {f.name for f in dataclasses.fields(hw)}  # noqa: E731
    assert set(UP) | set(DOWN) <= fields(mesh)
    assert set(GPU_UP) | set(GPU_DOWN) <= fields(gpu)
    assert {"compute_grid"} <= fields(mesh)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_plan_simulates(name: str) -> None:
    assert palm.simulate(_load(name, ())).iteration_time_s > 0
