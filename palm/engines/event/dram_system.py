"""DRAM channels whose bandwidth is shared fairly among the accesses in progress.

The paper (sec. IV-C) treats DRAM bandwidth "as a resource that is occupied during execution
like the NoC model". Taken literally, with whole weight streams of tens of milliseconds as the
unit, an exclusive channel makes a stage wait for another stage's entire stream, forming
convoys whose order flips with tiny timing changes: in our tests a faster NoC then made an
iteration 3.6% *slower*. A memory controller interleaves the bursts of concurrent requests, so
we share each channel's bandwidth equally between the accesses using it (processor sharing).

One access is all the cores of one stage reading ``b`` bytes each, ``n_c`` of them from channel
``c`` (each core from its nearest). It progresses at ``x`` bytes per core per second, bounded by
the NoC path of a core and, on every channel it uses, by its equal share of that channel:

    x = min(noc_bandwidth, min_c bandwidth_c / (n_c * active_c))

where ``active_c`` counts the accesses using channel ``c``. Alone, an access therefore takes
exactly ``b * max(1 / noc, max_c n_c / bandwidth_c)`` plus the response time and NoC latency
(paper Eq. 4, 5), what the analytical engine charges. Rates are recomputed whenever an access
starts or finishes; an access is one transfer however many channels and cores it spans, so the
number of events does not grow with the mesh.
"""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heappush

import numpy as np
import simpy

from palm.engines.event.shared import PENDING, Arrival, ChannelClasses, Timer

__all__ = ["DramSystem"]

_new_event = object.__new__
_INF = float("inf")
_NORMAL = simpy.events.NORMAL


class _Access:
    __slots__ = (
        "remaining",
        "pattern",
        "limits",
        "single",
        "limit",
        "noc_bandwidth",
        "latency",
        "done",
        "rate",
    )

    def __init__(
        self,
        nbytes: float,
        pattern: int,
        limits: tuple[tuple[int, float], ...],
        noc_bandwidth: float,
        latency: float,
        done: Arrival,
    ) -> None:
        self.remaining = nbytes
        self.pattern = pattern
        self.limits = limits  # its pattern's (class, limit) pairs
        # the class and limit of a pattern on one class (-1: several)
        self.single, self.limit = limits[0] if len(limits) == 1 else (-1, 0.0)
        self.noc_bandwidth = noc_bandwidth
        self.latency = latency
        self.done = done
        self.rate = 0.0


class DramSystem:
    """All DRAM channels of a mesh, each shared equally by the accesses using it (the
    ``exclusive`` NoC model's DRAM); :meth:`read` returns an event that fires when the access
    is through (including its fixed latency). Channels are grouped by
    :class:`ChannelClasses`; rates are computed once per start or finish."""

    def __init__(
        self,
        env: simpy.Environment,
        bandwidth_Bps: Sequence[float],
        patterns: Sequence[tuple[Sequence[int], Sequence[float]]],
        *,
        classes: ChannelClasses | None = None,
    ) -> None:
        """``classes``: the channels grouped already (:meth:`ChannelClasses.fresh` of those of
        ``bandwidth_Bps`` and ``patterns``, which are then not read), else grouped here."""
        self.env = env
        self.classes = classes if classes is not None else ChannelClasses(bandwidth_Bps, patterns)
        self.bandwidth = self.classes.bandwidth
        self._limits = self.classes.limits
        self._active: list[_Access] = []
        self._users = [0] * self.classes.count
        self._class_busy = [0.0] * self.classes.count
        self._last = 0.0
        self._timer: simpy.Event | None = None  # the timer of the last change (others: stale)
        self._on_timer = self._complete  # the timers' callback, bound once

    @property
    def busy_s(self) -> np.ndarray:
        """Seconds each channel had at least one access in progress."""
        return self.classes.per_channel(self._class_busy)

    @property
    def nbytes(self) -> np.ndarray:
        """Bytes each channel delivered."""
        return self.classes.nbytes

    def _advance(self, now: float) -> None:
        dt = now - self._last
        if dt > 0 and self._active:
            for a in self._active:
                a.remaining -= a.rate * dt
            self._count_busy(dt)
        self._last = now

    def _count_busy(self, dt: float) -> None:
        for k, users in enumerate(self._users):
            if users:
                self._class_busy[k] += dt

    def read(
        self,
        nbytes_per_core: float,
        *,
        pattern: int,
        noc_bandwidth_Bps: float,
        latency_s: float,
    ) -> simpy.Event:
        """Every core of access pattern ``pattern`` reads ``nbytes_per_core``."""
        return self.begin(nbytes_per_core, pattern, noc_bandwidth_Bps, latency_s)

    def begin(
        self, nbytes_per_core: float, pattern: int, noc_bandwidth_Bps: float, latency_s: float
    ) -> simpy.Event:
        """:meth:`read` with positional arguments (the engine's hot path)."""
        now = self.env._now  # noqa: SLF001 - the clock, without the property
        done = _new_event(Arrival)  # Arrival(self.env), without the constructor's call
        done.env, done.callbacks, done._value = self.env, [], PENDING  # noqa: SLF001
        self.classes.read_per_core[pattern] += nbytes_per_core
        if nbytes_per_core <= 0 or not self._limits[pattern]:
            self._advance(now)
            done.succeed_in(0.0)
            return done
        # the accesses in progress move their bytes up to now in _schedule's pass (the new
        # one, at rate 0, moves none)
        dt = now - self._last
        if dt > 0 and self._active:
            self._count_busy(dt)
        else:
            dt = 0.0
        self._last = now
        access = _Access(
            nbytes_per_core, pattern, self._limits[pattern], noc_bandwidth_Bps, latency_s, done
        )
        self._active.append(access)
        for k, _limit in self._limits[pattern]:
            self._users[k] += 1
        self._schedule(dt)
        return done

    def _schedule(self, dt: float = 0.0) -> None:
        """Bytes moved in the ``dt`` seconds since the last change, new rates, and one timer
        for every start and every finish, firing when the access closest to completion is
        done. Earlier timers become stale. (Exactly two timers per access, so the event
        count never depends on how accesses overlap.)"""
        users = self._users
        soonest = _INF if self._active else 0.0
        for a in self._active:
            if dt:  # bytes moved since the last change, at the old rate
                a.remaining -= a.rate * dt
            # the access's rate: its NoC bandwidth or its least channel share, whichever is
            # lower; and the earliest completion on the way
            rate = a.noc_bandwidth
            k = a.single
            if k >= 0:  # a pattern on one channel class (an interleaved placement's)
                share = a.limit / users[k]
                if share < rate:
                    rate = share
            else:
                for k, limit in a.limits:
                    share = limit / users[k]
                    if share < rate:
                        rate = share
            a.rate = rate
            left = a.remaining / rate
            if left < soonest:
                soonest = left
        # self.env.timeout(delay) calling back _complete, without the constructor's calls
        # (SimPy 4.1, simpy/events.py: the fields Timeout.__init__ sets, then schedule's push)
        delay = max(soonest, 0.0)
        env = self.env
        timer = self._timer = _new_event(Timer)
        timer.env, timer.callbacks, timer._value = env, [self._on_timer], None  # noqa: SLF001
        timer._delay, timer._ok = delay, True  # noqa: SLF001
        heappush(env._queue, (env._now + delay, _NORMAL, next(env._eid), timer))  # noqa: SLF001

    def _complete(self, timer: simpy.Event) -> None:
        active = self._active
        if timer is not self._timer or not active:
            return  # superseded by a later start or finish, or nothing left
        now = self.env._now  # noqa: SLF001
        dt = now - self._last
        if dt > 0:
            busy = self._class_busy  # _count_busy, inline
            for k, n in enumerate(self._users):
                if n:
                    busy[k] += dt
        else:
            dt = 0.0
        self._last = now
        # bytes moved up to now, and the access this timer was set for (ties: the earliest
        # started); rounding may leave it a sliver of bytes, which is why it is not found by
        # remaining <= 0
        a, best = active[0], _INF
        if dt:
            for x in active:
                x.remaining -= x.rate * dt
                left = x.remaining / x.rate
                if left < best:
                    a, best = x, left
        else:
            for x in active:
                left = x.remaining / x.rate
                if left < best:
                    a, best = x, left
        active.remove(a)
        users = self._users
        for k, _limit in a.limits:
            users[k] -= 1
        a.done.succeed_in(a.latency)
        self._schedule()
