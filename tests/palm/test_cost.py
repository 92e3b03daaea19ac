"""Cost model physics: efficiency by shape, roofline, ring collectives, routed paths."""

from __future__ import annotations

import numpy as np
import pytest

from palm.cost.collectives import collective_time, ring_allreduce_time
from palm.cost.compute import DeviceRates, gemm_efficiency, gemm_time
from palm.engines.event.fabric import mesh_link_endpoints
from palm.hardware import HARDWARE_PRESETS, GpuClusterHardware, Mesh2DHardware, PeakTflops
from palm.network.loads import Profile, cluster_profile, mesh_profile
from palm.workload.ops import Collective, Gemm

RATES = DeviceRates(
    peak_flops=100e12,
    matmul_efficiency=0.8,
    matmul_half_dim=64.0,
    local_bandwidth_Bps=1e12,
    dram_bandwidth_Bps=1e12,
    sram_bytes=float("inf"),
    elem_bytes=2,
)


def test_efficiency_grows_with_every_dimension_and_stays_below_the_cap() -> None:
    base = gemm_efficiency(Gemm(256, 256, 256), RATES)
    for bigger in (Gemm(512, 256, 256), Gemm(256, 512, 256), Gemm(256, 256, 512)):
        assert gemm_efficiency(bigger, RATES) > base
    assert gemm_efficiency(Gemm(10**6, 10**6, 10**6), RATES) == pytest.approx(0.8, rel=1e-3)
    assert gemm_efficiency(Gemm(64, 10**9, 10**9), RATES) == pytest.approx(0.4, rel=1e-6)


def test_roofline_large_gemm_is_compute_bound_skinny_gemm_memory_bound() -> None:
    big = Gemm(8192, 8192, 8192)
    assert gemm_time(big, RATES) == pytest.approx(
        big.flops / (100e12 * gemm_efficiency(big, RATES))
    )
    skinny = Gemm(1, 8192, 8192)  # matrix-vector: reads the whole matrix for 2 FLOPs per element
    assert gemm_time(skinny, RATES) == pytest.approx(skinny.operand_elements() * 2 / 1e12)


def test_ring_allreduce_closed_form() -> None:
    step = Profile(latency_s=1e-6, bandwidth_Bps=100e9, hops=1)
    b = 64e6
    for n in (4, 16):
        expected = 2 * (n - 1) / n * b / 100e9 + 2 * (n - 1) * 1e-6
        assert ring_allreduce_time(n=n, nbytes=b, step=step) == pytest.approx(expected)
    assert ring_allreduce_time(n=1, nbytes=b, step=step) == 0.0


def test_reduce_scatter_plus_all_gather_equals_all_reduce() -> None:
    step = Profile(latency_s=2e-6, bandwidth_Bps=50e9, hops=1)
    parts = sum(
        collective_time(Collective(k, 1e8), n=8, step=step)
        for k in ("reduce-scatter", "all-gather")
    )
    assert parts == pytest.approx(collective_time(Collective("all-reduce", 1e8), n=8, step=step))


def _mesh(**over: object) -> Mesh2DHardware:
    base = dict(
        name="m",
        tiles=(2, 2),
        cores_per_tile=(2, 2),
        core_peak_tflops=PeakTflops(fp16=1.0),
        sram_per_core_mib=1.0,
        sram_bandwidth_per_core_gbps=100.0,
        intra_tile_link_gbps=100.0,
        inter_tile_link_gbps=10.0,
        intra_tile_link_latency_ns=1.0,
        inter_tile_link_latency_ns=5.0,
        dram_channels=4,
        dram_channel_bandwidth_gbps=10.0,
        dram_capacity_gib=1.0,
        dram_response_ns=50.0,
    )
    base.update(over)
    return Mesh2DHardware(**base)  # type: ignore[arg-type]


def _path(hw: Mesh2DHardware, a: tuple[int, int], b: tuple[int, int]) -> Profile:
    return mesh_profile(hw, np.array([a]), np.array([b]), with_links=True)


def _ring(hw: Mesh2DHardware, members: list[tuple[int, int]]) -> Profile:
    arr = np.array(members)
    return mesh_profile(hw, arr, np.roll(arr, -1, axis=0))


def test_xy_route_goes_along_the_row_first() -> None:
    hw = _mesh()
    links = _path(hw, (0, 0), (1, 2)).links
    assert links is not None and set(links.loads.tolist()) == {1.0}
    hops = sorted(mesh_link_endpoints(hw, int(i)) for i in links.ids)
    assert hops == [((0, 0), (0, 1)), ((0, 1), (0, 2)), ((0, 2), (1, 2))]
    assert _path(hw, (2, 2), (2, 2)).hops == 0


def test_mesh_path_counts_intra_and_inter_tile_hops_by_hand() -> None:
    hw = _mesh()  # 4 x 4 cores, tile boundary between core rows/cols 1 and 2
    inside = _path(hw, (0, 0), (1, 1))  # 2 hops inside tile 0
    assert (inside.hops, inside.latency_s, inside.bandwidth_Bps) == (2, pytest.approx(2e-9), 100e9)
    across = _path(hw, (0, 0), (0, 3))  # 3 hops: intra, inter, intra
    assert across.hops == 3
    assert across.latency_s == pytest.approx((1 + 5 + 1) * 1e-9)
    assert across.bandwidth_Bps == 10e9
    corner = _path(hw, (0, 0), (3, 3))  # 6 hops, 2 of them cross tiles
    assert corner.latency_s == pytest.approx((4 * 1 + 2 * 5) * 1e-9)


def test_ring_takes_slowest_edge() -> None:
    hw = _mesh()
    ring = _ring(hw, [(0, 0), (0, 1), (1, 1), (1, 0)])  # a 2x2 ring inside one tile
    assert (ring.hops, ring.bandwidth_Bps) == (1, 100e9)
    spread = _ring(hw, [(0, 0), (0, 2)])  # crosses a tile boundary both ways
    assert spread.bandwidth_Bps == 10e9 and spread.hops == 2


def test_gpu_cluster_paths_use_switch_inside_a_node_and_nic_across() -> None:
    hw = HARDWARE_PRESETS["dgx-a100"]

    def bw(src: list[int], dst: list[int]) -> float:
        return cluster_profile(hw, np.array(src), np.array(dst), devices=16).bandwidth_Bps  # type: ignore[arg-type]

    assert bw([0], [7]) == 300e9
    assert bw([7], [8]) == 25e9
    assert bw(list(range(16)), list(range(1, 16)) + [0]) == 25e9


def test_gpu_cluster_port_loads_count_each_transfer_on_its_ports() -> None:
    """Hand-worked: on 2 nodes of 8, transfers 0->1, 0->2 (same node: switch ports), 3->9,
    3->10, 4->9 (across: NICs). Switch out of GPU 0 carries 2 transfers, NIC out of GPU 3
    carries 2, NIC in of GPU 9 carries 2: the busiest port of each kind sets the bandwidth,
    and the link list names every loaded port once, ascending, with its count."""
    hw = HARDWARE_PRESETS["dgx-a100"]
    assert isinstance(hw, GpuClusterHardware)
    src, dst = np.array([0, 0, 3, 3, 4, 5]), np.array([1, 2, 9, 10, 9, 5])  # 5->5: no transfer
    prof = cluster_profile(hw, src, dst, devices=16, with_links=True)
    assert prof.links is not None
    d = 16
    expected = {
        0 * d + 0: 2.0,  # switch out of GPU 0
        1 * d + 1: 1.0,
        1 * d + 2: 1.0,  # switch in of GPUs 1, 2
        2 * d + 3: 2.0,
        2 * d + 4: 1.0,  # NIC out of GPUs 3, 4
        3 * d + 9: 2.0,
        3 * d + 10: 1.0,  # NIC in of GPUs 9, 10
    }
    assert prof.links.ids.tolist() == sorted(expected)
    assert prof.links.loads.tolist() == [expected[i] for i in sorted(expected)]
    # two transfers share the busiest NIC: 25 GB/s / 2 (the switch's 2 on 300 GB/s is faster)
    assert prof.bandwidth_Bps == 25e9 / 2
    assert prof.latency_s == hw.inter_node_latency_us * 1e-6
