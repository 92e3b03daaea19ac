"""Contended resources of the event engine and the flows that hold them.

A resource is a link, an aggregate of links, or a DRAM channel; it serves one flow at a time
(paper sec. IV-C: "treating the link as an exclusive resource"). A flow holds all of its
resources for its whole duration, which is the uncontended duration of the plan's profile
(so a flow alone takes exactly what the analytical engine charges), and starts when every one
of them is free: first come, first served in simulated time (SPEC sec. 9: a collective's links
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
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from palm.hardware.spec import Mesh2DHardware
from palm.network.loads import LinkLoad, Profile
from palm.plan import Plan

__all__ = ["Flow", "Fabric", "build_fabric", "GRANULARITIES"]

GRANULARITIES: tuple[str, ...] = ("group", "link")

_CLUSTER_KINDS = ("sw_out", "sw_in", "nic_out", "nic_in")


@dataclass(frozen=True)
class Flow:
    """Resources a flow holds, and the bytes it puts on each of them per byte sent by one
    transfer (its load on that resource)."""

    resources: tuple[int, ...]
    loads: tuple[float, ...]
    kind: str


class Fabric:
    """The resource table: when each resource is free, how long it was busy, bytes carried."""

    def __init__(self) -> None:
        self.keys: list[Hashable] = []
        self.kinds: list[str] = []
        self._index: dict[Hashable, int] = {}
        self.free_at: list[float] = []
        self.busy_s: list[float] = []
        self.nbytes: list[float] = []

    def resource(self, key: Hashable, kind: str) -> int:
        idx = self._index.get(key)
        if idx is None:
            idx = len(self.keys)
            self._index[key] = idx
            self.keys.append(key)
            self.kinds.append(kind)
            self.free_at.append(0.0)
            self.busy_s.append(0.0)
            self.nbytes.append(0.0)
        return idx

    def account(self, flow: Flow, duration: float, nbytes: float) -> None:
        """Book busy time and bytes without reserving: for a flow that nothing else shares,
        which therefore never waits."""
        busy, carried = self.busy_s, self.nbytes
        for r, load in zip(flow.resources, flow.loads):  # noqa: B905 (equal by construction)
            busy[r] += duration
            carried[r] += load * nbytes

    def reserve(self, flow: Flow, now: float, duration: float, nbytes: float) -> float:
        """Hold every resource of ``flow`` for ``duration`` from the first moment all are
        free at or after ``now``; ``nbytes`` per unit load. Returns the end time."""
        free = self.free_at
        resources = flow.resources
        start = now
        for r in resources:
            if free[r] > start:
                start = free[r]
        end = start + duration
        busy, carried = self.busy_s, self.nbytes
        for r, load in zip(resources, flow.loads):  # noqa: B905 (equal by construction)
            free[r] = end
            busy[r] += duration
            carried[r] += load * nbytes
        return end


def _cluster_group_keys(links: LinkLoad, devices: int, group: int) -> dict[Hashable, float]:
    out: dict[Hashable, float] = {}
    for link, load in zip(links.ids.tolist(), links.loads.tolist(), strict=True):
        kind, gpu = divmod(int(link), devices)
        key = (_CLUSTER_KINDS[kind], gpu // group)
        out[key] = out.get(key, 0.0) + load
    return out


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


def build_fabric(plan: Plan, granularity: str) -> tuple[Fabric, FlowTable]:
    """Resources and flows of ``plan`` at ``granularity`` ("group" or "link")."""
    fabric = Fabric()
    mesh = isinstance(plan.config.hardware, Mesh2DHardware)
    group = plan.config.parallelism.tp * plan.config.parallelism.data_ranks
    pp = plan.config.parallelism.pp

    def make(keys: dict[Hashable, float], kind: str) -> Flow:
        items = sorted(keys.items(), key=lambda kv: repr(kv[0]))
        res = tuple(fabric.resource(k, k[0] if isinstance(k, tuple) else kind) for k, _ in items)
        return Flow(res, tuple(v for _, v in items), kind)

    def flow(prof: Profile, kind: str, group_key: Hashable, transfers: float) -> Flow:
        if prof.bandwidth_Bps == float("inf"):
            return Flow((), (), kind)
        if granularity == "link":
            assert prof.links is not None, "plan built without link loads"
            return make(_link_keys(plan, prof.links), kind)
        if not mesh:
            assert prof.links is not None
            return make(_cluster_group_keys(prof.links, plan.devices, group), kind)
        return make({group_key: transfers}, kind)

    tp = tuple(flow(plan.tp_profiles[s], "tp", ("tp", s), group) for s in range(pp))
    dp = tuple(flow(plan.dp_profiles[s], "dp", ("dp", s), group) for s in range(pp))
    send = tuple(
        flow(prof, "p2p", ("p2p", c % pp, (c + 1) % pp), group)
        for c, prof in enumerate(plan.send_profiles)
    )
    grad = tuple(
        flow(prof, "p2p", ("p2p", (c + 1) % pp, c % pp), group)
        for c, prof in enumerate(plan.grad_profiles)
    )
    dram = None
    if plan.dram is not None:
        per_stage = []
        for access in plan.dram:
            noc_flow = Flow((), (), "dram-noc")
            if granularity == "link" and access.noc.links is not None:
                noc_flow = make(_link_keys(plan, access.noc.links), "dram-noc")
            per_stage.append(DramFlows(access.channels, noc_flow))
        dram = tuple(per_stage)
    # a stage's TP flow can be folded into its compute phase when no other flow shares its
    # resources: it then never waits, and the phase needs one event instead of two
    users: dict[int, set[tuple[str, int]]] = {}
    dram_flows = [d.noc for d in (dram or ())]
    for kind, table in (
        ("tp", tp),
        ("dp", dp),
        ("send", send),
        ("grad", grad),
        ("dram", dram_flows),
    ):
        for i, f in enumerate(table):
            for r in f.resources:
                users.setdefault(r, set()).add((kind, i))
    exclusive = tuple(all(users[r] == {("tp", s)} for r in tp[s].resources) for s in range(pp))
    return fabric, FlowTable(tp, dp, send, grad, dram, exclusive)


def resource_label(key: Hashable) -> str:
    """Readable name of a resource key."""
    if isinstance(key, tuple):
        head, *rest = key
        if head == "p2p":
            return f"p2p[{rest[0]}->{rest[1]}]"
        return f"{head}[{','.join(str(x) for x in rest)}]"
    return str(key)


def mesh_link_endpoints(
    hw: Mesh2DHardware, link_id: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Source and destination cores of mesh link ``link_id``."""
    cols = hw.core_grid[1]
    node, direction = divmod(link_id, 4)
    r, c = divmod(node, cols)
    dr, dc = ((0, 1), (0, -1), (1, 0), (-1, 0))[direction]
    return (r, c), (r + dr, c + dc)
