"""Moving an activation from one tile group to the next on a mesh (paper sec. V-C, Eq. 7, 8).

When a stage hands its output to the next stage, the source group may hold it as *partial*
results (the last operator's partial sums, e.g. Megatron's row-parallel output before its
all-reduce) and every member of the destination group needs it whole. ``a`` *adapter* tiles
carry it across: the source members nearest the destination and the destination members
nearest the source; every other member is served by its nearest adapter.

* Strategy 1, ``allreduce-broadcast`` (Eq. 7): ``T = T_SG_AR + T_inter + T_DG_B``: all-reduce
  in the source group (ring), each source adapter sends the activation to its destination
  adapter, each destination adapter broadcasts it to the members it serves.
* Strategy 2, ``reduce-adapters`` (Eq. 8): ``T = T_SG_R + T_inter + T_adapters_AR + T_DG_B``:
  each source adapter gathers the partial results of the members it serves and sums them, sends
  that partial sum across, the destination adapters all-reduce their partial sums (ring), and
  each broadcasts the result to the members it serves.

Reduce and broadcast between an adapter and its members are direct transfers, all at once (the
adapter's links carry them all), not pipelined along a ring; the all-reduces are rings. When the
source data is already complete (``partial = False``) the reductions are skipped. All replicas
of a stage (data parallelism) do the same at the same time, so their transfers share links.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from palm.cost.collectives import collective_time
from palm.hardware.spec import Mesh2DHardware
from palm.network.loads import (
    Profile,
    mesh_link_key,
    mesh_profile,
    ring_orders,
    tile_aligned_key,
)
from palm.network.memo import remember
from palm.workload.ops import Collective

__all__ = ["HandOff", "hand_off", "choose_adapters", "INTER_GROUP_STRATEGIES"]

INTER_GROUP_STRATEGIES: tuple[str, ...] = ("allreduce-broadcast", "reduce-adapters")


@dataclass(frozen=True)
class HandOff:
    """The parts of one hand-off (seconds) and the link loads of its flows (link mode)."""

    reduce_s: float
    transfer_s: float
    adapters_allreduce_s: float
    broadcast_s: float
    profiles: tuple[Profile, ...] = ()

    @property
    def total_s(self) -> float:
        return self.reduce_s + self.transfer_s + self.adapters_allreduce_s + self.broadcast_s


def choose_adapters(members: np.ndarray, toward: np.ndarray, count: int) -> np.ndarray:
    """Indices of the ``count`` members of a group (``(n, 2)`` cores) nearest the centroid of
    ``toward`` (Manhattan distance; ties by member order). Groups stacked as ``(g, n, 2)``
    give ``(g, count)``."""
    # the mean's own value (a sum over a count), without np.mean's wrapper
    centre = toward.sum(axis=-2, keepdims=True) / toward.shape[-2]
    dist = np.abs(members - centre).sum(axis=-1)
    order: np.ndarray = np.argsort(dist, axis=-1, kind="stable")[..., :count]
    return order


def _serving(members: np.ndarray, adapters: np.ndarray) -> np.ndarray:
    """For each member (``(g, n, 2)``), the index into ``adapters`` (``(g, a, 2)``) of its
    nearest adapter (ties to the lower index)."""
    dist = np.abs(members[:, :, None, :] - adapters[:, None, :, :]).sum(axis=-1)
    nearest: np.ndarray = dist.argmin(axis=-1)
    return nearest


def _spatial(members: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """The coordinates of the picked members of every group, in row-major order."""
    coords = np.take_along_axis(members, picked[:, :, None], axis=1)
    key = coords[:, :, 0] * (int(coords[:, :, 1].max(initial=0)) + 1) + coords[:, :, 1]
    order = np.argsort(key, axis=1, kind="stable")
    out: np.ndarray = np.take_along_axis(coords, order[:, :, None], axis=1)
    return out


def _at(points: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``points[g, index[g, i]]`` for every group ``g`` and member ``i``."""
    out: np.ndarray = np.take_along_axis(points, index[:, :, None], axis=1)
    return out


@dataclass(frozen=True)
class _Picks:
    """The adapters of a hand-off (:func:`choose_adapters`): indices into the source and the
    destination groups, ``(replicas, a)`` each."""

    source: np.ndarray
    destination: np.ndarray


@dataclass(frozen=True)
class _Routes:
    """The geometry of one hand-off, independent of its size: the profiles of its parts
    (``None``: the part is skipped), the group size ``n`` and the adapter count ``a``."""

    transfer: Profile
    broadcast: Profile
    source_ring: Profile | None
    reduce: Profile | None
    adapters_ring: Profile | None
    n: int
    a: int


def hand_off(
    hw: Mesh2DHardware,
    *,
    src: np.ndarray,
    dst: np.ndarray,
    nbytes: float,
    strategy: str,
    adapters: int,
    partial: bool,
    with_links: bool = False,
) -> HandOff:
    """Time of handing ``nbytes`` (one replica's activation) from every replica's source group
    ``src[d]`` to its destination group ``dst[d]`` (arrays of shape ``(replicas, n, 2)``). All
    replicas are handled at once (numpy over the replica axis). The adapters are chosen on the
    given cores (:func:`choose_adapters`: a centroid's rounding depends on where it lies); the
    routes from them on are remembered inside :func:`palm.network.memo.shared_geometry`
    (without link loads) under :func:`~palm.network.loads.tile_aligned_key`, so hand-offs
    moved by whole tiles with the same adapters share them."""
    if strategy not in INTER_GROUP_STRATEGIES:
        raise ValueError(f"unknown inter-group strategy {strategy!r}")
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    a = max(1, min(adapters, src.shape[1], dst.shape[1]))
    picks = _Picks(choose_adapters(src, dst, a), choose_adapters(dst, src, a))

    def routes() -> _Routes:
        return _routes(
            hw, src, dst, picks, strategy=strategy, partial=partial, with_links=with_links
        )

    if with_links:
        r = routes()
    else:
        r = remember(
            lambda: (
                "hand_off",
                mesh_link_key(hw),
                *tile_aligned_key(hw, src, dst),
                picks.source.tobytes(),
                picks.destination.tobytes(),
                strategy,
                partial,
            ),
            routes,
        )
    reduce_s = adapters_ar = 0.0
    if r.source_ring is not None:
        reduce_s = collective_time(Collective("all-reduce", nbytes), n=r.n, step=r.source_ring)
    if r.reduce is not None:
        reduce_s = r.reduce.time(nbytes)
    if r.adapters_ring is not None:
        adapters_ar = collective_time(Collective("all-reduce", nbytes), n=r.a, step=r.adapters_ring)
    parts = (r.source_ring, r.reduce, r.adapters_ring)
    return HandOff(
        reduce_s=reduce_s,
        transfer_s=r.transfer.time(nbytes),
        adapters_allreduce_s=adapters_ar,
        broadcast_s=r.broadcast.time(nbytes),
        profiles=(r.transfer, r.broadcast, *(p for p in parts if p is not None)),
    )


def _routes(
    hw: Mesh2DHardware,
    src: np.ndarray,
    dst: np.ndarray,
    picks: _Picks,
    *,
    strategy: str,
    partial: bool,
    with_links: bool,
) -> _Routes:
    """The profiles of :func:`hand_off`'s parts (Eq. 7, 8; see the module's docstring) with
    the adapters ``picks``. Integer geometry from the picks on: moving ``src`` and ``dst`` by
    whole tiles gives the same profiles (without link loads)."""
    n, a = src.shape[1], picks.source.shape[1]
    # adapters of every replica, paired in a consistent spatial order
    s_ad = _spatial(src, picks.source)
    d_ad = _spatial(dst, picks.destination)
    cross = [(s_ad.reshape(-1, 2), d_ad.reshape(-1, 2))]
    bcast = [(_at(d_ad, _serving(dst, d_ad)).reshape(-1, 2), dst.reshape(-1, 2))]

    def prof(pairs: list[tuple[np.ndarray, np.ndarray]]) -> Profile:
        return mesh_profile(
            hw,
            np.concatenate([p[0] for p in pairs]),
            np.concatenate([p[1] for p in pairs]),
            with_links=with_links,
        )

    def ring(stacked: np.ndarray) -> Profile:
        return mesh_profile(
            hw,
            stacked.reshape(-1, 2),
            np.roll(stacked, -1, axis=1).reshape(-1, 2),
            with_links=with_links,
        )

    source_p = reduce_p = adapters_p = None
    if partial and strategy == "allreduce-broadcast":
        source_p = ring(ring_orders(src) if n >= 4 else src)
    elif partial:
        reduce_p = prof([(src.reshape(-1, 2), _at(s_ad, _serving(src, s_ad)).reshape(-1, 2))])
        if a > 1:
            adapters_p = ring(ring_orders(d_ad) if a >= 4 else d_ad)
    return _Routes(
        transfer=prof(cross),
        broadcast=prof(bcast),
        source_ring=source_p,
        reduce=reduce_p,
        adapters_ring=adapters_p,
        n=n,
        a=a,
    )
