"""The collective rings of a plan: per stage, the tensor-parallel rings of every replica and
the data-parallel rings (run at once), and the rings of an operator split's groups; priced as
:class:`~palm.network.loads.Profile` s, and the time of a list of collectives on them
(:mod:`palm.cost.collectives`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from palm.cost.collectives import bytes_sent_per_member, collective_time
from palm.hardware.spec import Mesh2DHardware
from palm.network.loads import Profile, profile, ring_orders
from palm.network.rings import stage_ring_profile
from palm.plan.context import PlanContext
from palm.strategy import SimConfig
from palm.workload.ops import Collective

__all__ = ["NO_TRANSFER", "StageRings", "stage_rings", "flat", "ring_profile"]

NO_TRANSFER = Profile(0.0, float("inf"), 0)  # a group of one: nothing to exchange


def flat(arr: np.ndarray, mesh: bool) -> np.ndarray:
    """Device ids (cluster) or core coordinates (mesh) of ``arr`` as a flat list."""
    return arr.reshape(-1, 2) if mesh else arr.reshape(-1)


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
    return profile(
        config.hardware,
        flat(arr, mesh),
        flat(nxt, mesh),
        devices=config.parallelism.devices,
        with_links=with_links,
    )


def _stage_ring(ctx: PlanContext, s: int, axis: int) -> Profile:
    """The rings of one group kind of stage ``s`` (axis 0: DP, 1: TP); one ring through a whole
    stage of a mesh is priced from its runs of links (:mod:`palm.network.rings`) where its shape
    allows."""
    par, hw = ctx.config.parallelism, ctx.config.hardware
    sizes = (par.dp, par.tp)
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
    return ring_profile(ctx.config, ctx.array(s), axis, with_links=ctx.with_links)


@dataclass(frozen=True)
class StageRings:
    """The rings of every stage, and the time of collectives on them."""

    ctx: PlanContext
    tp: tuple[Profile, ...]
    dp: tuple[Profile, ...]
    _split: dict[tuple[int, str], tuple[Profile, int]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def group(self, stage: int, group: str) -> tuple[Profile, int]:
        """The ring profile and size of ``group`` ("tp", "dp" or a split group
        ``"AxBxC:axis"``) in ``stage``."""
        if group == "tp":
            return self.tp[stage], self.ctx.tp
        if group == "dp":
            return self.dp[stage], self.ctx.config.parallelism.dp
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
            prof, n = self.group(stage, x.group)
            total += collective_time(x, n=n, step=prof)
        return total

    def sent_bytes(self, colls: Sequence[Collective], stage: int) -> float:
        """Bytes each member sends for ``colls``."""
        return sum(bytes_sent_per_member(x, n=self.group(stage, x.group)[1]) for x in colls)


def stage_rings(ctx: PlanContext) -> StageRings:
    pp = ctx.config.parallelism.pp
    return StageRings(
        ctx=ctx,
        tp=tuple(_stage_ring(ctx, s, 1) for s in range(pp)),
        dp=tuple(_stage_ring(ctx, s, 0) for s in range(pp)),
    )
