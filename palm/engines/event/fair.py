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
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import simpy

from palm.engines.event.shared import Arrival, Timer
from palm.errors import NoProgressError
from palm.network.flows import fill

__all__ = ["FairNetwork", "FlowEnvironment", "Route", "STALL_LIMIT", "fair_rates"]

#: relative slack when deciding that a resource is full (rounding of the filling levels)
_TIGHT = 1e-12
#: a resource loaded above 1 - _SLACK of its capacity counts as full
_SLACK = 1e-9
#: groups of flows with more (flow, resource) loads than this are filled with numpy
_NUMPY_ABOVE = 400
_INF = float("inf")
#: with at most this many flows in flight, a change recomputes them all
_ALL_BELOW = 32
#: answers of progressive filling kept for reuse (the memo is cleared when full)
_MEMO_SIZE = 65536
#: fewest flows on the first bottleneck for them to be kept as a :class:`_Class` (and at
#: least as many as the other flows in flight)
_CLASS_MIN = 4
#: a class's loads are summed afresh and its service counted from zero every this many joins
_REBASE = 256
#: a resource loaded up to this much of its capacity (rounding of the level) is not over it
_OVER = 1.0 + _TIGHT


#: most SimPy events a run takes at one instant without a flow ending, unless its caller
#: sets its own (``FlowEnvironment.stall_limit``)
STALL_LIMIT = 1_000_000


_ROUTES_MADE = itertools.count()
#: SimPy's priority of an ordinary event (``simpy.events.NORMAL``)
_NORMAL = simpy.events.NORMAL
_new_event = object.__new__


class Route:
    """The resources a kind of flow loads and how much (bytes per byte moved), with the rate
    it gets alone. Built once per flow kind."""

    __slots__ = ("resources", "loads", "pairs", "alone_Bps", "tracked", "order")

    def __init__(
        self,
        resources: Sequence[int],
        loads: Sequence[float],
        capacity: Sequence[float],
        passive: Sequence[int] = (),
    ) -> None:
        kept: list[int] = []
        kept_loads: list[float] = []
        alone = _INF
        for r, a in zip(resources, loads, strict=True):
            if a > 0:
                kept.append(int(r))
                kept_loads.append(float(a))
                lone = capacity[kept[-1]] / kept_loads[-1]
                if lone < alone:
                    alone = lone
        self.resources = tuple(kept)
        self.loads = tuple(kept_loads)
        self.pairs = tuple(zip(kept, kept_loads, strict=True))  # (resource, load) pairs
        self.alone_Bps = alone  # the least of capacity / load, inf without resources
        #: resources whose busy time the flow counts: its own and ``passive`` ones, which it
        #: loads but which can never bind its rate
        self.tracked = (
            self.resources + tuple(int(r) for r in passive) if passive else self.resources
        )
        #: creation rank: flows are filled in the order of their routes, so that rates depend
        #: on which flows are in flight, not on the order they started in
        self.order = next(_ROUTES_MADE)

    @property
    def empty(self) -> bool:
        return not self.resources


def fair_rates(routes: Sequence[Route], capacity: Sequence[float]) -> list[float]:
    """Max-min fair rates of flows on ``routes`` by progressive filling: every unfrozen flow
    sits at the same level; the resource that fills first (``level = room / weight``) freezes
    the flows that load it; repeat. Resources wait in a heap by the level at which they fill
    (entries made stale by a freeze are skipped), so a call costs ``O(loads log resources)``."""
    return _Filler(list(capacity)).fill(routes)


class _Filler:
    """Progressive filling on the resources of one network, with per-resource scratch lists
    kept between calls (each call sets the entries of the resources it loads, and leaves every
    count at zero), so that a call costs nothing per resource it does not load."""

    def __init__(self, capacity: list[float]) -> None:
        n = len(capacity)
        self.capacity = capacity
        self.room = [0.0] * n  # capacity not taken by frozen flows
        self.weight = [0.0] * n  # load of one unit of level from the unfrozen flows
        self.unfrozen = [0] * n  # unfrozen flows on the resource
        self.on: list[list[int]] = [[] for _ in range(n)]
        self.loaded: list[int] = []  # the resources the last call loaded

    def fill(
        self,
        routes: Sequence[Route],
        taken: dict[int, float] | None = None,
        class_level: float = 0.0,
    ) -> list[float]:
        """:func:`fair_rates` (:meth:`used` then tells the capacity they use). With ``taken``,
        resource ``r`` has ``taken[r] x class_level`` of its capacity taken already (by a
        :class:`_Class` of flows frozen at ``class_level``); where that rounds below zero (a
        resource the class fills exactly, as it fills its bottleneck) no room is left, and
        the flows there get rate 0.

        It always ends (docs/model.md sec. 7, "Termination"): the heap holds at most one entry
        per resource, every key is ``>= 0`` (room is never below zero at the start, and an
        entry is pushed again only at a level above its key), so an entry popped with its
        resource unchanged since its push is not stale; a resource changes only when a flow
        on it freezes, so it is pushed again at most once per flow on it. More pushes than
        that are a broken invariant: :class:`~palm.errors.NoProgressError`."""
        inf = _INF
        rates = [inf] * len(routes)  # flows without resources keep inf; inf also: unfrozen
        room, weight, unfrozen, on, capacity = (
            self.room,
            self.weight,
            self.unfrozen,
            self.on,
            self.capacity,
        )
        loaded: list[int] = []
        self.loaded = loaded
        left = 0  # flows not frozen yet
        for i, route in enumerate(routes):
            if route.pairs:
                left += 1
            for r, a in route.pairs:
                if unfrozen[r]:
                    weight[r] += a
                    unfrozen[r] += 1
                    on[r].append(i)
                else:
                    cap = (
                        capacity[r]
                        if taken is None
                        else capacity[r] - taken.get(r, 0.0) * class_level
                    )
                    if cap < 0.0:  # the class's use of a resource it fills, rounded up
                        cap = 0.0
                    room[r], weight[r], unfrozen[r], on[r] = cap, a, 1, [i]
                    loaded.append(r)
        # a freeze only raises the level at which another resource fills ((room - a L) /
        # (weight - a) >= L when room / weight >= L), so entries are refreshed lazily when
        # popped; once every flow is frozen, the resources left in the heap change nothing
        heap = [(room[r] / weight[r], r) for r in loaded]
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        stale = len(loaded) * len(routes)  # pushes again the proof allows (see above)
        while left:
            level, r = pop(heap)
            if not unfrozen[r]:
                continue
            current = room[r] / weight[r]
            if current > level * (1.0 + _TIGHT):  # stale: a freeze took load off r
                stale -= 1
                if stale < 0:
                    raise _stuck_filling(r, level, current, room[r], weight[r], len(routes))
                push(heap, (current, r))
                continue
            for i in on[r]:
                if rates[i] != inf:
                    continue
                rates[i] = level
                left -= 1
                for q, a in routes[i].pairs:
                    room[q] -= a * level
                    weight[q] -= a
                    unfrozen[q] -= 1
        return rates

    def used(self) -> dict[int, float]:
        """The capacity taken on each resource the last :meth:`fill` loaded, at its rates
        (``taken``'s part included), by resource."""
        capacity, room = self.capacity, self.room
        return {r: capacity[r] - room[r] for r in self.loaded}


def _stuck_filling(
    r: int, level: float, current: float, room: float, weight: float, flows: int
) -> NoProgressError:
    """The error of a progressive filling that pushed a resource back more often than its
    flows could have changed it (:meth:`_Filler.fill`)."""
    return NoProgressError(
        f"fair network: progressive filling of {flows} flows made no progress: resource {r} "
        f"(room {room!r} B/s, load {weight!r} per unit of level) stays stale at level "
        f"{level!r} (now {current!r})"
    )


def _fill_arrays(routes: Sequence[Route], capacity: np.ndarray) -> list[float]:
    """:func:`fair_rates` through numpy (:func:`palm.network.flows.fill`), for groups of flows
    spanning many resources (``link`` mode), where it is the faster of the two."""
    ids = np.concatenate([np.asarray(r.resources, dtype=np.int64) for r in routes])
    used, column = np.unique(ids, return_inverse=True)
    rows = np.repeat(np.arange(len(routes)), [len(r.resources) for r in routes])
    matrix = np.zeros((len(routes), len(used)))
    np.add.at(matrix, (rows, column), np.concatenate([np.asarray(r.loads) for r in routes]))
    return [float(x) for x in fill(matrix, capacity[used])]


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
_RESOURCES = attrgetter("resources")


def _failure(event: simpy.Event) -> BaseException:
    """The exception SimPy's ``Environment.step`` raises for a failed event nobody defused: a
    copy of the event's, caused by it (SimPy 4.1, simpy/core.py)."""
    cause: BaseException = event._value  # noqa: SLF001
    exc = type(cause)(*cause.args)
    exc.__cause__ = cause
    return exc


class _Process(simpy.Process):
    """``simpy.Process`` with a leaner resume (SimPy 4.1, simpy/events.py ``Process._resume``):
    the generator's ``send`` and the process's resume are bound once, not on every wait, and
    the event it waits on is read once. The same events, in the same order: a failed event is
    thrown into the generator by SimPy's own resume, and the process ends (its event
    scheduled, with the generator's return value or exception) as SimPy ends it."""

    def __init__(self, env: simpy.Environment, generator: simpy.events.ProcessGenerator) -> None:
        super().__init__(env, generator)
        self._send = generator.send
        self._wake = self._resume  # the callback it leaves on every event it waits on

    def _resume(self, event: simpy.Event) -> None:
        env = self.env
        env._active_proc = self  # noqa: SLF001 - as SimPy's resume
        while True:
            if not event._ok:  # noqa: SLF001 - a failed event: SimPy's resume throws it in
                super()._resume(event)
                return
            try:
                event = self._send(event._value)  # noqa: SLF001
            except StopIteration as stop:  # the process ends
                self._ok, self._value = True, stop.value
                env.schedule(self)
                break
            except BaseException as exc:  # the process fails
                self._ok, self._value = False, exc
                exc.__traceback__ = exc.__traceback__.tb_next  # type: ignore[union-attr]
                env.schedule(self)
                break
            try:
                callbacks = event.callbacks
            except AttributeError:
                raise RuntimeError(f'Invalid yield value "{event}"') from None
            if callbacks is not None:  # not processed yet: wait for it
                callbacks.append(self._wake)
                self._target = event
                env._active_proc = None  # noqa: SLF001
                return
            # processed already: go on at once with its value, as SimPy does
        self._target = None  # type: ignore[assignment]
        env._active_proc = None  # noqa: SLF001


class FlowEnvironment(simpy.Environment):
    """A SimPy environment whose clock also runs a :class:`FairNetwork`: the network's next
    flow end is an event of the simulation like SimPy's own, taken before SimPy's events of
    the same instant (bytes through at ``t`` leave the links before flows started at ``t``
    take their share). A change of rates therefore costs no SimPy event, and every flow costs
    exactly one end event however flows overlap (``flow_events`` counts them). Only ``run()``
    without ``until`` is supported."""

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self.network: FairNetwork | None = None
        self.flow_events = 0
        #: most SimPy events ``run`` takes at one instant without a flow ending: beyond it
        #: the run is stuck (a zero-delay loop) and raises :class:`NoProgressError`. The
        #: engine sets it to what the run's whole program can schedule
        self.stall_limit = STALL_LIMIT

    def process(self, generator: simpy.events.ProcessGenerator) -> simpy.Process:
        """``simpy.Process(self, generator)``, with the leaner resume of :class:`_Process`."""
        return _Process(self, generator)

    def timeout(self, delay: float, value: Any = None) -> simpy.Timeout:  # type: ignore[override]
        """``simpy.Timeout(self, delay, value)`` built without its constructor's calls (SimPy
        4.1, simpy/events.py: the fields ``Timeout.__init__`` sets, then ``schedule``'s push
        with the environment's event counter): the same event, scheduled the same way, as a
        :class:`~palm.engines.event.shared.Timer` (its fields in slots)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        event = _new_event(Timer)
        event.env, event.callbacks, event._value = self, [], value  # noqa: SLF001
        event._delay, event._ok = delay, True  # noqa: SLF001
        heapq.heappush(self._queue, (self._now + delay, _NORMAL, next(self._eid), event))
        return event

    def run(self, until: Any = None) -> None:
        if until is not None:
            raise ValueError("FlowEnvironment.run() runs until no event is left (no until)")
        net = self.network
        queue, pop = self._queue, heapq.heappop
        if net is None:  # SimPy's events only (the exclusive model): Environment.step inlined
            # events since the clock last moved, and when it did (the clock is written only
            # when it moves)
            idle, limit, last = 0, self.stall_limit, self._now
            while queue:
                now, _, _, event = pop(queue)
                if now != last:
                    self._now = last = now
                    idle = 0
                else:
                    idle += 1
                    if idle > limit:
                        raise _stalled(self, event, idle)
                callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):  # noqa: SLF001
                    raise _failure(event)
            return
        _run_with_network(self, net)


def _run_with_network(env: FlowEnvironment, net: FairNetwork) -> None:
    """:meth:`FlowEnvironment.run` with a network: SimPy's events and the network's flow ends in
    time order. A function of its own so that the compiled build can type its locals
    (``fair.pxd``: the network's fields are then read as C fields, its ends called as C
    methods)."""
    queue, pop, heappush = env._queue, heapq.heappop, heapq.heappush  # noqa: SLF001
    ends = 0  # flow ends, added to ``flow_events`` when the run stops
    # SimPy events since the clock moved or a flow ended, and the clock (written only when it
    # moves)
    idle, limit, last = 0, env.stall_limit, env._now  # noqa: SLF001
    try:
        while True:
            end = net.next_end
            if queue and queue[0][0] < end:
                # SimPy's Environment.step (SimPy 4.1, simpy/core.py), inlined: one call less
                # per event
                now, _, _, event = pop(queue)
                if now != last:
                    env._now = last = now  # noqa: SLF001
                    idle = 0
                else:
                    idle += 1
                    if idle > limit:
                        raise _stalled(env, event, idle)
                callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):  # noqa: SLF001
                    raise _failure(event)
            elif end < _INF:
                env._now = last = end
                ends += 1
                idle = 0
                if net._cls is None:  # noqa: SLF001
                    net._fire()  # noqa: SLF001
                else:  # FairNetwork._fire's first test, taken here: one call less
                    net._fire_in_class()  # noqa: SLF001
                ready = net.ready
                if ready is not None:
                    # the ended flow's done event, scheduled at ``end`` (no latency): it is
                    # SimPy's next event when nothing else is due by then (every event queued
                    # at ``end`` was scheduled earlier, so comes first) and no flow ends then
                    # (flow ends go first): then run it at once, as step would, else queue it
                    net.ready = None
                    if (queue and queue[0][0] <= end) or net.next_end <= end:
                        heappush(queue, (end, _NORMAL, net.ready_eid, ready))
                    else:
                        callbacks, ready.callbacks = ready.callbacks, None  # type: ignore[assignment]
                        for callback in callbacks:
                            callback(ready)
            elif net.rates():  # flows in flight whose end is not a time (NaN rates)
                raise _never_ending(net)
            else:
                return
    finally:
        env.flow_events += ends


def _stalled(env: simpy.Environment, event: simpy.Event, idle: int) -> NoProgressError:
    """The error of a run whose clock stays at one instant: ``idle`` events there without a
    flow ending, the last ``event``."""
    waiting = [getattr(getattr(c, "__self__", None), "name", None) for c in event.callbacks or ()]
    who = ", ".join(w for w in waiting if w) or "no process"
    return NoProgressError(
        f"simulation made no progress: {idle} events at t = {env.now!r} s without the clock "
        f"moving or a flow ending (more than the run can schedule); the last, "
        f"{type(event).__name__}, resumes {who}"
    )


def _never_ending(net: FairNetwork) -> NoProgressError:
    """The error of a run that has no event left but flows in flight (their ends are not
    times: NaN rates)."""
    flows = net.rates()
    first = next(iter(flows))
    return NoProgressError(
        f"fair network: {len(flows)} flows in flight can never end; the first, on resources "
        f"{list(first.route.resources)}, moves at {flows[first]!r} B/s with "
        f"{first.remaining!r} B left (ends at {first.end!r} s)"
    )


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
        if c is not None:  # a class lives: the class's update, inline
            # (neither ``_active`` nor ``_on`` is kept while a class lives, whose members
            # and rest are the flows in flight: :meth:`_dissolve` sets them again)
            users, since = self._users, self._since
            if self._count_bytes:
                carried = self.nbytes
                for r, a in route.pairs:
                    carried[r] += a * nbytes
            for r in route.tracked:
                if not users[r]:
                    since[r] = now
                users[r] += 1
            if len(c.members) + len(c.rest) >= _ALL_BELOW:  # with flow, more in flight
                self._dissolve(now, flow)
                self._reschedule(route.resources, now, whole=True)
                return
            member = c.bottleneck in route.resources
            if member and not c.rest:
                # _class_change for a flow that joins the class, no flow beside it (a stage's
                # reads among the others'), inline
                if route not in c.seen:
                    c.seen.add(route)
                    c.touched.update(route.resources)
                weight, capacity, bottleneck = c.weight, self.capacity, c.bottleneck
                bound = c.bound
                for q, a in route.pairs:
                    w = weight[q] = weight.get(q, 0.0) + a
                    if q != bottleneck and capacity[q] * _OVER < bound * w:
                        bound = capacity[q] * _OVER / w
                c.bound = bound
                level = capacity[bottleneck] / weight[bottleneck]
                if level <= bound or level <= c.tighten(capacity):
                    self.class_updates += 1
                    if level != c.level:
                        c.service = c.service + c.level * (now - c.service_t)  # c.served(now)
                        c.service_t, c.level = now, level
                    # c.join(flow, now), inline
                    flow.finish = c.service + c.level * (now - c.service_t) + flow.remaining
                    heapq.heappush(c.heap, (flow.finish, flow.seq, flow))
                    c.members[flow] = None
                    c.updates += 1
                    if c.updates % _REBASE == 0:
                        c.rebase(capacity)
                    # self._class_next(), inline (no flow beside the class)
                    finish, _seq, first = c.heap[0]
                    first.end = end = c.service_t + (finish - c.service) / c.level
                    self.next_end, self._first = end, first
                    return
            elif not c.rest:
                # _class_change's first case (a flow beside the class, no other: a hand-off
                # beside the reads), inline: it takes what the class leaves
                if route not in c.seen:
                    c.seen.add(route)
                    c.touched.update(route.resources)
                capacity, weight, level = self.capacity, c.weight, c.level
                rate = _INF  # _share(route, capacity, weight, level), inline (3-4% per event)
                for q, a in route.pairs:
                    share = (capacity[q] - weight.get(q, 0.0) * level) / a
                    if share < rate:
                        rate = share
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
            self._dissolve(now, flow)
            self._reschedule(route.resources, now, whole=True)
            return
        self._active[flow] = None
        users, carried, on, since = self._users, self.nbytes, self._on, self._since
        used, capacity, alone = self._used, self.capacity, route.alone_Bps
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
        if self._count_bytes:
            for r, a in route.pairs:
                carried[r] += a * nbytes
        for r in route.tracked:
            if not users[r]:
                since[r] = now
            users[r] += 1
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
            group = self._connected(changed)
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
                self._form_class(group, rates, now)
        else:
            self._next()

    def _form_class(self, group: list[_Flow], rates: list[float], now: float) -> None:
        """Keep the flows on a full resource as a :class:`_Class` if they all move at the
        lowest rate of ``group`` (every flow in flight, just refilled): that resource is
        then a bottleneck of the filling's first round, which froze all its flows. (While
        the class lives, ``_used`` is not kept; :meth:`_dissolve` sets
        them again.)"""
        lowest = min(rates)
        on, used, capacity = self._on, self._used, self.capacity
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
        c = self._cls = _Class(r, lowest, now)
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
        c.tighten(self.capacity)
        self._class_next()

    def _class_next(self) -> None:
        """``next_end`` while a class lives: its first flow through, or a rest flow's end
        (ties: the earliest started)."""
        c = self._cls
        assert c is not None
        finish, seq, first = c.heap[0]
        end = first.end = c.service_t + (finish - c.service) / c.level
        for g in c.rest:
            e = g.end
            if e <= end and (e < end or g.seq < seq):
                first, end, seq = g, e, g.seq
        self.next_end, self._first = end, first

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
            if route not in c.seen:
                c.seen.add(route)
                c.touched.update(route.resources)
            member = bottleneck in route.resources
            if member:
                joins = True
                bound = c.bound
                for q, a in route.pairs:
                    w = weight[q] = weight.get(q, 0.0) + a
                    if q != bottleneck and capacity[q] * _OVER < bound * w:
                        bound = capacity[q] * _OVER / w
                c.bound = bound
                level = capacity[bottleneck] / weight[bottleneck]
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
        if len(rest) == 1:  # the usual case: progressive filling of one flow, inlined
            (g,) = rest
            rate = _INF  # _share(g.route, capacity, weight, level), inline
            for q, a in g.route.pairs:
                share = (capacity[q] - weight.get(q, 0.0) * level) / a
                if share < rate:
                    rate = share
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
        if level != c.level:
            c.service = c.service + c.level * (now - c.service_t)  # c.served(now)
            c.service_t, c.level = now, level
        if joins:
            # c.join(flow, now), inline
            flow.finish = c.service + c.level * (now - c.service_t) + flow.remaining
            heapq.heappush(c.heap, (flow.finish, flow.seq, flow))
            c.members[flow] = None
            c.updates += 1
            if c.updates % _REBASE == 0:
                c.rebase(capacity)
        if rest:
            for g, rate in zip(rest, rates):  # noqa: B905 (equal by construction)
                old = g.rate
                if rate != old:
                    if old:  # 0 for the flow being started
                        g.remaining -= old * (now - g.t0)
                        g.t0 = now
                    g.rate = rate
                    g.end = now + g.remaining / rate
        # self._class_next(), inline: the class's first through, or a rest flow's end
        finish, seq, first = c.heap[0]
        end = first.end = c.service_t + (finish - c.service) / c.level
        for g in rest:
            e = g.end
            if e <= end and (e < end or g.seq < seq):
                first, end, seq = g, e, g.seq
        self.next_end, self._first = end, first
        return True

    def _dissolve(self, now: float, started: _Flow | None = None) -> None:
        """End the class: its flows get their bytes left, rate and end as flows of their own,
        and the use of every resource it touched is left for a full filling to set. The flows
        in flight are the class's members and rest, and ``started``, the flow starting."""
        c = self._cls
        assert c is not None
        self._cls = None
        served, level = c.served(now), c.level
        for f in c.members:
            f.remaining = f.finish - served
            f.t0, f.rate = now, level
            f.end = now + f.remaining / level
        used = self._used
        for r in c.touched:
            used[r] = 0.0
        # the flows on each resource, in start order, as begin and _fire keep them (every
        # flow in flight loads only resources the class touched, but one that starts with
        # too many in flight, whose resources carry no other flow)
        flows = dict.fromkeys(c.members)
        flows.update(dict.fromkeys(c.rest))
        if started is not None:
            flows[started] = None
        self._active = active = dict.fromkeys(sorted(flows, key=_SEQ))  # in start order
        on = self._on
        for r in c.touched:
            on[r] = {}
        for f in active:
            for r in f.route.resources:
                on[r][f] = None

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
        # Arrival.succeed_in, inlined: the fields Event.succeed sets and a delayed schedule
        done = f  # the flow is its done event
        done._ok, done._value = True, None  # noqa: SLF001
        env = self.env
        if f.latency:
            heapq.heappush(env._queue, (now + f.latency, _NORMAL, next(env._eid), done))  # noqa: SLF001
        else:  # scheduled now: the clock pushes it, or runs it at once if it comes next
            self.ready, self.ready_eid = done, next(env._eid)  # noqa: SLF001

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
            # _class_change for the end of the only flow beside the class (a hand-off), inline:
            # nothing else changes, the next end is the class's first through
            del rest[f]
            self.class_updates += 1
            finish, _seq, first = c.heap[0]
            first.end = end = c.service_t + (finish - c.service) / c.level
            self.next_end, self._first = end, first
        elif not rest and len(c.members) > 1:
            # _class_change for a class flow through, no flow beside the class, inline
            assert c.heap[0][2] is f  # the class's first through (_class_next)
            heapq.heappop(c.heap)
            del c.members[f]
            weight, capacity, bottleneck = c.weight, self.capacity, c.bottleneck
            for q, a in route.pairs:
                weight[q] -= a
            level = capacity[bottleneck] / weight[bottleneck]
            if level > c.bound and level > c.tighten(capacity):
                self._class_misses += 1
                self._dissolve(now)
                self._reschedule(route.resources, now, whole=True)
            else:
                self.class_updates += 1
                if level != c.level:
                    c.service = c.service + c.level * (now - c.service_t)  # c.served(now)
                    c.service_t, c.level = now, level
                finish, _seq, first = c.heap[0]
                first.end = end = c.service_t + (finish - c.service) / c.level
                self.next_end, self._first = end, first
        elif not self._class_change(f, now, started=False):
            self._class_misses += 1
            self._dissolve(now)
            if self._active:
                self._reschedule(route.resources, now, whole=True)
            else:
                self._next()
        done = f  # the flow is its done event
        done._ok, done._value = True, None  # noqa: SLF001
        env = self.env
        if f.latency:
            heapq.heappush(env._queue, (now + f.latency, _NORMAL, next(env._eid), done))  # noqa: SLF001
        else:  # scheduled now: the clock pushes it, or runs it at once if it comes next
            self.ready, self.ready_eid = done, next(env._eid)  # noqa: SLF001
