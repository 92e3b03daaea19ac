"""Compile a configuration into per-stage costs that every engine shares.

The plan cuts the operator chain into ``pp * interleave`` chunks (chunk ``c`` runs on pipeline
rank ``c % pp``, as in Megatron-LM's interleaved schedule), prices one micro-batch of each
chunk with :mod:`palm.cost.compute` and the tensor-parallel collectives of
:mod:`palm.cost.collectives`, prices the activation hand-off to the next chunk, the
data-parallel gradient reduction and the optimizer step, and adds up memory per device.

Transformer layers are split evenly between chunks, the embedding riding with the first and the
logits with the last, as Megatron-LM does; when the layers do not divide evenly, or for other
operator chains, chunks are balanced by forward time (the contiguous split that minimises the
largest chunk). Identical operators are priced once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from palm.config import validate
from palm.cost.collectives import collective_time
from palm.cost.compute import DeviceRates, OpTimes, device_rates, op_times
from palm.cost.memory import MemoryBreakdown, in_flight_microbatches, state_bytes_per_param
from palm.hardware.spec import Mesh2DHardware
from palm.network.links import PathCost, path_cost, ring_cost
from palm.network.placement import Placement, make_placement
from palm.strategy import SimConfig
from palm.workload.model import Workload, build_workload
from palm.workload.ops import Collective, Op

__all__ = ["ChunkCost", "StageCost", "Plan", "build_plan", "partition"]


@dataclass(frozen=True)
class ChunkCost:
    """One model chunk on one device, for one micro-batch (seconds, FLOPs, bytes)."""

    index: int
    stage: int
    first_op: int
    last_op: int
    layers: int
    forward_compute_s: float
    backward_compute_s: float
    recompute_s: float
    tp_forward_s: float
    tp_backward_s: float
    zero3_gather_s: float
    forward_flops: float
    backward_flops: float
    recompute_flops: float
    tp_bytes_forward: float
    tp_bytes_backward: float
    weight_stream_bytes: float
    send_bytes: float
    send_s: float

    @property
    def forward_s(self) -> float:
        return self.forward_compute_s + self.tp_forward_s + self.zero3_gather_s

    @property
    def backward_s(self) -> float:
        return self.backward_compute_s + self.recompute_s + self.tp_backward_s + self.zero3_gather_s


@dataclass(frozen=True)
class StageCost:
    """One pipeline rank: its chunks, memory and end-of-iteration work."""

    stage: int
    chunks: tuple[ChunkCost, ...]
    params_per_device: float
    memory: MemoryBreakdown
    in_flight_microbatches: float
    dp_grad_bytes: float
    dp_allreduce_s: float
    dp_buckets: int
    optimizer_s: float

    @property
    def forward_s(self) -> float:
        return sum(c.forward_s for c in self.chunks)

    @property
    def backward_s(self) -> float:
        return sum(c.backward_s for c in self.chunks)


@dataclass(frozen=True)
class Plan:
    config: SimConfig
    workload: Workload
    placement: Placement
    rates: DeviceRates
    micro_batches: int
    stages: tuple[StageCost, ...]
    chunks: tuple[ChunkCost, ...]
    training: bool

    @property
    def devices(self) -> int:
        return self.config.parallelism.devices

    @property
    def samples_per_iteration(self) -> int:
        return self.config.training.global_batch

    @property
    def memory_capacity_bytes(self) -> float:
        return self.config.hardware.device_memory_bytes


def partition(costs: Sequence[float], parts: int) -> list[tuple[int, int]]:
    """Contiguous split of ``costs`` into ``parts`` non-empty ranges ``[start, end)``
    minimising the largest sum (binary search on the bound, then a greedy cut that leaves
    enough items for the remaining parts)."""
    n = len(costs)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot cut {n} items into {parts} parts")
    lo, hi = max(costs), sum(costs)

    def cuts(bound: float) -> list[tuple[int, int]] | None:
        ranges: list[tuple[int, int]] = []
        start, acc = 0, 0.0
        for i, c in enumerate(costs):
            remaining_parts = parts - len(ranges) - 1
            must_cut = n - i == remaining_parts  # exactly one item left per remaining part
            if i > start and (acc + c > bound or must_cut):
                ranges.append((start, i))
                start, acc = i, 0.0
                if len(ranges) == parts:
                    return None
            acc += c
        ranges.append((start, n))
        return ranges if len(ranges) == parts and acc <= bound else None

    for _ in range(100):
        mid = (lo + hi) / 2
        if cuts(mid) is None:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * max(hi, 1e-30):
            break
    found = cuts(hi)
    assert found is not None
    return found


def _chunk_ranges(
    workload: Workload, parts: int, unit_cost: Sequence[float]
) -> list[tuple[int, int]]:
    ops = workload.ops
    if workload.transformer:
        layers = workload.blocks
        if layers % parts == 0:
            per = layers // parts
            bounds = [1 + i * per for i in range(parts)] + [len(ops)]
            bounds[0] = 0
            return [(bounds[i], bounds[i + 1]) for i in range(parts)]
        # balance layers, then attach embedding and logits to the end chunks
        layer_ranges = partition(unit_cost[1:-1], parts)
        out = [(a + 1, b + 1) for a, b in layer_ranges]
        out[0] = (0, out[0][1])
        out[-1] = (out[-1][0], len(ops))
        return out
    return partition(unit_cost, parts)


def _ring_time(colls: Sequence[Collective], n: int, step: PathCost) -> float:
    return sum(collective_time(c, n=n, step=step) for c in colls)


def build_plan(config: SimConfig) -> Plan:
    """Price ``config`` (validated again here, so hand-built configs are checked too)."""
    validate(config)
    par, tr, hw = config.parallelism, config.training, config.hardware
    training = tr.mode == "train"
    workload = build_workload(config.model)
    rates = device_rates(hw, tr.precision)
    placement = make_placement(config)
    sp = par.sequence_parallel and par.tp > 1
    b, tp, p = tr.micro_batch, par.tp, rates.elem_bytes
    micro_batches = tr.global_batch // (par.dp * tr.micro_batch)
    states = state_bytes_per_param(tr)
    recompute = tr.recompute if training else "none"

    n_chunks = par.pp * par.chunks
    unit_cost = [op.forward_flops(batch=1) + 1.0 for op in workload.ops]
    ranges = _chunk_ranges(workload, n_chunks, unit_cost)

    # stage weights decide whether weights stay in SRAM (mesh) for all of the stage's chunks
    stage_params = [0.0] * par.pp
    for c, (lo, hi) in enumerate(ranges):
        stage_params[c % par.pp] += sum(op.params_per_device(tp=tp) for op in workload.ops[lo:hi])

    cache: dict[tuple[Op, bool], OpTimes] = {}

    def priced(op: Op, resident: bool) -> OpTimes:
        key = (dataclasses.replace(op, name=""), resident)
        if key not in cache:
            cache[key] = op_times(
                op,
                batch=b,
                tp=tp,
                sp=sp,
                recompute=recompute,
                rates=rates,
                weights_resident=resident,
                training=training,
            )
        return cache[key]

    chunks: list[ChunkCost] = []
    for c, (lo, hi) in enumerate(ranges):
        stage = c % par.pp
        ops = workload.ops[lo:hi]
        weights_bytes = stage_params[stage] * states.weights
        resident = weights_bytes <= rates.sram_bytes
        times = [priced(op, resident) for op in ops]
        tp_step = ring_cost(hw, placement.tp_group(stage))
        f_coll = [
            x for op in ops for x in op.forward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
        ]
        b_coll = [
            x for op in ops for x in op.backward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
        ]
        if recompute == "full":
            b_coll += [
                x
                for op in ops
                if op.recompute_gemms(batch=b, tp=tp, recompute="full")
                for x in op.forward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
            ]
        zero3 = 0.0
        if training and tr.zero >= 3 and par.dp > 1:
            dp_step = ring_cost(hw, placement.dp_group(stage))
            chunk_params = sum(op.params_per_device(tp=tp) for op in ops)
            gather = Collective("all-gather", chunk_params * states.weights)
            zero3 = collective_time(gather, n=par.dp, step=dp_step)
        send_bytes, send_s = 0.0, 0.0
        if c + 1 < n_chunks:
            full = ops[-1].output_bytes(batch=b, act_bytes=p)
            send_bytes = full / tp  # Megatron scatter/gather: each TP rank sends its slice
            nxt = (c + 1) % par.pp
            hop = path_cost(hw, placement.device(stage, 0, 0), placement.device(nxt, 0, 0))
            send_s = hop.time(send_bytes)
            if tp > 1:
                send_s += collective_time(
                    Collective("all-gather", full),
                    n=tp,
                    step=ring_cost(hw, placement.tp_group(nxt)),
                )
        chunks.append(
            ChunkCost(
                index=c,
                stage=stage,
                first_op=lo,
                last_op=hi - 1,
                layers=sum(1 for op in ops if type(op).__name__ == "TransformerLayer"),
                forward_compute_s=sum(t.forward_s for t in times),
                backward_compute_s=sum(t.backward_s for t in times),
                recompute_s=sum(t.recompute_s for t in times),
                tp_forward_s=_ring_time(f_coll, tp, tp_step),
                tp_backward_s=_ring_time(b_coll, tp, tp_step) if training else 0.0,
                zero3_gather_s=zero3,
                forward_flops=sum(t.forward_flops for t in times),
                backward_flops=sum(t.backward_flops for t in times),
                recompute_flops=sum(t.recompute_flops for t in times),
                tp_bytes_forward=sum(x.nbytes for x in f_coll),
                tp_bytes_backward=sum(x.nbytes for x in b_coll) if training else 0.0,
                weight_stream_bytes=sum(t.weight_stream_bytes for t in times),
                send_bytes=send_bytes,
                send_s=send_s,
            )
        )

    stages: list[StageCost] = []
    bucket_bytes = par.dp_bucket_mib * 2**20
    for s in range(par.pp):
        mine = tuple(ch for ch in chunks if ch.stage == s)
        params = stage_params[s]
        act = 0.0
        for ch in mine:
            ops = workload.ops[ch.first_op : ch.last_op + 1]
            if training:
                act += sum(
                    op.activation_bytes(batch=b, tp=tp, sp=sp, act_bytes=p, recompute=recompute)
                    for op in ops
                )
            else:
                act = max(act, max(op.output_bytes(batch=b, act_bytes=p) for op in ops) * 2)
        in_flight = in_flight_microbatches(
            parallelism=par, stage=s, micro_batches=micro_batches, training=training
        )
        memory = MemoryBreakdown.for_stage(
            params=params,
            states=states,
            zero=tr.zero if training else 0,
            dp=par.dp,
            activation_bytes_per_microbatch=act,
            in_flight=in_flight,
        )
        grad_bytes = params * states.gradients if training else 0.0
        dp_s, buckets, opt_s = 0.0, 0, 0.0
        if training:
            if par.dp > 1:
                dp_step = ring_cost(hw, placement.dp_group(s))
                # ZeRO >= 1: reduce-scatter of gradients and all-gather of updated weights move
                # the same bytes as one all-reduce (Rajbhandari et al. 2020, sec. 7).
                dp_s = collective_time(Collective("all-reduce", grad_bytes), n=par.dp, step=dp_step)
                buckets = max(1, math.ceil(grad_bytes / bucket_bytes))
            opt_s = _optimizer_time(
                params,
                config,
                rates,
                shards=par.dp if tr.zero >= 1 else 1,
                resident=params * states.total <= rates.sram_bytes,
            )
        stages.append(
            StageCost(
                stage=s,
                chunks=mine,
                params_per_device=params,
                memory=memory,
                in_flight_microbatches=in_flight,
                dp_grad_bytes=grad_bytes,
                dp_allreduce_s=dp_s,
                dp_buckets=buckets,
                optimizer_s=opt_s,
            )
        )
    return Plan(
        config=config,
        workload=workload,
        placement=placement,
        rates=rates,
        micro_batches=micro_batches,
        stages=tuple(stages),
        chunks=tuple(chunks),
        training=training,
    )


def _optimizer_time(
    params: float, config: SimConfig, rates: DeviceRates, *, shards: int, resident: bool
) -> float:
    """Memory-bound optimizer step over the parameters this device updates: read gradient,
    master weight and states, write them back and the low-precision copy. Adam: 28 B per
    parameter either way (mixed: 2 + 12 read, 12 + 2 written; fp32: 16 read, 12 written); SGD:
    12 B (mixed: 2 + 4 read, 4 + 2 written; fp32: 8 read, 4 written)."""
    per_param = 28.0 if config.training.optimizer == "adam" else 12.0
    bandwidth = rates.local_bandwidth_Bps if resident else rates.dram_bandwidth_Bps
    if not isinstance(config.hardware, Mesh2DHardware):
        bandwidth = rates.local_bandwidth_Bps
    return params / shards * per_param / bandwidth
