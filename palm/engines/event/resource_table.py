"""The resource table of a run: for every resource (a link, a port, a stage group's aggregate),
its key, kind and capacity, when it is free again under the ``exclusive`` model's holds (sec.
IV-C: a flow holds all its resources from the first moment they are all free), how long it
was busy and the bytes it carried. Built by :func:`palm.engines.event.fabric.build_fabric`;
compiled at install time like the networks (``resource_table.pxd``,
:mod:`palm.engines.event.accel`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from palm.engines.event.fabric import Flow

__all__ = ["Fabric", "resource_label"]


class Fabric:
    """The resource table: when each resource is free, how long it was busy, bytes carried."""

    def __init__(self) -> None:
        self.keys: list[Hashable] = []
        self.kinds: list[str] = []
        self._index: dict[Hashable, int] = {}
        self.free_at: list[float] = []
        self.busy_s: list[float] = []
        self.nbytes: list[float] = []
        self.capacity_Bps: list[float] = []
        self._labels: list[str] = []

    @property
    def labels(self) -> list[str]:
        """Readable names of the resources (:func:`resource_label`), made once per fabric and
        shared by its :meth:`fresh` copies."""
        if len(self._labels) != len(self.keys):
            self._labels[:] = [resource_label(k) for k in self.keys]
        return self._labels

    def resource(self, key: Hashable, kind: str, capacity_Bps: float = 1.0) -> int:
        idx = self._index.get(key)
        if idx is None:
            idx = len(self.keys)
            self._index[key] = idx
            self.keys.append(key)
            self.kinds.append(kind)
            self.capacity_Bps.append(capacity_Bps)
            self.free_at.append(0.0)
            self.busy_s.append(0.0)
            self.nbytes.append(0.0)
        return idx

    def resources(
        self,
        keys: Iterable[Hashable],
        kind: str,
        capacity: Callable[[Hashable], float] | None = None,
    ) -> tuple[int, ...]:
        """The indices of the resources of ``keys``, in order, each added when new
        (:meth:`resource`: of kind its key's head when the key is a tuple, else ``kind``, and
        of capacity ``capacity(key)``, 1 without)."""
        index = self._index
        out = []
        for key in keys:
            idx = index.get(key)
            if idx is None:
                head = key[0] if isinstance(key, tuple) else kind
                idx = self.resource(key, head, 1.0 if capacity is None else capacity(key))
            out.append(idx)
        return tuple(out)

    def fresh(self) -> Fabric:
        """The same resources with every counter at zero: a run's own fabric, from one built
        once per plan (whose counters stay at zero)."""
        out = Fabric.__new__(Fabric)
        out.keys, out.kinds, out._index = self.keys, self.kinds, self._index
        out.capacity_Bps = self.capacity_Bps
        out._labels = self._labels
        n = len(self.keys)
        out.free_at, out.busy_s, out.nbytes = [0.0] * n, [0.0] * n, [0.0] * n
        return out

    def account(self, flow: Flow, duration: float, nbytes: float) -> None:
        """Book busy time and bytes without reserving: for a flow that nothing else shares,
        which therefore never waits."""
        busy, carried = self.busy_s, self.nbytes
        for r, load in flow.pairs:
            busy[r] += duration
            carried[r] += load * nbytes

    def book(self, flow: Flow, nbytes: float) -> None:
        """Book the bytes of a flow (the ``fair`` model, which measures busy time itself)."""
        carried = self.nbytes
        for r, load in flow.pairs:
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
        for r, load in flow.pairs:
            free[r] = end
            busy[r] += duration
            carried[r] += load * nbytes
        return end


def resource_label(key: Hashable) -> str:
    """Readable name of a resource key."""
    if isinstance(key, tuple):
        head, *rest = key
        if head == "p2p":
            return f"p2p[{rest[0]}->{rest[1]}]"
        return f"{head}[{','.join(str(x) for x in rest)}]"
    return str(key)
