"""The analytical engine: a case worked by hand, schedules, monotonicity, determinism."""

from __future__ import annotations

import json

import pytest

import palm
from palm.plan import build_plan
from palm.validation import load_cases


def _analytical(config: palm.SimConfig) -> palm.Result:
    return palm.simulate(config, engine="analytical")


CONTRACT_KEYS = {
    "throughput_samples_per_s",
    "iteration_time_s",
    "model_tflops_per_device",
    "hardware_tflops_per_device",
    "mfu",
    "bubble_fraction",
    "peak_memory_bytes",
    "memory_capacity_bytes",
    "fits_memory",
    "memory_overflow_bytes",
    "engine",
    "events_simulated",
    "sim_wall_s",
    "stages",
    "links",
}


def _toy(**over: object) -> palm.SimConfig:
    """Two bias-free 1024x1024 Linear layers on a 1 TFLOP/s 'GPU' whose memory is so fast that
    only the matrix multiplies cost time, at 100% efficiency whatever their shape."""
    linear = {"type": "linear", "in_features": 1024, "out_features": 1024, "bias": False}
    tables: dict[str, dict[str, object]] = {
        "model": {"name": "toy", "ops": [linear, linear]},
        "hardware": {
            "topology": "gpu-cluster",
            "gpus_per_node": 8,
            "peak_tflops": {"fp32": 1.0},
            "hbm_gib": 80.0,
            "hbm_bandwidth_gbps": 1e9,
            "switch_bandwidth_gbps": 100.0,
            "switch_latency_us": 0.0,
            "inter_node_bandwidth_gbps": 10.0,
            "inter_node_latency_us": 0.0,
            "matmul_efficiency": 1.0,
            "matmul_half_dim": 0.0,
            "memory_efficiency": 1.0,
        },
        "training": {"global_batch": 6, "micro_batch": 2, "precision": "fp32", "optimizer": "sgd"},
        "parallelism": {"tp": 1, "pp": 2, "dp": 1, "schedule": "1f1b"},
    }
    for key, value in over.items():
        section, field = key.split("__")
        tables[section][field] = value
    return palm.parse_config(tables)


def test_two_stage_pipeline_worked_by_hand() -> None:
    result = _analytical(_toy())
    fwd = 2 * 2 * 1024 * 1024 / 1e12  # one micro-batch of 2 samples through one layer
    bwd = 2 * fwd  # input gradient + weight gradient
    send = 2 * 1024 * 4 / 100e9  # 2 x 1024 fp32 activations over the switch
    m = 3
    # (m - 1) max(F + B) + sum(F + B) + a forward and a backward hand-off
    expected = (m - 1) * (fwd + bwd) + 2 * (fwd + bwd) + 2 * send
    assert result.iteration_time_s == pytest.approx(expected, rel=1e-6)
    s0, s1 = result.stages
    assert s0.forward_s == pytest.approx(fwd) and s0.backward_s == pytest.approx(bwd)
    assert s0.bubble_s == pytest.approx(expected - m * (fwd + bwd), rel=1e-6)
    assert s1.bubble_s == pytest.approx(expected - bwd - send - m * (fwd + bwd), rel=1e-6)
    # 2 x forward + backward matrix FLOPs per sample, 6 samples, spread over 2 devices
    assert result.model_tflops_per_device == pytest.approx(
        6 * 2 * 3 * 2 * 1024 * 1024 / 2 / expected / 1e12, rel=1e-6
    )


def test_inference_is_steady_state_without_fill_and_drain() -> None:
    result = _analytical(_toy(training__mode="inference"))
    fwd = 2 * 2 * 1024 * 1024 / 1e12
    send = 2 * 1024 * 4 / 100e9
    assert result.iteration_time_s == pytest.approx(3 * (fwd + send), rel=1e-6)
    assert result.throughput_samples_per_s == pytest.approx(6 / (3 * (fwd + send)), rel=1e-6)


def test_json_contract_keys_and_determinism() -> None:
    cfg = palm.load_config("examples/wafer-t18b.toml")
    a, b = _analytical(cfg).to_dict(), _analytical(cfg).to_dict()
    assert set(a) >= CONTRACT_KEYS
    assert isinstance(a["fits_memory"], bool)
    a.pop("sim_wall_s"), b.pop("sim_wall_s")
    assert json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.case_id)
def test_more_bandwidth_never_slows_an_iteration(case: object) -> None:
    cfg = case.config  # type: ignore[attr-defined]
    base = _analytical(cfg).iteration_time_s
    for field in ("switch_bandwidth_gbps", "inter_node_bandwidth_gbps", "hbm_bandwidth_gbps"):
        hw = cfg.hardware
        faster = palm.parse_config(
            {
                **palm.config_to_dict(cfg),
                "hardware": {**palm.config_to_dict(cfg)["hardware"], field: getattr(hw, field) * 2},
            }
        )
        assert _analytical(faster).iteration_time_s <= base


def test_more_micro_batches_shrink_the_bubble_and_interleaving_shrinks_it_more() -> None:
    tables = {
        "model": {"preset": "t-145b"},
        "hardware": {"preset": "dgx-a100"},
        "training": {
            "global_batch": 96,
            "micro_batch": 1,
            "precision": "fp16",
            "recompute": "full",
        },
        "parallelism": {"tp": 8, "pp": 8, "dp": 4},
    }
    few = _analytical(palm.parse_config(tables))
    many = _analytical(
        palm.parse_config({**tables, "training": {**tables["training"], "global_batch": 384}})
    )
    assert many.bubble_fraction < few.bubble_fraction
    inter = _analytical(
        palm.parse_config(
            {
                **tables,
                "parallelism": {
                    **tables["parallelism"],
                    "schedule": "interleaved-1f1b",
                    "interleave": 2,
                },
            }
        )
    )
    assert inter.bubble_fraction < few.bubble_fraction
    assert inter.iteration_time_s < few.iteration_time_s


def test_uniform_pipeline_bubble_matches_p_minus_1_over_m() -> None:
    plan = build_plan(_toy(parallelism__pp=2, training__global_batch=16))
    result = _analytical(plan.config)
    m, p = plan.micro_batches, 2
    work = 3 * 2 * 2 * 1024 * 1024 / 1e12  # forward + backward of one micro-batch
    send = 2 * 1024 * 4 / 100e9
    # stage 0 idles (p - 1) stage-times plus both hand-offs out of (m + p - 1) stage-times
    expected = ((p - 1) * work + 2 * send) / ((m + p - 1) * work + 2 * send)
    assert result.stages[0].bubble_s / result.iteration_time_s == pytest.approx(expected, rel=1e-6)
    assert result.stages[0].bubble_s / result.iteration_time_s == pytest.approx(
        (p - 1) / (m + p - 1), rel=0.02
    )


def test_validation_cases_load_and_simulate() -> None:
    cases = load_cases()
    assert len(cases) == 14  # SC21 Table 1 (6), Korthikanti et al. 2022 Table 5 (8)
    for case in cases:
        r = _analytical(case.config)
        assert r.fits_memory and 0 < r.mfu < 1 and r.iteration_time_s > 0
