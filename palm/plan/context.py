"""What every step of :func:`palm.plan.build_plan` reads: the configuration unpacked once, the
workload with its operator splits, and the partition of the operator chain into chunks
(:mod:`palm.partition`). Built by :func:`plan_context`; the other ``palm.plan`` modules are
functions of it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from palm.config import validate
from palm.cost.compute import DeviceRates, device_rates
from palm.cost.memory import StateBytes, state_bytes_per_param
from palm.hardware.spec import Mesh2DHardware
from palm.network.placement import Placement, make_placement
from palm.network.region import CoreRegion
from palm.partition import chunk_ranges
from palm.strategy import SimConfig
from palm.workload.model import Workload, build_workload
from palm.workload.moe import with_expert_layout
from palm.workload.ops import Conv2d, Linear, Op, Pool
from palm.workload.opsplit import SplitOp
from palm.workload.sharding import resolve_attention, shard_workload

__all__ = ["PlanContext", "plan_context", "unnamed"]


@dataclass(frozen=True)
class PlanContext:
    """A validated configuration unpacked for pricing (sizes per device, bytes, counts)."""

    config: SimConfig
    with_links: bool
    workload: Workload
    rates: DeviceRates
    placement: Placement
    states: StateBytes
    micro_batches: int
    ranges: tuple[tuple[int, int], ...]
    regions: tuple[CoreRegion, ...]
    _arrays: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def training(self) -> bool:
        return self.config.training.mode == "train"

    @property
    def mesh(self) -> bool:
        return isinstance(self.config.hardware, Mesh2DHardware)

    @property
    def tp(self) -> int:
        return self.config.parallelism.tp

    @property
    def ranks(self) -> int:
        """``dp x cp``: the ranks of a stage that reduce gradients and shard ZeRO states."""
        return self.config.parallelism.data_ranks

    @property
    def zero(self) -> int:
        """The ZeRO stage in effect (``fsdp = true`` is 3, or 2 with ``zero = 2``; none in
        inference)."""
        return self.config.training.zero_stage if self.training else 0

    @property
    def per_layer_sharding(self) -> bool:
        """Weights gathered and gradients reduce-scattered operator by operator in every pass
        (ZeRO-3 / FSDP; FSDP ``SHARD_GRAD_OP`` gathers in the forward passes only), nothing
        reduced at the step's end."""
        return self.zero >= 3 or (self.zero == 2 and self.config.training.fsdp)

    @property
    def recompute_early_stop(self) -> bool:
        """Full recompute stops early (PyTorch's non-reentrant ``torch.utils.checkpoint``,
        ``training.recompute_early_stop``, by default from ``[software]``); Megatron's and
        DeepSpeed's re-run the whole layer. GPU clusters only."""
        return self.training and self.config.training.recompute_early_stop and not self.mesh

    @property
    def sp(self) -> bool:
        """Megatron sequence parallelism (only meaningful with tensor parallelism)."""
        return self.config.parallelism.sequence_parallel and self.tp > 1

    @property
    def micro_batch(self) -> int:
        return self.config.training.micro_batch

    @property
    def act_bytes(self) -> float:
        return self.rates.elem_bytes

    @property
    def n_chunks(self) -> int:
        return self.config.parallelism.pp * self.config.parallelism.chunks

    def stage_of(self, chunk: int) -> int:
        """Pipeline rank of ``chunk`` (Megatron-LM's interleaving: ``chunk % pp``)."""
        return chunk % self.config.parallelism.pp

    def chunks_of(self, stage: int) -> range:
        return range(stage, self.n_chunks, self.config.parallelism.pp)

    def ops(self, chunk: int) -> tuple[Op, ...]:
        lo, hi = self.ranges[chunk]
        return self.workload.ops[lo:hi]

    def array(self, stage: int) -> np.ndarray:
        """The devices of ``stage`` (:meth:`Placement.stage_array`), built on first use: rarely
        needed on big meshes."""
        if stage not in self._arrays:
            self._arrays[stage] = self.placement.stage_array(stage)
        return self._arrays[stage]


def _with_attention_kernel(rates: DeviceRates, kernel: str) -> DeviceRates:
    """``rates`` with the fused attention kernel in use (``auto``: FlashAttention-2)."""
    if not rates.attention_kernels:
        return rates
    return dataclasses.replace(rates, attention_kernel="flash2" if kernel == "auto" else kernel)


def plan_context(config: SimConfig, *, with_links: bool) -> PlanContext:
    """Validate ``config`` (again, so hand-built configs are checked too), build its workload
    and cut the operator chain into ``pp * interleave`` chunks balanced by forward FLOPs."""
    validate(config)
    par, tr = config.parallelism, config.training
    # the attention kernel of the hardware and each context-parallel rank's share of a sequence
    workload = shard_workload(
        _with_splits(build_workload(config.model), config),
        attention=resolve_attention(config.model.attention, topology=config.hardware.topology),
        cp=par.cp,
        causal=config.model.family != "bert",
    )
    # the expert-parallel degrees on every mixture-of-experts layer; the flex dispatcher
    # (DeepEP / HybridEP) hands the experts fp32 routing probabilities (Megatron-Core
    # token_dispatcher.py @92c8482e: "DeepEP only supports float32 probs", likewise HybridEP)
    prob_bytes = 4.0 if par.moe_dispatcher == "deepep" else 0.0
    workload = dataclasses.replace(
        workload,
        ops=with_expert_layout(workload.ops, ep=par.ep, etp=par.expert_tp, prob_bytes=prob_bytes),
    )
    placement = make_placement(config)
    mesh = isinstance(config.hardware, Mesh2DHardware)
    unit_cost = _unit_costs(workload.ops)
    ranges = chunk_ranges(
        workload,
        par.pp * par.chunks,
        unit_cost,
        pp=par.pp,
        first_stage_layers=par.first_stage_layers,
        last_stage_layers=par.last_stage_layers,
    )
    return PlanContext(
        config=config,
        with_links=with_links,
        workload=workload,
        rates=_with_attention_kernel(
            device_rates(config.hardware, tr.precision, training=tr.mode == "train"),
            config.model.attention_kernel,
        ),
        placement=placement,
        states=state_bytes_per_param(tr),
        micro_batches=tr.global_batch // (par.dp * tr.micro_batch),
        ranges=tuple(ranges),
        regions=tuple(placement.stage_region(s) for s in range(par.pp)) if mesh else (),
    )


def unnamed(x: object) -> tuple[object, ...]:
    """The field values of an operator (or an SRAM allocation) but its name: with its type,
    a key under which the layers of a model, the same operator under other names, are one."""
    return tuple(v for k, v in vars(x).items() if k != "name")


def _unit_costs(ops: tuple[Op, ...]) -> list[float]:
    """Forward FLOPs of one sample plus one of every operator, the partition's cost units;
    operators equal but for their name are priced once."""
    priced: dict[tuple[object, ...], float] = {}
    out = []
    for op in ops:
        key = (type(op), *unnamed(op))
        if key not in priced:
            priced[key] = op.forward_flops(batch=1) + 1.0
        out.append(priced[key])
    return out


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
