"""Weight streaming (``hardware.execution = "weight-streaming"``, docs/model.md sec. 7d): the
recurrence of :mod:`palm.cost.weight_streaming` worked by hand, a tiny model bound by its weight
stream, monotone in the link's bandwidth, the model state off the mesh, the Cerebras presets'
figures, and bad values refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import palm
from palm.api import plan_for
from palm.cost.weight_streaming import streamed_backward_s, streamed_forward_s
from palm.errors import ConfigError
from palm.hardware import HARDWARE_PRESETS, Mesh2DHardware
from tests.palm.mesh_toys import LINEAR_SIDE as SIDE
from tests.palm.mesh_toys import linear_toy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LAYER_BYTES = SIDE * SIDE * 2.0  # one fp16 256 x 256 weight


def _config(
    *, gbps: float = 0.1, execution: str = "weight-streaming", **par: Any
) -> palm.SimConfig:
    """Four 256x256 linear layers, fp16 SGD, one micro-batch per rank on a 16-core mesh."""
    hardware = {"execution": execution, "external_memory_gbps": gbps}
    return linear_toy(hardware=hardware, parallelism=par)


def test_forward_recurrence_by_hand() -> None:
    # stream-bound: arrivals at 3 and 6, compute ends at 4 and 7
    assert streamed_forward_s(compute_s=[1.0, 1.0], stream_s=[3.0, 3.0]) == 7.0
    # compute-bound: only the first stream is exposed, 1 + 3 + 3
    assert streamed_forward_s(compute_s=[3.0, 3.0], stream_s=[1.0, 1.0]) == 7.0
    # one operator of prefetch: the third stream waits for the first operator's buffer
    # (free at 6), arrives at 12, not 8, and the pass ends at 17, not 16
    assert streamed_forward_s(compute_s=[5.0, 5.0, 5.0], stream_s=[1.0, 1.0, 6.0]) == 17.0
    assert streamed_forward_s(compute_s=[], stream_s=[]) == 0.0


def test_backward_recurrence_by_hand() -> None:
    # computes end at 4 and 7; gradients out at 4 + 2 = 6 and max(6, 7) + 2 = 9
    got = streamed_backward_s(compute_s=[1.0, 1.0], stream_s=[3.0, 3.0], out_s=[2.0, 2.0])
    assert got == 9.0


def test_tiny_model_is_bound_by_its_weight_stream() -> None:
    """At 0.1 GB/s one layer's weights take 1.31 ms against microseconds of compute: the
    iteration is the eight weight streams in (four forward, four backward), the last
    gradient's stream out, and little else."""
    config = _config(gbps=0.1)
    s = LAYER_BYTES / 0.1e9
    plan = plan_for(config)
    (ch,) = plan.chunks
    assert ch.external_bytes_forward == 4 * LAYER_BYTES
    assert ch.external_bytes_backward == 8 * LAYER_BYTES  # weights in, gradients out
    assert 4 * s <= ch.forward_compute_s < 4 * s * 1.01
    assert 5 * s <= ch.backward_compute_s + ch.recompute_s < 5 * s * 1.01
    for engine in ("analytical", "event"):
        r = palm.simulate(config, engine=engine)
        assert 9 * s <= r.iteration_time_s < 9 * s * 1.05
        assert r.stages[0].optimizer_s == 0.0  # in the memory service


def test_fast_link_leaves_compute_and_the_first_stream() -> None:
    """With a link far faster than compute every pass is its compute plus the first
    operator's stream (the one nothing hides): ten times the bandwidth saves exactly nine
    tenths of one layer's stream."""
    (a,) = plan_for(_config(gbps=1e5)).chunks
    (b,) = plan_for(_config(gbps=1e6)).chunks
    saved = LAYER_BYTES / 1e14 - LAYER_BYTES / 1e15
    assert a.forward_compute_s - b.forward_compute_s == pytest.approx(saved, rel=1e-6)


def test_monotone_in_the_link_bandwidth() -> None:
    for engine in ("analytical", "event"):
        times = [
            palm.simulate(_config(gbps=g), engine=engine).iteration_time_s
            for g in (0.05, 0.1, 1.0, 10.0, 100.0, 1e4)
        ]
        assert all(a >= b for a, b in zip(times, times[1:], strict=False)), times
        assert times[0] > times[-1]


def test_model_state_is_off_the_mesh() -> None:
    streamed = palm.simulate(_config(gbps=1.0), engine="analytical")
    stored = palm.simulate(_config(execution="overlapped", gbps=0.0), engine="analytical")
    mem = streamed.memory
    assert mem.weights_bytes == mem.gradients_bytes == mem.optimizer_bytes == 0.0
    assert stored.memory.weights_bytes == 4 * LAYER_BYTES
    # capacity is SRAM alone: no share of DRAM
    assert streamed.memory_capacity_bytes == 2**20
    assert stored.memory_capacity_bytes > 2**20
    assert plan_for(_config(gbps=1.0)).dram is None


def test_cerebras_presets_match_their_sources() -> None:
    cs2, cs3 = (HARDWARE_PRESETS[n] for n in ("cerebras-cs2", "cerebras-cs3"))
    assert isinstance(cs2, Mesh2DHardware) and isinstance(cs3, Mesh2DHardware)
    for hw, pflops, sram_gb, pbps in ((cs2, 62.5, 40.0, 20.0), (cs3, 125.0, 44.0, 21.0)):
        assert hw.weight_streaming and hw.external_memory_gbps == 150.0  # 1.2 Tb/s
        n = hw.device_count
        assert n == 320
        assert hw.core_peak_tflops.bf16 * n == pytest.approx(pflops * 1e3)
        assert hw.sram_per_core_mib * 2**20 * n == pytest.approx(sram_gb * 1e9)
        assert hw.sram_bandwidth_per_core_gbps * n == pytest.approx(pbps * 1e6)
    # fabric: Pb/s / 8 over cores x 4 ports, times the sqrt(cores / 320) rows of a block edge
    for hw, cores, pbits in ((cs2, 850_000, 220.0), (cs3, 900_000, 214.0)):
        port = pbits * 1e6 / 8 / (cores * 4)
        assert hw.intra_tile_link_gbps == pytest.approx(port * (cores / 320) ** 0.5, rel=1e-4)


def test_example_runs_and_fits() -> None:
    config = palm.load_config(EXAMPLES / "cerebras-cs3-t18b.toml")
    r = palm.simulate(config, engine="analytical")
    assert r.peak_memory_bytes <= r.memory_capacity_bytes
    # 18.4B bf16 weights over 150 GB/s, in and again in backward, per micro-batch
    weights = 18_449_756_160 * 2.0 / 150e9
    assert r.iteration_time_s >= 16 * 2 * weights


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gbps": -1.0}, "hardware.external_memory_gbps"),
        ({"gbps": 0.0}, "hardware.external_memory_gbps"),
        ({"execution": "streaming"}, "hardware.execution"),
    ],
)
def test_bad_hardware_values_are_refused(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        plan_for(_config(**change))
    assert err.value.field == field


def test_a_pipeline_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        plan_for(_config(gbps=1.0, pp=2, dp=8))
    assert err.value.field == "parallelism.pp"


def test_cli_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from search.cli import main

    path = tmp_path / "bad.toml"
    text = (EXAMPLES / "cerebras-cs3-t18b.toml").read_text()
    path.write_text(
        text.replace(
            'preset = "cerebras-cs3"', 'preset = "cerebras-cs3"\nexternal_memory_gbps = -5'
        )
    )
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "hardware.external_memory_gbps" in err[0], err
