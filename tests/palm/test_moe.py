"""Mixture of experts: parameter counts against published ones, the dispatch all-to-all pinned
to hand-worked bytes and times, expert sharding of memory and gradients, expert-parallel
validation (Megatron-Core's layout rules)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from palm import ConfigError, parse_config
from palm.cost.collectives import (
    all_to_all_step,
    bytes_sent_per_member,
    cluster_all_to_all_step,
    collective_time,
    hierarchical_inter_node_scale,
)
from palm.cost.compute import device_rates, gemm_time
from palm.hardware.presets import HARDWARE_PRESETS
from palm.plan import build_plan
from palm.workload import MODEL_PRESETS, TransformerLayer, build_workload
from palm.workload.moe import MoELayer
from palm.workload.presets import MOE_PUBLISHED_PARAMS

H100 = HARDWARE_PRESETS["dgx-h100"]


def moe_layer(**changes: Any) -> MoELayer:
    """A Mixtral-8x7B layer: h 4096, 32 heads, 8 KV heads, 8 SwiGLU experts of 14336, top-2."""
    base = MoELayer(
        name="l",
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn_hidden=0,
        seq_len=4096,
        mlp="swiglu",
        bias=False,
        norm="rmsnorm",
        dropout=False,
        experts=8,
        top_k=2,
        moe_ffn_hidden=14336,
    )
    return dataclasses.replace(base, **changes)


# ------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED_PARAMS))
def test_moe_presets_match_published_total_parameters(name: str) -> None:
    total, _, _ = MOE_PUBLISHED_PARAMS[name]
    assert build_workload(MODEL_PRESETS[name]).params == pytest.approx(total, rel=0.01)


@pytest.mark.parametrize(
    "name", ["mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"]
)
def test_moe_presets_match_published_active_parameters(name: str) -> None:
    _, active, _ = MOE_PUBLISHED_PARAMS[name]
    assert build_workload(MODEL_PRESETS[name]).active_params == pytest.approx(active, rel=0.02)


def test_gpt_oss_active_parameters_as_its_model_card_counts_them() -> None:
    # the card's 5.13B per token counts the unembedding but not the input embedding
    m = MODEL_PRESETS["gpt-oss-120b"]
    w = build_workload(m)
    assert w.active_params - m.vocab * m.hidden == pytest.approx(5.13e9, rel=0.01)


def test_mixtral_8x7b_parameter_count_is_exact() -> None:
    # the released checkpoint (mistralai/Mixtral-8x7B-v0.1) holds 46,702,792,704 parameters:
    # per layer 4096 (4096 + 2 x 1024) + 4096^2 attention, 8 x 3 x 4096 x 14336 experts,
    # 4096 x 8 router, 2 x 4096 norms; embeddings 2 x 32000 x 4096, final norm 4096
    layer = 4096 * 6144 + 4096**2 + 8 * 3 * 4096 * 14336 + 4096 * 8 + 2 * 4096
    assert layer == moe_layer().params
    assert build_workload(MODEL_PRESETS["mixtral-8x7b"]).params == 46_702_792_704
    assert 32 * layer + 2 * 32000 * 4096 + 4096 == 46_702_792_704


def test_deepseek_v3_mla_and_layer_kinds() -> None:
    w = build_workload(MODEL_PRESETS["deepseek-v3"])
    layers = [op for op in w.ops if isinstance(op, TransformerLayer)]
    assert all(isinstance(op, MoELayer) and op.mla for op in layers)
    assert [op.experts for op in layers[:4]] == [0, 0, 0, 256]
    assert layers[0].ffn_hidden == 18432 and layers[3].ffn_hidden == 0
    # MLA (DeepSeek-V3 config): q 7168x1536 + 1536 norm + 1536 x 128 x 192;
    # kv 7168 x (512 + 64) + 512 norm + 512 x 128 x (128 + 128); out 128 x 128 x 7168
    mla = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256
    assert layers[3].attention_params == mla + 128 * 128 * 7168 == 187_107_328


def test_moe_layer_without_experts_is_the_dense_layer() -> None:
    dense = TransformerLayer(
        name="d", hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, seq_len=2048, mlp="swiglu"
    )
    same = MoELayer(**{f.name: getattr(dense, f.name) for f in dataclasses.fields(dense)})
    assert same.params == dense.params
    for tp in (1, 4):
        assert same.params_per_device(tp=tp) == dense.params_per_device(tp=tp)
        assert same.forward_gemms(batch=2, tp=tp) == dense.forward_gemms(batch=2, tp=tp)
        assert same.forward_collectives(
            batch=2, tp=tp, sp=True, act_bytes=2
        ) == dense.forward_collectives(batch=2, tp=tp, sp=True, act_bytes=2)


def test_head_dim_sets_the_query_width() -> None:
    # Qwen3-30B-A3B: 32 heads of 128 on a hidden size of 2048 -> queries 4096 wide
    layer = TransformerLayer(
        name="q", hidden=2048, heads=32, kv_heads=4, ffn_hidden=6144, seq_len=8, head_dim=128
    )
    assert layer.q_dim == 4096 and layer.kv_dim == 512
    qkv, _, _, proj, _, _ = layer.forward_gemms(batch=1, tp=1)
    assert (qkv.n, qkv.k) == (4096 + 2 * 512, 2048) and (proj.n, proj.k) == (2048, 4096)


# ------------------------------------------------------------------------------ compute


def test_expert_gemms_are_grouped_and_count_top_k_tokens() -> None:
    layer = moe_layer(ep=4)
    router, up, down = layer.moe_gemms(batch=1, tp=1)
    assert (router.m, router.n, router.k) == (4096, 8, 4096)
    # 4096 tokens x top-2 = 8192 rows over 2 local experts (8 / ep 4): 4096 rows each
    assert (up.m, up.n, up.k, up.count, up.grouped) == (4096, 2 * 14336, 4096, 2, True)
    assert (down.m, down.n, down.k, down.count) == (4096, 4096, 14336, 2)
    # each EP rank routes its own 4096 tokens: FLOPs summed over the 4 ranks =
    # all tokens x top-k x expert MLP FLOPs
    assert 4 * (up.flops + down.flops) == pytest.approx(4 * 4096 * 2 * 2 * 3 * 4096 * 14336)


def test_capacity_factor_and_load_imbalance_scale_the_busiest_device() -> None:
    base = moe_layer(ep=8)
    rows = base.moe_gemms(batch=1, tp=1)[1].m
    assert moe_layer(ep=8, load_imbalance=1.5).moe_gemms(batch=1, tp=1)[1].m == 1.5 * rows
    # a capacity factor pads every expert buffer to c x its fair share, whatever the imbalance
    capped = moe_layer(ep=8, capacity_factor=1.25, load_imbalance=3.0)
    assert capped.moe_gemms(batch=1, tp=1)[1].m == 1.25 * rows
    assert capped.dispatched_tokens(batch=1, tp=1) == 1.25 * base.dispatched_tokens(batch=1, tp=1)


def test_grouped_gemm_efficiency_slows_only_grouped_products() -> None:
    # from no grouped loss (the preset carries the fitted one) to half
    fast = dataclasses.replace(
        device_rates(H100, "bf16"), grouped_gemm_efficiency=1.0, grouped_expert_s=0.0
    )
    slow = dataclasses.replace(fast, grouped_gemm_efficiency=0.5)
    router, up, _ = moe_layer(ep=4).moe_gemms(batch=1, tp=1)
    assert gemm_time(router, slow) == gemm_time(router, fast)
    assert gemm_time(up, slow) == pytest.approx(2 * gemm_time(up, fast))


def test_one_local_expert_is_an_ordinary_product() -> None:
    # Mixtral 8x7B at ep 8: one expert per device, so its MLP is one plain GEMM per
    # projection (Megatron-Core's grouped MLP with one local expert) and pays no grouped loss;
    # at ep 4 the two local experts form a grouped GEMM
    slow = dataclasses.replace(
        device_rates(H100, "bf16"), grouped_gemm_efficiency=0.5, grouped_expert_s=20e-6
    )
    _, up1, down1 = moe_layer(ep=8).moe_gemms(batch=1, tp=1)
    assert (up1.count, up1.grouped, down1.grouped) == (1, False, False)
    assert gemm_time(up1, slow) == gemm_time(
        dataclasses.replace(up1, grouped=True),
        dataclasses.replace(slow, grouped_gemm_efficiency=1.0, grouped_expert_s=0.0),
    )
    _, up2, _ = moe_layer(ep=4).moe_gemms(batch=1, tp=1)
    assert (up2.count, up2.grouped) == (2, True)


def test_grouped_gemm_pays_a_fixed_time_per_local_expert() -> None:
    # 20 us per expert kernel: Mixtral at ep 4 has 2 local experts, so each grouped product
    # takes 2 x 20 us more in every pass; the router (a plain GEMM) does not change
    base = dataclasses.replace(
        device_rates(H100, "bf16"), grouped_gemm_efficiency=1.0, grouped_expert_s=0.0
    )
    per_expert = dataclasses.replace(base, grouped_expert_s=20e-6)
    router, up, down = moe_layer(ep=4).moe_gemms(batch=1, tp=1)
    assert gemm_time(up, per_expert) - gemm_time(up, base) == pytest.approx(2 * 20e-6)
    assert gemm_time(down, per_expert) - gemm_time(down, base) == pytest.approx(2 * 20e-6)
    assert gemm_time(router, per_expert) == gemm_time(router, base)
    # the hardware field reaches the rates in seconds
    hw = dataclasses.replace(H100, grouped_gemm_expert_us=20.0)
    assert device_rates(hw, "bf16").grouped_expert_s == pytest.approx(20e-6)
    cfg = parse_config(mixtral(ep=4, dp=16))
    assert cfg.hardware.grouped_gemm_expert_us == H100.grouped_gemm_expert_us
    tables = mixtral(ep=4)
    tables["hardware"] = {"preset": "dgx-h100", "grouped_gemm_expert_us": 5.0}
    assert parse_config(tables).hardware.grouped_gemm_expert_us == 5.0


# ------------------------------------------------------------------------------ all-to-all


def test_top2_dispatch_all_to_all_bytes_hand_worked() -> None:
    # b 1, s 4096, h 4096, bf16, top-2, ep 8: each device sends D = 4096 x 2 = 8192 rows of
    # 4096 x 2 B = 64 MiB per all-to-all, 7/8 of it off-device; dispatch and combine forward,
    # their mirrors backward
    layer = moe_layer(ep=8)
    colls = layer.forward_collectives(batch=1, tp=1, sp=False, act_bytes=2)
    assert [(c.kind, c.group, c.nbytes) for c in colls] == [
        ("all-to-all", "ep", 67_108_864.0),
        ("all-to-all", "ep", 67_108_864.0),
    ]
    assert bytes_sent_per_member(colls[0], n=8) == 58_720_256.0
    assert layer.backward_collectives(batch=1, tp=1, sp=False, act_bytes=2) == colls


def test_all_to_all_with_tp_and_etp_hand_worked() -> None:
    # tp 2 with sequence parallelism: 2048 tokens enter each device, D = 4096 rows = 32 MiB;
    # etp 2 gathers N = 2 D rows (64 MiB) for its half of each expert and reduce-scatters them;
    # the attention keeps its all-gather / reduce-scatter pair, the absent dense MLP drops its
    layer = moe_layer(ep=4, etp=2)
    colls = layer.forward_collectives(batch=1, tp=2, sp=True, act_bytes=2)
    sbh = 4096 * 4096 * 2.0
    assert [(c.kind, c.group, c.nbytes) for c in colls] == [
        ("all-gather", "tp", sbh),
        ("reduce-scatter", "tp", sbh),
        ("all-to-all", "ep", 2**25),
        ("all-gather", "etp", 2**26),
        ("reduce-scatter", "etp", 2**26),
        ("all-to-all", "ep", 2**25),
    ]


def test_all_to_all_time_inside_a_node_and_across_nodes() -> None:
    nbytes = 67_108_864.0
    coll = dataclasses.replace(moe_layer(ep=8).moe_collectives(batch=1, tp=1, act_bytes=2)[0])
    # 8 GPUs of one DGX-H100: 7/8 B over NVLink (450 GB/s) + 7 x 2 us
    inside = cluster_all_to_all_step(H100, np.arange(8)[None, :])
    t = collective_time(coll, n=8, step=inside)
    assert t == pytest.approx(7 / 8 * nbytes / 450e9 + 7 * 2e-6)
    # 16 GPUs over 2 nodes: 7/16 B on NVLink, 8/16 B on the 50 GB/s NIC, which dominates
    across = cluster_all_to_all_step(H100, np.arange(16)[None, :])
    t = collective_time(coll, n=16, step=across)
    assert t == pytest.approx(8 / 16 * nbytes / 50e9 + 15 * 5e-6)
    # a group spread one GPU per node sends everything through the NIC
    spread = all_to_all_step(
        n=4, local=1, intra_Bps=450e9, inter_Bps=50e9, intra_latency_s=0, inter_latency_s=0
    )
    assert collective_time(coll, n=4, step=spread) == pytest.approx(3 / 4 * nbytes / 50e9)


MIXTRAL_H100 = {
    "model": {"preset": "mixtral-8x7b"},
    "hardware": {"preset": "dgx-h100"},
    "training": {"global_batch": 64, "micro_batch": 1, "zero": 1, "recompute": "full"},
    "parallelism": {"tp": 1, "pp": 1, "dp": 16, "ep": 8},
}


def mixtral(**parallel: Any) -> dict[str, Any]:
    tables = {k: dict(v) for k, v in MIXTRAL_H100.items()}
    tables["parallelism"].update(parallel)
    return tables


def test_plan_prices_expert_parallel_all_to_all_on_the_real_topology() -> None:
    inside = build_plan(parse_config(mixtral(ep=8)))
    split = mixtral(ep=8)
    split["hardware"] = {"preset": "dgx-h100", "gpus_per_node": 4}
    across = build_plan(parse_config(split))
    layer = next(op for op in inside.workload.ops if isinstance(op, MoELayer))
    assert layer.ep == 8
    a2a_in = 2 * 32 * (7 / 8 * 2**26 / 450e9 + 7 * 2e-6)  # two per layer, 32 layers
    assert inside.chunks[0].tp_forward_s == pytest.approx(a2a_in)
    # with 4 GPUs per node the 8 EP ranks span two nodes: half of each buffer crosses the
    # 50 GB/s NICs (3/8 stays on NVLink), about 8x slower
    a2a_across = 2 * 32 * (4 / 8 * 2**26 / 50e9 + 7 * 5e-6)
    assert across.chunks[0].tp_forward_s == pytest.approx(a2a_across)
    # full recompute re-runs the dispatch in the backward pass
    assert inside.chunks[0].tp_backward_s == pytest.approx(2 * a2a_in)


def test_hierarchical_dispatch_sends_one_copy_per_remote_node_hand_worked() -> None:
    # Qwen3-30B-A3B: 128 experts, top-8, over 2 nodes of 64 experts each. A node gets none of
    # a token's 8 copies with p0 = C(64, 8) / C(128, 8) = 4426165368 / 1429702652400, so the
    # NIC carries 1 - p0 copies per token instead of 8 x 1/2 = 4: a factor 2 (1 - p0) / 8
    p0 = 4426165368 / 1429702652400
    scale = hierarchical_inter_node_scale(experts=128, top_k=8, nodes=2)
    assert scale == pytest.approx(2 * (1 - p0) / 8)
    assert scale == pytest.approx(0.24923, abs=1e-5)
    # one node, or one copy per token: nothing to deduplicate
    assert hierarchical_inter_node_scale(experts=128, top_k=8, nodes=1) == 1.0
    assert hierarchical_inter_node_scale(experts=8, top_k=1, nodes=2) == 1.0
    # many nodes, few copies: almost every copy goes to its own node (DeepSeek-V3: 256
    # experts, top-8, 16 nodes: 16 (1 - C(240, 8) / C(256, 8)) / 8 = 0.81)
    assert hierarchical_inter_node_scale(experts=256, top_k=8, nodes=16) == pytest.approx(
        16 * (1 - math.comb(240, 8) / math.comb(256, 8)) / 8
    )


def test_hierarchical_all_to_all_step_hand_worked() -> None:
    # 16 GPUs over 2 DGX-H100 nodes, factor s: the NIC carries 8 s parts, NVLink its 7 own
    # parts plus the 8 x 7/8 forwarded ones: max(14 / 450e9, 8 s / 50e9) per part
    s = hierarchical_inter_node_scale(experts=128, top_k=8, nodes=2)
    flat = cluster_all_to_all_step(H100, np.arange(16)[None, :])
    deep = cluster_all_to_all_step(H100, np.arange(16)[None, :], routing=(128, 8))
    assert deep.bandwidth_Bps == pytest.approx(15 / max(14 / 450e9, 8 * s / 50e9))
    assert flat.bandwidth_Bps / deep.bandwidth_Bps == pytest.approx(s)


def test_flex_dispatch_sends_one_copy_per_destination_rank_over_nvlink_hand_worked() -> None:
    # Qwen3-235B at ep 16 inside one NVLink domain (GB300 NVL72 segment): 128 experts, 8 per
    # rank, top-8. A rank gets none of a token's copies with p0 = C(120, 8) / C(128, 8) =
    # 840261910995 / 1429702652400 = 0.5877, so the flex dispatcher sends 16 (1 - p0) = 6.60
    # rows per token where the all-to-all dispatcher sends 8: every NVLink part x 0.8246
    p0 = 840261910995 / 1429702652400
    r = 16 * (1 - p0) / 8
    assert r == pytest.approx(0.82456, abs=1e-5)
    assert hierarchical_inter_node_scale(experts=128, top_k=8, nodes=16) == pytest.approx(r)
    gb300 = HARDWARE_PRESETS["gb300-nvl72"]
    flat = cluster_all_to_all_step(gb300, np.arange(16)[None, :])
    flex = cluster_all_to_all_step(gb300, np.arange(16)[None, :], routing=(128, 8))
    assert flat.bandwidth_Bps == pytest.approx(15 / (15 / 900e9))
    assert flex.bandwidth_Bps == pytest.approx(15 / (15 * r / 900e9))
    assert flex.latency_s == flat.latency_s == pytest.approx(2e-6)
    # one DGX-H100 node, 16 experts per rank: 8 (1 - C(112, 8) / C(128, 8)) / 8 = 0.6674
    one = cluster_all_to_all_step(H100, np.arange(8)[None, :], routing=(128, 8))
    flat8 = cluster_all_to_all_step(H100, np.arange(8)[None, :])
    assert flat8.bandwidth_Bps / one.bandwidth_Bps == pytest.approx(0.66742, abs=1e-5)
    # one expert per rank (Mixtral, 8 experts top-2 on 8 ranks): the k copies already go to k
    # ranks, nothing to deduplicate; gpt-oss at ep 64 (2 per rank, top-4): 0.988
    assert hierarchical_inter_node_scale(experts=8, top_k=2, nodes=8) == pytest.approx(1.0)
    assert hierarchical_inter_node_scale(experts=128, top_k=4, nodes=64) == pytest.approx(
        0.98819, abs=1e-5
    )
    # across two nodes the NVLink parts (7 own + 8 x 7/8 forwarded) shrink by the same factor
    across = all_to_all_step(
        n=16,
        local=8,
        intra_Bps=450e9,
        inter_Bps=1e30,
        intra_latency_s=0,
        inter_latency_s=0,
        inter_scale=0.5,
        rank_scale=r,
    )
    assert across.bandwidth_Bps == pytest.approx(15 / (14 * r / 450e9))


def test_plan_prices_the_deepep_dispatcher_across_nodes() -> None:
    # Mixtral on 4-GPU nodes, ep 8 over 2 nodes: 8 experts, top-2; p0 = C(4, 2) / C(8, 2)
    split = mixtral(ep=8)
    split["hardware"] = {"preset": "dgx-h100", "gpus_per_node": 4}
    flat = build_plan(parse_config(split))
    split["parallelism"]["moe_dispatcher"] = "deepep"
    deep = build_plan(parse_config(split))
    s = 2 * (1 - 6 / 28) / 2
    nvlink = (3 + 4 * 3 / 4) / 8 * 2**26 / 450e9
    a2a = 2 * 32 * (max(nvlink, 4 * s / 8 * 2**26 / 50e9) + 7 * 5e-6)
    assert deep.chunks[0].tp_forward_s == pytest.approx(a2a)
    assert deep.chunks[0].tp_forward_s < flat.chunks[0].tp_forward_s
    with pytest.raises(ConfigError, match="moe_dispatcher"):
        split["parallelism"]["moe_dispatcher"] = "nccl"
        parse_config(split)


def test_tp_comm_overlap_does_not_hide_the_expert_all_to_all() -> None:
    # Mixtral at tp 2, ep 8 on 16 GPUs: TP overlap pipelines only the TP collectives with the
    # linear products; the dispatch and combine stay on the critical path
    sp = {"tp": 2, "dp": 8, "ep": 8, "sequence_parallel": True}
    plain = build_plan(parse_config(mixtral(**sp)))
    overlapped = build_plan(parse_config(mixtral(**sp, tp_comm_overlap=True)))
    layer = next(op for op in plain.workload.ops if isinstance(op, MoELayer))
    a2a = [
        x for x in layer.forward_collectives(batch=1, tp=2, sp=True, act_bytes=2) if x.group == "ep"
    ]
    assert len(a2a) == 2
    # 4096 tokens / tp 2 x top-2 = 4096 rows of 8 KiB: 32 MiB, 7/8 of it over NVLink
    one = 7 / 8 * 2**25 / 450e9 + 7 * 2e-6
    assert overlapped.chunks[0].tp_forward_s >= 32 * 2 * one * (1 - 1e-9)
    assert overlapped.chunks[0].tp_forward_s < plain.chunks[0].tp_forward_s


def test_moe_a2a_overlap_hides_the_all_to_all_behind_compute() -> None:
    # across two 4-GPU nodes the all-to-all is slow; overlapped with another micro-batch it
    # is exposed only where it exceeds the chunk's compute (forward + backward + recompute)
    split = mixtral(ep=8)
    split["hardware"] = {"preset": "dgx-h100", "gpus_per_node": 4}
    exposed = build_plan(parse_config(split)).chunks[0]
    split["parallelism"]["moe_a2a_overlap"] = True
    hidden = build_plan(parse_config(split)).chunks[0]
    a2a = exposed.tp_forward_s + exposed.tp_backward_s
    compute = exposed.forward_compute_s + exposed.backward_compute_s + exposed.recompute_s
    assert hidden.tp_forward_s == 0.0
    assert hidden.tp_backward_s == pytest.approx(max(0.0, a2a - compute))


def test_expert_states_are_sharded_by_ep_and_zero_over_expert_data_parallel() -> None:
    plan = build_plan(parse_config(mixtral(ep=8)))
    w = plan.workload
    experts = sum(op.expert_params for op in w.ops if isinstance(op, MoELayer))
    dense = w.params - experts
    mem = plan.stages[0].memory
    assert plan.stages[0].params_per_device == pytest.approx(dense + experts / 8)
    assert mem.weights_bytes == pytest.approx(2 * (dense + experts / 8))
    # ZeRO-1: dense optimizer states over dp = 16, expert states over edp = 16 / 8 = 2
    assert mem.optimizer_bytes == pytest.approx(12 * (dense / 16 + experts / 8 / 2))


def test_expert_gradients_are_reduced_over_the_expert_data_parallel_group() -> None:
    layer = moe_layer(ep=4, etp=2)
    colls = layer.update_collectives(tp=2, dp=8, grad_bytes=2.0)
    per_device_experts = layer.expert_params / 8
    dense = layer.params_per_device(tp=2) - per_device_experts
    assert [(c.group, c.nbytes) for c in colls] == [
        ("dp", dense * 2.0),
        ("edp", per_device_experts * 2.0),  # over edp = 2 x 8 / (4 x 2) = 2 devices
    ]
    assert layer.update_collectives(tp=1, dp=8, grad_bytes=2.0)[1:] == ()  # edp = 1


def test_more_expert_parallelism_less_memory_more_all_to_all() -> None:
    small = build_plan(parse_config(mixtral(ep=2)))
    big = build_plan(parse_config(mixtral(ep=8)))
    assert big.stages[0].memory.total_bytes < small.stages[0].memory.total_bytes
    assert big.chunks[0].tp_forward_s > small.chunks[0].tp_forward_s


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"ep": 3}, "parallelism.ep", "a divisor of model.experts = 8"),
        ({"ep": 8, "etp": 4}, "parallelism.ep*etp", "a divisor of tp x cp x dp = 16"),
        ({"ep": 1, "etp": 5}, "parallelism.etp", "a divisor of model.moe_ffn_hidden = 14336"),
        ({"ep": 0}, "parallelism.ep", "an integer >= 1"),
        ({"tp": 2, "dp": 8}, "parallelism.sequence_parallel", "true when tp > 1"),
    ],
)
def test_expert_parallel_validation_errors(
    changes: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(mixtral(**changes))
    message = str(err.value)
    assert message.startswith(f"{field} = ") and fragment in message and "\n" not in message


@pytest.mark.parametrize(
    ("model", "field", "fragment"),
    [
        ({"top_k": 9}, "model.top_k", "1..experts = 8"),
        ({"moe_load_imbalance": 0.5}, "model.moe_load_imbalance", ">= 1"),
        ({"capacity_factor": -1.0}, "model.capacity_factor", "0 (dropless)"),
        ({"dense_layers": 32}, "model.dense_layers", "fewer than model.layers = 32"),
        ({"moe_layer_freq": 0}, "model.moe_layer_freq", ">= 1"),
    ],
)
def test_moe_model_validation_errors(model: dict[str, Any], field: str, fragment: str) -> None:
    tables = mixtral()
    tables["model"].update(model)
    with pytest.raises(ConfigError) as err:
        parse_config(tables)
    assert str(err.value).startswith(f"{field} = ") and fragment in str(err.value)


def test_expert_parallelism_on_a_dense_model_is_refused() -> None:
    tables = mixtral(ep=2)
    tables["model"] = {"preset": "llama2-7b"}
    with pytest.raises(ConfigError, match=r"^parallelism.ep = 2 .*model.experts = 0"):
        parse_config(tables)
    tables["model"] = {"preset": "llama2-7b", "top_k": 2}
    with pytest.raises(ConfigError, match=r"^model.top_k = 2 .*experts > 0"):
        parse_config(tables)


def test_moe_layer_frequency_and_dense_layers() -> None:
    m = dataclasses.replace(MODEL_PRESETS["mixtral-8x7b"], dense_layers=2, moe_layer_freq=2)
    kinds = [m.is_moe_layer(i) for i in range(6)]
    assert kinds == [False, False, True, False, True, False]
    layers = [op for op in build_workload(m).ops if isinstance(op, TransformerLayer)]
    assert [isinstance(op, MoELayer) for op in layers[:4]] == [False, False, True, False]


def test_etp_defaults_to_tp_like_megatron_core() -> None:
    plan = build_plan(parse_config(mixtral(tp=2, dp=8, ep=4, sequence_parallel=True)))
    layer = next(op for op in plan.workload.ops if isinstance(op, MoELayer))
    assert (layer.ep, layer.etp) == (4, 2)  # edp = 2 x 8 / (4 x 2) = 2
    explicit = build_plan(parse_config(mixtral(tp=2, dp=8, ep=4, etp=1, sequence_parallel=True)))
    layer = next(op for op in explicit.workload.ops if isinstance(op, MoELayer))
    assert (layer.ep, layer.etp) == (4, 1)


def test_router_stays_in_bf16_and_experts_run_in_fp8() -> None:
    router, up, down = moe_layer(ep=8).moe_gemms(batch=1, tp=1)
    assert router.fp8 is False and up.fp8 and down.fp8


def test_mla_flash_attention_flops_hand_worked() -> None:
    # DeepSeek-V3 attention, one sequence of 4096, causal: Q K^T over heads of 192, P V over
    # heads of 128 -> 2 s^2 (192 + 128) x 128 heads / 2
    layer = next(
        op
        for op in build_workload(MODEL_PRESETS["deepseek-v3"]).ops
        if isinstance(op, MoELayer) and op.experts
    )
    flash = dataclasses.replace(layer, attention="flash")
    fused = flash.fused_attention(batch=1, tp=1, act_bytes=2)
    assert fused is not None
    assert fused.forward_flops == 2 * 4096**2 * (192 + 128) * 128 / 2
    unfused = dataclasses.replace(layer, attention="unfused", causal=False)
    qk, pv = unfused._attention_gemms(batch=1, tp=1)
    assert (qk.m, qk.n, qk.k, qk.count) == (4096, 4096, 192, 128)
    assert (pv.m, pv.n, pv.k) == (4096, 128, 4096) and not qk.fp8


def test_context_parallel_ranks_join_the_expert_layout() -> None:
    # cp 2 doubles a stage's ranks: ep 8 x etp 1 over tp 1 x cp 2 x dp 8 = 16 -> edp 2
    plan = build_plan(parse_config(mixtral(dp=8, ep=8, cp=2)))
    layer = next(op for op in plan.workload.ops if isinstance(op, MoELayer))
    assert layer.seq_len == 2048  # each CP rank routes its half of the sequence
    assert plan.config.parallelism.expert_dp == 2
    colls = layer.update_collectives(tp=1, dp=16, grad_bytes=2.0)
    assert [c.group for c in colls] == ["dp", "edp"]
    with pytest.raises(ConfigError, match=r"^parallelism.ep\*etp = .*tp x cp x dp = 16"):
        parse_config(mixtral(dp=8, cp=2, ep=8, etp=4))


def test_all_to_all_uses_the_member_with_the_fewest_local_peers() -> None:
    # groups of 4 over DGX nodes of 8: [0, 1, 8, 9] has 2 local, [2, 3, 4, 16] has 1 (rank 16)
    step = cluster_all_to_all_step(H100, np.array([[0, 1, 8, 9], [2, 3, 4, 16]]))
    assert step.bandwidth_Bps == pytest.approx(3 / max(0 / 450e9, 3 / 50e9))
    even = cluster_all_to_all_step(H100, np.array([[0, 1, 8, 9]]))
    assert even.bandwidth_Bps == pytest.approx(3 / max(1 / 450e9, 2 / 50e9))


def test_expert_count_is_bounded() -> None:
    tables = mixtral(ep=1)
    tables["model"].update(experts=2**40, top_k=2)
    with pytest.raises(ConfigError, match=r"^model.experts = 1099511627776 .*at most 65,536"):
        parse_config(tables)


def test_moe_activation_and_vector_bytes_hand_worked() -> None:
    # h 8, s 4, 4 SwiGLU experts of 16, top-2, ep 2, bf16: T = 4 tokens, D = N = 8 rows
    tiny = dict(hidden=8, heads=2, kv_heads=2, seq_len=4, mlp="swiglu", norm="rmsnorm", bias=False)
    layer = MoELayer(
        name="m", ffn_hidden=0, dropout=False, experts=4, top_k=2, moe_ffn_hidden=16, ep=2, **tiny
    )
    attention_only = TransformerLayer(name="a", ffn_hidden=0, dropout=False, **tiny)
    kw: dict[str, Any] = dict(batch=1, tp=1, sp=False, act_bytes=2)
    # kept: fp32 router probabilities 4 T E = 64, expert input and output 2 N h p = 256,
    # expert activations (2 + 1) N f p = 768
    extra = layer.activation_bytes(**kw, recompute="none") - attention_only.activation_bytes(
        **kw, recompute="none"
    )
    assert extra == 64 + 256 + 768
    assert layer.activation_bytes(**kw, recompute="full") == attention_only.activation_bytes(
        **kw, recompute="full"
    )
    # traffic: router 12 T E = 192, permute and combine 2 (T + D) h p = 384, activations 768
    vec = layer.forward_vector_bytes(**kw) - attention_only.forward_vector_bytes(**kw)
    assert vec == 192 + 384 + 768


def test_plan_gathers_expert_weights_bucket_by_bucket() -> None:
    # Mixtral on 16 H100 with ep = 4: edp = 4 groups span the two nodes. Per layer and device
    # the experts' fc1 holds 2 x 2 x 4096 x 14336 = 235 M parameters (6 buckets of 40 M) and
    # fc2 117 M (3); their later buckets are waited back to back in the modules' pre-hooks,
    # so most of the weight all-gather is exposed, against a small part with ep = 8 on 8
    # GPUs (edp = 1: only the dense weights are gathered; the embedding spans 4 buckets)
    def stage(**parallel: Any) -> Any:
        cfg = mixtral(overlap_param_gather=True, **parallel)
        cfg["training"] = {**cfg["training"], "recompute": "none"}
        return build_plan(parse_config(cfg)).stages[0]

    split = stage(ep=4)
    assert 0.5 * split.dp_param_gather_s < split.param_gather_exposed_s
    assert split.param_gather_exposed_s <= split.dp_param_gather_s
    dense = stage(ep=8, dp=8)
    exposed = split.param_gather_exposed_s / split.dp_param_gather_s  # 0.75
    assert exposed > 3 * dense.param_gather_exposed_s / dense.dp_param_gather_s  # 0.15


# ------------------------------------------------------------------- unfused expert passes


def test_clamped_activation_and_expert_bias_add_their_unfused_passes_by_hand() -> None:
    # gpt-oss-like toy: h 8, F 4, 4 experts, top-2, 16 tokens, ep 2: N = 16 x 2 = 32 rows
    plain = moe_layer(
        hidden=8, heads=2, kv_heads=2, seq_len=16, experts=4, top_k=2, moe_ffn_hidden=4, ep=2
    )
    gpt_oss = dataclasses.replace(plain, mlp="clamped-swiglu", bias=True)
    n, f, h, p = 32, 4, 8, 2.0
    kw = {"batch": 1, "tp": 1, "sp": False, "act_bytes": p}
    # forward: clamps (r+w of each half: 4 N F p), concatenation (4 N F p); bias: b p written,
    # added (r 2, w 1), the experts' pieces concatenated (r 1, w 1): 6 N h p
    fwd = gpt_oss.forward_vector_bytes(**kw) - plain.forward_vector_bytes(**kw)
    assert fwd == 8 * n * f * p + 6 * n * h * p == 5120
    # backward: the plain layer's rule (twice its forward) plus the clamps' gradients
    # (2 x 3 N F p), the split's concatenation (4 N F p) and the two bias / probability
    # gradient products written and read back (2 x 3 N h p)
    assert plain.backward_vector_bytes(**kw) == 2 * plain.forward_vector_bytes(**kw)
    bwd = gpt_oss.backward_vector_bytes(**kw) - plain.backward_vector_bytes(**kw)
    assert bwd == 10 * n * f * p + 6 * n * h * p == 5632
    # memory: the clamped, concatenated copy (2 N F p) beside the GEMM output
    mem = {"batch": 1, "tp": 1, "sp": False, "act_bytes": p, "recompute": "selective"}
    clamped_only = dataclasses.replace(plain, mlp="clamped-swiglu")
    extra = clamped_only.activation_bytes(**mem) - plain.activation_bytes(**mem)  # type: ignore[arg-type]
    assert extra == 2 * n * f * p
    # the clamp changes no product: same FLOPs and parameters as a SwiGLU layer
    assert clamped_only.params == plain.params
    assert clamped_only.forward_flops(batch=1) == plain.forward_flops(batch=1)


def test_unfused_expert_passes_scale_with_the_routed_rows_and_slow_the_backward() -> None:
    base = moe_layer(mlp="clamped-swiglu", bias=True, ep=8)
    one = base.unfused_expert_bytes(batch=1, tp=1, act_bytes=2)
    four = base.unfused_expert_bytes(batch=4, tp=1, act_bytes=2)
    assert four == (4 * one[0], 4 * one[1])
    assert moe_layer().unfused_expert_bytes(batch=1, tp=1, act_bytes=2) == (0.0, 0.0)
    rates = device_rates(H100, precision="bf16")
    from palm.cost.compute import op_times

    args = {"batch": 1, "tp": 1, "sp": False, "recompute": "none", "training": True}
    slow = op_times(base, rates=rates, **args)  # type: ignore[arg-type]
    fast = op_times(moe_layer(ep=8), rates=rates, **args)  # type: ignore[arg-type]
    bw = rates.local_bandwidth_Bps
    assert slow.forward_s - fast.forward_s == pytest.approx(one[0] / bw, rel=1e-9)
    assert slow.backward_s - fast.backward_s == pytest.approx(one[1] / bw, rel=1e-9)


def test_fp32_probabilities_of_the_flex_dispatcher_widen_the_expert_bias_passes() -> None:
    # the toy above with biases only: N h = 32 x 8 = 256 elements; bf16 activations, fp32
    # probabilities (q = 4): forward b p 4 + sum (2 + 4) + 4 + concatenation 4 + 4 + cast back
    # 4 + 2 = 28 bytes per element; backward two products 2 x 3 x 4 + casts 2 x (2 + 4) = 36
    layer = moe_layer(
        hidden=8,
        heads=2,
        kv_heads=2,
        seq_len=16,
        experts=4,
        top_k=2,
        moe_ffn_hidden=4,
        ep=2,
        bias=True,
    )
    assert layer.unfused_expert_bytes(batch=1, tp=1, act_bytes=2) == (12 * 256, 12 * 256)
    wide = dataclasses.replace(layer, prob_bytes=4)
    assert wide.unfused_expert_bytes(batch=1, tp=1, act_bytes=2) == (28 * 256, 36 * 256)
    # the plan sets them from the dispatcher
    flex = build_plan(parse_config(mixtral(ep=8, moe_dispatcher="deepep")))
    plain = build_plan(parse_config(mixtral(ep=8)))
    first = [next(op for op in p.workload.ops if isinstance(op, MoELayer)) for p in (flex, plain)]
    assert [op.prob_bytes for op in first] == [4.0, 0.0]
