"""``palm.simulate`` of a ``training.mode = "serve"`` configuration: the served model's memory,
its steady state (:mod:`palm.serving.scenario`) and the :class:`palm.result.Result` with its
serving fields (docs/serving.md).

The usual keys mean, for serving: ``throughput_samples_per_s`` requests answered per second
(``sample_unit = "requests"``), ``tokens_per_s`` output tokens per second, ``iteration_time_s``
one decode step of the pipeline (``tpot_s``), ``micro_batches`` the pipeline's micro-batches,
``mfu`` the products' FLOPs of the decode step over the devices' peak, ``peak_memory_bytes``
the fullest device (weights, KV cache of the sequences in flight, one step's workspace),
``fits_memory`` whether it is within ``memory_fraction`` of the device's memory (and
``memory_overflow_bytes`` by how much it is over that share). The engine is the closed form of
:mod:`palm.serving.scenario` whichever ``--engine`` is asked (``engine`` names the one asked).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from palm.errors import ConfigError
from palm.hardware.spec import GpuClusterHardware
from palm.result import MemoryResult, Result, ServingResult, ServingStep, StageResult
from palm.serving.chips import chip_devices
from palm.serving.kernels import serve_rates
from palm.serving.memory import StageMemory, max_sequences, stage_bytes, stage_memory
from palm.serving.model import ServedModel, kv_bytes_per_token_layer, served_model
from palm.serving.runtime import runtime_costs
from palm.serving.scenario import Outcome, Pipeline, serve
from palm.serving.spec import (
    activation_bytes,
    attention_weight_format,
    kv_format,
    stored_bytes,
    weight_format,
)
from palm.serving.step import StepCost
from palm.strategy import SimConfig

__all__ = ["simulate_serving", "ServingRun", "serving_run"]


@dataclass(frozen=True)
class ServingRun:
    """A served configuration's pipeline, memory and steady state (for results and traces)."""

    config: SimConfig
    model: ServedModel
    pipeline: Pipeline
    memory: list[StageMemory]
    outcome: Outcome
    replica_sequences: int
    max_batch: int
    usable_bytes: float


def serving_run(config: SimConfig) -> ServingRun:
    """Price ``config`` (validated, ``training.mode = "serve"``)."""
    if config.model.family not in ("gpt", "llama"):
        raise ConfigError("model.family", config.model.family, "a decoder (gpt or llama)")
    sv, tr, par = config.serving, config.training, config.parallelism
    prec = tr.precision
    wa = stored_bytes(attention_weight_format(sv, prec))
    wm = stored_bytes(weight_format(sv, prec))
    kvb = stored_bytes(kv_format(sv, prec))
    act = activation_bytes(prec)
    model = served_model(config)
    runtime = runtime_costs(config)
    sr = serve_rates(
        config.hardware,
        prec,
        attention_weight_bytes=wa,
        mlp_weight_bytes=wm,
        kv_bytes=kvb,
        act_bytes=act,
        grouped_efficiency=runtime.grouped_efficiency,
        attention_efficiency=runtime.attention_efficiency,
        matmul_efficiency=runtime.matmul_efficiency,
    )
    pipe = Pipeline(model=model, sr=sr, hw=config.hardware, runtime=runtime)
    memory = [
        stage_memory(
            model, s, attention_weight_bytes=wa, mlp_weight_bytes=wm, kv_bytes=kvb, act_bytes=act
        )
        for s in range(par.pp)
    ]
    usable = sv.memory_fraction * _device_memory(config)
    per_replica = max_sequences(memory, serving=sv, usable_bytes=usable)
    replica = math.ceil(sv.batch / par.dp)
    outcome = serve(pipe, sv, sequences=replica, rate_per_s=sv.request_rate_per_s / par.dp)
    return ServingRun(
        config=config,
        model=model,
        pipeline=pipe,
        memory=memory,
        outcome=outcome,
        replica_sequences=replica,
        max_batch=per_replica * par.dp,
        usable_bytes=usable,
    )


def _device_memory(config: SimConfig) -> float:
    hw = config.hardware
    if isinstance(hw, GpuClusterHardware):
        return hw.device_memory_bytes
    chip = hw.dram_capacity_gib * 2**30 + hw.sram_per_core_mib * 2**20 * hw.device_count
    return chip / chip_devices(hw)


def _step(costs: list[StepCost], scale: float = 1.0) -> ServingStep:
    return ServingStep(
        time_s=scale * sum(c.time_s for c in costs),
        gemm_s=scale * sum(c.gemm_s for c in costs),
        attention_s=scale * sum(c.attention_s for c in costs),
        vector_s=scale * sum(c.vector_s for c in costs),
        comm_s=scale * sum(c.comm_s for c in costs),
        overhead_s=scale * sum(c.overhead_s for c in costs),
    )


def simulate_serving(config: SimConfig, *, engine: str = "event") -> Result:
    """The :class:`~palm.result.Result` of a served configuration (module docstring)."""
    start = time.perf_counter()
    run = serving_run(config)
    return serving_result(run, started=start, engine=engine)


def serving_result(run: ServingRun, *, started: float, engine: str = "event") -> Result:
    """The result of a priced :class:`ServingRun`; ``engine`` is the engine asked for (both
    price a served configuration with the same closed form)."""
    config, out = run.config, run.outcome
    sv, par = config.serving, config.parallelism
    devices = par.tp * par.pp * par.dp
    system = min(sv.batch, out.sequences * par.dp)
    tokens_s = out.tokens_per_s * par.dp
    requests_s = out.requests_per_s * par.dp
    peak = stage_bytes(run.memory, serving=sv, sequences=run.replica_sequences)
    fullest = max(
        range(par.pp),
        key=lambda s: stage_bytes([run.memory[s]], serving=sv, sequences=run.replica_sequences),
    )
    st = run.memory[fullest]
    max_len = sv.input_tokens + sv.output_tokens
    kv_dev = run.replica_sequences * max_len * st.kv_bytes_per_token
    kvb = run.pipeline.sr.kv_bytes
    kv_token = sum(kv_bytes_per_token_layer(op, kv_bytes=kvb) for op in run.model.layers)
    flops = sum(c.flops for c in out.decode) * min(par.pp, max(out.sequences, 1))
    peak_flops = run.pipeline.sr.rates.peak_flops
    mfu = flops / out.tpot_s / par.pp / peak_flops if peak_flops > 0 else 0.0
    serving = ServingResult(
        ttft_s=out.ttft_s,
        tpot_s=out.tpot_s,
        output_tokens_per_s=tokens_s,
        output_tokens_per_s_per_user=1.0 / out.tpot_s,
        kv_cache_bytes_per_device=kv_dev,
        kv_cache_bytes_per_token=kv_token,
        max_batch=run.max_batch,
        sequences_in_flight=system,
        requests_per_s=requests_s,
        saturated=out.saturated,
        prefill=_step(out.prefill),
        decode=_step(out.decode),
    )
    stages = _stage_results(run)
    notes = ("saturated: requests arrive faster than the server answers them",) * out.saturated
    return Result(
        throughput_samples_per_s=requests_s,
        iteration_time_s=out.tpot_s,
        model_tflops_per_device=flops / out.tpot_s / par.pp / 1e12,
        hardware_tflops_per_device=flops / out.tpot_s / par.pp / 1e12,
        mfu=mfu,
        bubble_fraction=0.0,
        peak_memory_bytes=peak,
        memory_capacity_bytes=_device_memory(config),
        fits_memory=peak <= run.usable_bytes,
        memory_overflow_bytes=max(0.0, peak - run.usable_bytes),
        engine=engine,
        events_simulated=None,
        sim_wall_s=time.perf_counter() - started,
        devices=devices,
        micro_batches=max(1, min(par.pp, out.sequences)),
        sample_unit="requests",
        tokens_per_s=tokens_s,
        memory=MemoryResult(
            weights_bytes=st.weights_bytes,
            gradients_bytes=0.0,
            optimizer_bytes=0.0,
            activations_bytes=peak - st.weights_bytes,
        ),
        stages=stages,
        notes=notes,
        serving=serving,
    )


def _stage_results(run: ServingRun) -> tuple[StageResult, ...]:
    """Each pipeline stage's decode step, busy share and memory."""
    out, sv, pp = run.outcome, run.config.serving, run.config.parallelism.pp
    micro = min(pp, out.sequences)
    return tuple(
        StageResult(
            stage=s,
            layers=len(run.model.stages[s]),
            forward_s=out.decode[s].time_s,
            backward_s=0.0,
            busy_s=out.decode[s].time_s,
            idle_s=max(0.0, out.tpot_s - out.decode[s].time_s),
            bubble_s=0.0,
            busy_fraction=min(1.0, out.decode[s].time_s * micro / out.tpot_s),
            memory_bytes=stage_bytes([run.memory[s]], serving=sv, sequences=run.replica_sequences),
            dp_allreduce_s=0.0,
            dp_exposed_s=0.0,
            optimizer_s=0.0,
            sent_bytes=0.0,
            received_bytes=0.0,
        )
        for s in range(pp)
    )
