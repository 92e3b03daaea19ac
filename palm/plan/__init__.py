"""Compile a configuration into the costs every engine shares.

The plan cuts the operator chain into ``pp * interleave`` chunks (chunk ``c`` runs on pipeline
rank ``c % pp``, as in Megatron-LM's interleaved schedule), prices one micro-batch of each
chunk (:mod:`palm.cost.compute`), and describes every *flow* an iteration needs as a
:class:`~palm.network.loads.Profile` over the devices that take part: the tensor-parallel ring
of every replica of a stage, the data-parallel rings, the activation and gradient hand-offs
between the devices of neighbouring chunks, and (on a mesh) the DRAM reads of each stage's
cores. The analytical engine adds these up; the event engine schedules them on shared
resources.

Where each concern lives (the steps of :func:`build_plan`, :mod:`palm.plan.build`):

========================  =================================================================
:mod:`.context`           validation, workload with operator splits, partition into chunks
:mod:`.rings`             TP / DP / split-group rings of each stage, collective times
:mod:`.traffic`           SRAM allocation and DRAM traffic of a mesh stage, DRAM access
:mod:`.products`          the matrix products of every pass on their memory domains (mesh)
:mod:`.handoffs`          activation and gradient hand-offs between neighbouring chunks
:mod:`.memory`            parameters and memory per stage, ``recompute = "auto"``
:mod:`.chunks`            compute pricing and collectives of each chunk (:class:`ChunkCost`)
:mod:`.stages`            DP gradient reduction and optimizer step (:class:`StageCost`)
:mod:`.types`             :class:`Plan`, :class:`StageCost`, :class:`ChunkCost`
========================  =================================================================

How the chain is cut is :mod:`palm.partition`; how a stage reaches DRAM is
:mod:`palm.network.dram`. Identical operators are priced once.
"""

from __future__ import annotations

from palm.network.dram import DramAccess
from palm.partition import partition
from palm.plan.build import build_plan
from palm.plan.stages import MAX_DP_BUCKETS
from palm.plan.types import ChunkCost, Plan, StageCost

__all__ = [
    "ChunkCost",
    "StageCost",
    "Plan",
    "DramAccess",
    "build_plan",
    "partition",
    "MAX_DP_BUCKETS",
]
