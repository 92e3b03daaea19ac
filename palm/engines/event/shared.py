"""What the engine's networks share: SimPy events with their fields in slots (``Arrival``, the
done event of a hand-off or a flow; ``Timer``) and the DRAM channels grouped into classes
(``ChannelClasses``). The DRAM system of the ``exclusive`` model is
:mod:`palm.engines.event.dram_system`."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from heapq import heappush
from typing import Any

import numpy as np
import simpy

__all__ = ["Arrival", "ChannelClasses", "PENDING", "Timer"]

_NORMAL = simpy.events.NORMAL


#: the value of an event not triggered yet (SimPy's ``simpy.events.PENDING``)
PENDING = simpy.events.PENDING


class Arrival(simpy.Event):
    """An event that can be told, at the sender's time, to fire ``delay`` seconds later: one
    scheduled event per hand-off instead of a timeout plus a trigger.

    The fields SimPy reads and writes on every event (``simpy.Event``'s, SimPy 4.1
    simpy/events.py) are slots, not entries of the instance's dictionary: the engine makes
    and fires thousands of these per run. A slot has no class default, so ``_value`` is set
    to ``PENDING`` when the event is made (``Event.__init__`` leaves it to the class).

    The fair network (:mod:`palm.engines.event.fair`) keeps the flow an arrival marks the end
    of on the arrival itself, one object per flow (the other slots; so an arrival is the done
    event of one flow at most)."""

    __slots__ = (
        "env",
        "callbacks",
        "_ok",
        "_value",
        # the fair network's flow (palm.engines.event.fair._Flow)
        "route",
        "seq",
        "remaining",
        "t0",
        "rate",
        "end",
        "latency",
        "finish",
    )
    route: Any  # a palm.engines.event.fair.Route
    seq: int
    remaining: float
    t0: float
    rate: float
    end: float
    latency: float
    finish: float

    def __init__(self, env: simpy.Environment) -> None:
        self.env, self.callbacks, self._value = env, [], PENDING

    def succeed_in(self, delay: float) -> None:
        # the two fields Event.succeed sets (SimPy 4, simpy/events.py), then a delayed schedule
        self._ok = True
        self._value = None
        env = self.env  # Environment.schedule, inlined
        heappush(env._queue, (env._now + delay, _NORMAL, next(env._eid), self))  # noqa: SLF001


class Timer(simpy.Timeout):
    """``simpy.Timeout`` with SimPy's per-event fields as slots (see :class:`Arrival`), for
    the timeouts the engine builds without the constructor's calls (every field set)."""

    __slots__ = ("env", "callbacks", "_value", "_delay", "_ok")


class ChannelClasses:
    """The DRAM channels of a mesh grouped into *classes*: channels that the same set of access
    patterns use always carry the same accesses, so a rate is a minimum over classes, not over
    channels, and an access costs the same on a 4 x 4 mesh as on a 633 x 633 one.

    ``patterns`` lists, once per kind of access (a stage's cores reading), the channels it
    uses and how many cores' worth of bytes each serves per byte read by one core."""

    def __init__(
        self,
        bandwidth_Bps: Sequence[float],
        patterns: Sequence[tuple[Sequence[int], Sequence[float]]],
    ) -> None:
        self.bandwidth = list(bandwidth_Bps)
        n_channels = len(self.bandwidth)
        bandwidth = np.asarray(self.bandwidth, dtype=np.float64)
        self.read_per_core = [0.0] * len(patterns)
        #: per pattern: its channels and cores per channel, as arrays
        self.patterns: list[tuple[np.ndarray, np.ndarray]]
        if self._one_class(bandwidth, patterns):
            return
        self.patterns = [
            (np.asarray(channels, dtype=np.int64), np.asarray(cores, dtype=np.float64))
            for channels, cores in patterns
        ]
        # which patterns use each channel, as rows of a (channels x patterns) table
        uses = np.zeros((n_channels, max(1, len(self.patterns))), dtype=bool)
        for p, (channels, _cores) in enumerate(self.patterns):
            uses[channels, p] = True
        used = np.nonzero(uses.any(axis=1))[0]
        _keys, first, klass = np.unique(uses[used], axis=0, return_index=True, return_inverse=True)
        rank = np.argsort(np.argsort(first))  # classes numbered by their lowest channel
        self.channel_class = np.full(n_channels, -1, dtype=np.int64)
        self.channel_class[used] = rank[klass.ravel()]
        self.count = len(first)
        #: per pattern: (class, min over its channels of bandwidth / cores) pairs
        self.limits: list[tuple[tuple[int, float], ...]] = []
        for channels, cores in self.patterns:
            best = np.full(self.count, np.inf)
            np.minimum.at(best, self.channel_class[channels], bandwidth[channels] / cores)
            k = np.nonzero(np.isfinite(best))[0]
            self.limits.append(tuple(zip(k.tolist(), best[k].tolist(), strict=True)))

    def _one_class(
        self, bandwidth: np.ndarray, patterns: Sequence[tuple[Sequence[int], Sequence[float]]]
    ) -> bool:
        """When every pattern uses the same channels, in the same order (interleaved
        placement: every stage reads every channel), they are one class, numbered 0, and a
        pattern's limit is the least of its channels' ``bandwidth / cores``: what the general
        grouping gives (a minimum is exact in any order), without sorting the table of uses.
        The patterns then share one array of channels, their cores are rows of one array.
        False (nothing set) otherwise."""
        if not patterns or not len(patterns[0][0]):
            return False
        same = tuple(patterns[0][0])
        if not all(tuple(channels) == same for channels, _ in patterns):
            return False
        first = np.asarray(same, dtype=np.int64)
        cores = np.asarray([c for _, c in patterns], dtype=np.float64)  # (patterns, channels)
        self.patterns = [(first, row) for row in cores]
        self.channel_class = np.full(len(self.bandwidth), -1, dtype=np.int64)
        self.channel_class[first] = 0
        self.count = 1
        per_core = bandwidth[first][None, :] / cores
        least = per_core.min(axis=1).tolist()
        self.limits = [((0, x),) if x < np.inf else () for x in least]
        return True

    def fresh(self) -> ChannelClasses:
        """The same classes with nothing read yet: a run's own, from one built once per plan."""
        out = copy.copy(self)
        out.read_per_core = [0.0] * len(self.patterns)
        return out

    def per_channel(self, per_class: Sequence[float]) -> np.ndarray:
        """A per-class quantity spread over the channels (0 for unused channels)."""
        values = np.append(np.asarray(per_class, dtype=np.float64), 0.0)
        out: np.ndarray = values[self.channel_class]  # class -1 (unused) reads the trailing 0
        return out

    @property
    def nbytes(self) -> np.ndarray:
        """Bytes each channel delivered."""
        out = np.zeros(len(self.bandwidth))
        for (channels, cores), per_core in zip(self.patterns, self.read_per_core, strict=True):
            if per_core:
                np.add.at(out, channels, cores * per_core)
        return out
