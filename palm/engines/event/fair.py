"""Flows that share links and DRAM channels max-min fairly (``communication.noc_model = "fair"``).

Every transfer in flight (a collective's ring steps on all replicas of a stage, a hand-off, a
stage's DRAM reads, ...) is a *flow*: it has bytes left to move and puts ``a_ir`` bytes on
resource ``r`` per byte it moves. While the set of flows stays the same, each moves at its
max-min fair rate under ``sum_i a_ir x_i <= c_r``, found by progressive filling (Bertsekas &
Gallager, *Data Networks*, sec. 6.5; :func:`palm.network.flows.max_min_rates` is the reference,
:func:`fair_rates` the same algorithm on the engine's few flows in plain Python, which is
faster than numpy at these sizes). Rates are recomputed only when a flow starts or ends, and one
timer is set for the next flow to finish (earlier timers become stale): every flow costs exactly
two timers and its end event, however many links and cores it spans. A flow's fixed latency
(route latency, DRAM response) is added when its bytes are through.

A flow alone moves at ``min_r c_r / a_ir``, so it takes exactly what the analytical engine
charges; ``k`` equal flows on one resource each take ``k`` times as long.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
import simpy

from palm.engines.event.shared import Arrival
from palm.network.flows import fill

__all__ = ["FairNetwork", "Route", "fair_rates"]

#: relative slack when deciding that a resource is full (rounding of the filling levels)
_TIGHT = 1e-12
#: groups of flows with more (flow, resource) loads than this are filled with numpy
_NUMPY_ABOVE = 400


class Route:
    """The resources a kind of flow loads and how much (bytes per byte moved), with the rate
    it gets alone. Built once per flow kind."""

    __slots__ = ("resources", "loads", "alone_Bps", "tracked", "arrays")

    def __init__(
        self,
        resources: Sequence[int],
        loads: Sequence[float],
        capacity: Sequence[float],
        passive: Sequence[int] = (),
    ) -> None:
        pairs = [(int(r), float(a)) for r, a in zip(resources, loads, strict=True) if a > 0]
        self.resources = tuple(r for r, _ in pairs)
        self.loads = tuple(a for _, a in pairs)
        self.alone_Bps = min((capacity[r] / a for r, a in pairs), default=float("inf"))
        #: resources whose busy time the flow counts: its own and ``passive`` ones, which it
        #: loads but which can never bind its rate
        self.tracked = self.resources + tuple(int(r) for r in passive)
        self.arrays = (np.asarray(self.resources, dtype=np.int64), np.asarray(self.loads))

    @property
    def empty(self) -> bool:
        return not self.resources


def fair_rates(routes: Sequence[Route], capacity: Sequence[float]) -> list[float]:
    """Max-min fair rates of flows on ``routes`` by progressive filling: every unfrozen flow
    sits at the same level; the resource that fills first (``level = room / weight``) freezes
    the flows that load it; repeat. Resources wait in a heap by the level at which they fill
    (entries made stale by a freeze are skipped), so a call costs ``O(loads log resources)``."""
    n = len(routes)
    rates = [float("inf")] * n  # flows without resources keep inf
    room: dict[int, float] = {}  # capacity not taken by frozen flows
    weight: dict[int, float] = {}  # load of one unit of level from the unfrozen flows
    unfrozen: dict[int, int] = {}
    on: dict[int, list[int]] = {}
    for i, route in enumerate(routes):
        for r, a in zip(route.resources, route.loads):  # noqa: B905 (equal by construction)
            if r in weight:
                weight[r] += a
                unfrozen[r] += 1
                on[r].append(i)
            else:
                room[r], weight[r], unfrozen[r], on[r] = capacity[r], a, 1, [i]
    # a freeze only raises the level at which another resource fills ((room - a L) /
    # (weight - a) >= L when room / weight >= L), so entries are refreshed lazily when popped
    heap = [(room[r] / w, r) for r, w in weight.items()]
    heapq.heapify(heap)
    frozen = [False] * n
    while heap:
        level, r = heapq.heappop(heap)
        if not unfrozen[r]:
            continue
        current = room[r] / weight[r]
        if current > level * (1.0 + _TIGHT):  # stale: a freeze took load off r
            heapq.heappush(heap, (current, r))
            continue
        for i in on[r]:
            if frozen[i]:
                continue
            frozen[i] = True
            rates[i] = level
            route = routes[i]
            for q, a in zip(route.resources, route.loads):  # noqa: B905
                room[q] -= a * level
                weight[q] -= a
                unfrozen[q] -= 1
    return rates


def _fill_arrays(routes: Sequence[Route], capacity: np.ndarray) -> list[float]:
    """:func:`fair_rates` through numpy (:func:`palm.network.flows.fill`), for groups of flows
    spanning many resources (``link`` mode), where it is the faster of the two."""
    ids = np.concatenate([r.arrays[0] for r in routes])
    used, column = np.unique(ids, return_inverse=True)
    rows = np.repeat(np.arange(len(routes)), [len(r.resources) for r in routes])
    matrix = np.zeros((len(routes), len(used)))
    np.add.at(matrix, (rows, column), np.concatenate([r.arrays[1] for r in routes]))
    return [float(x) for x in fill(matrix, capacity[used])]


class _Flow:
    __slots__ = ("route", "remaining", "latency", "done", "rate")

    def __init__(self, route: Route, nbytes: float, latency: float, done: Arrival) -> None:
        self.route = route
        self.remaining = nbytes
        self.latency = latency
        self.done = done
        self.rate = 0.0


class FairNetwork:
    """The resources of a simulation (capacities in bytes/s) and the flows in flight.

    ``busy_s`` (seconds with at least one flow on the resource) and ``nbytes`` (bytes the
    resource carried: load times bytes of every flow started on it) record utilisation."""

    def __init__(self, env: simpy.Environment, capacity_Bps: Sequence[float]) -> None:
        self.env = env
        self.capacity = [float(c) for c in capacity_Bps]
        self._capacity_array = np.asarray(self.capacity)
        n = len(self.capacity)
        self.busy_s = [0.0] * n
        self.nbytes = [0.0] * n
        self._since = [0.0] * n
        self._users = [0] * n
        self._on: list[dict[_Flow, None]] = [{} for _ in range(n)]  # ordered sets of flows
        self._active: list[_Flow] = []
        self._last = 0.0
        self._version = 0
        self.recomputes = 0

    def route(
        self, resources: Sequence[int], loads: Sequence[float], *, passive: Sequence[int] = ()
    ) -> Route:
        return Route(resources, loads, self.capacity, passive)

    def start(self, route: Route, nbytes: float, *, latency_s: float, done: Arrival) -> None:
        """Start moving ``nbytes`` over ``route``; ``done`` fires ``latency_s`` after the last
        byte (for an empty route: at once, after the latency)."""
        if nbytes <= 0 or route.empty:
            done.succeed_in(latency_s)
            return
        self._advance()
        flow = _Flow(route, nbytes, latency_s, done)
        self._active.append(flow)
        now = self._last
        users, carried, on, since = self._users, self.nbytes, self._on, self._since
        for r, a in zip(route.resources, route.loads):  # noqa: B905 (equal by construction)
            carried[r] += a * nbytes
            on[r][flow] = None
        for r in route.tracked:
            if not users[r]:
                since[r] = now
            users[r] += 1
        self._reschedule(route.resources)

    def transfer(self, route: Route, duration_s: float, *, done: Arrival) -> None:
        """A flow that takes ``duration_s`` alone (the plan's time of a collective or hand-off,
        latencies included): ``duration x`` its lone rate in bytes; ``done`` fires at its end."""
        if route.empty:
            done.succeed_in(max(duration_s, 0.0))
            return
        self.start(route, duration_s * route.alone_Bps, latency_s=0.0, done=done)

    def _advance(self) -> None:
        now = float(self.env.now)
        dt = now - self._last
        if dt > 0:
            for f in self._active:
                f.remaining -= f.rate * dt
        self._last = now

    def _connected(self, seeds: Sequence[int]) -> list[_Flow]:
        """The flows in flight that share resources, directly or through other flows, with
        ``seeds``: the only ones whose rates a start or an end there can change."""
        on = self._on
        seen: set[int] = set()
        found: dict[_Flow, None] = {}
        stack = list(seeds)
        while stack:
            r = stack.pop()
            if r in seen:
                continue
            seen.add(r)
            for f in on[r]:
                if f not in found:
                    found[f] = None
                    stack.extend(f.route.resources)
        return list(found)

    def _reschedule(self, changed: Sequence[int]) -> None:
        """New rates for the flows connected to the resources that ``changed``, and one timer
        for the first flow in flight to finish."""
        self.recomputes += 1
        # finding the connected flows pays when routes are short (group mode); with routes of
        # hundreds of links (link mode) recomputing every flow in flight is cheaper
        group = self._connected(changed) if len(changed) <= 16 else list(self._active)
        if len(group) == 1:
            group[0].rate = group[0].route.alone_Bps
        elif group:
            routes = [f.route for f in group]
            if sum(len(r.resources) for r in routes) > _NUMPY_ABOVE:
                rates = _fill_arrays(routes, self._capacity_array)
            else:
                rates = fair_rates(routes, self.capacity)
            for f, rate in zip(group, rates):  # noqa: B905 (equal by construction)
                f.rate = rate
        flows = self._active
        self._version += 1
        version = self._version
        dt = min(f.remaining / f.rate for f in flows)
        timer = self.env.timeout(dt if dt > 0 else 0.0)
        timer.callbacks.append(lambda _e: self._finish(version))

    def _finish(self, version: int) -> None:
        if version != self._version:
            return  # superseded by a later start or finish
        self._advance()
        # the flow this timer was set for (ties: the earliest started); one flow per timer, so
        # that every flow costs exactly two timers however flows overlap (rounding may leave it
        # a sliver of bytes, which is why it is not found by remaining <= 0)
        f = min(self._active, key=lambda x: x.remaining / x.rate)
        self._active.remove(f)
        now, users, on = self._last, self._users, self._on
        for r in f.route.resources:
            del on[r][f]
        for r in f.route.tracked:
            users[r] -= 1
            if not users[r]:
                self.busy_s[r] += now - self._since[r]
        f.done.succeed_in(f.latency)
        if self._active:
            self._reschedule(f.route.resources)
        else:  # keep two timers per flow, so the event count never depends on overlaps
            self.env.timeout(0.0)
