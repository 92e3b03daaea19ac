"""LLM serving (``training.mode = "serve"``): hand-worked KV cache sizes, the memory-bandwidth
bound of a decode step, the compute bound of a large prefill, ``max_batch`` as the last batch
that fits, monotonicity in bandwidth and batch, and the table's validation."""

from __future__ import annotations

from typing import Any, cast

import pytest

from palm import ConfigError, parse_config, simulate
from palm.hardware.presets import HARDWARE_PRESETS
from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
from palm.serving.comm import Link, allreduce_time
from palm.serving.kernels import experts_touched
from palm.serving.model import served_model
from palm.serving.runtime import constants_override, runtime_costs
from palm.serving.simulate import serving_run
from palm.workload.moe import MoELayer

H100 = cast(GpuClusterHardware, HARDWARE_PRESETS["dgx-h100"])

#: no fixed runtime costs: the device's physics alone (the fitted constants add time on top)
NO_RUNTIME = {
    kind: {"kernel_us": 0.0, "step_us": 0.0, "sequence_us": 0.0} for kind in ("gpu", "mesh")
}


@pytest.fixture
def device_only() -> Any:
    with constants_override(NO_RUNTIME):
        yield


#: Llama-3.1-70B (meta-llama/Llama-3.1-70B config.json: 80 layers, hidden 8192, 64 heads,
#: 8 KV heads of 128, intermediate 28672, vocab 128256)
LLAMA31_70B = {"preset": "llama2-70b", "vocab": 128256}


def serve_config(
    model: dict[str, Any] | None = None,
    *,
    hardware: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    parallelism: dict[str, Any] | None = None,
    **serving: Any,
) -> Any:
    table = {"batch": 1, "input_tokens": 128, "output_tokens": 128, **serving}
    return parse_config(
        {
            "model": model or dict(LLAMA31_70B),
            "hardware": hardware or {"preset": "dgx-h100"},
            "training": {"mode": "serve", "precision": "bf16", **(training or {})},
            "parallelism": parallelism or {"tp": 8},
            "serving": table,
        }
    )


# ------------------------------------------------------------------------------ KV cache


def test_kv_bytes_per_token_of_a_gqa_model_is_the_formula() -> None:
    # 2 (K and V) x 8 KV heads x 128 head dim x 2 B (bf16) x 80 layers = 327,680 B
    result = simulate(serve_config())
    assert result.serving is not None
    assert result.serving.kv_cache_bytes_per_token == 2 * 8 * 128 * 2 * 80 == 327_680
    fp8 = simulate(serve_config(kv_cache="fp8"))
    assert fp8.serving is not None and fp8.serving.kv_cache_bytes_per_token == 163_840


def test_kv_bytes_per_token_of_an_mla_model_is_the_formula() -> None:
    # DeepSeek-V3: the 512-value latent and the 64-value rotary key, shared by the 128 heads:
    # (512 + 64) x 2 B x 61 layers = 70,272 B, against 2 x 128 x 192 x 2 x 61 for MHA
    config = serve_config({"preset": "deepseek-v3"}, hardware={"preset": "dgx-b200"})
    result = simulate(config)
    assert result.serving is not None
    assert result.serving.kv_cache_bytes_per_token == (512 + 64) * 2 * 61 == 70_272


def test_kv_cache_per_device_is_sequences_times_length_times_per_token_share() -> None:
    # TP 8 over 8 KV heads: one KV head per device; 16 sequences of 128 + 128 tokens
    result = simulate(serve_config(batch=16))
    assert result.serving is not None
    per_device_token = 2 * 1 * 128 * 2 * 80
    assert result.serving.kv_cache_bytes_per_device == 16 * 256 * per_device_token
    # TP 16 > 8 KV heads: each device still keeps one whole KV head (replicated)
    wide = simulate(serve_config(batch=16, parallelism={"tp": 16}))
    assert wide.serving is not None
    assert wide.serving.kv_cache_bytes_per_device == result.serving.kv_cache_bytes_per_device


# ------------------------------------------------------------------------------ bounds


def _decode_bytes_per_device(config: Any, sequences: int, context: float) -> float:
    run = serving_run(config)
    st = run.memory[0]
    return st.weights_bytes + sequences * context * st.kv_bytes_per_token


@pytest.mark.parametrize("tp", [1, 8])
def test_decode_step_at_batch_one_is_at_least_weights_and_kv_over_bandwidth(tp: int) -> None:
    with constants_override(NO_RUNTIME):
        _decode_bound(tp, device_only=True)
    _decode_bound(tp, device_only=False)  # the runtime's fixed costs only add time


def _decode_bound(tp: int, *, device_only: bool) -> None:
    config = serve_config(
        training={"precision": "fp8"},
        parallelism={"tp": tp},
        batching="static",
        input_tokens=2048,
        output_tokens=256,
    )
    result = simulate(config)
    assert result.serving is not None
    context = 2048 + 256 / 2
    floor = _decode_bytes_per_device(config, 1, context) / (H100.hbm_bandwidth_gbps * 1e9)
    tpot = result.serving.tpot_s
    assert tpot >= floor
    if tp == 1 and device_only:  # one device: the weights' and cache's read, little more
        assert tpot <= 1.35 * floor / H100.memory_efficiency


@pytest.mark.usefixtures("device_only")
def test_prefill_at_large_batch_approaches_compute_bound() -> None:
    def achieved(batch: int, prompt: int) -> float:
        config = serve_config(  # one device: no tensor-parallel all-reduce in the way
            training={"precision": "bf16"},
            parallelism={"tp": 1},
            batching="static",
            batch=batch,
            input_tokens=prompt,
            output_tokens=1,
        )
        run = serving_run(config)
        out = run.outcome
        flops = sum(c.flops for c in out.prefill)  # the products of one prefill, per device
        assert out.ttft_s is not None
        return flops / out.ttft_s / (H100.peak_tflops.bf16 * 1e12)

    # the products' own large-shape efficiency: the runtime's forward one, else the hardware's
    eff = runtime_costs(serve_config()).matmul_efficiency or H100.matmul_efficiency
    big = achieved(64, 2048)
    small = achieved(1, 16)
    assert big <= eff  # never above the products' own efficiency
    assert big >= 0.8 * eff  # compute-bound: near it
    assert small < 0.1 * big  # a 16-token prefill is bound by reading the weights


@pytest.mark.parametrize("field", ["attention_efficiency", "matmul_efficiency"])
def test_forward_kernel_efficiencies_scale_their_compute_bound_work(field: str) -> None:
    """A runtime efficiency replaces the hardware's for its kernels only: doubling it halves a
    compute-bound prefill's attention (``attention_efficiency``) or products
    (``matmul_efficiency``) and leaves the other part alone."""
    config = serve_config(
        parallelism={"tp": 1}, batching="static", batch=8, input_tokens=4096, output_tokens=1
    )

    def prefill(eff: float) -> Any:
        table = {k: {**v, field: eff} for k, v in NO_RUNTIME.items()}
        with constants_override(table):
            return serving_run(config).outcome.prefill[0]

    one, two = prefill(0.3), prefill(0.6)
    if field == "attention_efficiency":
        assert two.attention_s == pytest.approx(one.attention_s / 2, rel=1e-9)
        assert two.gemm_s == pytest.approx(one.gemm_s, rel=1e-12)
    else:
        assert two.gemm_s == pytest.approx(one.gemm_s / 2, rel=0.02)
        assert two.attention_s == pytest.approx(one.attention_s, rel=1e-12)


def test_more_hbm_bandwidth_is_never_slower() -> None:
    base = serve_config(batch=32, input_tokens=512, output_tokens=512)
    fast = serve_config(
        hardware={"preset": "dgx-h100", "hbm_bandwidth_gbps": 2 * H100.hbm_bandwidth_gbps},
        batch=32,
        input_tokens=512,
        output_tokens=512,
    )
    a, b = simulate(base).serving, simulate(fast).serving
    assert a is not None and b is not None and a.ttft_s is not None and b.ttft_s is not None
    assert b.tpot_s < a.tpot_s
    assert b.ttft_s <= a.ttft_s
    assert b.output_tokens_per_s > a.output_tokens_per_s


def test_more_batch_never_lowers_system_throughput_until_memory_binds() -> None:
    first = simulate(serve_config(input_tokens=1024, output_tokens=1024))
    assert first.serving is not None
    top = first.serving.max_batch
    previous = 0.0
    for batch in sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, top // 2, top}):
        if batch > top:
            continue
        result = simulate(serve_config(batch=batch, input_tokens=1024, output_tokens=1024))
        assert result.serving is not None and result.fits_memory
        assert result.serving.output_tokens_per_s >= previous
        previous = result.serving.output_tokens_per_s


# ------------------------------------------------------------------------------ memory


@pytest.mark.parametrize("dp", [1, 2])
def test_max_batch_is_the_last_batch_that_fits(dp: int) -> None:
    def config(batch: int) -> Any:
        return serve_config(
            parallelism={"tp": 4, "dp": dp},
            training={"precision": "fp8"},
            batch=batch,
            input_tokens=2048,
            output_tokens=2048,
        )

    top = simulate(config(1)).serving
    assert top is not None and top.max_batch > 0
    at = simulate(config(top.max_batch))
    over = simulate(config(top.max_batch + 1))
    assert at.fits_memory and not over.fits_memory
    assert over.memory_overflow_bytes > 0
    assert at.serving is not None and at.serving.max_batch == top.max_batch


def test_weights_that_do_not_fit_leave_no_batch() -> None:
    # 70B in 16 bits is 141 GB: not on one 80 GB H100
    result = simulate(serve_config(parallelism={"tp": 1}))
    assert result.serving is not None
    assert result.serving.max_batch == 0 and not result.fits_memory


@pytest.mark.usefixtures("device_only")
def test_weight_only_int4_reads_fewer_bytes_and_computes_in_16_bits() -> None:
    bf16 = simulate(serve_config(parallelism={"tp": 2}, batching="static"))
    int4 = simulate(serve_config(parallelism={"tp": 2}, batching="static", weights="int4"))
    assert bf16.serving is not None and int4.serving is not None
    assert int4.memory.weights_bytes < 0.3 * bf16.memory.weights_bytes
    assert int4.serving.tpot_s < 0.5 * bf16.serving.tpot_s  # decode: bandwidth-bound
    # a large prefill is compute-bound at the same 16-bit rate: about the same time
    big: dict[str, Any] = {
        "batching": "static",
        "batch": 32,
        "input_tokens": 4096,
        "output_tokens": 1,
    }
    p16 = simulate(serve_config(parallelism={"tp": 2}, **big)).serving
    p4 = simulate(serve_config(parallelism={"tp": 2}, weights="int4", **big)).serving
    assert p16 is not None and p4 is not None and p16.ttft_s and p4.ttft_s
    assert p4.ttft_s == pytest.approx(p16.ttft_s, rel=0.1)


# ------------------------------------------------------------------------------ pieces


def test_small_all_reduce_takes_the_one_shot_latency() -> None:
    link = Link(latency_s=2e-6, bandwidth_Bps=450e9)
    # 8 KB over 8 GPUs: one shot = 7 x 8e3 / 450e9 + 2 us; the ring pays 14 latencies
    small = allreduce_time(n=8, nbytes=8e3, link=link)
    assert small == pytest.approx(7 * 8e3 / 450e9 + 2e-6)
    # 1 GB: the ring's (or two-shot's) 2 (n-1)/n B / bw wins
    big = allreduce_time(n=8, nbytes=1e9, link=link)
    assert big == pytest.approx(2 * 7 / 8 * 1e9 / 450e9 + 2 * 2e-6)


def test_experts_touched_follow_the_balanced_routing_law() -> None:
    model = served_model(serve_config({"preset": "mixtral-8x7b"}, parallelism={"tp": 2}))
    op = model.layers[0]
    assert isinstance(op, MoELayer)
    assert experts_touched(op, tokens=1) == pytest.approx(8 * (1 - 6 / 8))  # 2 of 8
    assert experts_touched(op, tokens=64) == pytest.approx(8 * (1 - 0.75**64))


@pytest.mark.usefixtures("device_only")
def test_mixture_of_experts_decode_at_batch_one_reads_only_its_experts() -> None:
    config = serve_config({"preset": "mixtral-8x7b"}, parallelism={"tp": 2}, batching="static")
    run = serving_run(config)
    # weights on a device: ~47B / 2 in bf16; a batch-1 decode reads the dense part and 2 of
    # 8 experts: about 13B / 2 parameters
    tpot = run.outcome.tpot_s
    all_weights = run.memory[0].weights_bytes / (H100.hbm_bandwidth_gbps * 1e9)
    assert tpot < 0.5 * all_weights


# ------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"parallelism": {"tp": 3}}, "parallelism.tp"),
        ({"training": {"mode": "serve", "precision": "fp4"}}, "training.precision"),
        ({"serving": {"memory_fraction": 1.5}}, "serving.memory_fraction"),
        ({"serving": {"batch": 0}}, "serving.batch"),
        ({"serving": {"scenario": "server", "batching": "static"}}, "serving.batching"),
        ({"serving": {"scenario": "online"}}, "serving.scenario"),
        ({"training": {"mode": "train"}}, "training.mode"),
        ({"parallelism": {"tp": 8, "ep": 2}}, "parallelism.ep"),
    ],
)
def test_bad_serving_configs_name_the_field(changes: dict[str, Any], field: str) -> None:
    data: dict[str, Any] = {
        "model": dict(LLAMA31_70B),
        "hardware": {"preset": "dgx-h100"},
        "training": {"mode": "serve"},
        "parallelism": {"tp": 8},
        "serving": {"batch": 4},
    }
    for section, table in changes.items():
        data[section] = {**data[section], **table}
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert err.value.field == field


def test_fp4_serves_on_blackwell_at_its_peak() -> None:
    hw = {"preset": "dgx-b200"}
    fp8 = simulate(serve_config(hardware=hw, training={"precision": "fp8"}, batch=256))
    fp4 = simulate(serve_config(hardware=hw, training={"precision": "fp4"}, batch=256))
    assert fp8.serving is not None and fp4.serving is not None
    assert fp4.memory.weights_bytes < 0.6 * fp8.memory.weights_bytes
    assert fp4.serving.output_tokens_per_s > fp8.serving.output_tokens_per_s


def test_host_work_overlaps_the_devices_step() -> None:
    """A step takes the longer of the devices' work and the host's (step + per sequence)."""
    config = serve_config(batch=64, batching="static", input_tokens=512, output_tokens=64)
    with constants_override(NO_RUNTIME):
        device = serving_run(config).outcome.tpot_s
    slow_host = {**NO_RUNTIME, "gpu": {"kernel_us": 0.0, "step_us": 0.0, "sequence_us": 1000.0}}
    with constants_override(slow_host):
        host_bound = serving_run(config).outcome.tpot_s
    fast_host = {**NO_RUNTIME, "gpu": {"kernel_us": 0.0, "step_us": 1.0, "sequence_us": 0.0}}
    with constants_override(fast_host):
        hidden = serving_run(config).outcome.tpot_s
    assert host_bound == pytest.approx(64 * 1000e-6)  # 64 sequences x 1 ms, over the devices
    assert hidden == pytest.approx(device)  # 1 us of host work hides behind the step


# ------------------------------------------------------------------------------ outputs

SERVE_EXAMPLE = "examples/serve-llama31-70b-h100.toml"
CONTRACT_KEYS = {
    "ttft_s",
    "tpot_s",
    "output_tokens_per_s",
    "output_tokens_per_s_per_user",
    "kv_cache_bytes_per_device",
    "max_batch",
    "fits_memory",
    "peak_memory_bytes",
    "memory_capacity_bytes",
    "mfu",
    "throughput_samples_per_s",
}


def test_simulate_json_has_the_serving_contract_keys_and_is_deterministic() -> None:
    from tests.cli_run import run

    first = run("simulate", SERVE_EXAMPLE, "--json", "--no-wall-time")
    second = run("simulate", SERVE_EXAMPLE, "--json", "--no-wall-time")
    assert first.code == 0, first.stderr
    assert first.stdout == second.stdout
    import json

    data = json.loads(first.stdout)
    assert set(data) >= CONTRACT_KEYS
    assert data["config"]["serving"]["batch"] == 64
    assert data["tpot_s"] > 0 and data["ttft_s"] > data["tpot_s"]


def test_summary_trace_and_gantt_show_prefill_and_decode(tmp_path: Any) -> None:
    import json

    from tests.cli_run import run

    trace = tmp_path / "trace.json"
    out = run(
        "simulate",
        SERVE_EXAMPLE,
        "--set",
        "parallelism.pp=2",
        "--set",
        "parallelism.tp=4",
        "--trace",
        str(trace),
    )
    assert out.code == 0, out.stderr
    assert "prefill" in out.stdout and "decode" in out.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    cats = {e.get("cat") for e in events if e["ph"] == "X"}
    assert cats == {"prefill", "decode"}
    stages = {e["tid"] for e in events if e["ph"] == "X"}
    assert stages == {0, 1}
    # the second stage starts each micro-batch after the first has handed it over
    first = min(e["ts"] for e in events if e["ph"] == "X" and e["tid"] == 1)
    assert first > 0
    plots = run("plot", SERVE_EXAMPLE, "--out", str(tmp_path / "plots"))
    assert plots.code == 0, plots.stderr
    assert (tmp_path / "plots" / "gantt.png").stat().st_size > 0


@pytest.mark.parametrize("tp", [1, 8])
def test_memory_check_of_a_served_config_agrees_with_its_result(tp: int) -> None:
    from palm.api import analytical_if_fits, memory_check

    config = serve_config(parallelism={"tp": tp}, batch=32)
    check = memory_check(config)
    result = simulate(config)
    assert check.peak_bytes == result.peak_memory_bytes
    assert (check.overflow_bytes <= 0) == result.fits_memory
    screened = analytical_if_fits(config)
    assert (screened is None) == (not result.fits_memory)


@pytest.mark.usefixtures("device_only")
def test_a_tenstorrent_chip_decodes_no_faster_than_its_dram_reads_the_weights() -> None:
    n150 = HARDWARE_PRESETS["wormhole-n150"]
    assert isinstance(n150, Mesh2DHardware)
    config = serve_config(
        {"preset": "llama2-7b"},
        hardware={"preset": "wormhole-n150"},
        parallelism={"tp": 1},
        batching="static",
        weights="bfp4",
        attention_weights="bfp8",
    )
    run = serving_run(config)
    dram = n150.dram_channels * n150.dram_channel_bandwidth_gbps * 1e9
    floor = run.memory[0].weights_bytes / dram
    assert run.outcome.tpot_s >= floor
    assert run.outcome.tpot_s <= 1.3 * floor / n150.memory_efficiency
    # bfp4 MLP weights read fewer bytes than bfp8 ones: a faster decode
    bfp8 = serving_run(
        serve_config(
            {"preset": "llama2-7b"},
            hardware={"preset": "wormhole-n150"},
            parallelism={"tp": 1},
            batching="static",
            weights="bfp8",
        )
    )
    assert bfp8.outcome.tpot_s > run.outcome.tpot_s


def test_server_scenario_follows_littles_law_and_saturates_above_capacity() -> None:
    def at(rate: float) -> Any:
        return simulate(
            serve_config(
                scenario="server",
                request_rate_per_s=rate,
                batch=256,
                input_tokens=1024,
                output_tokens=256,
            )
        ).serving

    low = at(2.0)
    assert low is not None and low.ttft_s is not None and not low.saturated
    assert low.output_tokens_per_s == pytest.approx(2.0 * 256)
    in_flight = 2.0 * (low.ttft_s + 256 * low.tpot_s)  # Little's law, n = rate x time
    assert low.sequences_in_flight == pytest.approx(in_flight, abs=1.0)
    high = at(1000.0)
    assert high is not None and high.saturated and high.ttft_s is None
    capacity = simulate(serve_config(batch=256, input_tokens=1024, output_tokens=256)).serving
    assert capacity is not None
    assert high.output_tokens_per_s == pytest.approx(capacity.output_tokens_per_s)
