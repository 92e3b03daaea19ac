"""Flows that share links and DRAM channels max-min fairly (``communication.noc_model = "fair"``).

Every transfer in flight (a collective's ring steps on all replicas of a stage, a hand-off, a
stage's DRAM reads, ...) is a *flow*: it has bytes left to move and puts ``a_ir`` bytes on
resource ``r`` per byte it moves. While the set of flows stays the same, each moves at its
max-min fair rate under ``sum_i a_ir x_i <= c_r``, found by progressive filling (Bertsekas &
Gallager, *Data Networks*, sec. 6.5; :func:`palm.network.flows.max_min_rates` is the reference,
:func:`fair_rates` the same algorithm on the engine's few flows in plain Python, which is
faster than numpy at these sizes). Rates are recomputed only when a flow starts or ends on a
resource whose flows it can change, and a flow's bytes left only when its rate changes. The
flows' ends wait in a heap of the network's own, which the simulation clock
(:class:`FlowEnvironment`) reads beside SimPy's queue: every flow costs exactly one end event,
however many links and cores it spans and however flows overlap. A flow's fixed latency (route
latency, DRAM response) is added when its bytes are through.

A flow alone moves at ``min_r c_r / a_ir``, so it takes exactly what the analytical engine
charges; ``k`` equal flows on one resource each take ``k`` times as long.

When the flows on one full resource all move at the lowest rate in flight (on the wafer, every
stage's DRAM reads on the channels), they are kept as a *class* (:class:`_Class`): a start or
an end among them changes the class's level (capacity over the class's load there) and the
rates of the few other flows, filled on what the class leaves, instead of a filling and a
bytes-left update of every flow; the class's flows share one service counter (generalized
processor sharing's virtual time) and end in the order of the counter value at which their
bytes are through. A change that would make another resource bind the class, or leave a flow
slower than the class, ends the class, and a full filling takes over. The rates are those of
a full filling, up to rounding (the class's load is kept as flows join and leave, not summed
anew).

The network is four modules, compiled together as one unit with the C types of ``fair.pxd``
(setup.py; :mod:`palm.engines.event.builds` lists the parts): :mod:`~.filling` (progressive
filling and routes), :mod:`~.flowclass` (the classes), :mod:`~.clock` (the event loop) and
this one (the flows in flight).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import numpy as np
import simpy

from palm.engines.event.clock import _NORMAL, STALL_LIMIT, FlowEnvironment
from palm.engines.event.filling import (
    _INF,
    _NUMPY_ABOVE,
    _RESOURCES,
    _SLACK,
    _TIGHT,
    Route,
    _fill_arrays,
    _Filler,
    fair_rates,
)
from palm.engines.event.flowclass import (
    _CLASS_MIN,
    _END,
    _ORDER,
    _ROUTE,
    _SEQ,
    _apart,
    _Class,
    _class_next,
    _connected,
    _dissolve,
    _Flow,
    _form_class,
    _share,
    _slower,
    _tops,
)
from palm.engines.event.shared import Arrival

__all__ = ["FairNetwork", "FlowEnvironment", "Route", "STALL_LIMIT", "fair_rates"]

#: with at most this many flows in flight, a change recomputes them all
_ALL_BELOW = 32
#: answers of progressive filling kept for reuse (the memo is cleared when full)
_MEMO_SIZE = 65536


class FairNetwork:
    """The resources of a simulation (capacities in bytes/s) and the flows in flight, on a
    :class:`FlowEnvironment`.

    Each flow moves at its max-min fair rate; rates are recomputed only when a flow starts on a
    resource that has no room for it at its lone rate, or ends on a full resource it shares,
    and a flow's bytes left are brought up to date only when its rate changes (``remaining -
    rate x elapsed``), so a flow whose rate never changes ends at exactly ``start + bytes /
    rate``. The first flow to end is the one with the earliest end (ties: the earliest
    started).

    ``busy_s`` (seconds with at least one flow on the resource) and ``nbytes`` (bytes the
    resource carried: load times bytes of every flow started on it; zero unless
    ``count_bytes``) record utilisation."""

    def __init__(
        self,
        env: simpy.Environment,
        capacity_Bps: Sequence[float],
        *,
        count_bytes: bool = True,
        filled: dict[tuple[Route, ...], tuple[list[float], dict[int, float]]] | None = None,
    ) -> None:
        if not isinstance(env, FlowEnvironment):
            raise TypeError("FairNetwork runs on a FlowEnvironment (its clock drives flow ends)")
        self.env = env
        env.network = self
        self.capacity = [float(c) for c in capacity_Bps]
        self._capacity_array = np.asarray(self.capacity)
        n = len(self.capacity)
        self.busy_s = [0.0] * n
        self.nbytes = [0.0] * n
        self._count_bytes = count_bytes
        self._since = [0.0] * n
        self._users = [0] * n
        # sum of load x rate of the flows in flight, by resource (a dict, so that a recompute
        # sets the resources it filled in one update)
        self._used: dict[int, float] = dict.fromkeys(range(n), 0.0)
        self._on: list[dict[_Flow, None]] = [{} for _ in range(n)]  # ordered sets of flows
        self._active: dict[_Flow, None] = {}  # in start order
        #: when the next flow ends (inf: none in flight), and which; read by the clock
        self.next_end = _INF
        #: the done event of a flow that just ended without latency, and its event number,
        #: for the clock to queue or run (:meth:`FlowEnvironment.run`)
        self.ready: Arrival | None = None
        self.ready_eid = 0
        self._first: _Flow | None = None
        self._started = itertools.count()
        self._refills = 0  # full fillings (_reschedule)
        self._class_misses = 0  # a class's updates given up for a dissolution and a refill
        # progressive filling's answers by the routes in flight, in order: a pipeline's steady
        # state brings the same sets of flows back again and again. ``filled``: a memo kept
        # by the caller, shared by networks of the same capacities whose flows take the same
        # Route objects (the runs of one plan: a filling depends on its routes and the
        # capacities alone, so a shared memo changes no rate)
        self._filled: dict[tuple[Route, ...], tuple[list[float], dict[int, float]]] = (
            {} if filled is None else filled
        )
        self._filler = _Filler(self.capacity)
        #: the flows frozen at the first bottleneck, while they stay the slowest (else None)
        self._cls: _Class | None = None
        #: recomputations done as a class's update (without a full filling)
        self.class_updates = 0

    @property
    def recomputes(self) -> int:
        """Recomputations of rates: full fillings, and updates of a class, carried
        (``class_updates``) or given up (the class dissolved and a full filling followed)."""
        return self._refills + self.class_updates + self._class_misses

    def route(
        self, resources: Sequence[int], loads: Sequence[float], *, passive: Sequence[int] = ()
    ) -> Route:
        return Route(resources, loads, self.capacity, passive)

    def start(self, route: Route, nbytes: float, *, latency_s: float, done: Arrival) -> None:
        """Start moving ``nbytes`` over ``route``; ``done`` fires ``latency_s`` after the last
        byte (for an empty route: at once, after the latency). ``done`` is this flow's alone:
        the flow in flight is kept on it (:data:`_Flow`)."""
        self.begin(route, nbytes, latency_s, done)

    def begin(self, route: Route, nbytes: float, latency_s: float, done: Arrival) -> None:
        """:meth:`start` with positional arguments (the engine's hot path)."""
        if nbytes <= 0 or not route.pairs:
            done.succeed_in(latency_s)
            return
        now = self.env._now  # noqa: SLF001 - the clock, without the property's call
        # the flow is kept on its done event (``finish`` is set when it joins a class, the
        # only time it is read)
        flow = done
        flow.route, flow.seq, flow.remaining, flow.t0 = route, next(self._started), nbytes, now
        flow.rate, flow.end, flow.latency = 0.0, _INF, latency_s
        c = self._cls
        if c is not None:  # a class lives: the class's update
            self._count_start(route, nbytes, now)
            self._begin_in_class(c, flow, route, now)
            return
        self._active[flow] = None
        on, used, capacity, alone = self._on, self._used, self.capacity, route.alone_Bps
        # the rate it gets from the room the flows in flight leave, and the resource that
        # holds it there (None: none, it runs at its lone rate)
        rate, tight, room = alone, None, True
        for r, a in route.pairs:
            on[r][flow] = None
            left = capacity[r] - used[r]
            if left < a * rate:
                if left <= capacity[r] * _SLACK:
                    room = False  # a full resource: someone has to make room
                elif left < a * alone * (1.0 - _TIGHT):
                    rate, tight = left / a, r
        self._count_start(route, nbytes, now)
        if room and (tight is None or _tops(on[tight], flow, rate)):
            # every flow in flight keeps its bottleneck (none is on a resource of the new flow,
            # which were not full), and the new one gets one: the resource it fills, on which
            # no flow is faster (or it runs alone); that is the max-min fair allocation, so
            # no filling is needed (Bertsekas & Gallager, sec. 6.5.2)
            for r, a in route.pairs:
                used[r] += a * rate
            flow.rate = rate
            flow.end = end = now + nbytes / rate
            if end < self.next_end:  # on a tie the flow started earlier ends first
                self.next_end, self._first = end, flow
        else:
            self._reschedule(route.resources, now)

    def _count_start(self, route: Route, nbytes: float, now: float) -> None:
        """Utilisation of a flow of ``nbytes`` starting on ``route`` at ``now``: the bytes
        its resources carry (with ``count_bytes``), and the busy time of those it tracks
        from their first user."""
        if self._count_bytes:
            carried = self.nbytes
            for r, a in route.pairs:
                carried[r] += a * nbytes
        users, since = self._users, self._since
        for r in route.tracked:
            if not users[r]:
                since[r] = now
            users[r] += 1

    def _begin_in_class(self, c: _Class, flow: _Flow, route: Route, now: float) -> None:
        """:meth:`begin` while class ``c`` lives: the class's update, or its dissolution and
        a full filling. (Neither ``_active`` nor ``_on`` is kept while a class lives, whose
        members and rest are the flows in flight: :func:`_dissolve` sets them again.)"""
        if len(c.members) + len(c.rest) >= _ALL_BELOW:  # with flow, more in flight
            _dissolve(self, now, flow)
            self._reschedule(route.resources, now, whole=True)
            return
        member = c.bottleneck in route.resources
        if member and not c.rest:
            # _class_change for a flow that joins the class, no flow beside it (a stage's
            # reads among the others')
            c.see(route)
            capacity = self.capacity
            level = c.add_load(route, capacity)
            if level <= c.bound or level <= c.tighten(capacity):
                self.class_updates += 1
                c.move_to(now, level)
                c.admit(flow, now, capacity)
                _class_next(self)
                return
        elif not c.rest:
            # _class_change's first case (a flow beside the class, no other: a hand-off
            # beside the reads): it takes what the class leaves
            c.see(route)
            level = c.level
            rate = _share(route, self.capacity, c.weight, level)
            if rate >= level * (1.0 - _TIGHT):  # else it binds the class: dissolve
                c.rest[flow] = None
                self.class_updates += 1
                flow.rate = rate
                flow.end = end = now + flow.remaining / rate
                if end < self.next_end:  # on a tie, the class's flow started earlier
                    self.next_end, self._first = end, flow
                return
        elif self._class_change(flow, now, started=True):
            return
        self._class_misses += 1
        _dissolve(self, now, flow)
        self._reschedule(route.resources, now, whole=True)

    def rates(self) -> dict[_Flow, float]:
        """The rate (bytes/s) of every flow in flight, in start order."""
        c = self._cls
        if c is None:
            return {f: f.rate for f in self._active}
        flows = sorted([*c.members, *c.rest], key=_SEQ)  # in flight, in start order
        return {f: c.level if f in c.members else f.rate for f in flows}

    def _next(self) -> None:
        """``next_end``: the earliest end of the flows in flight (ties: the earliest started)."""
        if self._active:
            first = self._first = min(self._active, key=_END)
            self.next_end = first.end
        else:
            self.next_end, self._first = _INF, None

    def transfer(self, route: Route, duration_s: float, *, done: Arrival) -> None:
        """A flow that takes ``duration_s`` alone (the plan's time of a collective or hand-off,
        latencies included): ``duration x`` its lone rate in bytes; ``done`` fires at its end."""
        if route.empty:
            done.succeed_in(max(duration_s, 0.0))
            return
        self.start(route, duration_s * route.alone_Bps, latency_s=0.0, done=done)

    def _reschedule(self, changed: Sequence[int], now: float, *, whole: bool = False) -> None:
        """New rates for the flows connected to the resources that ``changed`` (every flow
        in flight if ``whole``), and the next flow end (``next_end``)."""
        self._refills += 1
        active = self._active
        # with few flows in flight (group mode) or routes of hundreds of links (link mode),
        # recomputing every flow in flight is cheaper than finding the connected ones; the
        # others' rates come out the same (max-min fairness splits over connected groups)
        whole = whole or len(active) <= _ALL_BELOW or len(changed) > 16
        if whole:  # by route (ties: start order), the memo's key
            group = sorted(active, key=_ORDER)
        else:
            group = _connected(self, changed)
            group.sort(key=_ORDER)
        routes = tuple(map(_ROUTE, group))
        filled = self._filled.get(routes)
        if filled is None:
            filled = self._fill(routes)
        rates, used = filled
        # the earliest end among the group (ties: the earliest started), found on the way when
        # the group is every flow in flight
        first: _Flow | None = None
        first_end, first_seq = _INF, 0
        for f, rate in zip(group, rates):  # noqa: B905 (equal by construction)
            old = f.rate
            if rate != old:
                if old:  # 0 for the flow being started
                    f.remaining -= old * (now - f.t0)
                    f.t0 = now
                f.rate = rate
                f.end = end = now + f.remaining / rate
            else:
                end = f.end
            if end <= first_end and (end < first_end or f.seq < first_seq):
                first, first_end, first_seq = f, end, f.seq
        # the group holds every flow on its resources: what they use is what is not left
        self._used.update(used)
        if whole:
            self.next_end, self._first = first_end, first
            if _CLASS_MIN <= len(group) <= _ALL_BELOW:
                _form_class(self, group, rates, now)
        else:
            self._next()

    def _class_change(self, flow: _Flow, now: float, *, started: bool) -> bool:
        """``flow`` started (``started``) or ended while a class lives: the class's new level
        and the rest's rates, when the class's flows are still the slowest and their
        bottleneck still full; else False, and the caller dissolves the class (whose level
        and counter this leaves as they were). A flow that starts off the class's bottleneck
        with no other flow beside the class is :meth:`begin`'s own case, not this one's."""
        c = self._cls
        assert c is not None
        route, weight, capacity = flow.route, c.weight, self.capacity
        joins = False
        level, bottleneck = c.level, c.bottleneck
        if started:
            c.see(route)
            member = bottleneck in route.resources
            if member:
                joins = True
                level = c.add_load(route, capacity)
            else:
                c.rest[flow] = None
        elif flow in c.members:
            assert c.heap[0][2] is flow  # the class's first through (_class_next)
            heapq.heappop(c.heap)
            del c.members[flow]
            if not c.members:
                return False
            for q, a in route.pairs:
                weight[q] -= a
            level = capacity[bottleneck] / weight[bottleneck]
        else:
            del c.rest[flow]
        if len(c.members) < len(c.rest):
            # an update refills the rest: with more flows there than in the class, a full
            # filling (memoised) costs less
            return False
        # does the class still fit at its level on every resource it loads (its bottleneck
        # fills exactly)? ``c.bound`` is at most the least level at which another resource
        # fills under the class alone: lowered as flows join, recomputed only when a level
        # above it is asked for
        if level > c.bound and level > c.tighten(capacity):
            return False
        # ... and the rest, filled on what it leaves, is no slower: the class's bottleneck
        # fills first, so the class's flows freeze in the first round, at ``level``
        rest = c.rest
        if len(rest) == 1:  # the usual case: progressive filling of one flow
            (g,) = rest
            rate = _share(g.route, capacity, weight, level)
            rates = [rate]
            if rate < level * (1.0 - _TIGHT):
                return False
        elif rest:
            routes = [g.route for g in rest]
            if _apart(routes):  # each flow's filling is its own
                rates = [_share(route, capacity, weight, level) for route in routes]
            else:
                rates = self._filler.fill(routes, weight, level)
            if min(rates) < level * (1.0 - _TIGHT):
                return False
        self.class_updates += 1
        c.move_to(now, level)
        if joins:
            c.admit(flow, now, capacity)
        if rest:
            for g, rate in zip(rest, rates):  # noqa: B905 (equal by construction)
                old = g.rate
                if rate != old:
                    if old:  # 0 for the flow being started
                        g.remaining -= old * (now - g.t0)
                        g.t0 = now
                    g.rate = rate
                    g.end = now + g.remaining / rate
        _class_next(self)  # the class's first through, or a rest flow's end
        return True

    def _fill(self, routes: tuple[Route, ...]) -> tuple[list[float], dict[int, float]]:
        """Rates of flows on ``routes`` and the capacity they use on each resource, memoised."""
        capacity = self.capacity
        if len(routes) > 1 and sum(map(len, map(_RESOURCES, routes))) <= _NUMPY_ABOVE:
            rates = self._filler.fill(routes)
            used = self._filler.used()
        else:
            if len(routes) == 1:
                route = routes[0]
                rates = [route.alone_Bps]
                room = {r: capacity[r] - a * route.alone_Bps for r, a in route.pairs}
            else:
                rates = _fill_arrays(routes, self._capacity_array)
                room = {}
                for route, rate in zip(routes, rates):  # noqa: B905 (equal by construction)
                    for r, a in route.pairs:
                        room[r] = room.get(r, capacity[r]) - a * rate
            used = {r: capacity[r] - left for r, left in room.items()}
        if len(self._filled) >= _MEMO_SIZE:
            self._filled.clear()
        self._filled[routes] = (rates, used)
        return rates, used

    def _fire(self) -> None:
        """The first flow to end is through (the clock is at its end)."""
        if self._cls is not None:
            self._fire_in_class()
            return
        f = self._first
        assert f is not None
        del self._active[f]
        now, users, on, used, capacity = (
            self.env._now,  # noqa: SLF001
            self._users,
            self._on,
            self._used,
            self.capacity,
        )
        # if on every resource it leaves it was alone, or there was room, or every other flow
        # was slower (so held by a bottleneck elsewhere), no other flow was held back by it,
        # so no rate changes
        alone = True
        rate = f.rate
        route = f.route
        if self._active:
            for r, a in route.pairs:
                if (
                    alone
                    and len(on[r]) > 1
                    and used[r] >= capacity[r] * (1.0 - _SLACK)
                    and not _slower(on[r], f, rate)
                ):
                    alone = False
                used[r] -= a * rate
                del on[r][f]
        else:  # the last flow in flight: nobody's rate to change
            for r, a in route.pairs:
                used[r] -= a * rate
                del on[r][f]
        f.rate = 0.0
        for r in route.tracked:
            users[r] -= 1
            if not users[r]:
                self.busy_s[r] += now - self._since[r]
        active = self._active
        if not active:
            self.next_end, self._first = _INF, None
        elif alone:  # _next, inline
            first = self._first = min(active, key=_END)
            self.next_end = first.end
        else:
            self._reschedule(route.resources, now)
        self._through(f, now)

    def _through(self, f: _Flow, now: float) -> None:
        """Flow ``f``'s bytes are through at ``now``: its done event (the flow itself)
        succeeds after its latency (``Arrival.succeed_in``'s fields and delayed schedule);
        without latency the clock pushes it, or runs it at once if it comes next (``ready``)."""
        f._ok, f._value = True, None  # noqa: SLF001
        env = self.env
        if f.latency:
            heapq.heappush(env._queue, (now + f.latency, _NORMAL, next(env._eid), f))  # noqa: SLF001
        else:
            self.ready, self.ready_eid = f, next(env._eid)  # noqa: SLF001

    def _fire_in_class(self) -> None:
        """:meth:`_fire` while a class lives (the clock calls it directly then)."""
        f = self._first
        assert f is not None
        now = self.env._now  # noqa: SLF001
        # (neither ``_active`` nor ``_on`` is kept while a class lives: :meth:`_dissolve`
        # sets them again, without ``f``, which has left the class's members or rest then)
        route, users = f.route, self._users
        f.rate = 0.0
        for r in route.tracked:
            users[r] -= 1
            if not users[r]:
                self.busy_s[r] += now - self._since[r]
        c = self._cls
        assert c is not None
        rest = c.rest
        if f in rest and len(rest) == 1 and c.members and c.level <= c.bound:
            # _class_change for the end of the only flow beside the class (a hand-off):
            # nothing else changes, the next end is the class's first through
            del rest[f]
            self.class_updates += 1
            _class_next(self)
        elif not rest and len(c.members) > 1:
            # _class_change for a class flow through, no flow beside the class
            assert c.heap[0][2] is f  # the class's first through (_class_next)
            heapq.heappop(c.heap)
            del c.members[f]
            weight, capacity, bottleneck = c.weight, self.capacity, c.bottleneck
            for q, a in route.pairs:
                weight[q] -= a
            level = capacity[bottleneck] / weight[bottleneck]
            if level > c.bound and level > c.tighten(capacity):
                self._class_misses += 1
                _dissolve(self, now)
                self._reschedule(route.resources, now, whole=True)
            else:
                self.class_updates += 1
                c.move_to(now, level)
                _class_next(self)
        elif not self._class_change(f, now, started=False):
            self._class_misses += 1
            _dissolve(self, now)
            if self._active:
                self._reschedule(route.resources, now, whole=True)
            else:
                self._next()
        self._through(f, now)
