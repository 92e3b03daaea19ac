"""NCCL's channels on a GPU cluster: a ring whose members share nodes uses every NIC of them.

NCCL builds one ring per *channel* and, on rail-optimised clusters (one NIC per GPU, as on
DGX A100 / H100 / B200 and GB200 NVL72), gives each channel a different NIC, so that a
collective over ``m`` GPUs per node leaves each node through ``m`` NICs, each channel carrying
``1/m`` of the data (NCCL ``src/graph/search.cc`` "ring graph" search over NICs; NVIDIA,
"Doubling all2all performance" / DGX SuperPOD reference architecture, rail-optimised fabric).
Inside the node every channel's hops run over NVLink, which carries the whole buffer.

A ring's per-step bandwidth is therefore ``min(m * nic, nvlink)`` when it crosses nodes, not
the single-NIC figure of one ring edge: a 64-GPU FSDP all-gather on 8 DGX H100 runs at
``min(8 x 50, 450) = 400`` GB/s per GPU, where a single ring would see 50. A ring with one
member per node (the DP rings of ``tp = 8``) keeps one NIC per ring, as before.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from palm.hardware.spec import GpuClusterHardware
from palm.network.loads import Profile

__all__ = ["members_per_node", "with_channels"]


def members_per_node(hw: GpuClusterHardware, ring: np.ndarray) -> int:
    """Most members of the ring ``ring`` (global GPU ranks) that share one node."""
    nodes = np.asarray(ring, dtype=np.int64).ravel() // hw.gpus_per_node
    return int(np.bincount(nodes).max())


def with_channels(hw: GpuClusterHardware, prof: Profile, *, members: int, crosses: bool) -> Profile:
    """``prof`` of a ring with ``members`` GPUs per node, spread over that many channels."""
    if members <= 1 or not crosses:
        return prof
    bandwidth = min(members * hw.inter_node_bandwidth_gbps, hw.switch_bandwidth_gbps) * 1e9
    if bandwidth <= prof.bandwidth_Bps:
        return prof
    return dataclasses.replace(prof, bandwidth_Bps=bandwidth)
