"""One forward step of a served model on one pipeline stage of one replica.

A step runs every layer of the stage once over the step's tokens: the next token of each
decoding sequence and, under chunked prefill, prompt tokens of new requests in the same
products (in-flight batching: Yu et al. 2022, "Orca", sec. 4.2 selective batching; vLLM and
TensorRT-LLM mix context and generation tokens in one forward pass). Per layer, on one device
(:mod:`palm.serving.kernels`, :mod:`palm.serving.comm`):

    t_layer = sum(products) + decode attention + prefill attention
              + element-wise bytes / bw + collectives + kernels x kernel_s

The products see all ``T`` tokens of the step (linear layers are shared by decode and prefill
tokens); attention is per sequence. The first stage adds the embedding gather, the last the
output layer over the tokens that emit a token (one per decoding sequence and one per prompt
that finishes in the step) and the all-gather of its vocabulary-parallel logits; on chips
joined by Ethernet the collectives run on a ring over the chips (:mod:`palm.serving.chips`);
every step
runs beside the host's work for it (:class:`RuntimeCosts`, :mod:`palm.serving.scenario`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from palm.hardware.spec import GpuClusterHardware, Hardware
from palm.serving.chips import chip_allgather_time, chip_allreduce_time
from palm.serving.comm import Link, all_to_all_time, allreduce_time, group_link
from palm.serving.kernels import (
    ServeRates,
    decode_attention_time,
    expert_product_time,
    experts_touched,
    kv_write_bytes,
    prefill_attention_time,
    product_time,
)
from palm.serving.model import ServedModel, is_mla
from palm.workload.moe import MoELayer
from palm.workload.ops import Gemm, TransformerLayer

__all__ = ["RuntimeCosts", "StepLoad", "StepCost", "stage_step", "layer_gemms"]


@dataclass(frozen=True)
class RuntimeCosts:
    """Costs of the serving runtime on a device: ``kernel_s`` per kernel launched (launch,
    ramp-up and tail of a kernel that CUDA graphs do not remove); the host's work per forward
    step, ``step_s`` plus ``sequence_s`` per sequence in the step (scheduling, sampling,
    bookkeeping), overlapped with the devices' step (:meth:`palm.serving.scenario.Pipeline
    .host_time`); ``grouped_efficiency``, the fraction of the shape rule's rate that a fused
    mixture-of-experts kernel reaches (0: the hardware's ``grouped_gemm_efficiency``);
    ``attention_efficiency``, the fraction of the 16-bit peak that the runtime's forward-only
    attention kernels reach (0: the hardware's ``attention_efficiency``, whose fit on training
    rows prices forward and backward FlashAttention together); and ``matmul_efficiency``, the
    fraction of peak the runtime's forward products reach when large and well shaped, for
    every precision (0: the hardware's ``matmul_efficiency`` / ``fp8_matmul_efficiency``,
    fitted on training steps whose backward products and framework gaps it also covers)."""

    kernel_s: float = 0.0
    step_s: float = 0.0
    sequence_s: float = 0.0
    grouped_efficiency: float = 0.0
    attention_efficiency: float = 0.0
    matmul_efficiency: float = 0.0


@dataclass(frozen=True)
class StepLoad:
    """What one step of one replica carries: ``decode`` sequences emitting a token, whose
    caches hold ``context`` tokens on average; ``prefill_tokens`` prompt tokens from
    ``prompts`` prompts of ``prompt_len`` tokens run in chunks of ``chunk`` (0: whole), of
    which ``finishing`` complete their prompt in this step and emit their first token."""

    decode: int = 0
    context: float = 0.0
    prefill_tokens: int = 0
    prompts: float = 0.0
    prompt_len: int = 0
    chunk: int = 0
    finishing: float = 0.0

    @property
    def tokens(self) -> int:
        return self.decode + self.prefill_tokens

    @property
    def logit_rows(self) -> int:
        return self.decode + math.ceil(self.finishing)

    def split(self, parts: int) -> StepLoad:
        """One of ``parts`` equal micro-batches of this load (pipeline parallelism)."""
        if parts <= 1:
            return self
        return StepLoad(
            decode=math.ceil(self.decode / parts),
            context=self.context,
            prefill_tokens=math.ceil(self.prefill_tokens / parts),
            prompts=self.prompts / parts,
            prompt_len=self.prompt_len,
            chunk=self.chunk,
            finishing=self.finishing / parts,
        )


@dataclass(frozen=True)
class StepCost:
    """Time of one step on one stage and its parts (seconds), and its matrix FLOPs."""

    time_s: float
    gemm_s: float = 0.0
    attention_s: float = 0.0
    vector_s: float = 0.0
    comm_s: float = 0.0
    overhead_s: float = 0.0
    flops: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)


def layer_gemms(
    op: TransformerLayer, *, tokens: int, tp: int
) -> tuple[tuple[Gemm, ...], tuple[Gemm, ...], tuple[Gemm, ...]]:
    """The products of ``op`` for ``tokens`` tokens on one device as ``(attention, mlp,
    experts)``: the attention projections, the dense MLP / shared experts / router, and the
    routed experts' grouped products."""
    gemms = op.forward_gemms(batch=tokens, tp=tp)
    experts: tuple[Gemm, ...] = ()
    if isinstance(op, MoELayer) and op.experts:
        experts = op.moe_gemms(batch=tokens, tp=tp)[-2:]
        gemms = gemms[:-2]
    if is_mla(op):
        assert isinstance(op, MoELayer)
        n_attn = (2 if op.q_lora_rank else 1) + 3
    else:
        n_attn = 2
    return gemms[:n_attn], gemms[n_attn:], experts


def _layer_time(
    op: TransformerLayer,
    load: StepLoad,
    sr: ServeRates,
    model: ServedModel,
    hw: Hardware,
    runtime: RuntimeCosts,
) -> tuple[float, float, float, float, float, float, float]:
    """Products, attention, element-wise, collectives, overhead, total and FLOPs of one layer."""
    tp, tokens = model.tp, load.tokens
    attn_g, mlp_g, expert_g = layer_gemms(op, tokens=tokens, tp=tp)
    gemm = sum(product_time(g, sr, weight_bytes=sr.attention_weight_bytes) for g in attn_g)
    gemm += sum(product_time(g, sr, weight_bytes=sr.mlp_weight_bytes) for g in mlp_g)
    flops = sum(g.flops for g in (*attn_g, *mlp_g))
    if expert_g:
        assert isinstance(op, MoELayer)
        touched = experts_touched(op, tokens=tokens)
        rows = op.expert_tokens(batch=tokens, tp=tp)
        w = sr.mlp_weight_bytes
        gemm += sum(
            expert_product_time(g, sr, rows=rows, touched=touched, weight_bytes=w) for g in expert_g
        )
        flops += sum(2.0 * rows * g.n * g.k for g in expert_g)
    attn = decode_attention_time(op, sr, sequences=load.decode, context=load.context, tp=tp)
    if load.prompts > 0:
        one = prefill_attention_time(op, sr, prompt=load.prompt_len, chunk=load.chunk, tp=tp)
        attn += load.prompts * one
    vec_bytes = op.forward_vector_bytes(batch=tokens, tp=tp, sp=False, act_bytes=sr.act_bytes)
    vec_bytes += kv_write_bytes(op, sr, tokens=tokens, tp=tp)
    vec = vec_bytes / sr.bandwidth_Bps
    comm, n_coll = _layer_comm(op, tokens, sr, model, hw)
    kernels = len(attn_g) + len(mlp_g) + len(expert_g) + 1 + 4 + n_coll
    overhead = kernels * runtime.kernel_s
    total = gemm + attn + vec + comm + overhead
    return gemm, attn, vec, comm, overhead, total, flops


def _layer_comm(
    op: TransformerLayer, tokens: int, sr: ServeRates, model: ServedModel, hw: Hardware
) -> tuple[float, int]:
    """Collectives of one layer: the tensor-parallel all-reduces after attention and after the
    MLP, or, when the experts span more devices than a tensor-parallel group (attention data
    parallelism with expert parallelism), the dispatch and combine all-to-alls instead of the
    second all-reduce. Returns the time and the number of collectives."""
    tp = model.tp
    nbytes = tokens * op.hidden * sr.act_bytes
    if not isinstance(hw, GpuClusterHardware):
        # chips on Ethernet: the ring over the group's chips (palm.serving.chips)
        ar_chips = chip_allreduce_time(hw, n=tp, nbytes=nbytes)
        return 2 * ar_chips, 2 if tp > 1 else 0
    link = group_link(hw, size=tp)
    ar = allreduce_time(n=tp, nbytes=nbytes, link=link)
    group = model.ep * model.etp
    if isinstance(op, MoELayer) and op.experts and group > tp:
        a2a = all_to_all_time(
            hw, n=group, nbytes=nbytes * op.top_k, experts=op.experts, top_k=op.top_k
        )
        return ar + 2 * a2a, (1 if tp > 1 else 0) + 2
    return 2 * ar, 2 if tp > 1 else 0


def stage_step(
    stage: int,
    load: StepLoad,
    *,
    sr: ServeRates,
    model: ServedModel,
    hw: Hardware,
    runtime: RuntimeCosts,
) -> StepCost:
    """Time of one step of ``load`` on pipeline stage ``stage`` (module docstring)."""
    parts = [0.0] * 6
    flops = 0.0
    cache: dict[int, tuple[float, ...]] = {}  # identical layers share one instance
    for i in model.stages[stage]:
        op = model.layers[i]
        found = cache.get(id(op))
        if found is None:
            found = _layer_time(op, load, sr, model, hw, runtime)
            cache[id(op)] = found
        for j in range(6):
            parts[j] += found[j]
        flops += found[6]
    gemm, attn, vec, comm, overhead, _ = parts
    if stage == 0:
        vec += 3.0 * load.tokens * model.embedding.hidden * sr.act_bytes / sr.bandwidth_Bps
    if stage == len(model.stages) - 1:
        g_l, c_l, f_l = _output_layer(load, sr, model, hw)
        gemm, comm, flops = gemm + g_l, comm + c_l, flops + f_l
    total = gemm + attn + vec + comm + overhead
    return StepCost(
        time_s=total,
        gemm_s=gemm,
        attention_s=attn,
        vector_s=vec,
        comm_s=comm,
        overhead_s=overhead,
        flops=flops,
    )


def _output_layer(
    load: StepLoad, sr: ServeRates, model: ServedModel, hw: Hardware
) -> tuple[float, float, float]:
    """The output layer over the rows that emit a token (16-bit weights) and the all-gather of
    their vocabulary-parallel logits: product time, collective time, FLOPs."""
    rows = load.logit_rows
    if rows <= 0:
        return 0.0, 0.0, 0.0
    lg = model.logits
    g = Gemm(rows, math.ceil(lg.vocab / model.tp), lg.hidden, fp8=False)
    t = product_time(g, sr, weight_bytes=2.0)
    comm = 0.0
    nbytes = rows * lg.vocab * sr.act_bytes
    if isinstance(hw, GpuClusterHardware) and model.tp > 1:
        link: Link = group_link(hw, size=model.tp)
        comm = (model.tp - 1) / model.tp * nbytes / link.bandwidth_Bps + link.latency_s
    elif not isinstance(hw, GpuClusterHardware):
        comm = chip_allgather_time(hw, n=model.tp, nbytes=nbytes)
    return t, comm, g.flops
