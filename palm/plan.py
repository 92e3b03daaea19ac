"""Compile a configuration into the costs every engine shares.

The plan cuts the operator chain into ``pp * interleave`` chunks (chunk ``c`` runs on pipeline
rank ``c % pp``, as in Megatron-LM's interleaved schedule), prices one micro-batch of each
chunk (:mod:`palm.cost.compute`), and describes every *flow* an iteration needs as a
:class:`~palm.network.loads.Profile` over the devices that take part: the tensor-parallel ring
of every replica of a stage, the data-parallel rings, the activation and gradient hand-offs
between the devices of neighbouring chunks, and (on a mesh) the DRAM reads of each stage's
cores from their nearest edge channel. The analytical engine adds these up; the event engine
schedules them on shared resources.

How the chain is cut is :mod:`palm.partition`; how a stage reaches DRAM is
:mod:`palm.network.dram`. Identical operators are priced once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from palm.config import validate
from palm.cost.collectives import (
    RingStep,
    bytes_sent_per_member,
    cluster_all_to_all_step,
    collective_time,
)
from palm.cost.compute import DeviceRates, OpTimes, device_rates, op_times
from palm.cost.memory import (
    MemoryBreakdown,
    StateBytes,
    in_flight_microbatches,
    state_bytes_per_param,
)
from palm.cost.sram import OpFootprint, SramAllocation, allocate_sram
from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
from palm.network.dram import DramAccess, dram_access
from palm.network.intergroup import HandOff
from palm.network.intergroup import hand_off as intergroup_hand_off
from palm.network.loads import (
    LinkLoad,
    Profile,
    dram_channel_cores,
    profile,
    ring_order,
)
from palm.network.placement import Placement, make_placement
from palm.network.rings import stage_ring_profile
from palm.partition import chunk_ranges, partition
from palm.strategy import SimConfig
from palm.workload.model import Workload, build_workload
from palm.workload.moe import expert_params_per_device, with_expert_layout
from palm.workload.ops import (
    Collective,
    Conv2d,
    Linear,
    Op,
    Pool,
    RecomputeMode,
    TransformerLayer,
)
from palm.workload.opsplit import SplitOp

__all__ = ["ChunkCost", "StageCost", "Plan", "DramAccess", "build_plan", "partition"]


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
    recv_forward_s: float
    recv_backward_s: float
    zero3_gather_s: float
    stream_forward_s: float
    stream_backward_s: float
    fetch_s: float
    forward_flops: float
    backward_flops: float
    recompute_flops: float
    tp_bytes_forward: float
    tp_bytes_backward: float
    tp_sent_forward: float
    tp_sent_backward: float
    stream_bytes_forward: float
    stream_bytes_backward: float
    fetch_bytes: float
    send_bytes: float
    send_s: float
    grad_send_s: float

    @property
    def forward_busy_s(self) -> float:
        """Compute (or the weight stream it waits on) of one forward pass."""
        return max(self.forward_compute_s, self.stream_forward_s)

    @property
    def backward_busy_s(self) -> float:
        return max(self.backward_compute_s + self.recompute_s, self.stream_backward_s)

    @property
    def forward_comm_s(self) -> float:
        """Collectives on the critical path of one forward pass."""
        return self.tp_forward_s + self.recv_forward_s + self.zero3_gather_s

    @property
    def backward_comm_s(self) -> float:
        return self.tp_backward_s + self.recv_backward_s + self.zero3_gather_s

    @property
    def forward_s(self) -> float:
        return self.fetch_s + self.forward_busy_s + self.forward_comm_s

    @property
    def backward_s(self) -> float:
        return self.backward_busy_s + self.backward_comm_s


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
    optimizer_in_dram: bool = False
    optimizer_bytes: float = 0.0

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
    recompute: str
    tp_profiles: tuple[Profile, ...]
    dp_profiles: tuple[Profile, ...]
    send_profiles: tuple[Profile, ...]
    grad_profiles: tuple[Profile, ...]
    dram: tuple[DramAccess, ...] | None
    sram: tuple[tuple[tuple[int, SramAllocation], ...], ...] = ()

    @property
    def devices(self) -> int:
        return self.config.parallelism.devices

    @property
    def samples_per_iteration(self) -> int:
        return self.config.training.global_batch

    @property
    def memory_capacity_bytes(self) -> float:
        return self.config.hardware.device_memory_bytes


def _flat(arr: np.ndarray, mesh: bool) -> np.ndarray:
    return arr.reshape(-1, 2) if mesh else arr.reshape(-1)


def _ring_profile(config: SimConfig, arr: np.ndarray, axis: int, *, with_links: bool) -> Profile:
    """All rings along ``axis`` of a stage's ``[d, t]`` device array, run at once; on a mesh
    each ring is put in :func:`~palm.network.loads.ring_order`."""
    mesh = isinstance(config.hardware, Mesh2DHardware)
    if arr.shape[axis] == 1:
        return Profile(0.0, float("inf"), 0)  # a group of one: nothing to exchange
    if mesh:
        n = arr.shape[axis]
        rings = np.moveaxis(arr, axis, -2).reshape(-1, n, 2)
        if n >= 4:
            rings = np.stack([ring_order(r) for r in rings])
        arr, axis = rings, 1
    nxt = np.roll(arr, -1, axis=axis)
    return profile(
        config.hardware,
        _flat(arr, mesh),
        _flat(nxt, mesh),
        devices=config.parallelism.devices,
        with_links=with_links,
    )


def build_plan(config: SimConfig, *, with_links: bool = False) -> Plan:
    """Price ``config`` (validated again here, so hand-built configs are checked too).

    ``with_links`` keeps the per-link loads of every flow (needed by the event engine's
    per-link mode); without it only each flow's profile is kept.
    """
    validate(config)
    par, tr, hw = config.parallelism, config.training, config.hardware
    training = tr.mode == "train"
    mesh = isinstance(hw, Mesh2DHardware)
    workload = _with_splits(build_workload(config.model), config)
    workload = dataclasses.replace(
        workload, ops=with_expert_layout(workload.ops, ep=par.ep, etp=par.expert_tp)
    )
    rates = device_rates(hw, tr.precision)
    placement = make_placement(config)
    sp = par.sequence_parallel and par.tp > 1
    b, tp, p = tr.micro_batch, par.tp, rates.elem_bytes
    micro_batches = tr.global_batch // (par.dp * tr.micro_batch)
    states = state_bytes_per_param(tr)
    asked = tr.recompute if training else "none"
    recompute: RecomputeMode = "full" if asked == "auto" else asked

    arrays = functools.cache(placement.stage_array)  # built on first use: rarely on big meshes
    regions = [placement.stage_region(s) for s in range(par.pp)] if mesh else []
    sizes = (par.dp, par.tp)  # group sizes along axis 0 (DP rings) and 1 (TP rings)

    def ring(s: int, axis: int) -> Profile:
        """The rings of one group kind of stage ``s``; one ring through a whole stage of a mesh
        is priced from its runs of links (:mod:`palm.network.rings`) where its shape allows."""
        if sizes[axis] == 1:
            return Profile(0.0, float("inf"), 0)  # groups of one: nothing to exchange
        if mesh and not with_links and sizes[1 - axis] == 1 and sizes[axis] >= 4:
            assert isinstance(hw, Mesh2DHardware)
            layout = config.placement.layout
            fast = stage_ring_profile(
                hw, regions[s], snake=layout == "s-shape", explicit=layout == "explicit"
            )
            if fast is not None:
                return fast
        return _ring_profile(config, arrays(s), axis, with_links=with_links)

    tp_prof = tuple(ring(s, 1) for s in range(par.pp))
    dp_prof = tuple(ring(s, 0) for s in range(par.pp))
    dram: tuple[DramAccess, ...] | None = None
    if mesh:
        assert isinstance(hw, Mesh2DHardware)
        channels_at = dram_channel_cores(hw)
        dram = tuple(
            dram_access(hw, regions[s], channels_at, with_links=with_links) for s in range(par.pp)
        )

    n_chunks = par.pp * par.chunks
    unit_cost = [op.forward_flops(batch=1) + 1.0 for op in workload.ops]
    ranges = chunk_ranges(workload, n_chunks, unit_cost)

    def hand_off(src: int, dst: int) -> Profile:
        a, z = arrays(src), arrays(dst)
        return profile(
            hw, _flat(a, mesh), _flat(z, mesh), devices=par.devices, with_links=with_links
        )

    # on a mesh, hand-offs follow the inter-group strategy of each boundary (paper sec. V-C);
    # the reduction of a Megatron layer's partial output moves into the hand-off
    comm = config.communication
    strategies = comm.boundary_strategies or (comm.inter_group,) * (n_chunks - 1)
    forward_hand: list[HandOff | None] = [None] * (n_chunks - 1)
    backward_hand: list[HandOff | None] = [None] * (n_chunks - 1)
    partial_out = [False] * n_chunks  # last op's forward all-reduce taken by the hand-off
    partial_in = [False] * n_chunks  # first op's input-gradient all-reduce taken likewise
    if mesh:
        assert isinstance(hw, Mesh2DHardware)
        for c in range(n_chunks - 1):
            last, first = workload.ops[ranges[c][1] - 1], workload.ops[ranges[c + 1][0]]
            nbytes = last.output_bytes(batch=b, act_bytes=p)
            partial_out[c] = tp > 1 and not sp and isinstance(last, TransformerLayer)
            partial_in[c + 1] = (
                training and tp > 1 and not sp and isinstance(first, TransformerLayer)
            )
            src, dst = arrays(c % par.pp), arrays((c + 1) % par.pp)
            forward_hand[c] = intergroup_hand_off(
                hw,
                src=src,
                dst=dst,
                nbytes=nbytes,
                strategy=strategies[c],
                adapters=comm.adapters,
                partial=partial_out[c],
                with_links=with_links,
            )
            if training:
                backward_hand[c] = intergroup_hand_off(
                    hw,
                    src=dst,
                    dst=src,
                    nbytes=nbytes,
                    strategy=strategies[c],
                    adapters=comm.adapters,
                    partial=partial_in[c + 1],
                    with_links=with_links,
                )
        no_transfer = Profile(0.0, float("inf"), 0)  # inference: no gradient goes back
        send_prof = tuple(_merged(h) for h in forward_hand if h is not None)
        grad_prof = tuple(_merged(h) if h is not None else no_transfer for h in backward_hand)
    else:  # a GPU cluster: Megatron's scatter/gather between peer devices
        send_prof = tuple(hand_off(c % par.pp, (c + 1) % par.pp) for c in range(n_chunks - 1))
        grad_prof = tuple(hand_off((c + 1) % par.pp, c % par.pp) for c in range(n_chunks - 1))

    # stage weights decide whether weights stay in SRAM (mesh) for all of the stage's chunks
    stage_params = [0.0] * par.pp
    stage_experts = [0.0] * par.pp  # of which expert weights, sharded by ZeRO over edp
    edp = par.expert_dp
    for c, (lo, hi) in enumerate(ranges):
        stage_params[c % par.pp] += sum(op.params_per_device(tp=tp) for op in workload.ops[lo:hi])
        stage_experts[c % par.pp] += expert_params_per_device(workload.ops[lo:hi])

    def stage_memory(s: int, mode: RecomputeMode) -> tuple[MemoryBreakdown, float]:
        act = 0.0
        for c in range(s, n_chunks, par.pp):
            lo, hi = ranges[c]
            ops = workload.ops[lo:hi]
            if training:
                act += sum(
                    op.activation_bytes(batch=b, tp=tp, sp=sp, act_bytes=p, recompute=mode)
                    for op in ops
                )
            else:
                act = max(act, max(op.output_bytes(batch=b, act_bytes=p) for op in ops) * 2)
        in_flight = in_flight_microbatches(
            parallelism=par, stage=s, micro_batches=micro_batches, training=training
        )
        memory = MemoryBreakdown.for_stage(
            params=stage_params[s] - stage_experts[s],
            states=states,
            zero=tr.zero if training else 0,
            dp=par.dp,
            activation_bytes_per_microbatch=act,
            in_flight=in_flight,
        )
        if stage_experts[s]:
            experts = MemoryBreakdown.for_stage(
                params=stage_experts[s],
                states=states,
                zero=tr.zero if training else 0,
                dp=edp,
                activation_bytes_per_microbatch=0.0,
                in_flight=0.0,
            )
            memory = MemoryBreakdown(
                *(
                    getattr(memory, f.name) + getattr(experts, f.name)
                    for f in dataclasses.fields(memory)
                )
            )
        return memory, in_flight

    if asked == "auto":
        # the least recompute that fits (paper sec. IV-A: recompute only when memory forces it)
        capacity = hw.device_memory_bytes
        mode: RecomputeMode
        for mode in ("none", "selective"):
            if all(stage_memory(s, mode)[0].total_bytes <= capacity for s in range(par.pp)):
                recompute = mode
                break

    # SRAM allocation per stage (mesh): op index -> allocation
    allocations: list[dict[int, SramAllocation]] = [{} for _ in range(par.pp)]
    if mesh:
        per_param = 28.0 if tr.optimizer == "adam" else 12.0
        for s in range(par.pp):
            indices = [i for c in range(s, n_chunks, par.pp) for i in range(*ranges[c])]
            feet = [
                _footprint(
                    workload.ops[i],
                    batch=b,
                    tp=tp,
                    sp=sp,
                    act_bytes=p,
                    states=states,
                    training=training,
                )
                for i in indices
            ]
            allocs = allocate_sram(
                feet,
                sram_bytes=rates.sram_bytes,
                training=training,
                full_recompute=recompute == "full",
                update_bytes_per_weight_byte=per_param
                / max(states.weights, 1e-30)
                / (par.dp if tr.zero >= 1 else 1),
            )
            allocations[s] = dict(zip(indices, allocs, strict=True))

    cache: dict[Op, OpTimes] = {}

    def priced(op: Op) -> OpTimes:
        key = dataclasses.replace(op, name="")
        if key not in cache:
            cache[key] = op_times(
                op, batch=b, tp=tp, sp=sp, recompute=recompute, rates=rates, training=training
            )
        return cache[key]

    group_cache: dict[tuple[int, str, bool], tuple[RingStep, int]] = {}

    def group_profile(stage: int, group: str, a2a: bool = False) -> tuple[RingStep, int]:
        """The ring profile and size of ``group`` ("tp", "dp", an expert group "ep", "etp",
        "edp", or a split group) in ``stage``; an all-to-all (``a2a``) over the expert-parallel
        group of a GPU cluster is priced as one (:func:`cluster_all_to_all_step`)."""
        if group == "tp":
            return tp_prof[stage], tp
        if group == "dp":
            return dp_prof[stage], par.dp
        key = (stage, group, a2a)
        if group in _EXPERT_AXES and key not in group_cache:
            layout, axis = (edp, par.ep, par.expert_tp), _EXPERT_AXES[group]
            arr = arrays(stage).reshape(*layout, 2) if mesh else arrays(stage).reshape(layout)
            if a2a and isinstance(hw, GpuClusterHardware):
                step: RingStep = cluster_all_to_all_step(hw, np.moveaxis(arr, axis, -1))
            else:
                step = _ring_profile(config, arr, axis, with_links=with_links)
            group_cache[key] = (step, layout[axis])
        if key not in group_cache:
            shape_text, axis_text = group.split(":")
            shape = tuple(int(x) for x in shape_text.split("x"))
            arr = arrays(stage).reshape(*shape, 2) if mesh else arrays(stage).reshape(shape)
            prof = _ring_profile(config, arr, int(axis_text), with_links=with_links)
            group_cache[key] = (prof, shape[int(axis_text)])
        return group_cache[key]

    def coll_time(colls: Sequence[Collective], stage: int) -> float:
        total = 0.0
        for x in colls:
            prof, n = group_profile(stage, x.group, x.kind == "all-to-all")
            total += collective_time(x, n=n, step=prof)
        return total

    def sent_bytes(colls: Sequence[Collective], stage: int) -> float:
        return sum(bytes_sent_per_member(x, n=group_profile(stage, x.group)[1]) for x in colls)

    chunks: list[ChunkCost] = []
    for c, (lo, hi) in enumerate(ranges):
        stage = c % par.pp
        ops = workload.ops[lo:hi]
        times = [priced(op) for op in ops]
        f_coll = [
            x for op in ops for x in op.forward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
        ]
        if partial_out[c]:
            f_coll.pop()  # the last layer's output all-reduce happens in the hand-off
        b_coll: list[Collective] = []
        if training:
            b_coll = [
                x for op in ops for x in op.backward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
            ]
            if partial_in[c]:
                b_coll.pop(0)  # the first layer's input-gradient all-reduce, likewise
            if recompute == "full":
                b_coll += [
                    x
                    for op in ops
                    if op.recompute_gemms(batch=b, tp=tp, recompute="full")
                    for x in op.forward_collectives(batch=b, tp=tp, sp=sp, act_bytes=p)
                ]
        chunk_params = sum(op.params_per_device(tp=tp) for op in ops)
        zero3 = 0.0
        if training and tr.zero >= 3 and par.dp > 1:
            gather = Collective("all-gather", chunk_params * states.weights)
            zero3 = collective_time(gather, n=par.dp, step=dp_prof[stage])
        # DRAM traffic of the SRAM allocation (Algorithm 1), streamed alongside each pass
        stream_f = stream_b = 0.0
        bytes_f = bytes_b = 0.0
        fetch = fetch_bytes = 0.0
        if dram is not None:
            chunk_allocs = [allocations[stage][i] for i in range(lo, hi)]
            bytes_f = sum(a.forward_bytes for a in chunk_allocs)
            bytes_b = sum(a.backward_bytes for a in chunk_allocs)
            stream_f = dram[stage].time(bytes_f)
            stream_b = dram[stage].time(bytes_b)
            if c == 0:  # data fetch: token ids (int32) or 8-bit pixels
                sample = workload.tokens_per_sample * 4 if workload.transformer else 3 * 224**2
                fetch_bytes = b * sample / (tp * par.dp)
                fetch = dram[stage].time(fetch_bytes)
        full_out = ops[-1].output_bytes(batch=b, act_bytes=p)
        send_bytes = full_out / tp if c + 1 < n_chunks else 0.0  # Megatron scatter/gather
        recv_f = recv_b = 0.0
        prev_out = (
            workload.ops[ranges[c - 1][1] - 1].output_bytes(batch=b, act_bytes=p) if c else 0.0
        )
        if tp > 1 and c > 0 and not mesh:  # Megatron scatter/gather (a mesh broadcasts)
            recv_f = collective_time(Collective("all-gather", prev_out), n=tp, step=tp_prof[stage])
        if tp > 1 and training and c + 1 < n_chunks and not mesh:
            recv_b = collective_time(Collective("all-gather", full_out), n=tp, step=tp_prof[stage])
        chunks.append(
            ChunkCost(
                index=c,
                stage=stage,
                first_op=lo,
                last_op=hi - 1,
                layers=sum(1 for op in ops if isinstance(op, TransformerLayer)),
                forward_compute_s=sum(t.forward_s for t in times),
                backward_compute_s=sum(t.backward_s for t in times),
                recompute_s=sum(t.recompute_s for t in times),
                tp_forward_s=coll_time(f_coll, stage),
                tp_backward_s=coll_time(b_coll, stage),
                recv_forward_s=recv_f,
                recv_backward_s=recv_b,
                zero3_gather_s=zero3,
                stream_forward_s=stream_f,
                stream_backward_s=stream_b,
                fetch_s=fetch,
                forward_flops=sum(t.forward_flops for t in times),
                backward_flops=sum(t.backward_flops for t in times),
                recompute_flops=sum(t.recompute_flops for t in times),
                tp_bytes_forward=sum(x.nbytes for x in f_coll),
                tp_bytes_backward=sum(x.nbytes for x in b_coll),
                tp_sent_forward=sent_bytes(f_coll, stage)
                + (
                    bytes_sent_per_member(Collective("all-gather", prev_out), n=tp)
                    if recv_f
                    else 0.0
                ),
                tp_sent_backward=sent_bytes(b_coll, stage)
                + (
                    bytes_sent_per_member(Collective("all-gather", full_out), n=tp)
                    if recv_b
                    else 0.0
                ),
                stream_bytes_forward=bytes_f,
                stream_bytes_backward=bytes_b,
                fetch_bytes=fetch_bytes,
                send_bytes=send_bytes,
                send_s=_hand_off_time(forward_hand, send_prof, c, send_bytes, n_chunks),
                grad_send_s=(
                    _hand_off_time(backward_hand, grad_prof, c, send_bytes, n_chunks)
                    if training
                    else 0.0
                ),
            )
        )

    stages: list[StageCost] = []
    bucket_bytes = par.dp_bucket_mib * 2**20
    for s in range(par.pp):
        mine = tuple(ch for ch in chunks if ch.stage == s)
        params = stage_params[s]
        memory, in_flight = stage_memory(s, recompute)
        grad_bytes = params * states.gradients if training else 0.0
        dp_s, buckets, opt_s, in_dram = 0.0, 0, 0.0, False
        if training:
            # gradient reductions, merged per group as DDP buckets merge them. ZeRO >= 1: the
            # reduce-scatter of gradients and all-gather of updated weights move the same bytes
            # as one all-reduce (Rajbhandari et al. 2020, sec. 7).
            per_group: dict[str, float] = {}
            for c in range(s, n_chunks, par.pp):
                for op in workload.ops[ranges[c][0] : ranges[c][1]]:
                    for x in op.update_collectives(tp=tp, dp=par.dp, grad_bytes=states.gradients):
                        per_group[x.group] = per_group.get(x.group, 0.0) + x.nbytes
            reduced = sum(per_group.values())
            if reduced > 0:
                dp_s = coll_time(
                    [Collective("all-reduce", v, group=g) for g, v in sorted(per_group.items())], s
                )
                buckets = max(1, math.ceil(reduced / bucket_bytes))
            grad_bytes = reduced
            in_dram = dram is not None and any(a.update_bytes > 0 for a in allocations[s].values())
            opt_s = sum(
                _optimizer_time(
                    n_params,
                    config,
                    rates,
                    shards=shards if tr.zero >= 1 else 1,
                    dram=dram[s] if (dram is not None and in_dram) else None,
                )
                for n_params, shards in (
                    (params - stage_experts[s], par.dp),
                    (stage_experts[s], edp),
                )
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
                optimizer_in_dram=training and dram is not None and in_dram,
                optimizer_bytes=(
                    _optimizer_bytes(
                        params - stage_experts[s], config, shards=par.dp if tr.zero >= 1 else 1
                    )
                    + _optimizer_bytes(stage_experts[s], config, shards=edp if tr.zero >= 1 else 1)
                    if training
                    else 0.0
                ),
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
        recompute=recompute,
        tp_profiles=tp_prof,
        dp_profiles=dp_prof,
        send_profiles=send_prof,
        grad_profiles=grad_prof,
        dram=dram,
        sram=tuple(tuple(sorted(a.items())) for a in allocations) if mesh else (),
    )


#: axis of each expert group in a stage's devices regrouped as (edp, ep, etp), Megatron-Core's
#: expert layout (etp fastest)
_EXPERT_AXES = {"edp": 0, "ep": 1, "etp": 2}


def _hand_off_time(
    hands: Sequence[HandOff | None],
    profiles: Sequence[Profile],
    c: int,
    send_bytes: float,
    n_chunks: int,
) -> float:
    if c + 1 >= n_chunks:
        return 0.0
    hand = hands[c] if c < len(hands) else None
    return hand.total_s if hand is not None else profiles[c].time(send_bytes)


def _merged(hand: HandOff) -> Profile:
    """One profile standing for a whole hand-off, carrying the link loads of all its parts
    (for the event engine's per-link mode)."""
    links = [p.links for p in hand.profiles if p.links is not None]
    merged = None
    if links:
        merged = LinkLoad(
            np.concatenate([x.ids for x in links]), np.concatenate([x.loads for x in links])
        )
    first = hand.profiles[0]
    return Profile(first.latency_s, first.bandwidth_Bps, first.hops, merged)


def _with_splits(workload: Workload, config: SimConfig) -> Workload:
    """Wrap Linear, Conv2d and Pool operators in their Table III split, when one is set."""
    par = config.parallelism
    splits: dict[type[Op], tuple[int, ...]] = {
        Linear: par.linear_split,
        Conv2d: par.conv_split,
        Pool: par.pool_split,
    }
    if not any(splits.values()):
        return workload
    ops = tuple(
        SplitOp(name=op.name, inner=op, split=splits[type(op)], replicas=par.dp)
        if splits.get(type(op))
        else op
        for op in workload.ops
    )
    return dataclasses.replace(workload, ops=ops)


def _footprint(
    op: Op, *, batch: int, tp: int, sp: bool, act_bytes: int, states: StateBytes, training: bool
) -> OpFootprint:
    """Per-device sizes of ``op`` for Algorithm 1."""
    params = op.params_per_device(tp=tp)
    seq_split = tp if (sp and isinstance(op, TransformerLayer)) else 1
    out_split = seq_split if isinstance(op, TransformerLayer) else tp
    return OpFootprint(
        name=op.name,
        weights=params * states.weights,
        states=params * (states.gradients + states.optimizer) if training else 0.0,
        inputs=op.input_bytes(batch=batch, act_bytes=act_bytes) / seq_split,
        outputs=op.output_bytes(batch=batch, act_bytes=act_bytes) / out_split,
    )


def _optimizer_time(
    params: float, config: SimConfig, rates: DeviceRates, *, shards: int, dram: DramAccess | None
) -> float:
    """Memory-bound optimizer step over the parameters this device updates: read gradient,
    master weight and states, write them back and the low-precision copy. Adam: 28 B per
    parameter either way (mixed: 2 + 12 read, 12 + 2 written; fp32: 16 read, 12 written); SGD:
    12 B (mixed: 2 + 4 read, 4 + 2 written; fp32: 8 read, 4 written). On a mesh whose model
    states do not fit in SRAM the traffic goes to DRAM."""
    nbytes = _optimizer_bytes(params, config, shards=shards)
    if dram is not None:
        return dram.time(nbytes)
    return nbytes / rates.local_bandwidth_Bps


def _optimizer_bytes(params: float, config: SimConfig, *, shards: int) -> float:
    per_param = 28.0 if config.training.optimizer == "adam" else 12.0
    return params / shards * per_param
