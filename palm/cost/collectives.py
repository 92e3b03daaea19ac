"""Closed-form time of collectives on a ring (no contention).

With ``n`` members, a full buffer of ``B`` bytes per member, per-step bandwidth ``bw`` and
per-step latency ``lat`` (the profile of the ring, :mod:`palm.network.loads`):

* all-reduce (ring reduce-scatter then all-gather): ``2 (n-1)/n * B / bw + 2 (n-1) lat``
  (Patarasuk & Yuan 2009; Thakur et al. 2005);
* reduce-scatter and all-gather: ``(n-1)/n * B / bw + (n-1) lat``;
* all-to-all on a ring: each member's ``B`` is cut into ``n`` parts and ``n - 1`` parts
  leave it, ``(n-1)/n * B / bw + (n-1) lat``;
* broadcast and reduce, pipelined along the ring in ``n`` chunks: ``B / bw + (n-1) lat``
  (chain pipelining; the ``(n-1)`` chunk fill is folded into the latency term).
"""

from __future__ import annotations

from typing import Protocol

from palm.workload.ops import Collective

__all__ = ["collective_time", "ring_allreduce_time", "RingStep", "bytes_sent_per_member"]


class RingStep(Protocol):
    """What a ring step costs: the latency of its slowest edge and its effective bandwidth
    (a :class:`palm.network.loads.Profile`)."""

    @property
    def latency_s(self) -> float: ...

    @property
    def bandwidth_Bps(self) -> float: ...


def ring_allreduce_time(*, n: int, nbytes: float, step: RingStep) -> float:
    """``2 (n-1)/n * B / bw + 2 (n-1) * latency``."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / step.bandwidth_Bps + 2 * (n - 1) * step.latency_s


def collective_time(coll: Collective, *, n: int, step: RingStep) -> float:
    """Time of ``coll`` over ``n`` members whose ring step costs ``step``."""
    if n <= 1 or coll.nbytes <= 0:
        return 0.0
    b, bw, lat = coll.nbytes, step.bandwidth_Bps, step.latency_s
    if coll.kind == "all-reduce":
        return ring_allreduce_time(n=n, nbytes=b, step=step)
    if coll.kind in ("reduce-scatter", "all-gather", "all-to-all"):
        return (n - 1) / n * b / bw + (n - 1) * lat
    return b / bw + (n - 1) * lat  # broadcast, reduce


def bytes_sent_per_member(coll: Collective, *, n: int) -> float:
    """Bytes each member puts on the ring: ``2 (n-1)/n B`` for all-reduce, ``(n-1)/n B`` for
    reduce-scatter, all-gather and all-to-all, ``B`` for broadcast and reduce."""
    if n <= 1:
        return 0.0
    if coll.kind == "all-reduce":
        return 2 * (n - 1) / n * coll.nbytes
    if coll.kind in ("reduce-scatter", "all-gather", "all-to-all"):
        return (n - 1) / n * coll.nbytes
    return coll.nbytes
