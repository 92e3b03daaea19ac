"""Hand-worked cases for the modern GPU mechanisms: FlashAttention FLOPs and HBM bytes, FP8 on
linear layers only, FSDP prefetch overlap, context-parallel ring traffic, uneven stages."""

from __future__ import annotations

import dataclasses
import math

import pytest

import palm
from palm.config import parse_config
from palm.cost.compute import OpTimes, attention_time, device_rates, gemm_time, op_times
from palm.cost.memory import extra_weight_bytes
from palm.cost.overlap import (
    fsdp_exposed_s,
    param_gather_chain_exposed_s,
    prefetch_exposed_s,
    ring_exposed_s,
)
from palm.engines._common import dp_exposed_time
from palm.errors import ConfigError
from palm.hardware.spec import GpuClusterHardware, PeakTflops
from palm.network.loads import Profile
from palm.partition import uneven_chunk_layers
from palm.plan import build_plan
from palm.strategy import TrainingConfig
from palm.workload.ops import FusedAttention, Linear, Logits, TransformerLayer, cp_merge_bytes

S, D, HEADS = 2048, 128, 8
LAYER = TransformerLayer(
    name="l",
    hidden=HEADS * D,
    heads=HEADS,
    kv_heads=HEADS,
    ffn_hidden=4096,
    seq_len=S,
    bias=False,
    dropout=False,
    attention="flash",
)
GPU = GpuClusterHardware(
    name="toy-gpu",
    gpus_per_node=8,
    peak_tflops=PeakTflops(fp32=50.0, bf16=1000.0, fp16=1000.0, fp8=2000.0, int8=2000.0),
    hbm_gib=80.0,
    hbm_bandwidth_gbps=3000.0,
    switch_bandwidth_gbps=450.0,
    switch_latency_us=0.0,
    inter_node_bandwidth_gbps=50.0,
    inter_node_latency_us=0.0,
    matmul_efficiency=0.5,
    fp8_matmul_efficiency=0.5,
    matmul_half_dim=0.0,
    attention_efficiency=0.4,
)


def test_flash_attention_flops_and_hbm_bytes_are_hand_worked() -> None:
    fused = LAYER.fused_attention(batch=1, tp=1, act_bytes=2)
    assert fused is not None
    # causal: half of 4 s^2 d per head
    assert fused.forward_flops == 4 * S * S * D * HEADS * 0.5
    assert fused.backward_flops + fused.recompute_flops == 2.5 * fused.forward_flops
    q = S * D * HEADS * 2  # bytes of Q (and of O, K, V, dQ, ... with kv_heads = heads)
    lse = 4 * S * HEADS
    assert fused.forward_bytes == 4 * q + lse  # read Q, K, V, write O
    assert fused.backward_bytes == 8 * q + lse  # read Q, K, V, O, dO; write dQ, dK, dV
    # never s x s: doubling the sequence doubles the bytes, the unfused score traffic x4
    long = dataclasses.replace(LAYER, seq_len=2 * S)
    assert long.fused_attention(batch=1, tp=1, act_bytes=2).forward_bytes == pytest.approx(
        2 * fused.forward_bytes
    )
    assert LAYER.forward_vector_bytes(batch=1, tp=1, sp=False, act_bytes=2) == pytest.approx(
        dataclasses.replace(LAYER, attention="unfused").forward_vector_bytes(
            batch=1, tp=1, sp=False, act_bytes=2
        )
        - HEADS * S * S * 2 * 2  # softmax read + write of the scores
    )


def test_flash_attention_time_and_recompute_flops() -> None:
    rates = device_rates(GPU, "bf16", training=True)
    unfused = dataclasses.replace(LAYER, attention="unfused")
    t_flash = op_times(LAYER, batch=1, tp=1, sp=False, recompute="none", rates=rates, training=True)
    t_gemm = op_times(
        unfused, batch=1, tp=1, sp=False, recompute="none", rates=rates, training=True
    )
    fused = LAYER.fused_attention(batch=1, tp=1, act_bytes=2)
    linear = sum(gemm_time(g, rates) for g in LAYER.forward_gemms(batch=1, tp=1))
    vec = (
        LAYER.forward_vector_bytes(batch=1, tp=1, sp=False, act_bytes=2) / rates.local_bandwidth_Bps
    )
    assert t_flash.forward_s == pytest.approx(linear + vec + fused.forward_flops / (1e15 * 0.4))
    assert t_flash.recompute_flops == fused.recompute_flops  # Q K^T again, always
    assert t_gemm.recompute_flops == 0.0
    # the backward kernel runs 2.5 x the forward FLOPs at the same rate
    att_b = t_flash.backward_s - (
        t_gemm.backward_s
        - 2 * sum(gemm_time(g, rates) for g in unfused.forward_gemms(batch=1, tp=1) if not g.fp8)
        - 2
        * (
            unfused.forward_vector_bytes(batch=1, tp=1, sp=False, act_bytes=2)
            - LAYER.forward_vector_bytes(batch=1, tp=1, sp=False, act_bytes=2)
        )
        / rates.local_bandwidth_Bps
    )
    assert att_b == pytest.approx(2.5 * fused.forward_flops / (1e15 * 0.4), rel=1e-6)


def test_softmax_exponentials_bound_small_heads_hand_worked() -> None:
    """2 T exponentials/s against 1000 TFLOP/s: 500 FLOPs per exponential, so a forward
    kernel (4 d FLOPs and one exponential per score) is bound by its exponentials below
    d = 125, its backward (10 d FLOPs, one exponential) below d = 50."""
    gpu = dataclasses.replace(GPU, sfu_exp_tera_per_s=2.0)
    rates = device_rates(gpu, "bf16", training=True)
    assert rates.exp_per_s == 2e12
    small = dataclasses.replace(LAYER, hidden=HEADS * 64, head_dim=64)
    assert small.head_dim == 64 and LAYER.head_dim == 128
    scores = S * S * HEADS * 0.5  # causal: 2^24 score elements, one exponential each
    for layer in (small, LAYER):
        fused = layer.fused_attention(batch=1, tp=1, act_bytes=2)
        assert fused.score_elements == scores == 2**24
    # d = 64 forward: 2^24 x 256 FLOPs = 4.29 us of tensor cores at peak against
    # 2^24 / 2e12 = 8.39 us of exponentials: exponential-bound, 8.39 / 0.4 = 20.97 us
    f64 = small.fused_attention(batch=1, tp=1, act_bytes=2)
    assert f64.forward_flops == 2**24 * 256
    t64 = attention_time(f64.forward_flops, f64.forward_bytes, rates, exponentials=scores)
    assert t64 == pytest.approx(2**24 / 2e12 / 0.4) == pytest.approx(20.97152e-6)
    # its backward: 2.5 x 4.29 = 10.74 us of products against 8.39 us: tensor-bound, 26.84 us
    b64 = attention_time(
        3.5 * f64.forward_flops - f64.forward_flops,  # dQ, dK, dV and Q K^T again
        f64.backward_bytes,
        rates,
        exponentials=scores,
    )
    assert b64 == pytest.approx(2.5 * 2**24 * 256 / 1e15 / 0.4) == pytest.approx(26.8435456e-6)
    # d = 128 forward: 8.59 us of products against the same 8.39 us: tensor-bound, 21.47 us,
    # as without the special-function units; the 64-wide heads take 98% of its time for half
    # its FLOPs
    f128 = LAYER.fused_attention(batch=1, tp=1, act_bytes=2)
    t128 = attention_time(f128.forward_flops, f128.forward_bytes, rates, exponentials=scores)
    assert t128 == pytest.approx(21.47483648e-6)
    assert t128 == attention_time(f128.forward_flops, f128.forward_bytes, rates)
    assert t64 / t128 == pytest.approx(500 / 512)
    # op_times prices it so: the d = 64 layer's forward is 20.97 - 10.74 us slower than
    # without the exponential bound, its backward unchanged
    plain = device_rates(GPU, "bf16", training=True)
    assert plain.exp_per_s == 0.0
    with_exp = op_times(
        small, batch=1, tp=1, sp=False, recompute="none", rates=rates, training=True
    )
    without = op_times(small, batch=1, tp=1, sp=False, recompute="none", rates=plain, training=True)
    assert with_exp.forward_s - without.forward_s == pytest.approx(
        20.97152e-6 - 2**24 * 256 / 1e15 / 0.4
    )
    assert with_exp.backward_s == pytest.approx(without.backward_s)
    assert with_exp.forward_flops == without.forward_flops  # exponentials are not FLOPs here


@pytest.mark.parametrize("d", [32, 64, 96, 128, 256])
def test_attention_time_is_monotone_in_the_exponential_rate_and_above_both_bounds(d: int) -> None:
    layer = dataclasses.replace(LAYER, hidden=HEADS * d, head_dim=d)
    fused = layer.fused_attention(batch=1, tp=1, act_bytes=2)
    exps = fused.score_elements
    times = []
    for tera in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 64.0):
        rates = device_rates(dataclasses.replace(GPU, sfu_exp_tera_per_s=tera), "bf16")
        for flops, nbytes in (
            (fused.forward_flops, fused.forward_bytes),
            (3.5 * fused.forward_flops - fused.forward_flops, fused.backward_bytes),
        ):
            t = attention_time(flops, nbytes, rates, exponentials=exps)
            assert t >= flops / (1e15 * 0.4) * (1 - 1e-12)  # the tensor cores' bound
            assert t >= exps / (tera * 1e12) * (1 - 1e-12)  # the units' peak rate
            assert t >= nbytes / rates.local_bandwidth_Bps  # HBM
        times.append(
            attention_time(fused.forward_flops, fused.forward_bytes, rates, exponentials=exps)
        )
    assert times == sorted(times, reverse=True)  # a faster unit never slows the kernel
    plain = device_rates(GPU, "bf16")
    no_sfu = attention_time(fused.forward_flops, fused.forward_bytes, plain, exponentials=exps)
    assert times[-1] == pytest.approx(no_sfu)  # fast units: the tensor-core time alone


def test_fp8_applies_to_linear_layers_only() -> None:
    layer = dataclasses.replace(LAYER, attention="unfused")
    gemms = layer.forward_gemms(batch=1, tp=1)
    assert [g.fp8 for g in gemms] == [True, False, False, True, True, True]  # qkv, 2 attn, 3 lin
    logits = Logits(name="out", vocab=32000, hidden=1024, seq_len=S)
    assert not any(g.fp8 for g in logits.forward_gemms(batch=1, tp=1))
    bf16 = device_rates(GPU, "bf16", training=True)
    fp8 = device_rates(GPU, "fp8", training=True)
    assert fp8.elem_bytes == 2 and fp8.fp8_casts  # 16-bit activations, FP8 products
    for g in gemms:
        ratio = gemm_time(g, fp8) / gemm_time(g, bf16)
        assert ratio == pytest.approx(0.5 if g.fp8 else 1.0)
    # backward products keep the forward product's precision
    unfused16 = op_times(
        layer, batch=1, tp=1, sp=False, recompute="none", rates=bf16, training=True
    )
    unfused8 = op_times(layer, batch=1, tp=1, sp=False, recompute="none", rates=fp8, training=True)
    attn16 = sum(gemm_time(g, bf16) for g in gemms if not g.fp8)
    lin16 = sum(gemm_time(g, bf16) for g in gemms if g.fp8)
    vec = layer.forward_vector_bytes(batch=1, tp=1, sp=False, act_bytes=2)
    cast_b = sum(3 * g.m * g.n for g in gemms if g.fp8)
    assert unfused16.backward_s - unfused8.backward_s == pytest.approx(
        2 * lin16 / 2 - cast_b / fp8.local_bandwidth_Bps
    )
    assert unfused8.backward_s > 2 * attn16 + 2 * vec / fp8.local_bandwidth_Bps
    # per-tensor scaling: every FP8 product casts its input (read 2 B, write 1 B)
    t16 = op_times(LAYER, batch=1, tp=1, sp=False, recompute="none", rates=bf16, training=True)
    t8 = op_times(LAYER, batch=1, tp=1, sp=False, recompute="none", rates=fp8, training=True)
    lin16 = sum(gemm_time(g, bf16) for g in LAYER.forward_gemms(batch=1, tp=1))
    casts = sum(3 * g.m * g.k for g in LAYER.forward_gemms(batch=1, tp=1))
    assert t16.forward_s - t8.forward_s == pytest.approx(
        lin16 / 2 - casts / fp8.local_bandwidth_Bps
    )


def test_fsdp_prefetch_exposes_nothing_when_compute_covers_the_gather() -> None:
    layers = 6
    gather = 2.0
    assert prefetch_exposed_s([gather] * layers, [3.0] * layers, lead_compute_s=3.0) == 0.0
    # no compute to hide behind: every gather is exposed
    assert prefetch_exposed_s([gather] * layers, [0.0] * layers) == layers * gather
    # slower links: the per-layer excess shows, the first gather entirely
    assert prefetch_exposed_s([gather] * layers, [1.5] * layers) == pytest.approx(
        gather + (layers - 1) * 0.5
    )
    assert ring_exposed_s(ring_s=1.0, attention_s=3.0) == 0.0
    assert ring_exposed_s(ring_s=4.0, attention_s=3.0) == 1.0


def _llama(**changes: object) -> palm.SimConfig:
    tables: dict[str, dict[str, object]] = {
        "model": {
            "family": "llama",
            "layers": 8,
            "hidden": 1024,
            "heads": 8,
            "kv_heads": 8,
            "ffn_hidden": 4096,
            "seq_len": 4096,
            "vocab": 32000,
            "mlp": "swiglu",
            "bias": False,
            "dropout": False,
        },
        "hardware": {"preset": "dgx-h100"},
        "training": {"global_batch": 32, "micro_batch": 2, "precision": "bf16"},
        "parallelism": {"dp": 16},
    }
    for key, value in changes.items():
        section, field = key.split("__")
        tables[section][field] = value
    return parse_config(tables)


def test_fsdp_in_the_plan_both_engines_agree_and_alias() -> None:
    ddp = build_plan(_llama())
    fsdp = build_plan(_llama(training__fsdp=True))
    assert fsdp.config.training.zero_stage == 3
    assert all(st.dp_allreduce_s == 0.0 for st in fsdp.stages)  # reduce-scattered in backward
    assert ddp.stages[0].dp_allreduce_s > 0
    # 16 ranks over 2 nodes: the gathers hide behind 2 x 4096-token layers except the first
    ch = fsdp.chunks[0]
    assert 0 < ch.zero3_gather_s < 0.2 * ch.forward_compute_s
    cfg = fsdp.config
    a = palm.simulate(cfg, engine="analytical").iteration_time_s
    e = palm.simulate(cfg, engine="event").iteration_time_s
    assert e == pytest.approx(a, rel=0.02)
    # memory: weights sharded over 16 plus the two largest gathered operators (the embedding
    # with its learned positions here: (32000 + 4096) x 1024 parameters of 2 B)
    embedding = (32000 + 4096) * 1024
    assert fsdp.stages[0].memory.weights_bytes == pytest.approx(
        ddp.stages[0].memory.weights_bytes / 16 + 2 * embedding * 2
    )
    with pytest.raises(ConfigError, match="training.zero"):
        _llama(training__fsdp=True, training__zero=1)
    assert TrainingConfig(fsdp=True).zero_stage == 3


def test_hidden_fsdp_collectives_cost_their_interference() -> None:
    # 1024 x 1024 linear layers (1,049,600 parameters each) sharded over 8 ranks on a toy
    # ring of 100 GB/s, no latency: a gather takes 7/8 x 2.0992 MB / 100 GB/s = 18.368 us,
    # an fp32 reduce-scatter 36.736 us; 1 ms forward and 2 ms backward compute per layer
    op = Linear(name="fc", in_features=1024, out_features=1024)
    times = [OpTimes(1e-3, 2e-3, 0.0, 0.0, 0.0, 0.0)]
    step = Profile(latency_s=0.0, bandwidth_Bps=100e9, hops=1)
    kw = dict(tp=1, weight_bytes=2.0, n=8, step=step)
    g = 7 / 8 * op.params * 2.0 / 100e9
    r = 7 / 8 * op.params * 4.0 / 100e9
    f0, b0 = fsdp_exposed_s([op], times, **kw)  # type: ignore[arg-type]
    # the first gather of a chunk is exposed (c_0 = 0); backward: the gather, then r last
    assert (f0, b0) == (pytest.approx(g), pytest.approx(g + r))
    # nothing hidden with one operator: interference changes nothing
    assert fsdp_exposed_s([op], times, interference=0.5, **kw) == (f0, b0)  # type: ignore[arg-type]
    two = [op, dataclasses.replace(op, name="fc2")]
    f1, b1 = fsdp_exposed_s(two, times * 2, **kw)  # type: ignore[arg-type]
    f2, b2 = fsdp_exposed_s(two, times * 2, interference=0.5, **kw)  # type: ignore[arg-type]
    # the second gather and one reduce-scatter are hidden; each costs half its time
    assert f2 - f1 == pytest.approx(0.5 * g)
    assert b2 - b1 == pytest.approx(0.5 * (g + r))


def test_shard_grad_op_gathers_in_the_forward_pass_only() -> None:
    # PyTorch FSDP SHARD_GRAD_OP keeps the weights gathered in the forward pass through the
    # backward pass: the toy of the test above (gather g, reduce-scatter r, 1 ms forward and
    # 2 ms backward per layer) exposes g forward, and backward only the last r
    op = Linear(name="fc", in_features=1024, out_features=1024)
    two = [op, dataclasses.replace(op, name="fc2")]
    times = [OpTimes(1e-3, 2e-3, 0.0, 0.0, 0.0, 0.0)] * 2
    step = Profile(latency_s=0.0, bandwidth_Bps=100e9, hops=1)
    kw = dict(tp=1, weight_bytes=2.0, n=8, step=step, backward_gathers=False)
    g = 7 / 8 * op.params * 2.0 / 100e9
    r = 7 / 8 * op.params * 4.0 / 100e9
    f, b = fsdp_exposed_s(two, times, **kw)  # type: ignore[arg-type]
    assert (f, b) == (pytest.approx(g), pytest.approx(r))
    # hidden: the second gather forward, the first reduce-scatter backward
    fi, bi = fsdp_exposed_s(two, times, interference=0.5, **kw)  # type: ignore[arg-type]
    assert (fi - f, bi - b) == (pytest.approx(0.5 * g), pytest.approx(0.5 * r))
    # in the plan: fsdp = true with zero = 2, the ZeRO-2 stage with FULL_SHARD's forward
    full = build_plan(_llama(training__fsdp=True))
    sgo = build_plan(_llama(training__fsdp=True, training__zero=2))
    ddp = build_plan(_llama())
    assert sgo.config.training.zero_stage == 2
    assert TrainingConfig(fsdp=True, zero=2).zero_stage == 2
    st = sgo.stages[0]
    assert st.dp_allreduce_s == st.dp_param_gather_s == st.param_gather_exposed_s == 0.0
    assert sgo.chunks[0].zero3_gather_s == pytest.approx(full.chunks[0].zero3_gather_s)
    assert 0 < sgo.chunks[0].zero3_backward_s < full.chunks[0].zero3_backward_s
    # weights kept whole (ZeRO-2 memory), gradients and optimizer states sharded
    assert st.memory.weights_bytes == pytest.approx(ddp.stages[0].memory.weights_bytes)
    assert st.memory.gradients_bytes == pytest.approx(ddp.stages[0].memory.gradients_bytes / 16)
    a = palm.simulate(sgo.config, engine="analytical").iteration_time_s
    e = palm.simulate(sgo.config, engine="event").iteration_time_s
    assert e == pytest.approx(a, rel=0.02)
    assert a < palm.simulate(full.config, engine="analytical").iteration_time_s
    with pytest.raises(ConfigError, match="overlap_param_gather"):
        _llama(training__fsdp=True, training__zero=2, parallelism__overlap_param_gather=True)


def test_early_stop_recompute_skips_the_down_projection() -> None:
    # PyTorch's non-reentrant checkpoint stops once the GELU output (the down-projection's
    # saved input) is rebuilt: of the layer's linear FLOPs 2 s (3 h h + h h + h f) + 2 s f h
    # the last 2 s f h (f = 4096, h = 1024: 8.6 GFLOP of 34.4) is not re-run
    rates = device_rates(GPU, "bf16", training=True)
    kw = dict(batch=1, tp=1, sp=False, recompute="full", rates=rates, training=True)
    full = op_times(LAYER, **kw)  # type: ignore[arg-type]
    early = op_times(LAYER, early_stop=True, **kw)  # type: ignore[arg-type]
    h, f = HEADS * D, 4096
    down = 2.0 * S * f * h
    assert full.recompute_flops - early.recompute_flops == down == 2 * 2048 * 4096 * 1024
    # matmul_half_dim = 0: every product at 50% of 1000 TFLOP/s
    assert full.recompute_s - early.recompute_s == pytest.approx(down / 0.5e15)
    assert (early.forward_s, early.backward_s) == (full.forward_s, full.backward_s)
    # the attention forward kernel is still re-run (beside the backward kernel's own Q K^T),
    # and early stop means nothing without recompute
    fused = LAYER.fused_attention(batch=1, tp=1, act_bytes=2)
    assert fused is not None
    attention = fused.forward_flops + fused.recompute_flops
    assert early.recompute_flops == 2 * S * h * (4 * h + f) + attention
    kw["recompute"] = "none"
    assert op_times(LAYER, early_stop=True, **kw) == op_times(LAYER, **kw)  # type: ignore[arg-type]
    # in the plan: only a PyTorch FSDP job (fsdp = true) stops early; zero = 3 re-runs it all
    zero3 = build_plan(_llama(training__zero=3, training__recompute="full")).chunks[0]
    torch = build_plan(_llama(training__fsdp=True, training__recompute="full")).chunks[0]
    assert torch.recompute_flops < zero3.recompute_flops
    assert torch.forward_flops == zero3.forward_flops


def test_overlapped_param_gather_is_hand_worked() -> None:
    # Megatron-Core's overlap_param_gather: one bucket in flight, waited in the forward
    # pre-hook of the module using it. Buckets of 10 parameters, 1 ms each to gather. Two
    # modules of two buckets each, 30 ms of compute: the first bucket is dispatched at its
    # wait (10 ms), the second only then and waited at once (10 ms); the third hides behind
    # the first module's compute; the fourth is dispatched when the third is waited and waits
    # its full 10 ms. Prefetching every bucket one ahead of its layers would expose 10 ms.
    two = [(0.0, 20.0, 0.03), (0.0, 20.0, 0.03)]
    assert param_gather_chain_exposed_s(
        two, bucket_params=10, seconds_per_param=1e-3
    ) == pytest.approx(0.03)
    # modules no larger than a bucket, each computing longer than a gather: only the first
    four = [(0.0, 10.0, 0.015)] * 4
    assert param_gather_chain_exposed_s(
        four, bucket_params=10, seconds_per_param=1e-3
    ) == pytest.approx(0.01)
    # ... and computing 5 ms each: 5 ms of each later gather are not hidden
    short = [(0.0, 10.0, 0.005)] * 4
    assert param_gather_chain_exposed_s(
        short, bucket_params=10, seconds_per_param=1e-3
    ) == pytest.approx(0.01 + 3 * 0.005)
    # compute before a module hides the gather dispatched at the previous wait
    late = [(0.0, 10.0, 0.0), (0.004, 10.0, 0.0)]
    assert param_gather_chain_exposed_s(
        late, bucket_params=10, seconds_per_param=1e-3
    ) == pytest.approx(0.01 + 0.006)
    # buckets are cut from the chain's end: 25 parameters are buckets of 5 (first), 10, 10
    assert param_gather_chain_exposed_s(
        [(0.0, 25.0, 0.0)], bucket_params=10, seconds_per_param=1e-3
    ) == pytest.approx(0.025)
    assert param_gather_chain_exposed_s([], bucket_params=10, seconds_per_param=1e-3) == 0.0
    # in the plan: ZeRO-1 over 16 ranks; the all-gather half leaves the step's end. The
    # 200 M parameters are 5 buckets of 40 M, the first (from the embedding) of 39.8 M:
    # at least its gather is exposed, at most the whole gather
    plain = build_plan(_llama(training__zero=1)).stages[0]
    over = build_plan(_llama(training__zero=1, parallelism__overlap_param_gather=True)).stages[0]
    assert over.dp_allreduce_s == pytest.approx(plain.dp_allreduce_s)  # the reduce-scatter
    assert over.dp_param_gather_s == pytest.approx(plain.dp_param_gather_s)
    params = over.params_per_device
    first = params - 40e6 * (math.ceil(params / 40e6) - 1)
    gathered = over.dp_param_gather_s
    assert gathered * first / params <= over.param_gather_exposed_s + 1e-15
    assert over.param_gather_exposed_s <= gathered
    cfg = _llama(training__zero=1, parallelism__overlap_param_gather=True)
    a = palm.simulate(cfg, engine="analytical")
    e = palm.simulate(cfg, engine="event")
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.02)
    # the step-end all-gather it replaces is exposed in full: overlapping is never slower
    no_overlap = palm.simulate(_llama(training__zero=1), engine="analytical").iteration_time_s
    assert a.iteration_time_s <= no_overlap
    with pytest.raises(ConfigError, match="overlap_param_gather"):
        _llama(parallelism__overlap_param_gather=True)  # no distributed optimizer


def test_zero12_weight_gather_is_exposed_after_the_step() -> None:
    # An all-reduce of T = 0.8 s in 4 buckets against a last backward pass of 2 s exposes
    # max(T/4, T - 2 x 3/4) = 0.2 s (DDP). Under ZeRO 1-2 the reduce-scatter half (0.4 s)
    # overlaps the same way: max(0.1, 0.4 - 1.5) = 0.1 s; the all-gather of the updated
    # weights (0.4 s) needs the optimizer step and follows it in full: 0.5 s, not 0.2.
    assert dp_exposed_time(allreduce_s=0.8, buckets=4, last_backward_s=2.0) == pytest.approx(0.2)
    assert dp_exposed_time(allreduce_s=0.4, buckets=4, last_backward_s=2.0) == pytest.approx(0.1)
    # in the plan: the DDP all-reduce T of zero = 0 splits into T/2 overlapped + T/2 exposed
    ddp = build_plan(_llama()).stages[0]
    for zero in (1, 2):
        plan = build_plan(_llama(training__zero=zero))
        st = plan.stages[0]
        assert st.dp_allreduce_s == pytest.approx(ddp.dp_allreduce_s / 2)
        assert st.dp_param_gather_s == pytest.approx(ddp.dp_allreduce_s / 2)
        assert st.param_gather_exposed_s == st.dp_param_gather_s  # after the step, in full
        # one stage: the pipeline, then the reduce-scatter's tail, the step and the gather
        m = plan.micro_batches
        work = st.forward_s + st.backward_s
        tail = dp_exposed_time(
            allreduce_s=st.dp_allreduce_s,
            buckets=st.dp_buckets,
            last_backward_s=st.chunks[0].backward_s,
        )
        a = palm.simulate(plan.config, engine="analytical")
        assert a.iteration_time_s == pytest.approx(
            m * work + tail + st.optimizer_s + st.dp_param_gather_s
        )
        e = palm.simulate(plan.config, engine="event")
        assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.02)
        # the event engine runs the gather on the data-parallel links after the step: at
        # least its uncontended time is exposed
        assert e.stages[0].dp_exposed_s >= st.dp_param_gather_s * (1 - 1e-9)


@pytest.mark.parametrize(
    "changes",
    [
        {"training__zero": 1},
        {"training__zero": 2},
        {"training__zero": 1, "parallelism__dp": 4, "parallelism__pp": 4},
        {
            "training__zero": 1,
            "parallelism__dp": 2,
            "parallelism__pp": 2,
            "parallelism__tp": 4,
            "parallelism__sequence_parallel": True,
            "parallelism__schedule": "interleaved-1f1b",
            "parallelism__interleave": 2,
        },
        {"training__zero": 2, "training__micro_batch": 1, "parallelism__dp": 32},
    ],
)
@pytest.mark.parametrize("engine", ["analytical", "event"])
def test_overlapping_the_param_gather_is_never_slower(
    changes: dict[str, object], engine: str
) -> None:
    # with or without overlap_param_gather the reduce-scatter is priced alike; the all-gather
    # is exposed in full without it and at most in full with it (the bucket chain)
    plain = palm.simulate(_llama(**changes), engine=engine).iteration_time_s
    over = palm.simulate(
        _llama(**changes, parallelism__overlap_param_gather=True), engine=engine
    ).iteration_time_s
    assert over <= plain * (1 + 1e-12)


def test_context_parallel_ring_traffic_is_hand_worked() -> None:
    layer = dataclasses.replace(
        LAYER, kv_heads=2, seq_len=S // 2, cp=2
    )  # a rank of cp = 2 holds 1024 of 2048 tokens
    (ring,) = layer.cp_collectives(batch=1, tp=1, act_bytes=2)
    # K and V of the whole sequence for the 2 local KV heads: 2 x 2048 x 128 x 2 x 2 B
    assert ring.nbytes == 2 * S * D * 2 * 2 and ring.group == "cp"
    # each rank sends (cp - 1)/cp of it: its own half once round the ring
    assert ring.kind == "all-gather"
    fused = layer.fused_attention(batch=1, tp=1, act_bytes=2)
    full = dataclasses.replace(LAYER, kv_heads=2).fused_attention(batch=1, tp=1, act_bytes=2)
    assert fused.forward_flops == pytest.approx(full.forward_flops / 2)


class _NoMerge(TransformerLayer):
    """The same layer with the context-parallel merge kernels left out."""

    def fused_attention(self, *, batch: int, tp: int, act_bytes: float) -> FusedAttention | None:
        fused = super().fused_attention(batch=batch, tp=tp, act_bytes=act_bytes)
        assert fused is not None
        return dataclasses.replace(fused, forward_merge_bytes=0.0, backward_merge_bytes=0.0)


def test_context_parallel_merge_traffic_is_hand_worked() -> None:
    # a rank of cp = 4 holds 512 of 2048 tokens: 8 heads and 2 KV heads of 128
    layer = dataclasses.replace(LAYER, kv_heads=2, seq_len=S // 4, cp=4)
    o = 512 * 8 * 128 * 2  # bytes of the local Q (= O, dQ): 1 MiB
    kv = 2 * 512 * 2 * 128 * 2  # the local K and V together: 0.5 MiB
    # Transformer Engine's ring, its last rank (every step covers all its queries):
    # forward: cat(K, V) into the send buffer (2 KV), initialise O from step 0 (2 O), rescale
    # and add the 3 other partial outputs (3 O each) -> 11 O + 2 KV
    # backward: copy K, V into the ring buffer (2 KV); dQ copied once, added 3 times (2 + 9 Q);
    # dK, dV: half copied (KV), 2 halves added (1.5 KV each), the diagonal added (3 KV)
    assert cp_merge_bytes(cp=4, q_bytes=o, o_bytes=o, kv_bytes=kv) == (
        11 * o + 2 * kv,
        11 * o + 9 * kv,
    )
    fused = layer.fused_attention(batch=1, tp=1, act_bytes=2)
    assert fused is not None
    assert (fused.forward_merge_bytes, fused.backward_merge_bytes) == (12 * 2**20, 15.5 * 2**20)
    # cp = 2 traced step by step: forward 2 O + 3 O + 2 KV; backward 2 Q + 3 Q, KV + 3 KV + 2 KV
    assert cp_merge_bytes(cp=2, q_bytes=o, o_bytes=o, kv_bytes=kv) == (
        5 * o + 2 * kv,
        5 * o + 6 * kv,
    )
    assert cp_merge_bytes(cp=1, q_bytes=o, o_bytes=o, kv_bytes=kv) == (0.0, 0.0)
    assert LAYER.fused_attention(batch=1, tp=1, act_bytes=2).forward_merge_bytes == 0.0
    # the merge runs after the kernels at HBM bandwidth, in every pass that runs the attention
    rates = device_rates(GPU, "bf16", training=True)
    bare = _NoMerge(**{f.name: getattr(layer, f.name) for f in dataclasses.fields(layer)})
    for recompute in ("none", "full"):
        with_merge, without = (
            op_times(x, batch=1, tp=1, sp=False, recompute=recompute, rates=rates, training=True)
            for x in (layer, bare)
        )
        bw = rates.local_bandwidth_Bps
        assert with_merge.forward_s - without.forward_s == pytest.approx(12 * 2**20 / bw)
        assert with_merge.backward_s - without.backward_s == pytest.approx(15.5 * 2**20 / bw)
        extra_re = 12 * 2**20 / bw if recompute == "full" else 0.0
        assert with_merge.recompute_s - without.recompute_s == pytest.approx(extra_re)


def test_context_parallel_in_the_plan() -> None:
    base = build_plan(_llama())
    cp = build_plan(_llama(parallelism__dp=8, parallelism__cp=2))
    assert cp.config.parallelism.devices == 16 and cp.config.parallelism.data_ranks == 16
    act = base.stages[0].memory.activations_bytes
    assert cp.stages[0].memory.activations_bytes == pytest.approx(act, rel=0.05) or (
        cp.stages[0].memory.activations_bytes < act
    )
    # same micro-batch count with dp halved means twice the sequences per rank, each half
    # as long: activation memory per micro-batch is half a cp = 1 rank's of the same batch
    one = build_plan(_llama(parallelism__dp=8))
    assert cp.stages[0].memory.activations_bytes == pytest.approx(
        one.stages[0].memory.activations_bytes / 2, rel=0.02
    )
    assert cp.chunks[0].tp_forward_s == 0.0  # inside a node the ring hides behind attention
    # a slow switch: each layer exposes its ring time less its attention time
    slow = build_plan(
        _llama(parallelism__dp=8, parallelism__cp=2, hardware__switch_bandwidth_gbps=0.5)
    )
    layer = next(op for op in slow.workload.ops if isinstance(op, TransformerLayer))
    assert layer.seq_len == 2048 and layer.context_len == 4096
    (ring,) = layer.cp_collectives(batch=2, tp=1, act_bytes=2)
    ring_s = ring.nbytes / 2 / 0.5e9 + 2e-6  # (cp - 1)/cp of it, one latency step
    fused = layer.fused_attention(batch=2, tp=1, act_bytes=2)
    att_s = attention_time(
        fused.forward_flops, fused.forward_bytes, slow.rates, exponentials=fused.score_elements
    )
    assert slow.chunks[0].tp_forward_s == pytest.approx(8 * (ring_s - att_s))
    with pytest.raises(ConfigError, match="parallelism.cp"):
        _llama(parallelism__dp=1, parallelism__cp=16, model__seq_len=4008)


def test_uneven_stages_split_like_megatron() -> None:
    counts = uneven_chunk_layers(layers=126, pp=16, chunks=8, first=7, last=7)
    assert len(counts) == 128 and sum(counts) == 126
    assert counts[0] == 0 and counts[-1] == 0 and set(counts[1:-1]) == {1}
    counts = uneven_chunk_layers(layers=126, pp=16, chunks=4, first=7, last=7)
    assert counts[0] == 1 and counts[-1] == 1 and set(counts[1:-1]) == {2}
    plan = build_plan(
        _llama(
            model__layers=10,
            parallelism__pp=4,
            parallelism__dp=4,
            parallelism__first_stage_layers=1,
            parallelism__last_stage_layers=1,
        )
    )
    assert [st.chunks[0].layers for st in plan.stages] == [1, 4, 4, 1]
    # interleaving no longer needs pp x interleave to divide the layers
    odd = build_plan(
        _llama(
            model__layers=10,
            parallelism__pp=2,
            parallelism__dp=8,
            parallelism__schedule="interleaved-1f1b",
            parallelism__interleave=3,
            training__global_batch=64,
        )
    )
    assert sum(c.layers for c in odd.chunks) == 10 and len(odd.chunks) == 6
    with pytest.raises(ConfigError, match="first_stage_layers"):
        _llama(parallelism__first_stage_layers=2)  # pp = 1


def test_extra_weight_buffers() -> None:
    assert extra_weight_bytes(
        linear_params=1e9, largest_layer_params=1e8, weight_bytes=2, zero=3, ranks=8, fp8=True
    ) == pytest.approx(2 * 1e8 * 2 + 1e9 / 8)
    assert (
        extra_weight_bytes(
            linear_params=1e9, largest_layer_params=1e8, weight_bytes=2, zero=1, ranks=8, fp8=False
        )
        == 0.0
    )
