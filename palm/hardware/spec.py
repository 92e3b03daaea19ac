"""What the model runs on: a 2-D mesh of tiles (``mesh2d``) or a cluster of GPU nodes
(``gpu-cluster``). Plain frozen data; units are in the field names.

``mesh2d`` (paper sec. IV, Fig. 1c): ``tiles = (rows, cols)`` of tiles, each a
``cores_per_tile = (rows, cols)`` mesh of cores. A *device* is one core: it has a compute peak
per precision and its own SRAM. Cores are joined by a 2-D mesh NoC whose links inside a tile
run at ``intra_tile_link_gbps`` and between tiles at ``inter_tile_link_gbps`` (per direction).
``dram_channels`` channels sit on the edge of the mesh, spread evenly round its perimeter, each
with its bandwidth and response time (paper Eq. 4); their capacity is shared by all cores.
A mesh whose tiles are chips (Tenstorrent n300, T3000, Galaxy, p150 x 4; docs/model.md sec.
7c) gives each tile its own channels (``dram_placement = "per-tile"``) and joins the tiles by
``chip_links_per_edge`` chip-to-chip links of ``inter_tile_link_gbps`` each.

``gpu-cluster``: nodes of ``gpus_per_node`` GPUs on a switch (NVSwitch), each GPU with its own
NIC into a fat tree whose core is non-blocking. A device is one GPU. The device count follows
from the parallel strategy unless ``gpus`` fixes it.

Chips with a Tensix matrix engine (Tenstorrent Wormhole, Blackhole) add: ``math_fidelity``,
the number of multiplier phases per product (``lofi`` 1, ``hifi2`` 2, ``hifi3`` 3, ``hifi4`` 4:
16, 32, 48 or 64 cycles per 32x32x32 tile product; ``core_peak_tflops`` is then the one-phase
(LoFi) rate and :meth:`Mesh2DHardware.peak_flops` divides it by the phase count);
``compute_grid = (rows, cols)``, the cores a job uses (``(0, 0)``: all); ``operand_feed_gelems``,
the rate, in 10^9 elements per second (elements per cycle at 1 GHz), at which a core's
unpackers bring operand datums from SRAM into the matrix engine's source registers (one operand
tile of 1024 elements per tile product, whatever its format; 0: no limit), which bounds the
engine when its own rate is higher (low fidelity); and the launch costs of
one program (``launch_us`` on the device, ``host_dispatch_us`` on the host when ``dispatch =
"host"``, plus ``host_sharded_output_us`` when the output is L1-sharded), which the ``gemm``
workload (:mod:`palm.workload.gemm`) charges, as it does ``matmul_config``, the program
config a product runs with (``"block2d"`` hand-tuned, ``"auto"`` ttnn's out-of-box choice),
and ``noc_floorplan``, the floorplan whose NoC routes price a product's output writes
(``"wormhole-b0"``: :mod:`palm.network.tensix_noc`; ``""``: none, the DRAM rate).

Both carry the constants of the achievable-efficiency model of :mod:`palm.cost.compute`
(``matmul_efficiency``, ``matmul_half_dim``, ``memory_efficiency``; on GPUs also
``fp8_matmul_efficiency`` for products run in FP8, ``attention_efficiency`` of the
FlashAttention kernel and ``grouped_gemm_efficiency``, the extra loss of a mixture-of-experts
grouped GEMM, 1.0 = only the shape rule, and ``grouped_gemm_expert_us``, the fixed time each
local expert's product adds to a grouped GEMM in each pass, and ``overlap_interference``, the
compute time lost per second of a ZeRO-3 / FSDP collective hidden behind it); their values
and origin are in ``docs/model.md``. A GPU also has ``sfu_exp_tera_per_s``, the rate of its
special-function units in 10^12 exponentials per second (a hardware figure: the softmax's
exponentials bound a FlashAttention kernel with small heads, :func:`palm.cost.compute.
attention_time`; 0 = not modelled), ``sm_count``, its streaming multiprocessors, and
``kernel_arch``, the architecture whose kernel constants (fitted on published kernel
measurements, :mod:`palm.cost.kernels`) price its GEMM and attention kernels from their shapes.
``sram_model`` chooses how a mesh prices DRAM traffic: ``"blocked"`` (per matrix product,
:mod:`palm.cost.blocking`) or ``"algorithm1"`` (the paper's per-layer rule,
:mod:`palm.cost.sram`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "PeakTflops",
    "Mesh2DHardware",
    "GpuClusterHardware",
    "Hardware",
    "MATH_FIDELITY_CYCLES",
    "TILE_DIM",
    "FLOORPLAN_TENSIX_GRID",
]

TILE_DIM = 32
"""Side of the square tile the Tensix matrix engine works on (tt-metal ``TILE_HEIGHT``)."""

MATH_FIDELITY_CYCLES: dict[str, int] = {"lofi": 16, "hifi2": 32, "hifi3": 48, "hifi4": 64}
"""Cycles of one 32x32x32 tile product on a Tensix matrix engine by math fidelity (one
multiplier phase per 16 cycles; tt-isa-documentation WormholeB0 MatrixUnit.md, tt-metal
tech_reports/GEMM_FLOPS)."""


FLOORPLAN_TENSIX_GRID: dict[str, tuple[int, int]] = {"wormhole-b0": (10, 8)}
"""Rows and columns of Tensix cores of each NoC floorplan (``Mesh2DHardware.noc_floorplan``):
Wormhole B0 has 10 rows of 8 (tt-isa-documentation ``WormholeB0/README.md``;
:data:`palm.network.tensix_noc.TENSIX_CORES`)."""


@dataclass(frozen=True)
class PeakTflops:
    """Dense peak TFLOP/s of one device by precision; 0 means not supported."""

    fp32: float = 0.0
    bf16: float = 0.0
    fp16: float = 0.0
    fp8: float = 0.0
    int8: float = 0.0
    bfp8: float = 0.0
    bfp4: float = 0.0
    #: NVFP4 (Blackwell's 4-bit floating point with block scales; :mod:`palm.serving.spec`)
    fp4: float = 0.0

    def get(self, precision: str) -> float:
        value: float = getattr(self, precision)
        return value


@dataclass(frozen=True)
class Mesh2DHardware:
    name: str
    tiles: tuple[int, int]
    cores_per_tile: tuple[int, int]
    core_peak_tflops: PeakTflops
    sram_per_core_mib: float
    sram_bandwidth_per_core_gbps: float
    intra_tile_link_gbps: float
    inter_tile_link_gbps: float
    intra_tile_link_latency_ns: float
    inter_tile_link_latency_ns: float
    dram_channels: int
    dram_channel_bandwidth_gbps: float
    dram_capacity_gib: float
    dram_response_ns: float
    matmul_efficiency: float = 0.8
    matmul_half_dim: float = 16.0
    memory_efficiency: float = 0.9
    #: where a stage's data lives in DRAM (palm/network/dram.py): "interleaved" over every
    #: channel, on the channel "nearest" each core, or "per-tile": each tile is a chip with
    #: its own ``dram_channels / tiles`` channels round its own edge, and a core's data is
    #: interleaved over its own tile's channels only (a local read never leaves the chip)
    dram_placement: Literal["interleaved", "nearest", "per-tile"] = "interleaved"
    sram_model: Literal["blocked", "algorithm1"] = "blocked"
    math_fidelity: str = ""
    compute_grid: tuple[int, int] = (0, 0)
    operand_feed_gelems: float = 0.0
    launch_us: float = 0.0
    host_dispatch_us: float = 0.0
    #: extra host cost per untraced launch whose output is an L1-sharded tensor (ttnn builds
    #: the sharded output's buffer layout on every dispatch)
    host_sharded_output_us: float = 0.0
    dispatch: Literal["trace", "host"] = "trace"
    #: program config of a ``gemm``: "block2d" (hand-tuned 2-D multicast) or "auto" (ttnn's
    #: out-of-box selection, :mod:`palm.workload.gemm`)
    matmul_config: Literal["block2d", "auto"] = "block2d"
    #: the chip's NoC floorplan, where one is modelled route by route
    #: (:mod:`palm.network.tensix_noc`): "wormhole-b0", or "" (none: DRAM channels spread
    #: round the edge, as ``dram_channels`` says)
    noc_floorplan: Literal["", "wormhole-b0"] = ""
    #: tiles joined by chip-to-chip links (Tenstorrent Ethernet): links between two
    #: neighbouring tiles, per direction; ``inter_tile_link_gbps`` and
    #: ``inter_tile_link_latency_ns`` are then one such link's. The links of a tile edge are
    #: shared evenly by the core rows (columns) that cross it (:meth:`inter_tile_gbps`).
    #: 0: the paper's mesh, one inter-tile link per crossing core row (column)
    chip_links_per_edge: int = 0
    #: how the mesh runs a training step (docs/model.md sec. 7d): "overlapped" (the paper's:
    #: the model state lives in SRAM and DRAM, compute overlaps its streams) or
    #: "weight-streaming" (Cerebras: the model state lives in an external memory service
    #: reached over ``external_memory_gbps``; each layer's weights stream in, its gradients
    #: stream out, the optimizer step runs in the service and only activations stay in SRAM)
    #: or "bulk-synchronous" (Graphcore IPU, docs/model.md sec. 7e: every pass computes, then
    #: exchanges; nothing overlaps its compute, the gradient reduction waits for the last
    #: backward pass)
    execution: Literal["overlapped", "weight-streaming", "bulk-synchronous"] = "overlapped"
    #: bandwidth (GB/s, per direction) of the link between the mesh and its external memory
    #: service under ``execution = "weight-streaming"`` (0: none)
    external_memory_gbps: float = 0.0
    topology: Literal["mesh2d"] = "mesh2d"

    def inter_tile_gbps(self, *, along_row: bool) -> float:
        """Bandwidth (GB/s, per direction) of one mesh link crossing a tile boundary along a
        row (east, west) or a column (south, north). With ``chip_links_per_edge = L`` the
        ``L`` links of ``inter_tile_link_gbps`` each join two chips across an edge crossed by
        ``cores_per_tile[0]`` rows (``[1]`` columns), so each row's share is
        ``L x inter_tile_link_gbps / rows``: a flow crossing on every row gets the edge's
        whole ``L`` links, never more (docs/model.md sec. 7c)."""
        if self.chip_links_per_edge <= 0:
            return self.inter_tile_link_gbps
        crossing = self.cores_per_tile[0] if along_row else self.cores_per_tile[1]
        return self.chip_links_per_edge * self.inter_tile_link_gbps / crossing

    @property
    def tile_count(self) -> int:
        return self.tiles[0] * self.tiles[1]

    @property
    def fidelity_phases(self) -> int:
        """Multiplier phases per product at ``math_fidelity`` (1 on chips without one)."""
        if not self.math_fidelity:
            return 1
        return MATH_FIDELITY_CYCLES[self.math_fidelity] // MATH_FIDELITY_CYCLES["lofi"]

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s of one core in ``precision`` at the configured math fidelity."""
        return self.core_peak_tflops.get(precision) * 1e12 / self.fidelity_phases

    @property
    def core_grid(self) -> tuple[int, int]:
        """Rows and columns of the whole core mesh."""
        return (self.tiles[0] * self.cores_per_tile[0], self.tiles[1] * self.cores_per_tile[1])

    @property
    def cores_per_tile_count(self) -> int:
        return self.cores_per_tile[0] * self.cores_per_tile[1]

    @property
    def device_count(self) -> int:
        rows, cols = self.core_grid
        return rows * cols

    @property
    def weight_streaming(self) -> bool:
        """Whether the model state lives off the mesh (``execution = "weight-streaming"``)."""
        return self.execution == "weight-streaming"

    @property
    def bulk_synchronous(self) -> bool:
        """Whether compute and exchange alternate (``execution = "bulk-synchronous"``)."""
        return self.execution == "bulk-synchronous"

    @property
    def device_memory_bytes(self) -> float:
        """Memory one core may use: its SRAM plus an equal share of the DRAM capacity; under
        weight streaming its SRAM alone (the external service holds the model state, the
        activations stay in SRAM)."""
        if self.weight_streaming:
            return self.sram_per_core_mib * 2**20
        return self.sram_per_core_mib * 2**20 + self.dram_capacity_gib * 2**30 / self.device_count

    @property
    def dram_bandwidth_gbps(self) -> float:
        return self.dram_channels * self.dram_channel_bandwidth_gbps


@dataclass(frozen=True)
class GpuClusterHardware:
    name: str
    gpus_per_node: int
    peak_tflops: PeakTflops
    hbm_gib: float
    hbm_bandwidth_gbps: float
    switch_bandwidth_gbps: float
    switch_latency_us: float
    inter_node_bandwidth_gbps: float
    inter_node_latency_us: float
    gpus: int = 0
    matmul_efficiency: float = 0.8
    matmul_half_dim: float = 64.0
    memory_efficiency: float = 0.85
    fp8_matmul_efficiency: float = 0.8
    attention_efficiency: float = 0.6
    grouped_gemm_efficiency: float = 1.0
    grouped_gemm_expert_us: float = 0.0
    overlap_interference: float = 0.0
    sfu_exp_tera_per_s: float = 0.0
    #: GB/s per direction between one GPU and host memory (PCIe, or NVLink-C2C to a Grace
    #: CPU, shared by the GPUs on it); 0: not known (no activation offloading)
    host_link_gbps: float = 0.0
    #: streaming multiprocessors (0: unknown, kernels priced without tiles and waves)
    sm_count: int = 0
    #: the architecture whose kernel constants apply (palm/data/fitted/kernels-<arch>.toml,
    #: :mod:`palm.cost.kernels`); "": none
    kernel_arch: Literal["", "sm80", "sm90", "sm100"] = ""
    topology: Literal["gpu-cluster"] = "gpu-cluster"

    @property
    def device_memory_bytes(self) -> float:
        return self.hbm_gib * 2**30


Hardware = Mesh2DHardware | GpuClusterHardware
