"""Activation CPU offloading (``training.activation_offload``, :mod:`palm.cost.offload`):
the copies over the host link hide behind the compute of the layers that follow, memory
loses the offloaded layers' activations, bad values are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import palm
from palm.config import parse_config
from palm.cost.offload import offload_exposed_s, offload_memory_bytes, offloaded_layers
from palm.errors import ConfigError
from palm.plan import build_plan
from palm.plan.context import plan_context
from palm.validation_modern import _activation_offload
from palm.workload.ops import TransformerLayer
from tests.cli_run import assert_usage_error, run


def test_exposed_copy_time_of_a_small_case_by_hand() -> None:
    # 4 layers, 2 offloaded: window floor(4 / 2) = 2 layers. A copy of 10 GB at 1 GB/s takes
    # 10 s; forward layers take 3 s (a window of 6 s hides 6 of it), backward ones 6 s
    # (a window of 12 s hides all of it).
    f, b = offload_exposed_s(
        layers=4,
        offloaded=2,
        layer_bytes=10e9,
        host_Bps=1e9,
        forward_layer_s=3.0,
        backward_layer_s=6.0,
    )
    assert (f, b) == (2 * (10.0 - 6.0), 0.0)
    # every layer offloaded: a window of one layer each
    f, b = offload_exposed_s(
        layers=4,
        offloaded=4,
        layer_bytes=10e9,
        host_Bps=1e9,
        forward_layer_s=3.0,
        backward_layer_s=6.0,
    )
    assert (f, b) == (4 * 7.0, 4 * 4.0)


def test_a_faster_host_link_never_exposes_more() -> None:
    prev = (float("inf"), float("inf"))
    for gbps in (1.0, 4.0, 16.0, 64.0, 450.0):
        now = offload_exposed_s(
            layers=8,
            offloaded=6,
            layer_bytes=2e9,
            host_Bps=gbps * 1e9,
            forward_layer_s=0.01,
            backward_layer_s=0.02,
        )
        assert now[0] <= prev[0] and now[1] <= prev[1]
        prev = now
    assert prev == (0.0, 0.0)


@pytest.mark.parametrize(
    ("layers", "fraction", "expected"),
    [(126, 95 / 126, 95), (80, 0.25, 20), (80, 0.0, 0), (80, 1e-4, 1), (4, 1.0, 4)],
)
def test_offloaded_layers(layers: int, fraction: float, expected: int) -> None:
    assert offloaded_layers(layers=layers, fraction=fraction) == expected


def test_memory_of_the_offload_by_hand() -> None:
    # 3 of a chunk's layers, 1 GB each, 4 micro-batches in flight: 12 GB freed, and the copy
    # buffers hold two layers (the copy in progress and the layer computing)
    assert offload_memory_bytes(offloaded=3, layer_bytes=1e9, in_flight=4.0) == (12e9, 2e9)
    assert offload_memory_bytes(offloaded=1, layer_bytes=1e9, in_flight=4.0) == (4e9, 1e9)


def _config(offload: float, **hardware: Any) -> palm.SimConfig:
    return parse_config(
        {
            "model": {
                "family": "gpt",
                "layers": 8,
                "hidden": 2048,
                "heads": 16,
                "ffn_hidden": 8192,
                "seq_len": 2048,
                "vocab": 32000,
            },
            "hardware": {"preset": "dgx-a100", **hardware},
            "training": {
                "global_batch": 8,
                "micro_batch": 4,
                "precision": "bf16",
                "activation_offload": offload,
            },
            "parallelism": {"dp": 2},
        }
    )


def test_offload_frees_the_offloaded_layers_activations() -> None:
    """8 layers, half offloaded, one stage, micro-batches in flight ``k``: the device keeps
    ``k (A_stage - 4 A_layer) + 2 A_layer`` of activations, ``A_layer`` from the layer op."""
    base, half = (build_plan(_config(f)) for f in (0.0, 0.5))
    ops = plan_context(_config(0.0), with_links=False).ops(0)
    layer = next(op for op in ops if isinstance(op, TransformerLayer))
    a_layer = layer.activation_bytes(batch=4, tp=1, sp=False, act_bytes=2, recompute="none")
    k = base.stages[0].in_flight_microbatches
    want = base.stages[0].memory.activations_bytes - k * 4 * a_layer + 2 * a_layer
    assert half.stages[0].memory.activations_bytes == pytest.approx(want, rel=1e-12)


def test_a_slow_host_link_exposes_its_copies_in_the_iteration() -> None:
    """On a 0.5 GB/s host link the copies bind: each pass of the chunk waits
    ``N max(0, A/B - w c)``; with one stage and ``m`` micro-batches the iteration grows by
    ``m (E_f + E_b)`` exactly. On the preset's PCIe link they hide."""
    slow = _config(0.5, host_link_gbps=0.5)
    ch = build_plan(slow).chunks[0]
    assert ch.offload_forward_s > 0 and ch.offload_backward_s >= 0
    m = 8 // (2 * 4)
    t_base = palm.simulate(_config(0.0), engine="analytical").iteration_time_s
    t_slow = palm.simulate(slow, engine="analytical").iteration_time_s
    assert t_slow - t_base == pytest.approx(
        m * (ch.offload_forward_s + ch.offload_backward_s), rel=1e-9
    )
    assert palm.simulate(slow).iteration_time_s == pytest.approx(t_slow, rel=1e-9)
    fast = build_plan(_config(0.5)).chunks[0]
    assert fast.offload_forward_s <= ch.offload_forward_s
    assert fast.offload_backward_s <= ch.offload_backward_s


@pytest.mark.parametrize(
    ("offload", "hardware", "match"),
    [
        (1.5, {}, r"training\.activation_offload.*1\.5.*\[0, 1\]"),
        (-0.1, {}, r"training\.activation_offload.*\[0, 1\]"),
        (0.5, {"host_link_gbps": 0.0}, r"training\.activation_offload.*host link"),
    ],
)
def test_bad_offload_values_are_refused(offload: float, hardware: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _config(offload, **hardware)


def test_the_cli_refuses_a_bad_offload_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "offload.toml"
    cfg.write_text(
        '[model]\npreset = "llama2-7b"\n[hardware]\npreset = "dgx-a100"\n'
        "[training]\nglobal_batch = 8\nactivation_offload = 2.0\n"
    )
    assert_usage_error(run("simulate", str(cfg)), "training.activation_offload")


def test_the_recipe_layers_translate_to_a_fraction_of_a_chunk() -> None:
    row = {
        "model": {"layers": 80},
        "parallelism": {"pp": 1, "vp": None},
        "training": {"recipe_hints": {"values": {"cpu_offloading_num_layers": 20}}},
    }
    assert _activation_offload(row) == 0.25
    row["parallelism"] = {"pp": 4, "vp": 2}
    assert _activation_offload(row) == 1.0  # 20 of a chunk's 10 layers: all of them
    row["training"] = {}
    assert _activation_offload(row) == 0.0
