"""Collectives of one serving step: the tensor-parallel all-reduce (small messages at decode),
the expert-parallel dispatch and combine, and the pipeline hand-off.

At decode an all-reduce carries ``T x hidden`` activations of a few dozen tokens: kilobytes,
where the per-step latency, not the bandwidth, is the cost. Serving runtimes therefore pick the
algorithm by size (vLLM ``custom_all_reduce.cuh``: a one-stage kernel below 512 KiB on 8 GPUs,
a two-stage one above; TensorRT-LLM ``customAllReduceKernels``: ``ONESHOT`` / ``TWOSHOT``,
NCCL's ring for large messages). Over ``n`` GPUs, a buffer of ``B`` bytes, per-GPU link
bandwidth ``bw`` and per-step latency ``lat`` (:data:`palm.hardware.spec.GpuClusterHardware`
``switch_latency_us`` inside a node, ``inter_node_latency_us`` across):

* ring (Patarasuk & Yuan 2009; :func:`palm.cost.collectives.ring_allreduce_time`):
  ``2 (n-1)/n B / bw + 2 (n-1) lat``;
* one-shot: every GPU writes its whole buffer to every peer and reduces what it receives,
  ``(n-1) B / bw + lat``;
* two-shot: a direct reduce-scatter then all-gather, ``2 (n-1)/n B / bw + 2 lat``;

and the step takes the least of the three (what the runtimes' size switch approximates).

Expert parallelism (vLLM's and SGLang's expert-parallel MoE, DeepSeek-V3 report sec. 3.4):
the tokens of a layer go to the devices holding their experts and come back, an all-to-all of
``T k h`` elements each way (:func:`palm.cost.collectives.cluster_all_to_all_step`, priced as
:func:`palm.cost.collectives.collective_time` of an all-to-all).

A pipeline hand-off sends ``T x hidden`` activations to the next stage: ``lat + B / bw``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from palm.cost.collectives import cluster_all_to_all_step, collective_time, ring_allreduce_time
from palm.hardware.spec import GpuClusterHardware
from palm.workload.ops import Collective

__all__ = ["Link", "group_link", "allreduce_time", "all_to_all_time", "handoff_time"]


@dataclass(frozen=True)
class Link:
    """One ring step of a group: its latency and per-GPU bandwidth (a
    :class:`palm.cost.collectives.RingStep`)."""

    latency_s: float
    bandwidth_Bps: float


def group_link(hw: GpuClusterHardware, *, size: int) -> Link:
    """The link of a group of ``size`` consecutive GPUs: the switch inside a node, the network
    when the group spans nodes."""
    if size <= hw.gpus_per_node:
        return Link(hw.switch_latency_us * 1e-6, hw.switch_bandwidth_gbps * 1e9)
    return Link(hw.inter_node_latency_us * 1e-6, hw.inter_node_bandwidth_gbps * 1e9)


def allreduce_time(*, n: int, nbytes: float, link: Link) -> float:
    """The least of ring, one-shot and two-shot all-reduce (module docstring)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    ring = ring_allreduce_time(n=n, nbytes=nbytes, step=link)
    one_shot = (n - 1) * nbytes / link.bandwidth_Bps + link.latency_s
    two_shot = 2.0 * (n - 1) / n * nbytes / link.bandwidth_Bps + 2.0 * link.latency_s
    return min(ring, one_shot, two_shot)


def all_to_all_time(
    hw: GpuClusterHardware, *, n: int, nbytes: float, experts: int, top_k: int
) -> float:
    """An expert-parallel all-to-all over ``n`` consecutive GPUs of ``nbytes`` per GPU."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    groups = np.arange(n, dtype=np.int64).reshape(1, n)
    step = cluster_all_to_all_step(hw, groups, routing=(experts, top_k))
    return collective_time(Collective("all-to-all", nbytes, group="ep"), n=n, step=step)


def handoff_time(*, nbytes: float, link: Link) -> float:
    """A pipeline hand-off of ``nbytes`` to the next stage."""
    if nbytes <= 0:
        return 0.0
    return link.latency_s + nbytes / link.bandwidth_Bps
