"""Contended resources of the event engine and the flows that hold them.

A resource is a link, an aggregate of links, or a DRAM channel; it serves one flow at a time
(paper sec. IV-C: "treating the link as an exclusive resource"). A flow holds all of its
resources for its whole duration, which is the uncontended duration of the plan's profile
(so a flow alone takes exactly what the analytical engine charges), and starts when every one
of them is free: first come, first served in simulated time (docs/model.md: a collective's links
are held as one flow, so cost does not grow with the square of the group size).

Granularity (``communication.noc_granularity``):

* ``group`` (default): virtual tile aggregation of the network. On a mesh each stage has one
  resource for its tensor-parallel rings and one for its data-parallel rings (disjoint links
  under a compact placement), one per ordered pair of stages that hand off activations, and
  the DRAM channels. On a GPU cluster the switch ports and the NICs of a stage's GPUs are
  aggregated per direction. The number of resources and of events does not depend on the
  number of tiles.
* ``link``: every directed link (mesh) or every GPU port and NIC (cluster) is a resource of its
  own; flows hold the links their routes actually load. For small meshes, and to check the
  aggregation.

Sharing model (``communication.noc_model``):

* ``exclusive``: the paper's holds above.
* ``fair`` (default): flows share every resource they load max-min fairly
  (:mod:`palm.engines.event.fair`). Each resource then has a capacity. In ``link`` mode it is the
  link's (port's) bandwidth and a flow's load on it the number of its transfers that cross it. In
  ``group`` mode a mesh stage's links are one resource ``noc[s]`` of capacity 1 that stands for
  the stage's bottleneck link, and a flow loads it with ``1 / B``, ``B`` the bandwidth one of its
  transfers gets alone (its profile's): a flow alone runs at ``B``, and flows of one stage (its
  tensor- and data-parallel collectives, the hand-offs in and out of it, its DRAM reads) share
  that link as transfers on one link would. On a GPU cluster the aggregated ports of the stage
  play the same role.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import TYPE_CHECKING

import numpy as np

from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
from palm.network.dram import DramAccess, interleaved_access
from palm.network.loads import (
    EAST,
    WEST,
    LinkLoad,
    Profile,
    dram_channel_cores,
    link_bandwidth_Bps,
    tile_hardware,
)
from palm.network.region import CoreRegion
from palm.plan import Plan

if TYPE_CHECKING:
    from palm.engines.event.resource_table import Fabric
else:  # the compiled build of resource_table.py when it is current, else the .py (accel)
    from palm.engines.event.accel import TABLE

    Fabric = TABLE.Fabric

__all__ = ["Flow", "Fabric", "build_fabric", "GRANULARITIES", "NOC_MODELS"]

GRANULARITIES: tuple[str, ...] = ("group", "link")
NOC_MODELS: tuple[str, ...] = ("fair", "exclusive")

_CLUSTER_KINDS = ("sw_out", "sw_in", "nic_out", "nic_in")
_INF = float("inf")


@dataclass(frozen=True)
class Flow:
    """Resources a flow holds, and the bytes it puts on each of them per byte sent by one
    transfer (its load on that resource). ``carried`` is what the resource's byte count books
    per byte of one transfer, when it differs from the load (the ``fair`` model's aggregates,
    whose loads are fractions of a link)."""

    resources: tuple[int, ...]
    loads: tuple[float, ...]
    kind: str
    carried: tuple[float, ...] | None = None

    @property
    def booked(self) -> tuple[float, ...]:
        return self.loads if self.carried is None else self.carried

    @cached_property
    def pairs(self) -> tuple[tuple[int, float], ...]:
        """``(resource, booked)`` pairs, made on first use (a hold reads them every time)."""
        return tuple(zip(self.resources, self.booked, strict=True))


def _cluster_group_keys(links: LinkLoad, devices: int, group: int) -> dict[Hashable, float]:
    """Loads of a cluster flow per (port kind, stage group): its ports' loads summed, in the
    order of ``links`` (``bincount`` adds them one by one, as a loop would)."""
    if links.blocks is not None and group % links.block == 0:
        links = links.blocks  # the same whole-number loads summed per block of the group
    ids = np.asarray(links.ids, dtype=np.int64)  # port kind x devices + GPU
    if devices % group == 0:  # groups tile the GPUs (every plan): one division numbers both
        stride = devices // group  # the number of groups
        code = ids // group  # = kind x stride + GPU // group
    else:
        kind, gpu = np.divmod(ids, devices)
        stride = devices // group + 1  # more than the number of groups
        code = kind * stride + gpu // group  # small integers: counted by bins, not sorted
    bins = len(_CLUSTER_KINDS) * stride
    codes = np.nonzero(np.bincount(code, minlength=bins))[0]
    sums = np.bincount(code, weights=np.asarray(links.loads, dtype=np.float64), minlength=bins)
    return {
        (_CLUSTER_KINDS[c // stride], c % stride): load
        for c, load in zip(codes.tolist(), sums[codes].tolist(), strict=True)
    }


def _link_keys(plan: Plan, links: LinkLoad) -> dict[Hashable, float]:
    """Resource keys of the links a flow loads (summing repeated ids, e.g. the parts of a
    hand-off)."""
    mesh = isinstance(plan.config.hardware, Mesh2DHardware)
    devices = plan.devices
    out: dict[Hashable, float] = {}
    for i, x in zip(links.ids.tolist(), links.loads.tolist(), strict=True):
        key: Hashable = (
            ("link", int(i)) if mesh else (_CLUSTER_KINDS[int(i) // devices], int(i) % devices)
        )
        out[key] = out.get(key, 0.0) + float(x)
    return out


@dataclass(frozen=True)
class DramFlows:
    """A stage's DRAM access: the channels it reads (fair-shared, see
    :mod:`palm.engines.event.shared`) and, in link mode, one flow over the mesh links the
    reads cross."""

    channels: tuple[int, ...]
    noc: Flow


@dataclass(frozen=True)
class FlowTable:
    tp: tuple[Flow, ...]
    dp: tuple[Flow, ...]
    send: tuple[Flow, ...]
    grad: tuple[Flow, ...]
    dram: tuple[DramFlows, ...] | None
    tp_exclusive: tuple[bool, ...]


def build_fabric(
    plan: Plan, granularity: str, noc_model: str = "exclusive"
) -> tuple[Fabric, FlowTable]:
    """Resources and flows of ``plan`` at ``granularity`` ("group" or "link") for
    ``noc_model`` ("exclusive" or "fair")."""
    maker = _FlowMaker(plan, granularity, noc_model)
    pp = plan.config.parallelism.pp
    tp = tuple(maker.flow(plan.tp_profiles[s], "tp", (s,)) for s in range(pp))
    dp = tuple(maker.flow(plan.dp_profiles[s], "dp", (s,)) for s in range(pp))
    send = tuple(
        maker.flow(prof, "p2p", (c % pp, (c + 1) % pp)) for c, prof in enumerate(plan.send_profiles)
    )
    grad = tuple(
        maker.flow(prof, "p2p", ((c + 1) % pp, c % pp)) for c, prof in enumerate(plan.grad_profiles)
    )
    dram = maker.dram() if plan.dram is not None else None
    others = (*dp, *send, *grad, *(d.noc for d in dram or ()))
    return maker.fabric, FlowTable(tp, dp, send, grad, dram, _alone(tp, others))


class _Texts(dict[Hashable, str]):
    """The ``repr`` of keys, each made once (a key recurs in the flows of its stage)."""

    def __missing__(self, key: Hashable) -> str:
        text = self[key] = repr(key)
        return text


class _FlowMaker:
    """:func:`build_fabric`'s flows, made one by one, with the resources they hold added to
    :attr:`fabric` as they first appear (so resources are numbered in the order of the flows
    that first use them: tensor-parallel, data-parallel, hand-offs, gradients, DRAM reads)."""

    def __init__(self, plan: Plan, granularity: str, noc_model: str) -> None:
        self.plan = plan
        self.fabric = Fabric()
        self.link = granularity == "link"
        self.fair = noc_model == "fair"
        self.mesh = isinstance(plan.config.hardware, Mesh2DHardware)
        par = plan.config.parallelism
        self.group = par.tp * par.data_ranks
        #: a new resource's capacity: a link's or port's bandwidth in ``link`` mode, else 1
        self._capacity = partial(_capacity, plan) if self.link else None
        #: the text of a resource key (the order of a flow's resources), by the key
        self._text = _Texts().__getitem__

    def make(self, keys: dict[Hashable, float], kind: str, carried: float | None = None) -> Flow:
        """A flow of ``kind`` loading the resources of ``keys`` by their values, in the order
        of the keys' text; ``carried``: what it books on each per byte of one transfer, when
        that differs from the load (the ``fair`` model's aggregates)."""
        if len(keys) > 1:
            order = sorted(keys, key=self._text)
            loads = tuple([keys[k] for k in order])
        else:
            order, loads = list(keys), tuple(keys.values())
        resources = self.fabric.resources(order, kind, self._capacity)
        booked = None if carried is None else (carried,) * len(resources)
        return Flow(resources, loads, kind, booked)

    def flow(self, prof: Profile, kind: str, stages: tuple[int, ...]) -> Flow:
        """The flow of a transfer priced by ``prof`` (each of the stage group's transfers at
        once) among ``stages``: the stage of a collective, the two of a hand-off."""
        if prof.bandwidth_Bps == _INF:
            return Flow((), (), kind)
        if self.link:
            assert prof.links is not None, "plan built without link loads"
            return self.make(_link_keys(self.plan, prof.links), kind)
        if not self.mesh:  # the stage groups' ports and NICs
            assert prof.links is not None
            keys = _cluster_group_keys(prof.links, self.plan.devices, self.group)
            if self.fair:  # loaded 1 / (lone bandwidth)
                return self.make(dict.fromkeys(keys, 1.0 / prof.bandwidth_Bps), kind, self.group)
            return self.make(keys, kind)
        if self.fair:  # one aggregated resource per stage touched, loaded 1 / (lone bandwidth)
            load = 1.0 / prof.bandwidth_Bps
            return self.make({("noc", s): load for s in stages}, kind, self.group)
        return self.make({(kind, *stages): self.group}, kind)

    def dram(self) -> tuple[DramFlows, ...]:
        """Per stage, its DRAM access: its channels and the flow over the NoC its reads make
        (:meth:`dram_noc`)."""
        plan = self.plan
        assert plan.dram is not None
        fair_groups = self.fair and not self.link
        if fair_groups and _per_tile(plan):
            edges = _tile_edges(plan)
        else:
            edge = _all_stages_reading_Bps(plan) if fair_groups else None
            edges = [
                {("dram-noc",): (a.cores, *edge)} if edge is not None else {} for a in plan.dram
            ]
        return tuple(
            DramFlows(access.channels, self.dram_noc(s, access, edges[s]))
            for s, access in enumerate(plan.dram)
        )

    def dram_noc(
        self, s: int, access: DramAccess, edge: dict[Hashable, tuple[float, float, float]]
    ) -> Flow:
        """The flow over the NoC of stage ``s``'s reads (``access``): over the links they load
        in ``link`` mode; under the ``fair`` model, on the stage's aggregate and on each
        shared edge of ``edge`` (key -> the stage's cores there, all stages' cores there and
        one core's read bandwidth when all read at once: the mesh's,
        :func:`_all_stages_reading_Bps`, or each tile's, :func:`_tile_edges`); none
        otherwise."""
        if self.link and access.noc.links is not None:
            return self.make(_link_keys(self.plan, access.noc.links), "dram-noc")
        if not (self.fair and access.noc.bandwidth_Bps < _INF):
            return Flow((), (), "dram-noc")
        own = 1.0 / access.noc.bandwidth_Bps
        cores = access.cores
        keys: dict[Hashable, float] = {("noc", s): own}
        for key, (mine, all_cores, rate) in edge.items():
            # the stage's share of the edge's bottleneck link when every stage reads (never
            # more than its own bottleneck: alone, a read takes its own time)
            keys[key] = min(mine / all_cores / rate, own)
        return self.make(keys, "dram-noc", cores)


def _alone(tp: tuple[Flow, ...], others: tuple[Flow, ...]) -> tuple[bool, ...]:
    """Per stage, whether no other flow shares a resource of its tensor-parallel flow ``tp[s]``
    (another stage's, or one of ``others``): it then never waits and can be folded into the
    stage's compute phase (one event instead of two)."""
    owner: dict[int, int] = {}  # resource -> the tensor-parallel flow on it
    shared: set[int] = set()  # resources of more than one flow
    for s, f in enumerate(tp):
        for r in f.resources:
            if owner.setdefault(r, s) != s:
                shared.add(r)
    for f in others:
        shared.update(f.resources)
    return tuple(all(r not in shared for r in f.resources) for f in tp)


def _all_stages_reading_Bps(plan: Plan) -> tuple[float, float] | None:
    """Interleaved placement, ``group`` mode: every stage's reads cross the links along the mesh
    edges, so they share one more aggregate, the bottleneck link of all stages' cores reading
    at once (:func:`~palm.network.dram.interleaved_access`). Returns the cores of all stages
    and the bandwidth one core's read gets then; None for ``nearest`` placement (reads stay
    near their channel)."""
    hw = plan.config.hardware
    if not isinstance(hw, Mesh2DHardware) or hw.dram_placement != "interleaved":
        return None
    pp = plan.config.parallelism.pp
    region = CoreRegion(np.concatenate([plan.placement.stage_region(s).rects for s in range(pp)]))
    access = interleaved_access(hw, region, dram_channel_cores(hw), with_latency=False)
    if access.noc.bandwidth_Bps == _INF:
        return None
    return access.cores, access.noc.bandwidth_Bps


def _per_tile(plan: Plan) -> bool:
    hw = plan.config.hardware
    return isinstance(hw, Mesh2DHardware) and hw.dram_placement == "per-tile"


def _tile_edges(plan: Plan) -> list[dict[Hashable, tuple[float, float, float]]]:
    """``per-tile`` placement, ``group`` mode: the reads of all stages on one tile (chip)
    cross that tile's edge links only, so they share one aggregate per tile, ``("dram-noc",
    t)``, the bottleneck link of all of tile ``t``'s reading cores
    (:func:`~palm.network.dram_tiles.per_tile_accesses`). Per stage: key -> (its cores on the
    tile, all stages' cores on it, one core's read bandwidth then)."""
    from palm.network.dram_tiles import tile_parts

    hw = plan.config.hardware
    assert isinstance(hw, Mesh2DHardware)
    pp = plan.config.parallelism.pp
    parts = [tile_parts(hw, plan.placement.stage_region(s)) for s in range(pp)]
    one = tile_hardware(hw)
    at = dram_channel_cores(one)
    tiles = sorted({t for p in parts for t in p})
    rates: dict[int, tuple[float, float]] = {}
    seen: dict[bytes, tuple[float, float] | None] = {}  # tiles read alike are priced once
    for t in tiles:
        region = CoreRegion(np.concatenate([p[t].rects for p in parts if t in p]))
        key = region.rects.tobytes()
        if key not in seen:
            access = interleaved_access(one, region, at, with_latency=False)
            bw = access.noc.bandwidth_Bps
            seen[key] = (access.cores, bw) if bw < _INF else None
        rate = seen[key]
        if rate is not None:
            rates[t] = rate
    return [
        {("dram-noc", t): (float(sub.count), *rates[t]) for t, sub in p.items() if t in rates}
        for p in parts
    ]


def _capacity(plan: Plan, key: Hashable) -> float:
    """Bytes/s of a ``link``-mode resource: a mesh link's or a GPU port's bandwidth."""
    hw = plan.config.hardware
    if not isinstance(key, tuple) or len(key) != 2:
        return 1.0
    head, index = key
    if head == "link" and isinstance(hw, Mesh2DHardware):
        node, direction = divmod(int(index), 4)
        r, c = divmod(node, hw.core_grid[1])
        position = c if direction in (EAST, WEST) else r
        return float(link_bandwidth_Bps(hw, direction, position))
    if isinstance(hw, GpuClusterHardware) and head in _CLUSTER_KINDS:
        gbps = hw.switch_bandwidth_gbps if head.startswith("sw") else hw.inter_node_bandwidth_gbps
        return gbps * 1e9
    return 1.0


def mesh_link_endpoints(
    hw: Mesh2DHardware, link_id: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Source and destination cores of mesh link ``link_id``."""
    cols = hw.core_grid[1]
    node, direction = divmod(link_id, 4)
    r, c = divmod(node, cols)
    dr, dc = ((0, 1), (0, -1), (1, 0), (-1, 0))[direction]
    return (r, c), (r + dr, c + dc)
