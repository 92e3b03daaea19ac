"""Flow classes of the ``fair`` network: the flows in flight that share one full resource and
all move at the lowest rate in flight, updated together (:class:`_Class`), and the steps that
form, advance and dissolve one on a :class:`~palm.engines.event.fair.FairNetwork`.

Part of the ``fair`` network (:mod:`palm.engines.event.fair`), compiled with it as one unit.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from palm.engines.event.filling import _INF, _OVER, _SLACK, _TIGHT, Route
from palm.engines.event.shared import Arrival

if TYPE_CHECKING:
    from palm.engines.event.fair import FairNetwork

__all__: list[str] = []

#: fewest flows on the first bottleneck for them to be kept as a :class:`_Class` (and at
#: least as many as the other flows in flight)
_CLASS_MIN = 4
#: a class's loads are summed afresh and its service counted from zero every this many joins
_REBASE = 256


#: a flow in flight is kept on its done event (:class:`~palm.engines.event.shared.Arrival`,
#: whose slots hold it): ``remaining`` bytes at time ``t0``, moving at ``rate`` since then,
#: so through at ``end``; its ``route``, start rank ``seq`` (on equal ends, the flow started
#: first ends first), ``latency`` after its last byte and, in a :class:`_Class`, ``finish``
#: (the class's service counter when its bytes are through)
_Flow = Arrival


class _Class:
    """The flows in flight that share one full resource ``bottleneck`` and all move at the
    lowest rate in flight, ``level`` (= capacity / ``weight[bottleneck]``): the first
    bottleneck of progressive filling, whose flows it freezes in its first round. On the
    wafer every stage's DRAM reads share the channels' resource and mostly form one.

    While the flows on the bottleneck stay the slowest, a start or an end there changes the
    class's level only, and the other flows in flight (the *rest*) get the max-min fair
    rates of what the class leaves of each resource (progressive filling continued past the
    class's level, Bertsekas & Gallager sec. 6.5.2). So a change costs the rest's filling
    and a pass over the resources the class loads, not a filling and an update per flow:

    * ``weight[r]``: the load of the class on resource ``r`` per unit of level, kept as flows
      join and leave (not summed anew, so rates may differ from a full filling's in the last
      bits);
    * ``service``: bytes each class flow has moved since the class was formed, at
      ``service_t`` (the virtual time of generalized processor sharing: Parekh & Gallager,
      IEEE/ACM Trans. Networking 1(3), 1993):
      a flow that joins with ``b`` bytes to move is through when the counter reaches its
      ``finish = service + b``; the class's flows end in the order of ``finish``, kept in a
      heap, and a change of level costs one update of the counter, not one per flow.
    """

    __slots__ = (
        "bottleneck",
        "level",
        "weight",
        "members",
        "heap",
        "service",
        "service_t",
        "rest",
        "touched",
        "seen",
        "bound",
        "updates",
    )

    def __init__(self, bottleneck: int, level: float, now: float) -> None:
        self.bottleneck = bottleneck
        self.level = level
        self.weight: dict[int, float] = {}
        self.members: dict[_Flow, None] = {}
        self.heap: list[tuple[float, int, _Flow]] = []
        self.service = 0.0
        self.service_t = now
        self.rest: dict[_Flow, None] = {}  # the other flows in flight, in start order
        self.touched: set[int] = set()  # resources loaded by any flow while the class lived
        self.seen: set[Route] = set()  # the routes of those flows (their resources touched)
        self.bound = 0.0  # see tighten
        self.updates = 0

    def tighten(self, capacity: Sequence[float]) -> float:
        """``bound``: the least level at which a resource other than the bottleneck fills
        under the class's flows alone (up to the rounding slack)."""
        bound = _INF
        for q, w in self.weight.items():
            if w > 0.0 and q != self.bottleneck and capacity[q] * _OVER < bound * w:
                bound = capacity[q] * _OVER / w
        self.bound = bound
        return bound

    def rebase(self, capacity: Sequence[float]) -> None:
        """Sum the class's loads afresh and count service from zero again, so that neither
        the rounding of many joins and leaves nor a large counter builds up (every
        ``_REBASE`` joins)."""
        weight: dict[int, float] = {}
        for f in self.members:
            for q, a in f.route.pairs:
                weight[q] = weight.get(q, 0.0) + a
        self.weight = weight
        served = self.service
        heap = []
        for f in self.members:
            f.finish -= served
            heap.append((f.finish, f.seq, f))
        heapq.heapify(heap)
        self.heap, self.service = heap, 0.0
        self.tighten(capacity)

    def served(self, now: float) -> float:
        """The service counter at ``now`` (bytes each class flow moved since the start)."""
        return self.service + self.level * (now - self.service_t)

    def join(self, f: _Flow, now: float) -> None:
        """``f``, with ``f.remaining`` bytes left at ``now``, joins."""
        f.finish = self.served(now) + f.remaining
        heapq.heappush(self.heap, (f.finish, f.seq, f))
        self.members[f] = None

    def admit(self, f: _Flow, now: float, capacity: list[float]) -> None:
        """:meth:`join` for a flow that starts while the class lives, counted: every
        ``_REBASE`` of them the class is summed afresh (:meth:`rebase`)."""
        self.join(f, now)
        self.updates += 1
        if self.updates % _REBASE == 0:
            self.rebase(capacity)

    def move_to(self, now: float, level: float) -> None:
        """The class moves at ``level`` from ``now`` on (its service counted up to now)."""
        if level != self.level:
            self.service = self.served(now)
            self.service_t, self.level = now, level

    def see(self, route: Route) -> None:
        """A flow on ``route`` is in flight while the class lives: its resources are
        touched (a dissolution resets them)."""
        if route not in self.seen:
            self.seen.add(route)
            self.touched.update(route.resources)

    def add_load(self, route: Route, capacity: list[float]) -> float:
        """A flow on ``route`` joins the class's load: ``bound`` lowered to the level at
        which another resource fills under the new load (:meth:`tighten`'s, kept as flows
        join), and the class's new level on its bottleneck returned."""
        weight, bottleneck, bound = self.weight, self.bottleneck, self.bound
        for q, a in route.pairs:
            w = weight[q] = weight.get(q, 0.0) + a
            if q != bottleneck and capacity[q] * _OVER < bound * w:
                bound = capacity[q] * _OVER / w
        self.bound = bound
        return capacity[bottleneck] / weight[bottleneck]


def _tops(flows: dict[_Flow, None], new: _Flow, rate: float) -> bool:
    """No flow of ``flows`` but ``new`` is faster than ``rate`` (up to rounding)."""
    top = rate * (1.0 + _TIGHT)
    return all(g.rate <= top for g in flows if g is not new)


def _share(route: Route, capacity: Sequence[float], taken: dict[int, float], level: float) -> float:
    """The rate of a flow on ``route`` that shares no resource with another flow but a
    :class:`_Class`'s at ``level`` (which take ``taken[r] x level`` of resource ``r``): the
    least room over load of its resources, as its progressive filling finds it, bit for bit."""
    rate = _INF
    for q, a in route.pairs:
        share = (capacity[q] - taken.get(q, 0.0) * level) / a
        if share < rate:
            rate = share
    return rate


def _apart(routes: Sequence[Route]) -> bool:
    """No resource is loaded twice by ``routes`` (by two of them, or twice by one)."""
    seen: set[int] = set()
    loads = 0
    for route in routes:
        seen.update(route.resources)
        loads += len(route.resources)
    return len(seen) == loads


def _slower(flows: dict[_Flow, None], leaving: _Flow, rate: float) -> bool:
    """Every flow of ``flows`` but ``leaving`` is clearly slower than ``rate``."""
    below = rate * (1.0 - _SLACK)
    return all(g.rate < below for g in flows if g is not leaving)


_END = attrgetter("end")
_ORDER = attrgetter("route.order")  # a flow's order in fillings: its route's rank
_SEQ = attrgetter("seq")
_ROUTE = attrgetter("route")


def _connected(net: FairNetwork, seeds: Sequence[int]) -> list[_Flow]:
    """The flows in flight that share resources, directly or through other flows, with
    ``seeds``: the only ones whose rates a start or an end there can change."""
    on = net._on
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


def _form_class(net: FairNetwork, group: list[_Flow], rates: list[float], now: float) -> None:
    """Keep the flows on a full resource as a :class:`_Class` if they all move at the
    lowest rate of ``group`` (every flow in flight, just refilled): that resource is
    then a bottleneck of the filling's first round, which froze all its flows. (While
    the class lives, ``_used`` is not kept; :meth:`_dissolve` sets
    them again.)"""
    lowest = min(rates)
    on, used, capacity = net._on, net._used, net.capacity
    for r in group[rates.index(lowest)].route.resources:
        flows = on[r]
        if (
            len(flows) >= _CLASS_MIN
            and 2 * len(flows) >= len(group)  # the class is at least half of the flows
            and used[r] >= capacity[r] * (1.0 - _SLACK)
            and all(g.rate == lowest for g in flows)
        ):
            break
    else:
        return
    c = net._cls = _Class(r, lowest, now)
    weight, touched = c.weight, c.touched
    seen = c.seen
    for g in group:
        if g.route not in seen:
            seen.add(g.route)
            touched.update(g.route.resources)
        if g in flows:
            g.remaining -= g.rate * (now - g.t0)  # bytes left now
            g.t0 = now
            c.join(g, now)
            for q, a in g.route.pairs:
                weight[q] = weight.get(q, 0.0) + a
        else:
            c.rest[g] = None
    c.tighten(net.capacity)
    _class_next(net)


def _class_next(net: FairNetwork) -> None:
    """``next_end`` while a class lives: its first flow through, or a rest flow's end
    (ties: the earliest started)."""
    c = net._cls
    assert c is not None
    finish, seq, first = c.heap[0]
    end = first.end = c.service_t + (finish - c.service) / c.level
    for g in c.rest:
        e = g.end
        if e <= end and (e < end or g.seq < seq):
            first, end, seq = g, e, g.seq
    net.next_end, net._first = end, first


def _dissolve(net: FairNetwork, now: float, started: _Flow | None = None) -> None:
    """End the class: its flows get their bytes left, rate and end as flows of their own,
    and the use of every resource it touched is left for a full filling to set. The flows
    in flight are the class's members and rest, and ``started``, the flow starting."""
    c = net._cls
    assert c is not None
    net._cls = None
    served, level = c.served(now), c.level
    for f in c.members:
        f.remaining = f.finish - served
        f.t0, f.rate = now, level
        f.end = now + f.remaining / level
    used = net._used
    for r in c.touched:
        used[r] = 0.0
    # the flows on each resource, in start order, as begin and _fire keep them (every
    # flow in flight loads only resources the class touched, but one that starts with
    # too many in flight, whose resources carry no other flow)
    flows = dict.fromkeys(c.members)
    flows.update(dict.fromkeys(c.rest))
    if started is not None:
        flows[started] = None
    net._active = active = dict.fromkeys(sorted(flows, key=_SEQ))  # in start order
    on = net._on
    for r in c.touched:
        on[r] = {}
    for f in active:
        for r in f.route.resources:
            on[r][f] = None
