"""The collective rings of a plan: per stage, the tensor-parallel rings of every replica and
the data-parallel rings (run at once), and the rings of an operator split's groups; priced as
:class:`~palm.network.loads.Profile` s, and the time of a list of collectives on them
(:mod:`palm.cost.collectives`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from palm.cost.collectives import (
    RingStep,
    bytes_sent_per_member,
    cluster_all_to_all_step,
    collective_time,
)
from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
from palm.network.channels import members_per_node, with_channels
from palm.network.loads import (
    Profile,
    cluster_one_to_one_profile,
    mesh_link_key,
    profile,
    ring_orders,
    tile_aligned_key,
)
from palm.network.memo import remember
from palm.network.rings import stage_ring_profile
from palm.plan.context import PlanContext
from palm.strategy import SimConfig
from palm.workload.ops import Collective

__all__ = ["NO_TRANSFER", "StageRings", "stage_rings", "flat", "ring_profile", "stage_block"]

NO_TRANSFER = Profile(0.0, float("inf"), 0)  # a group of one: nothing to exchange


def flat(arr: np.ndarray, mesh: bool) -> np.ndarray:
    """Device ids (cluster) or core coordinates (mesh) of ``arr`` as a flat list."""
    return arr.reshape(-1, 2) if mesh else arr.reshape(-1)


def stage_block(config: SimConfig) -> int:
    """The GPUs of one pipeline stage (``tp x dp x cp``) where they tile the cluster, else 1:
    the event engine books a cluster flow's port loads per stage group, so a flow's loads can
    be summed per block of this many GPUs
    (:func:`~palm.network.loads.cluster_one_to_one_profile`)."""
    par = config.parallelism
    group = par.tp * par.data_ranks
    return group if par.devices % group == 0 else 1


def ring_profile(config: SimConfig, arr: np.ndarray, axis: int, *, with_links: bool) -> Profile:
    """All rings along ``axis`` of a stage's ``[d, t]`` device array, run at once; on a mesh
    each ring is put in :func:`~palm.network.loads.ring_order` (all at once)."""
    mesh = isinstance(config.hardware, Mesh2DHardware)
    if arr.shape[axis] == 1:
        return NO_TRANSFER
    if mesh:
        n = arr.shape[axis]
        rings = np.moveaxis(arr, axis, -2).reshape(-1, n, 2)
        if n >= 4:
            rings = ring_orders(rings)
        arr, axis = rings, 1
    nxt = np.roll(arr, -1, axis=axis)
    hw = config.hardware
    src, dst, devices = flat(arr, mesh), flat(nxt, mesh), config.parallelism.devices
    if isinstance(hw, GpuClusterHardware):  # each GPU of a ring sends once, receives once
        prof = cluster_one_to_one_profile(
            hw, src, dst, devices=devices, with_links=with_links, block=stage_block(config)
        )
    else:
        prof = profile(hw, src, dst, devices=devices, with_links=with_links)
    if isinstance(hw, GpuClusterHardware):  # NCCL channels over every NIC of the ring's nodes
        first = np.moveaxis(arr, axis, 0).reshape(arr.shape[axis], -1)[:, 0]  # one ring
        nodes = first // hw.gpus_per_node
        prof = with_channels(
            hw, prof, members=members_per_node(hw, first), crosses=bool(np.ptp(nodes) > 0)
        )
    return prof


def _stage_ring(ctx: PlanContext, s: int, axis: int) -> Profile:
    """The rings of one group kind of stage ``s`` (axis 0: DP, 1: TP); one ring through a whole
    stage of a mesh is priced from its runs of links (:mod:`palm.network.rings`) where its shape
    allows, other mesh rings (without link loads) are remembered inside
    :func:`palm.network.memo.shared_geometry`."""
    par, hw = ctx.config.parallelism, ctx.config.hardware
    sizes = (par.data_ranks, par.tp)  # DP x CP rings along axis 0
    if sizes[axis] == 1:
        return NO_TRANSFER
    if ctx.mesh and not ctx.with_links and sizes[1 - axis] == 1 and sizes[axis] >= 4:
        assert isinstance(hw, Mesh2DHardware)
        layout = ctx.config.placement.layout
        fast = stage_ring_profile(
            hw, ctx.regions[s], snake=layout == "s-shape", explicit=layout == "explicit"
        )
        if fast is not None:
            return fast
    arr = ctx.array(s)
    if not isinstance(hw, Mesh2DHardware) or ctx.with_links:
        return ring_profile(ctx.config, arr, axis, with_links=ctx.with_links)
    # a mesh ring's profile reads the cores and the link fields of the hardware only
    return remember(
        lambda: ("stage_ring", mesh_link_key(hw), axis, *tile_aligned_key(hw, arr)),
        lambda: ring_profile(ctx.config, arr, axis, with_links=False),
    )


@dataclass(frozen=True)
class StageRings:
    """The rings of every stage, and the time of collectives on them."""

    ctx: PlanContext
    tp: tuple[Profile, ...]
    dp: tuple[Profile, ...]
    _split: dict[tuple[int, str], tuple[RingStep, int]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def group(self, stage: int, group: str, *, a2a: bool = False) -> tuple[RingStep, int]:
        """The ring profile and size of ``group`` ("tp", "dp", "cp", an expert group "ep",
        "etp", "edp", or a split group ``"AxBxC:axis"``) in ``stage``. The expert groups regroup
        the stage's ``tp x cp x dp`` ranks as ``(edp, ep, etp)``, ``etp`` fastest
        (Megatron-Core); an all-to-all (``a2a``) over one of them on a GPU cluster is priced as
        one, not as a ring (:func:`~palm.cost.collectives.cluster_all_to_all_step`)."""
        par = self.ctx.config.parallelism
        if group == "tp":
            return self.tp[stage], self.ctx.tp
        if group == "dp":  # data ranks: dp x cp
            return self.dp[stage], par.data_ranks
        if group == "cp":  # the CP ring: ranks ordered TP, CP, DP inside a stage
            group = f"{par.dp}x{par.cp}x{par.tp}:1"
        if group in _EXPERT_AXES:
            axis = _EXPERT_AXES[group]
            group = f"{par.expert_dp}x{par.ep}x{par.expert_tp}:{axis}"
            hw = self.ctx.config.hardware
            key = (stage, group + (":a2a" if a2a else ""))
            if a2a and isinstance(hw, GpuClusterHardware) and key not in self._split:
                arr = self.ctx.array(stage).reshape(par.expert_dp, par.ep, par.expert_tp)
                model = self.ctx.config.model
                routing = None
                if par.moe_dispatcher == "deepep" and model.experts:
                    routing = (model.experts, model.top_k)
                step = cluster_all_to_all_step(hw, np.moveaxis(arr, axis, -1), routing=routing)
                self._split[key] = (step, arr.shape[axis])
            if key in self._split:
                return self._split[key]
        key = (stage, group)
        if key not in self._split:
            shape_text, axis_text = group.split(":")
            shape = tuple(int(x) for x in shape_text.split("x"))
            arr = self.ctx.array(stage)
            arr = arr.reshape(*shape, 2) if self.ctx.mesh else arr.reshape(shape)
            prof = ring_profile(
                self.ctx.config, arr, int(axis_text), with_links=self.ctx.with_links
            )
            self._split[key] = (prof, shape[int(axis_text)])
        return self._split[key]

    def time(self, colls: Sequence[Collective], stage: int) -> float:
        """Seconds of ``colls`` run one after another on their groups' rings of ``stage``."""
        total = 0.0
        for x in colls:
            prof, n = self.group(stage, x.group, a2a=x.kind == "all-to-all")
            total += collective_time(x, n=n, step=prof)
        return total

    def sent_bytes(self, colls: Sequence[Collective], stage: int) -> float:
        """Bytes each member sends for ``colls``."""
        return sum(bytes_sent_per_member(x, n=self.group(stage, x.group)[1]) for x in colls)


#: axis of each expert group in a stage's ranks regrouped as (edp, ep, etp)
_EXPERT_AXES = {"edp": 0, "ep": 1, "etp": 2}


def stage_rings(ctx: PlanContext) -> StageRings:
    pp = ctx.config.parallelism.pp
    return StageRings(
        ctx=ctx,
        tp=tuple(_stage_ring(ctx, s, 1) for s in range(pp)),
        dp=tuple(_stage_ring(ctx, s, 0) for s in range(pp)),
    )
