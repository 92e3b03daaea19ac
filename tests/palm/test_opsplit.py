"""Operator-level parallelism: paper Table III groups and volumes."""

from __future__ import annotations

import numpy as np
import pytest

import palm
from palm.network.loads import mesh_profile
from palm.plan import build_plan
from palm.workload.ops import Conv2d, Linear, Pool
from palm.workload.opsplit import SplitOp, split_group, split_groups


def test_2222_linear_split_on_16_tiles_has_table_iii_groups_and_volumes() -> None:
    # Linear [B, M, N, K] = [8 samples, 32 tokens, 256 out, 128 in], split (b, m, n, k)
    op = SplitOp(
        name="fc",
        inner=Linear(name="fc", in_features=128, out_features=256, tokens=32, bias=False),
        split=(2, 2, 2, 2),
    )
    groups = {dim: split_groups((2, 2, 2, 2), axis) for axis, dim in enumerate("bmnk")}
    assert all(len(g) == 8 and all(len(x) == 2 for x in g) for g in groups.values())
    assert groups["k"][0] == (0, 1) and groups["n"][0] == (0, 2)
    assert groups["m"][0] == (0, 4) and groups["b"][0] == (0, 8)
    table = op.table_iii(batch=8)
    b_, m_, n_, k_ = 8, 32, 256, 128
    assert table["forward"] == [(split_group((2, 2, 2, 2), 3), b_ * m_ * n_ / 8)]  # BMN/bmn over k
    assert table["backward"] == [(split_group((2, 2, 2, 2), 2), b_ * m_ * k_ / 8)]  # BMK/bmk, n
    assert table["update"] == [
        (split_group((2, 2, 2, 2), 0), n_ * k_ / 4),  # NK/nk over b
        (split_group((2, 2, 2, 2), 1), n_ * k_ / 4),
    ]  # and over m
    (gemm,) = op.forward_gemms(batch=8, tp=1)
    assert gemm.flops == 2 * b_ * m_ * n_ * k_ / 16  # 2BMNK / bmnk
    assert op.params_per_device(tp=1) == n_ * k_ / 4


def test_conv_and_pool_splits_follow_table_iii() -> None:
    conv = Conv2d(
        name="c",
        in_channels=64,
        out_channels=128,
        in_hw=(56, 56),
        kernel=3,
        padding=1,
        norm_act=False,
    )
    op = SplitOp(name="c", inner=conv, split=(2, 2, 2, 2))  # (b, c, i, k)
    t = op.table_iii(batch=4)
    assert t["forward"][0][1] == 4 * 56 * 56 * 128 / 8  # B Ho Wo K / (b i k), over c
    assert t["backward"][0][1] == 4 * 56 * 56 * 64 / 8  # B H W C / (b i c), over k
    assert t["update"][0][1] == 3 * 3 * 64 * 128 / 4  # R S C K / (c k), over b and i
    (gemm,) = op.forward_gemms(batch=4, tp=1)
    assert gemm.flops == pytest.approx(2 * 4 * 56 * 56 * 9 * 64 * 128 / 16)
    pool = SplitOp(
        name="p",
        inner=Pool(name="p", channels=64, in_hw=(56, 56), kernel=2, stride=2),
        split=(2, 2, 4),
    )
    assert pool.table_iii(batch=4) == {"forward": [], "backward": [], "update": []}


def _mesh_linear(split: list[int] | None, features: int = 1024) -> palm.SimConfig:
    linear = {
        "type": "linear",
        "in_features": features,
        "out_features": features,
        "tokens": 64,
        "bias": False,
    }
    par: dict[str, object] = {"tp": 4, "pp": 1, "dp": 4}
    if split:
        par["linear_split"] = split
    return palm.parse_config(
        {
            "model": {"name": "mlp", "ops": [linear, linear]},
            "hardware": {
                "topology": "mesh2d",
                "tiles": [4, 4],
                "cores_per_tile": [1, 1],
                "core_peak_tflops": {"fp16": 10.0},
                "sram_per_core_mib": 64.0,
                "sram_bandwidth_per_core_gbps": 1000.0,
                "intra_tile_link_gbps": 100.0,
                "inter_tile_link_gbps": 50.0,
                "intra_tile_link_latency_ns": 1.0,
                "inter_tile_link_latency_ns": 20.0,
                "dram_channels": 4,
                "dram_channel_bandwidth_gbps": 100.0,
                "dram_capacity_gib": 16.0,
                "dram_response_ns": 50.0,
            },
            "training": {
                "global_batch": 32,
                "micro_batch": 2,
                "precision": "fp16",
                "optimizer": "sgd",
            },
            "parallelism": par,
        }
    )


def test_split_collectives_run_on_their_groups_in_the_plan() -> None:
    plan = build_plan(_mesh_linear([2, 2, 2, 2]))
    chunk = plan.chunks[0]
    # forward: per layer one all-reduce over k (size 2) of B M N / 8 elements and the
    # all-gather of the n-split output; group members are neighbours in the stage's order
    arr = plan.placement.stage_array(0).reshape(2, 2, 2, 2, 2)
    k_prof = mesh_profile(
        plan.config.hardware,
        arr.reshape(-1, 2),  # type: ignore[arg-type]
        np.roll(arr, -1, axis=3).reshape(-1, 2),
    )
    elems = 2 * 4 * 64 * 1024 / 8  # B = micro-batch x dp = 8 samples
    allreduce = 2 * 1 / 2 * elems * 2 / k_prof.bandwidth_Bps + 2 * k_prof.latency_s
    assert chunk.tp_forward_s > 2 * allreduce  # two layers, plus the all-gathers
    assert plan.stages[0].dp_allreduce_s > 0  # weight gradients over b and m


def test_splits_change_the_result_and_bad_splits_are_config_errors() -> None:
    default = palm.simulate(_mesh_linear(None))
    split = palm.simulate(_mesh_linear([2, 2, 2, 2]))
    assert split.iteration_time_s != default.iteration_time_s
    with pytest.raises(palm.ConfigError, match="parallelism.linear_split"):
        _mesh_linear([2, 2, 2, 1])
    with pytest.raises(palm.ConfigError, match="n divides 1000"):
        _mesh_linear([1, 1, 16, 1], features=1000)  # right product, but 16 does not divide 1000
