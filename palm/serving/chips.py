"""The serving device of a ``mesh2d`` system and the links between such devices.

A mesh whose tiles are chips joined by chip-to-chip links (``chip_links_per_edge > 0``:
Tenstorrent n300, T3000, Galaxy, p150 x 4; docs/model.md sec. 7c) serves as one device per
chip, as tt-metal's ``tt_transformers`` places one tensor-parallel shard of the model on each
chip of its mesh device (weights and KV cache in the chip's own DRAM, ``dram_placement =
"per-tile"``: "there is no concept of shared memory or global addressability across chips",
tt-metal ``tech_reports/EthernetMultichip/BasicEthernetGuide.md``). Any other mesh (one chip,
or the PALM paper's wafer of tiles) serves as a single device.

Between the chips a tensor-parallel collective runs on a ring over the chips of its group
(tt-metal's CCL all-gather and reduce-scatter on a ring or line of Ethernet links): each ring
step crosses one chip edge, whose ``chip_links_per_edge`` links of ``inter_tile_link_gbps``
each carry ``chip_links_per_edge x inter_tile_link_gbps`` per direction, after
``inter_tile_link_latency_ns`` per hop. There is no switch: the one-shot and two-shot
algorithms of :mod:`palm.serving.comm` (every device writing to every peer) do not apply, so
an all-reduce of ``B`` bytes over ``n`` chips takes the ring's
``2 (n-1)/n B / bw + 2 (n-1) lat`` (Patarasuk & Yuan 2009).
"""

from __future__ import annotations

from palm.cost.collectives import ring_allreduce_time
from palm.hardware.spec import Mesh2DHardware
from palm.serving.comm import Link

__all__ = ["chip_devices", "chip_link", "chip_allreduce_time", "chip_allgather_time"]


def chip_devices(hw: Mesh2DHardware) -> int:
    """Serving devices of ``hw``: its chips when tiles are chips on links, else 1."""
    return hw.tile_count if hw.chip_links_per_edge > 0 else 1


def chip_link(hw: Mesh2DHardware) -> Link:
    """One ring step between neighbouring chips: the edge's links together, per direction."""
    gbps = max(hw.chip_links_per_edge, 1) * hw.inter_tile_link_gbps
    return Link(hw.inter_tile_link_latency_ns * 1e-9, gbps * 1e9)


def chip_allreduce_time(hw: Mesh2DHardware, *, n: int, nbytes: float) -> float:
    """Ring all-reduce of ``nbytes`` per chip over ``n`` chips (module docstring)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return ring_allreduce_time(n=n, nbytes=nbytes, step=chip_link(hw))


def chip_allgather_time(hw: Mesh2DHardware, *, n: int, nbytes: float) -> float:
    """Ring all-gather whose gathered result is ``nbytes`` per chip:
    ``(n-1)/n B / bw + (n-1) lat``."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    link = chip_link(hw)
    return (n - 1) / n * nbytes / link.bandwidth_Bps + (n - 1) * link.latency_s
