"""The two ways the event engine's flows use the network, behind one interface.

* :class:`ExclusiveNet` (``communication.noc_model = "exclusive"``, the paper's sec. IV-C): a
  flow holds every resource it uses for its whole uncontended duration, first come first
  served (:class:`~palm.engines.event.fabric.Fabric`); DRAM channels are shared equally by
  the accesses in progress (:class:`~palm.engines.event.dram_system.DramSystem`), the mesh links a
  DRAM read crosses are held only in ``link`` mode.
* :class:`FairNet` (``"fair"``, the default): every flow (collectives, hand-offs, DRAM reads
  with the links they cross) shares every resource it loads max-min fairly
  (:class:`~palm.engines.event.fair.FairNetwork`).

A stage process asks for a *blocking* flow (it waits for the end), a *send* (fires the
receiver's arrival event when through, the sender goes on) or a DRAM *read* (started now,
waited for later, so that it overlaps the compute it feeds).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from palm.engines.event.accel import DRAM, FAIR
from palm.engines.event.fabric import Fabric, Flow, FlowTable
from palm.engines.event.shared import PENDING, Arrival, ChannelClasses
from palm.hardware.spec import Mesh2DHardware
from palm.plan import Plan

if TYPE_CHECKING:
    from palm.engines.event.dram_system import DramSystem
    from palm.engines.event.fair import FairNetwork, Route
else:  # the compiled builds when they are current, else the .py modules (accel)
    FairNetwork, Route = FAIR.FairNetwork, FAIR.Route
    DramSystem = DRAM.DramSystem

__all__ = ["ExclusiveNet", "FairNet", "Net", "binding_links"]

_new_event = object.__new__

#: where flows are recorded (the timeline's list's append), None when nothing is recorded
FlowLog = Callable[[tuple[str, tuple[int, ...], float, float, int]], None] | None


def _dram_patterns(plan: Plan) -> tuple[list[float], list[tuple[tuple[int, ...], Any]]]:
    hw = plan.config.hardware
    assert isinstance(hw, Mesh2DHardware) and plan.dram is not None
    bandwidth = [plan.dram[0].channel_bandwidth_Bps] * hw.dram_channels
    return bandwidth, [(a.channels, a.cores_per_channel) for a in plan.dram]


def _channel_classes(plan: Plan) -> ChannelClasses:
    """The plan's DRAM channels grouped into classes, for one run: grouped once per plan
    (``Plan.engine_tables``), each run reading through a fresh copy of its own."""
    classes = plan.engine_tables.get("channel-classes")
    if classes is None:
        classes = plan.engine_tables["channel-classes"] = ChannelClasses(*_dram_patterns(plan))
    return classes.fresh()


class ExclusiveNet:
    """First-come-first-served holds (the paper's model)."""

    def __init__(
        self, env: simpy.Environment, plan: Plan, fabric: Fabric, flows: FlowTable, log: FlowLog
    ) -> None:
        self.env, self.plan, self.fabric, self.flows, self.log = env, plan, fabric, flows, log
        self.dram: DramSystem | None = None
        # per stage: its reads' NoC bandwidth, latency and NoC flow (link mode)
        self._read_info: list[tuple[float, float, Flow]] = []
        if plan.dram is not None:
            classes = _channel_classes(plan)
            self.dram = DramSystem(env, classes.bandwidth, (), classes=classes)
            if flows.dram is not None:
                self._read_info = [
                    (a.noc.bandwidth_Bps, a.response_s + a.noc.latency_s, d.noc)
                    for a, d in zip(plan.dram, flows.dram, strict=True)
                ]

    @property
    def channels(self) -> ChannelClasses | None:
        return None if self.dram is None else self.dram.classes

    def _hold(self, flow: Flow, duration: float, nbytes: float, stage: int) -> float:
        now = self.env._now  # noqa: SLF001 - the clock (a float), without the property
        if duration <= 0:
            return now
        if not flow.resources:
            return now + duration
        end = self.fabric.reserve(flow, now, duration, nbytes)
        if self.log is not None:
            self.log((flow.kind, flow.resources, end - duration, end, stage))
        return end

    def blocking(
        self, flow: Flow, duration: float, nbytes: float, stage: int
    ) -> Generator[simpy.Event, Any, None]:
        end = self._hold(flow, duration, nbytes, stage)
        if end > self.env.now:
            yield self.env.timeout(end - self.env.now)

    def block(self, flow: Flow, duration: float, nbytes: float, stage: int) -> simpy.Event | None:
        """:meth:`blocking`'s event (None: nothing to wait for), for a caller that yields it."""
        end = self._hold(flow, duration, nbytes, stage)
        now = self.env._now  # noqa: SLF001 - the clock, without the property
        return self.env.timeout(end - now) if end > now else None

    def send(self, flow: Flow, duration: float, nbytes: float, stage: int, to: Arrival) -> None:
        to.succeed_in(self._hold(flow, duration, nbytes, stage) - self.env._now)  # noqa: SLF001

    def read(self, stage: int, nbytes: float) -> Any:
        """Every core of ``stage`` reads ``nbytes``: the channels' event and when the NoC part
        (link mode) is through."""
        assert self.dram is not None
        bandwidth, latency, noc = self._read_info[stage]
        event = self.dram.begin(nbytes, stage, bandwidth, latency)
        end = self.env._now  # noqa: SLF001 - the clock, without the property
        if noc.resources and nbytes > 0:
            # the reads occupy the mesh links they cross for bytes / bandwidth (the rest of
            # the access is the channels' time, during which those links carry other flows)
            end = self._hold(noc, nbytes / bandwidth, nbytes, stage)
        return event, end

    def wait(self, token: Any) -> Generator[simpy.Event, Any, None]:
        event, end = token
        if event.callbacks is not None:  # not processed yet
            yield event
        now = self.env._now  # noqa: SLF001
        if end > now:
            yield self.env.timeout(end - now)

    def account(self, flow: Flow, duration: float, nbytes: float) -> None:
        self.fabric.account(flow, duration, nbytes)

    def link_usage(self) -> tuple[list[float], list[float]]:
        return self.fabric.busy_s, self.fabric.nbytes


class _FairTables:
    """What :class:`FairNet` derives from the plan and its flows alone (capacities, the links
    that can bind, the reads' routes, the flows' routes as they are first used), built once
    per plan and flow table and shared by the plan's runs (a route's creation rank, its order
    in fillings, is then that of the plan's first run, which every run repeats)."""

    def __init__(self, plan: Plan, fabric: Fabric, flows: FlowTable) -> None:
        self.flows = flows  # held, so that the table's key (its id) stays this table's
        capacity = [float(c) for c in fabric.capacity_Bps]
        n_links = len(capacity)
        self.channels: ChannelClasses | None = None
        if plan.dram is not None:
            self.channels = plan.engine_tables.get("channel-classes")
            if self.channels is None:
                self.channels = ChannelClasses(*_dram_patterns(plan))
                plan.engine_tables["channel-classes"] = self.channels
            capacity += [1.0] * self.channels.count  # one resource per channel class
        self.capacity = capacity
        self.n_links = n_links
        # the reads' loads on the channel classes, beside their NoC loads
        reads: list[tuple[Sequence[int], Sequence[float]]] = []
        if plan.dram is not None and flows.dram is not None:
            assert self.channels is not None
            for s, limits in enumerate(self.channels.limits):
                noc = flows.dram[s].noc
                reads.append(
                    (
                        [*noc.resources, *(n_links + k for k, _ in limits)],
                        [*noc.loads, *(1.0 / limit for _, limit in limits)],
                    )
                )
        table: list[tuple[Sequence[int], Sequence[float]]] = [
            (f.resources, f.loads) for f in (*flows.tp, *flows.dp, *flows.send, *flows.grad)
        ]
        self.same = binding_links(capacity, table + reads)
        #: the resources that can bind (their own in ``same``)
        self.binding = frozenset(r for r, s in enumerate(self.same) if s == r)
        #: progressive filling's answers by the routes in flight (the network's memo, kept
        #: for the plan's later runs, whose flows take the same routes on the same capacities)
        self.filled: dict[tuple[Route, ...], tuple[list[float], dict[int, float]]] = {}
        #: routes of flows by the flow's id, made as they are first used
        self.routes: dict[int, Route] = {}
        read_routes = [self._route(*read) for read in reads]
        # per stage: its reads' route, latency, and their flow over the NoC (whose bytes the
        # fabric books)
        self.read_info: list[tuple[Route, float, Flow | None]] = []
        if plan.dram is not None:
            for s, route in enumerate(read_routes):
                access = plan.dram[s]
                noc_flow = flows.dram[s].noc if flows.dram is not None else None
                self.read_info.append((route, access.response_s + access.noc.latency_s, noc_flow))

    def _route(self, resources: Sequence[int], loads: Sequence[float]) -> Route:
        """The route of a flow loading ``resources`` by ``loads``: on the resources that can
        bind (see :func:`binding_links`), and passing the links that never bind but keep their
        own busy time (a channel class's busy time is not reported, so one that never binds is
        dropped)."""
        if self.binding.issuperset(resources):  # all kept: the flow's own lists
            return Route(resources, loads, self.capacity)
        same, n_links = self.same, self.n_links
        kept, kept_loads, passive = [], [], []
        for r, a in zip(resources, loads, strict=True):
            if same[r] == r:
                kept.append(r)
                kept_loads.append(a)
            elif same[r] == -1 and r < n_links:
                passive.append(r)
        return Route(kept, kept_loads, self.capacity, passive)

    def route(self, flow: Flow) -> Route:
        """The route of ``flow``, cached."""
        route = self.routes.get(id(flow))
        if route is None:
            route = self.routes[id(flow)] = self._route(flow.resources, flow.loads)
        return route


class FairNet:
    """Max-min fair sharing of links, link aggregates and DRAM channel classes."""

    def __init__(
        self, env: simpy.Environment, plan: Plan, fabric: Fabric, flows: FlowTable, log: FlowLog
    ) -> None:
        self.env, self.plan, self.fabric, self.flows, self.log = env, plan, fabric, flows, log
        key = ("fair-net", id(flows))
        tables = plan.engine_tables.get(key)
        if tables is None or tables.flows is not flows:
            tables = plan.engine_tables[key] = _FairTables(plan, fabric, flows)
        self._tables = tables
        self._channels = None if tables.channels is None else tables.channels.fresh()
        # the fabric counts the bytes; fillings are remembered across the plan's runs
        self.net = FairNetwork(env, tables.capacity, count_bytes=False, filled=tables.filled)
        self._n_links = tables.n_links
        self._same = tables.same
        self._routes = tables.routes
        self._read_info = tables.read_info
        self._book = fabric.book
        self._begin = self.net.begin

    @property
    def channels(self) -> ChannelClasses | None:
        return self._channels

    def _start(self, flow: Flow, duration: float, nbytes: float, stage: int, to: Arrival) -> None:
        route = self._routes.get(id(flow)) or self._tables.route(flow)
        self._book(flow, nbytes)
        if not route.pairs:  # never: some resource of a flow always binds (binding_links)
            to.succeed_in(duration)
        else:  # a transfer of ``duration`` alone (FairNetwork.transfer, one call less)
            self.net.begin(route, duration * route.alone_Bps, 0.0, to)
        log = self.log
        if log is not None and flow.resources:
            kind, resources, start = flow.kind, flow.resources, float(self.env.now)
            to.callbacks.append(lambda _e: log((kind, resources, start, self.env.now, stage)))

    def blocking(
        self, flow: Flow, duration: float, nbytes: float, stage: int
    ) -> Generator[simpy.Event, Any, None]:
        if duration <= 0:
            return
        if not flow.resources:
            yield self.env.timeout(duration)
            return
        done = Arrival(self.env)
        self._start(flow, duration, nbytes, stage, done)
        yield done

    def block(self, flow: Flow, duration: float, nbytes: float, stage: int) -> simpy.Event | None:
        """:meth:`blocking`'s event (None: nothing to wait for), for a caller that yields it."""
        if duration <= 0:
            return None
        if not flow.resources:
            return self.env.timeout(duration)
        # Arrival(self.env), without the constructor's call (the fields it sets)
        done = _new_event(Arrival)
        done.env, done.callbacks, done._value = self.env, [], PENDING  # noqa: SLF001
        self.send(flow, duration, nbytes, stage, done)
        return done

    def send(self, flow: Flow, duration: float, nbytes: float, stage: int, to: Arrival) -> None:
        if duration <= 0 or not flow.resources:
            to.succeed_in(max(duration, 0.0))
            return
        if self.log is None:  # _start, inline
            route = self._routes.get(id(flow)) or self._tables.route(flow)
            self._book(flow, nbytes)
            if route.pairs:
                self._begin(route, duration * route.alone_Bps, 0.0, to)
            else:  # never: some resource of a flow always binds (binding_links)
                to.succeed_in(duration)
        else:
            self._start(flow, duration, nbytes, stage, to)

    def read(self, stage: int, nbytes: float) -> Any:
        assert self._channels is not None
        route, latency, noc = self._read_info[stage]
        self._channels.read_per_core[stage] += nbytes
        if nbytes > 0:
            if noc is not None:
                self._book(noc, nbytes)
        else:
            latency = 0.0
        done = _new_event(Arrival)  # Arrival(self.env), without the constructor's call
        done.env, done.callbacks, done._value = self.env, [], PENDING  # noqa: SLF001
        self._begin(route, nbytes, latency, done)
        return done

    def wait(self, token: Any) -> Generator[simpy.Event, Any, None]:
        if not token.processed:
            yield token

    def account(self, flow: Flow, duration: float, nbytes: float) -> None:
        self.fabric.account(flow, duration, nbytes)

    def link_usage(self) -> tuple[list[float], list[float]]:
        fair_busy = self.net.busy_s
        busy = [
            a + fair_busy[r if r >= 0 else i]
            for i, (a, r) in enumerate(
                zip(self.fabric.busy_s, self._same[: self._n_links], strict=True)
            )
        ]
        return busy, self.fabric.nbytes


def binding_links(
    capacity: Sequence[float], table: Sequence[tuple[Sequence[int], Sequence[float]]]
) -> list[int]:
    """For every resource (capacities ``capacity``, loaded by the flows of ``table``, each its
    resources and loads): itself if it can bind a max-min rate; else, if another resource used
    by exactly the same flows can never fill later, that one (whose busy time it shares); else
    -1 (it never binds, but its busy time is tracked on its own). Resource ``l`` never binds when
    some ``l'`` carries, flow by flow, at least ``l``'s load per capacity: ``l'`` fills no later,
    and when it fills every flow on ``l`` freezes, so dropping ``l`` changes no rate. (A DRAM
    channel class usually never binds: the mesh links to the channels fill first.)"""
    n = len(capacity)
    if n * max(1, len(table)) <= _SMALL and len(table) < 8:
        return _binding_links_small(capacity, table)
    v = _loads_per_capacity(capacity, table)
    used: np.ndarray = v > 0
    any_used: list[bool] = np.any(used, axis=1).tolist()
    order = np.argsort(-v.sum(axis=1), kind="stable").tolist()
    if n * v.size <= _DENSE:  # every pair of resources compared in one pass
        cover = _cover_table(v, used)
        flows_on = [row.tobytes() for row in used]  # equal when the same flows use them
        return _keep(
            n,
            order,
            any_used,
            lambda k, kept: [i for i in kept if cover[k][i]] if k in cover else [],
            lambda i, k: flows_on[i] == flows_on[k],
        )
    return _keep(
        n,
        order,
        any_used,
        lambda k, kept: [kept[i] for i in np.nonzero((v[kept] >= v[k]).all(axis=1))[0]],
        lambda i, k: bool((used[i] == used[k]).all()),
    )


#: tables of at most this many (resource, flow) cells, and fewer than 8 flows, take
#: :func:`binding_links` in plain Python (a GPU cluster's few aggregates, where numpy's
#: per-call cost dominates)
_SMALL = 64
#: tables of at most this many (resource, resource, flow) comparisons compare every pair of
#: resources in one pass (a wafer's stage aggregates); larger ones (``link`` mode's mesh
#: links) compare one resource with those kept, resource by resource
_DENSE = 1 << 18


def _cover_table(v: np.ndarray, used: np.ndarray) -> dict[int, list[bool]]:
    """For the resources that some other resource may cover (rows of the loads per capacity
    ``v``; ``used``: ``v > 0``), whether each resource carries at least its load per capacity
    of every flow. A resource that is the only one to load some flow is covered by none (the
    others carry 0 of that flow) and has no entry: on a wafer's stage aggregates, which each
    carry their own stage's tensor-parallel flow, that leaves the one or two aggregates of
    the DRAM reads to compare."""
    alone = used[:, used.sum(axis=0) == 1].any(axis=1)  # loads some flow no other loads
    maybe = np.flatnonzero(~alone)
    rows = (v[:, None, :] >= v[None, maybe, :]).all(axis=2).T.tolist()
    return dict(zip(maybe.tolist(), rows, strict=True))


def _loads_per_capacity(
    capacity: Sequence[float], table: Sequence[tuple[Sequence[int], Sequence[float]]]
) -> np.ndarray:
    """The (resources x flows) table of loads per capacity: each flow's loads on a resource
    added in the order listed (``bincount`` adds them one by one from zero, as a loop would),
    then divided by the resource's capacity."""
    n, m = len(capacity), max(1, len(table))
    cells = [r * m + j for j, (resources, _) in enumerate(table) for r in resources]
    loads = [a for _, flow_loads in table for a in flow_loads]
    counts = np.bincount(
        np.asarray(cells, dtype=np.int64),
        weights=np.asarray(loads, dtype=np.float64),
        minlength=n * m,
    )
    v: np.ndarray = counts.astype(np.float64, copy=False).reshape(n, m)  # (empty: integers)
    v /= np.asarray(capacity, dtype=np.float64)[:, None]
    return v


def _keep(
    n: int,
    order: Sequence[int],
    used: Sequence[bool],
    covering: Callable[[int, list[int]], list[int]],
    twins: Callable[[int, int], bool],
) -> list[int]:
    """:func:`binding_links`'s choice, the resources taken in ``order``: an unused one stays
    its own; one covered by resources kept before it (``covering(k, kept)``: those that carry
    at least ``k``'s load per capacity of every flow, in the order kept) maps to the first of
    them used by the same flows (``twins(i, k)``), else to -1; any other is kept."""
    same = list(range(n))
    kept: list[int] = []
    for k in order:
        if not used[k]:
            continue
        if kept:
            over = covering(k, kept)
            if over:
                alike = [i for i in over if twins(i, k)]
                same[k] = alike[0] if alike else -1
                continue
        kept.append(k)
    return same


def _binding_links_small(
    capacity: Sequence[float], table: Sequence[tuple[Sequence[int], Sequence[float]]]
) -> list[int]:
    """:func:`binding_links` on lists: the same loads per capacity (each added, then divided,
    as the array form does), rows ordered by their sums (added left to right, as numpy adds
    rows of fewer than 8 elements) descending, ties by index (the stable sort), and the same
    comparisons, element by element."""
    n, m = len(capacity), max(1, len(table))
    v = [[0.0] * m for _ in range(n)]
    for j, (resources, loads) in enumerate(table):
        for r, a in zip(resources, loads, strict=True):
            v[r][j] += a
    sums = []
    for r, row in enumerate(v):
        c = float(capacity[r])
        total = 0.0
        for j, x in enumerate(row):
            row[j] = x = x / c
            total += x
        sums.append(-total)
    used = [[x > 0 for x in row] for row in v]
    return _keep(
        n,
        sorted(range(n), key=sums.__getitem__),
        [any(row) for row in used],
        lambda k, kept: [i for i in kept if all(a >= b for a, b in zip(v[i], v[k], strict=True))],
        lambda i, k: used[i] == used[k],
    )


Net = ExclusiveNet | FairNet
