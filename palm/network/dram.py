"""How a stage's cores reach the DRAM channels on the edge of a mesh (paper Eq. 4, 5)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from palm.hardware.spec import Mesh2DHardware
from palm.network.loads import Profile, mesh_profile, nearest_channel

__all__ = ["DramAccess", "dram_access"]


@dataclass(frozen=True)
class DramAccess:
    """How one stage's cores reach DRAM (paper Eq. 4, 5): each core reads its nearest channel,
    so channel ``i`` serves ``cores_per_channel[i]`` cores; ``noc`` is the profile of all those
    reads crossing the mesh at once. A read of ``b`` bytes per core takes, on channel ``i``,

        response + NoC latency + b * max(cores_i / channel_bandwidth, 1 / NoC bandwidth)

    and the access is done when its slowest channel is."""

    channels: tuple[int, ...]
    cores_per_channel: tuple[int, ...]
    noc: Profile
    channel_bandwidth_Bps: float
    response_s: float

    def channel_time(self, index: int, nbytes_per_core: float) -> float:
        if nbytes_per_core <= 0:
            return 0.0
        per_byte = max(
            self.cores_per_channel[index] / self.channel_bandwidth_Bps, 1.0 / self.noc.bandwidth_Bps
        )
        return self.response_s + self.noc.latency_s + nbytes_per_core * per_byte

    def time(self, nbytes_per_core: float) -> float:
        """When the busiest channel is done (the time grows with a channel's core count)."""
        if not self.channels:
            return 0.0
        busiest = self.cores_per_channel.index(max(self.cores_per_channel))
        return self.channel_time(busiest, nbytes_per_core)


def dram_access(
    hw: Mesh2DHardware, cores: np.ndarray, channels_at: np.ndarray, *, with_links: bool
) -> DramAccess:
    """Each core reads from its nearest channel (Manhattan distance, lowest index on ties)."""
    nearest = nearest_channel(hw, cores)
    noc = mesh_profile(hw, channels_at[nearest], cores, with_links=with_links)
    per_channel = np.bincount(nearest, minlength=len(channels_at))
    used = tuple(int(i) for i in np.nonzero(per_channel)[0])
    return DramAccess(
        channels=used,
        cores_per_channel=tuple(int(per_channel[i]) for i in used),
        noc=noc,
        channel_bandwidth_Bps=hw.dram_channel_bandwidth_gbps * 1e9 * hw.memory_efficiency,
        response_s=hw.dram_response_ns * 1e-9,
    )
