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

An all-to-all on a GPU cluster (mixture-of-experts token dispatch) is not a ring: each member
sends ``B / n`` to every other member at once (pairwise exchange, Thakur et al. 2005), the
``local - 1`` peers in its own node through its switch port and the ``n - local`` others through
its own NIC, so (each GPU belonging to one group, its port and NIC carry only its traffic)

    t = max((local - 1)/n * B / bw_switch, (n - local)/n * B / bw_nic) + (n - 1) lat,

which :func:`all_to_all_step` writes as a step of bandwidth
``(n - 1) / max((local - 1)/bw_switch, (n - local)/bw_nic)`` for the formula above.

**Hierarchical dispatch** (DeepEP's normal kernels and HybridEP, Megatron-Core's ``flex``
dispatcher; DeepSeek-V3 report sec. 3.2.2): a token bound for several experts on one remote
node crosses the network once, to the GPU of the same in-node index there, which forwards it
to the others over NVLink (DeepEP ``csrc/kernels/internode.cu``: one RDMA send per token and
node, with a bit mask of the NVLink ranks it goes to). With ``E`` experts spread evenly over
the ``N`` nodes of the group and ``k`` of them drawn per token without replacement, a node
receives none of a token's copies with probability ``p0 = C(E - E/N, k) / C(E, k)``, so the
NIC carries ``(N - 1)(1 - p0)`` copies per token instead of ``k (N - 1)/N``: a factor
``N (1 - p0) / k`` (:func:`hierarchical_inter_node_scale`). The forwarded copies cross NVLink
at the far end: ``(n - local)(local - 1)/local`` more parts on the switch port.

The same deduplication holds rank by rank over NVLink: DeepEP's normal kernels send a token
once to each rank that hosts any of its experts (``get_dispatch_layout``'s
``is_token_in_rank``, ``num_tokens_per_rank``), and HybridEP's dispatch output holds one row
per source token and destination rank, expanded to at most ``min(top_k, local experts)`` rows
by the permute that follows it (DeepEP ``docs/Hybrid-EP_Implementation.md`` @0b18ed2a, 7.2
"Buffer allocation challenge"; its combine reduces a token's expert outputs on each rank
before sending one row back, sec. 8.2). With ``E / n`` experts on each of the ``n`` ranks a
rank receives none of a token's copies with probability ``p0r = C(E - E/n, k) / C(E, k)``,
so every part on the switch port (the own node's and the forwarded ones) is scaled by
``n (1 - p0r) / k`` (:func:`hierarchical_inter_node_scale` with ``n`` destinations), inside
one node too. Megatron-Core's all-to-all dispatcher permutes first and sends ``k`` copies
(``MoEAlltoAllTokenDispatcher``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from palm.hardware.spec import GpuClusterHardware
from palm.workload.ops import Collective

__all__ = [
    "collective_time",
    "ring_allreduce_time",
    "RingStep",
    "bytes_sent_per_member",
    "AllToAllStep",
    "all_to_all_step",
    "cluster_all_to_all_step",
    "hierarchical_inter_node_scale",
]


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


@dataclass(frozen=True)
class AllToAllStep:
    """The step an all-to-all behaves as in :func:`collective_time` (a :class:`RingStep`)."""

    latency_s: float
    bandwidth_Bps: float


def all_to_all_step(
    *,
    n: int,
    local: int,
    intra_Bps: float,
    inter_Bps: float,
    intra_latency_s: float,
    inter_latency_s: float,
    inter_scale: float | None = None,
    rank_scale: float = 1.0,
) -> AllToAllStep:
    """Step of an all-to-all over ``n`` members of which ``local`` (itself included) share the
    node of the member with the fewest local peers: bandwidth
    ``(n - 1) / max((local - 1)/intra, (n - local)/inter)``, latency of the slowest path.
    ``inter_scale`` (hierarchical dispatch, module docstring) scales the parts that cross the
    network and adds the copies forwarded over NVLink at the far end; ``rank_scale`` (one copy
    per destination rank, module docstring) scales every part on the switch port."""
    if n <= 1:
        return AllToAllStep(0.0, float("inf"))
    intra_parts, inter_parts = float(local - 1), float(n - local)
    if inter_scale is not None and n > local:
        intra_parts += (n - local) * (local - 1) / local
        inter_parts *= inter_scale
    intra_parts *= rank_scale
    slowest = max(intra_parts / intra_Bps, inter_parts / inter_Bps)
    latency = inter_latency_s if local < n else intra_latency_s
    return AllToAllStep(latency, (n - 1) / slowest)


def hierarchical_inter_node_scale(*, experts: int, top_k: int, nodes: int) -> float:
    """Network bytes of a hierarchical dispatch relative to a flat all-to-all: a token's copies
    for one remote node travel once, ``N (1 - p0) / k`` with ``p0 = C(E - E/N, k) / C(E, k)``
    (module docstring); 1 within one node or with one copy per token. With ``nodes`` the
    ranks of the group, the same factor for one copy per destination rank."""
    if nodes <= 1 or top_k <= 1:
        return 1.0
    per_node = experts // nodes
    p0 = math.comb(experts - per_node, top_k) / math.comb(experts, top_k)
    return min(1.0, nodes * (1.0 - p0) / top_k)


def cluster_all_to_all_step(
    hw: GpuClusterHardware, groups: np.ndarray, *, routing: tuple[int, int] | None = None
) -> AllToAllStep:
    """The all-to-all step of concurrent groups of GPUs (``groups[g, i]`` = global rank of
    member ``i`` of group ``g``), limited by the member with the fewest peers in its node.
    ``routing = (experts, top_k)`` prices a hierarchical dispatch (module docstring) over the
    ``n / local`` nodes a group spans."""
    groups = np.asarray(groups, dtype=np.int64).reshape(-1, groups.shape[-1])
    node = groups // hw.gpus_per_node
    # members per (group, node): the smallest count is the member with the fewest local peers
    keys = np.arange(len(node))[:, None] * (int(node.max()) + 1) + node
    local = int(np.unique(keys, return_counts=True)[1].min())
    n = groups.shape[1]
    scale = None
    rank_scale = 1.0
    if routing is not None:
        scale = hierarchical_inter_node_scale(
            experts=routing[0], top_k=routing[1], nodes=max(1, n // local)
        )
        # one copy per destination rank over NVLink: the same law with n destinations
        rank_scale = hierarchical_inter_node_scale(experts=routing[0], top_k=routing[1], nodes=n)
    return all_to_all_step(
        n=n,
        local=local,
        inter_scale=scale,
        rank_scale=rank_scale,
        intra_Bps=hw.switch_bandwidth_gbps * 1e9,
        inter_Bps=hw.inter_node_bandwidth_gbps * 1e9,
        intra_latency_s=hw.switch_latency_us * 1e-6,
        inter_latency_s=hw.inter_node_latency_us * 1e-6,
    )
