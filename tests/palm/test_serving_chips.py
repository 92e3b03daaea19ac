"""Serving on chips joined by Ethernet (``palm.serving.chips``): a hand-worked decode step of a
T3000 at batch 1, more chip-link bandwidth never slower, the plan's check and the
Tenstorrent multi-chip rows' translation."""

from __future__ import annotations

from typing import Any, cast

import pytest

from palm import ConfigError, parse_config
from palm.hardware.presets import HARDWARE_PRESETS
from palm.hardware.spec import Mesh2DHardware
from palm.serving.chips import chip_allreduce_time, chip_devices, chip_link
from palm.serving.runtime import constants_override
from palm.serving.simulate import serving_run
from palm.serving.validation import load_inference_cases

T3000 = cast(Mesh2DHardware, HARDWARE_PRESETS["wormhole-t3000"])
NO_RUNTIME = {
    kind: {"kernel_us": 0.0, "step_us": 0.0, "sequence_us": 0.0} for kind in ("gpu", "mesh")
}
#: Llama-3.1-70B (80 layers, hidden 8192, 64 heads, 8 KV heads, ffn 28672, vocab 128256)
LLAMA_70B = {"preset": "llama2-70b", "vocab": 128256}


def config(hardware: dict[str, Any], *, tp: int = 8, dp: int = 1, **serving: Any) -> Any:
    table = {"batch": 1, "input_tokens": 128, "output_tokens": 128, "batching": "static"}
    return parse_config(
        {
            "model": dict(LLAMA_70B),
            "hardware": hardware,
            "training": {"mode": "serve", "precision": "bf16"},
            "parallelism": {"tp": tp, "dp": dp},
            "serving": {**table, "weights": "bfp8", "attention_weights": "bfp8", **serving},
        }
    )


def test_chip_link_and_ring_all_reduce_by_hand() -> None:
    link = chip_link(T3000)
    assert link.bandwidth_Bps == pytest.approx(1 * 12.5e9)  # 1 link of 100 Gb/s per edge
    assert link.latency_s == pytest.approx(650e-9)
    # 16 KiB over 8 chips: 2 x 7/8 x 16384 / 12.5e9 + 2 x 7 x 650 ns = 2.294 + 9.1 us
    assert chip_allreduce_time(T3000, n=8, nbytes=16384) == pytest.approx(11.394e-6, rel=1e-3)
    assert chip_devices(T3000) == 8
    assert chip_devices(cast(Mesh2DHardware, HARDWARE_PRESETS["wormhole-n150"])) == 1


def test_t3000_decode_at_batch_1_is_no_faster_than_dram_and_the_ethernet_ring() -> None:
    """tpot >= (weights / 8 + KV) / per-chip DRAM bandwidth + the step's all-reduces."""
    with constants_override(NO_RUNTIME):
        run = serving_run(config({"preset": "wormhole-t3000"}))
    chip_bw = 12 * 24e9  # one chip's 12 GDDR6 channels of 24 GB/s
    weights = run.memory[0].weights_bytes  # one chip's shard, bfp8 (1088 bits per 1024)
    assert weights == pytest.approx(70.6e9 * 1088 / 1024 / 8, rel=0.03)
    kv = 256 * run.memory[0].kv_bytes_per_token  # the longest context, every layer
    # 2 all-reduces a layer of one token's 8192 bf16 activations: 80 x 2 x 11.394 us
    ring = 80 * 2 * (2 * 7 / 8 * 8192 * 2 / 12.5e9 + 2 * 7 * 650e-9)
    assert ring == pytest.approx(1.823e-3, rel=1e-3)
    floor = (weights + kv) / chip_bw + ring
    assert run.outcome.tpot_s >= floor
    assert run.outcome.tpot_s <= 1.3 * floor / T3000.memory_efficiency
    assert run.outcome.decode[0].comm_s >= ring


@pytest.mark.parametrize(
    "field, worse, better",
    [
        ("inter_tile_link_gbps", 12.5, 50.0),
        ("chip_links_per_edge", 1, 4),
        ("inter_tile_link_latency_ns", 650.0, 100.0),
    ],
)
@pytest.mark.parametrize("batch", [1, 32])
def test_more_chip_link_bandwidth_is_never_slower(
    field: str, worse: float, better: float, batch: int
) -> None:
    def run(value: float) -> Any:
        hw = {"preset": "wormhole-t3000", field: value}
        return serving_run(config(hw, batch=batch, input_tokens=1024)).outcome

    slow, fast = run(worse), run(better)
    assert fast.tpot_s <= slow.tpot_s and fast.ttft_s <= slow.ttft_s
    assert fast.tpot_s < slow.tpot_s  # the ring's bandwidth or hop term shrinks


def test_plan_must_cover_the_chips() -> None:
    with pytest.raises(ConfigError) as err:
        config({"preset": "wormhole-t3000"}, tp=4)
    assert err.value.field == "parallelism.tp*pp*dp" and "8 chips" in str(err.value)
    tp2 = serving_run(config({"preset": "wormhole-t3000"}, tp=2, dp=4))
    assert tp2.outcome.tpot_s > 0


def test_multi_chip_tenstorrent_rows_translate_onto_the_presets() -> None:
    data = load_inference_cases(None)
    tt = [c for c in data.cases if c.hardware.startswith("Wormhole")]
    kinds = {c.hardware for c in tt}
    assert kinds == {"Wormhole-n150", "Wormhole-n300", "Wormhole-T3K", "Wormhole-Galaxy"}
    assert not [x for x in data.left_out if "Wormhole" in x.reason or "multi-chip" in x.reason]
    for case in tt:
        (cfg,) = case.configs
        hw = cfg.hardware
        assert isinstance(hw, Mesh2DHardware)
        assert cfg.parallelism.devices == chip_devices(hw)
    dp4 = next(c for c in tt if c.configs[0].parallelism.dp == 4)
    assert (dp4.configs[0].parallelism.tp, dp4.hardware) == (2, "Wormhole-T3K")
