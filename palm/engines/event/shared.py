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

import simpy

__all__ = ["DramSystem", "Arrival"]


class Arrival(simpy.Event):
    """An event that can be told, at the sender's time, to fire ``delay`` seconds later: one
    scheduled event per hand-off instead of a timeout plus a trigger."""

    def succeed_in(self, delay: float) -> None:
        # the two fields Event.succeed sets (SimPy 4, simpy/events.py), then a delayed schedule
        self._ok = True
        self._value = None
        self.env.schedule(self, simpy.events.NORMAL, delay)


class _Access:
    __slots__ = ("remaining", "pattern", "noc_bandwidth", "latency", "done")

    def __init__(
        self, nbytes: float, pattern: int, noc_bandwidth: float, latency: float, done: Arrival
    ) -> None:
        self.remaining = nbytes
        self.pattern = pattern
        self.noc_bandwidth = noc_bandwidth
        self.latency = latency
        self.done = done


class DramSystem:
    """All DRAM channels of a mesh, fair-shared; :meth:`read` returns an event that fires when
    the access is through (including its fixed latency).

    ``patterns`` lists, once per kind of access (a stage's cores reading), the channels it
    uses and how many cores read from each. Channels that the same set of patterns use always
    have the same number of accesses in progress, so they are kept as one *class*: a rate is
    then a minimum over classes, not over channels, and an access costs the same on a 4 x 4
    mesh as on a 633 x 633 one. ``busy_s`` and ``nbytes`` per channel record utilisation."""

    def __init__(
        self,
        env: simpy.Environment,
        bandwidth_Bps: Sequence[float],
        patterns: Sequence[tuple[Sequence[int], Sequence[int]]],
    ) -> None:
        self.env = env
        self.bandwidth = list(bandwidth_Bps)
        self._patterns = [(tuple(channels), tuple(cores)) for channels, cores in patterns]
        users_of: dict[int, list[int]] = {}
        for p, (channels, _cores) in enumerate(self._patterns):
            for c in channels:
                users_of.setdefault(c, []).append(p)
        class_of: dict[tuple[int, ...], int] = {}
        self._class_channels: list[list[int]] = []
        channel_class: dict[int, int] = {}
        for c in sorted(users_of):
            key = tuple(users_of[c])
            k = class_of.setdefault(key, len(class_of))
            if k == len(self._class_channels):
                self._class_channels.append([])
            self._class_channels[k].append(c)
            channel_class[c] = k
        # per pattern: (class, min over its channels of bandwidth / cores) pairs
        self._limits: list[tuple[tuple[int, float], ...]] = []
        for channels, cores in self._patterns:
            best: dict[int, float] = {}
            for c, n in zip(channels, cores, strict=True):
                k, share = channel_class[c], self.bandwidth[c] / n
                if share < best.get(k, float("inf")):
                    best[k] = share
            self._limits.append(tuple(sorted(best.items())))
        self._active: list[_Access] = []
        self._users = [0] * len(self._class_channels)
        self._class_busy = [0.0] * len(self._class_channels)
        self._read_per_core = [0.0] * len(self._patterns)
        self._last = 0.0
        self._version = 0

    @property
    def busy_s(self) -> list[float]:
        """Seconds each channel had at least one access in progress."""
        out = [0.0] * len(self.bandwidth)
        for k, channels in enumerate(self._class_channels):
            for c in channels:
                out[c] = self._class_busy[k]
        return out

    @property
    def nbytes(self) -> list[float]:
        """Bytes each channel delivered."""
        out = [0.0] * len(self.bandwidth)
        for (channels, cores), per_core in zip(self._patterns, self._read_per_core, strict=True):
            if per_core:
                for c, n in zip(channels, cores, strict=True):
                    out[c] += n * per_core
        return out

    def _rate(self, a: _Access) -> float:
        rate = a.noc_bandwidth
        users = self._users
        for k, limit in self._limits[a.pattern]:
            share = limit / users[k]
            if share < rate:
                rate = share
        return rate

    def _advance(self, now: float) -> None:
        dt = now - self._last
        if dt > 0 and self._active:
            for a in self._active:
                a.remaining -= self._rate(a) * dt
            for k, users in enumerate(self._users):
                if users:
                    self._class_busy[k] += dt
        self._last = now

    def read(
        self,
        nbytes_per_core: float,
        *,
        pattern: int,
        noc_bandwidth_Bps: float,
        latency_s: float,
    ) -> simpy.Event:
        """Every core of access pattern ``pattern`` reads ``nbytes_per_core``."""
        now = self.env.now
        self._advance(now)
        done = Arrival(self.env)
        self._read_per_core[pattern] += nbytes_per_core
        if nbytes_per_core <= 0 or not self._limits[pattern]:
            done.succeed_in(0.0)
            return done
        access = _Access(nbytes_per_core, pattern, noc_bandwidth_Bps, latency_s, done)
        self._active.append(access)
        for k, _limit in self._limits[pattern]:
            self._users[k] += 1
        self._schedule()
        return done

    def _schedule(self) -> None:
        """One timer for every start and every finish, firing when the access closest to
        completion is done. Earlier timers become stale. (Exactly two timers per access, so
        the event count never depends on how accesses overlap.)"""
        self._version += 1
        version = self._version
        dt = min((a.remaining / self._rate(a) for a in self._active), default=0.0)
        timer = self.env.timeout(max(dt, 0.0))
        timer.callbacks.append(lambda _e: self._complete(version))

    def _complete(self, version: int) -> None:
        if version != self._version or not self._active:
            return  # superseded by a later start or finish, or nothing left
        self._advance(self.env.now)
        # the access this timer was set for (ties: the earliest started); rounding may leave
        # it a sliver of bytes, which is why it is not found by remaining <= 0
        a = min(self._active, key=lambda x: x.remaining / self._rate(x))
        self._active.remove(a)
        for k, _limit in self._limits[a.pattern]:
            self._users[k] -= 1
        a.done.succeed_in(a.latency)
        self._schedule()
