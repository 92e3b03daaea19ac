"""Progressive filling: the max-min fair rates of flows on shared resources (Bertsekas &
Gallager, *Data Networks*, sec. 6.5), and the :class:`Route` a kind of flow takes.

Part of the ``fair`` network (:mod:`palm.engines.event.fair`): this module, ``flowclass``,
``clock`` and ``fair`` are compiled together as one unit (setup.py,
:mod:`palm.engines.event.builds`), with the C types of ``fair.pxd``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from palm.errors import NoProgressError
from palm.network.flows import fill

__all__ = ["Route", "fair_rates"]

#: relative slack when deciding that a resource is full (rounding of the filling levels)
_TIGHT = 1e-12
#: a resource loaded above 1 - _SLACK of its capacity counts as full
_SLACK = 1e-9
#: groups of flows with more (flow, resource) loads than this are filled with numpy
_NUMPY_ABOVE = 400
_INF = float("inf")
#: a resource loaded up to this much of its capacity (rounding of the level) is not over it
_OVER = 1.0 + _TIGHT

_ROUTES_MADE = itertools.count()
_RESOURCES = attrgetter("resources")


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
