"""Named hardware presets. Every figure carries its source; where a source gives none, the value
is an assumption, marked as such here and in ``docs/hardware.md``."""

from __future__ import annotations

from dataclasses import replace

from palm.hardware.spec import GpuClusterHardware, Hardware, Mesh2DHardware, PeakTflops

__all__ = ["HARDWARE_PRESETS", "hardware_preset"]

_MB_IN_MIB = 1e6 / 2**20

# Constants fitted on the visible Wormhole n150 measurements by benchmarks/calibrate_tiled.py
# (docs/validation.md, "Tenstorrent Wormhole n150"): the achievable fraction of the matrix
# engine's pipeline and of a DRAM channel, the rate at which the unpackers feed operand tiles
# (per cycle: 48.7 B at 1 GHz), the fixed cost of one program launch on the device (traced),
# of enqueueing it on the host (untraced) and the host's extra cost of an L1-sharded output.
_TENSIX_MATMUL_EFFICIENCY = 0.8152
_TENSIX_MEMORY_EFFICIENCY = 0.922
_TENSIX_FEED_BYTES_PER_CYCLE = 48.66
_TENSIX_LAUNCH_US = 8.72
_TENSIX_HOST_DISPATCH_US = 49.05
_TENSIX_HOST_SHARDED_OUTPUT_US = 51.58

# NVIDIA DGX B200 (DGX B200 datasheet; HGX B200 datasheet, 2024): 8 B200 GPUs; per
# system 72 PFLOP/s fp8 and 36 PFLOP/s fp16/bf16 "with sparsity", 600 TFLOP/s fp32 ->
# per GPU dense 2250 bf16, 4500 fp8 / int8, 75 fp32; 1440 GB HBM3e at 64 TB/s -> 180 GB
# at 8 TB/s per GPU; fifth-generation NVLink 14.4 TB/s in all = 1.8 TB/s per GPU
# bidirectional = 900 GB/s per direction; 8 x ConnectX-7 400 Gb/s = 50 GB/s per GPU.
# FP4 (NVFP4): 144 PFLOP/s per system with sparsity -> 9000 dense per GPU.
# The Blackwell and Blackwell Ultra presets below are this one with the figures that differ.
_DGX_B200 = GpuClusterHardware(
    name="dgx-b200",
    gpus_per_node=8,
    peak_tflops=PeakTflops(
        fp32=75.0, bf16=2250.0, fp16=2250.0, fp8=4500.0, int8=4500.0, fp4=9000.0
    ),
    hbm_gib=180e9 / 2**30,
    hbm_bandwidth_gbps=8000.0,
    switch_bandwidth_gbps=900.0,
    switch_latency_us=2.0,
    inter_node_bandwidth_gbps=50.0,
    inter_node_latency_us=5.0,
    # FP8, attention and grouped GEMMs fitted on the visible Blackwell rows
    # (benchmarks/calibrate_gpus.py); no dense BF16 row: matmul_efficiency keeps the A100
    # fit as a prior
    matmul_efficiency=0.671,
    fp8_matmul_efficiency=0.469,
    attention_efficiency=0.391,
    grouped_gemm_efficiency=0.499,
    grouped_gemm_expert_us=25.650,
    # special-function units: 5 T exponentials/s ("Attention acceleration (SFU EX2)", NVIDIA
    # technical blog "Inside NVIDIA Blackwell Ultra", 2025, B200 / GB200 column)
    sfu_exp_tera_per_s=5.0,
)

# NVIDIA DGX B300 (DGX B300 datasheet, 2025): 8 Blackwell Ultra GPUs; per system 72
# PFLOP/s fp8 training (with sparsity) -> 4500 dense fp8 and 2250 bf16 per GPU, as B200;
# 2.3 TB HBM3e -> 288 GB per GPU at 8 TB/s; NVLink 1.8 TB/s per GPU; 8 x ConnectX-8
# 800 Gb/s = 100 GB/s per GPU per direction. fp32: B200's figure (not restated).
# FP8, attention and grouped GEMMs fitted on the visible Blackwell Ultra rows
# (benchmarks/calibrate_gpus.py); no dense BF16 row: matmul_efficiency keeps the A100 fit
_DGX_B300 = replace(
    _DGX_B200,
    name="dgx-b300",
    # FP4: 144 PFLOP/s per system dense ("FP4 Tensor Core 144 | 108 PFLOPS" sparse | dense in
    # the datasheet) -> 13500 dense per GPU
    peak_tflops=replace(_DGX_B200.peak_tflops, fp4=13500.0),
    hbm_gib=288e9 / 2**30,
    inter_node_bandwidth_gbps=100.0,
    fp8_matmul_efficiency=0.535,
    attention_efficiency=0.637,
    grouped_gemm_efficiency=0.499,
    grouped_gemm_expert_us=5.037,
    # Blackwell Ultra doubles the special-function units' exponential rate: 10.7 T/s against
    # Blackwell's 5 ("Inside NVIDIA Blackwell Ultra", 2025, B300 / GB300 column)
    sfu_exp_tera_per_s=10.7,
)

# NVIDIA H100 SXM5 80GB (H100 Tensor Core GPU datasheet, 2023): dense 67 fp32 / 989 bf16,
# fp16 / 1979 fp8, int8 TFLOP/s (the datasheet's 1979 bf16 and 3958 fp8 are with 2:4
# sparsity, halved here); HBM3 80 GB at 3350 GB/s; NVLink4 900 GB/s per GPU
# bidirectional = 450 GB/s per direction; DGX H100: 8 x ConnectX-7 NDR 400 Gb/s = 50 GB/s
# per GPU per direction.
_DGX_H100 = GpuClusterHardware(
    name="dgx-h100",
    gpus_per_node=8,
    peak_tflops=PeakTflops(fp32=67.0, bf16=989.0, fp16=989.0, fp8=1979.0, int8=1979.0),
    hbm_gib=80e9 / 2**30,
    hbm_bandwidth_gbps=3350.0,
    switch_bandwidth_gbps=450.0,
    switch_latency_us=2.0,
    inter_node_bandwidth_gbps=50.0,
    inter_node_latency_us=5.0,
    # fitted on the visible H100 rows of visible_modern.json (benchmarks/calibrate_gpus.py,
    # docs/validation.md): BF16 and FP8 large products, FlashAttention kernels, MoE
    # grouped GEMMs, compute lost to hidden FSDP collectives
    matmul_efficiency=0.604,
    fp8_matmul_efficiency=0.548,
    attention_efficiency=0.178,
    grouped_gemm_efficiency=0.477,
    grouped_gemm_expert_us=3.850,
    overlap_interference=0.757,
    # 3.9 T special-function results/s (Shah et al. 2024, "FlashAttention-3", sec. 3.1;
    # = 132 SMs x 16 per clock x 1.83 GHz, the clock of the 989 TFLOP/s peak)
    sfu_exp_tera_per_s=3.9,
)

# NVIDIA H200 SXM 141GB (H200 Tensor Core GPU datasheet, 2024): the H100's compute (dense
# 989 bf16, 1979 fp8 TFLOP/s; the datasheet's 1979 / 3958 are with 2:4 sparsity) with
# HBM3e 141 GB at 4.8 TB/s; NVLink4 900 GB/s bidirectional per GPU; DGX H200: 8 x
# ConnectX-7 400 Gb/s, 50 GB/s per GPU per direction.
# The H100 fit carries over (same GPU, more and faster memory).
_DGX_H200 = replace(
    _DGX_H100,
    name="dgx-h200",
    hbm_gib=141e9 / 2**30,
    hbm_bandwidth_gbps=4800.0,
)

HARDWARE_PRESETS: dict[str, Hardware] = {
    # NVIDIA A100 80GB SXM4 (NVIDIA A100 Tensor Core GPU datasheet, 2021; Ampere architecture
    # whitepaper): dense peak 19.5 fp32 / 312 bf16, fp16 / 624 int8 TFLOP/s, no fp8;
    # HBM2e 80 GB at 2039 GB/s. DGX A100: 8 GPUs on NVSwitch, NVLink3 600 GB/s per GPU
    # bidirectional = 300 GB/s per direction; 8 x HDR InfiniBand 200 Gb/s per node = 25 GB/s
    # per GPU per direction (SPEC sec. 9). Latency per ring step: no measured public figure;
    # we take the order of NCCL's own cost-model constants (tuning.cc: ~0.5-2 us per NVLink
    # hop plus a few us base, ~2.7-9.6 us over the network): 2 us and 5 us.
    "dgx-a100": GpuClusterHardware(
        name="dgx-a100",
        gpus_per_node=8,
        peak_tflops=PeakTflops(fp32=19.5, bf16=312.0, fp16=312.0, fp8=0.0, int8=624.0),
        hbm_gib=80e9 / 2**30,
        hbm_bandwidth_gbps=2039.0,
        switch_bandwidth_gbps=300.0,
        switch_latency_us=2.0,
        inter_node_bandwidth_gbps=25.0,
        inter_node_latency_us=5.0,
        # fitted on the six visible Megatron SC21 cases (benchmarks/calibrate.py,
        # docs/validation.md): large fp16 GEMMs reach 67% of peak in those runs
        matmul_efficiency=0.671,
        # FlashAttention-2 kernels of the visible llm-foundry A100 rows and the compute lost
        # to hidden FSDP collectives (benchmarks/calibrate_gpus.py; matmul_efficiency is not
        # refitted there; the fit's attention 0.315 is kept at 0.314, under 0.1% of error)
        attention_efficiency=0.314,
        overlap_interference=0.166,
        # no published figure: 108 SMs x 16 exponentials per clock (CUDA C++ Programming
        # Guide, "Arithmetic Instructions", sm_80) x 1.41 GHz boost (the 312 TFLOP/s clock)
        sfu_exp_tera_per_s=2.44,
    ),
    "dgx-h100": _DGX_H100,  # sources above the constant
    "dgx-h200": _DGX_H200,
    "dgx-b200": _DGX_B200,  # sources above the constant
    # NVIDIA GB200 NVL72 (GB200 NVL72 datasheet; DGX GB200 datasheet, 2024): 72 Blackwell
    # GPUs in one NVLink domain (a "node" here: NVLink switch trays join all 72); per rack
    # 360 PFLOP/s fp16/bf16 and 720 fp8 / int8 with sparsity, 5760 TFLOP/s fp32 -> per GPU
    # dense 2500 bf16, 5000 fp8, 80 fp32; up to 13.4 TB HBM3e at 576 TB/s -> 186 GB at
    # 8 TB/s per GPU; NVLink 130 TB/s = 1.8 TB/s per GPU bidirectional; one ConnectX-7
    # 400 Gb/s per GPU (DGX GB200) = 50 GB/s per direction across racks.
    "gb200-nvl72": replace(
        _DGX_B200,
        name="gb200-nvl72",
        gpus_per_node=72,
        # FP4: 1440 PFLOP/s per rack with sparsity -> 10000 dense per GPU
        peak_tflops=PeakTflops(
            fp32=80.0, bf16=2500.0, fp16=2500.0, fp8=5000.0, int8=5000.0, fp4=10000.0
        ),
        hbm_gib=186e9 / 2**30,
    ),  # the Blackwell fit (as dgx-b200)
    "dgx-b300": _DGX_B300,  # sources above the constant
    # NVIDIA GB300 NVL72 (GB300 NVL72 datasheet, 2025): 72 Blackwell Ultra GPUs in one NVLink
    # domain; per rack 360 PFLOP/s bf16 and 720 fp8 with sparsity -> per GPU dense 2500 bf16,
    # 5000 fp8 (as GB200); up to 20 TB HBM3e at 576 TB/s -> 288 GB at 8 TB/s per GPU; NVLink
    # 1.8 TB/s per GPU; ConnectX-8 800 Gb/s per GPU = 100 GB/s per direction.
    "gb300-nvl72": replace(
        _DGX_B300,
        name="gb300-nvl72",
        gpus_per_node=72,
        # FP4: 1440 PFLOP/s per rack dense (Blackwell Ultra's NVFP4, "15 PFLOPS dense" per
        # GPU in "Inside NVIDIA Blackwell Ultra", 2025) -> 15000 per GPU
        peak_tflops=PeakTflops(
            fp32=80.0, bf16=2500.0, fp16=2500.0, fp8=5000.0, int8=5000.0, fp4=15000.0
        ),
    ),  # the Blackwell Ultra fit (as dgx-b300)
    # The PALM paper's wafer (Table VI): 5 x 4 tiles of 4 x 4 cores, 256 TFLOP/s fp16 and 60 MB
    # SRAM per tile (16 TFLOP/s, 3.75 MB per core), intra-tile NoC 1024 GB/s, inter-tile NoC
    # 256 GB/s, edge-shared DRAM 256 GB/s per tile. Table VI gives no latencies, SRAM bandwidth,
    # DRAM capacity or fp32 rate; the values below for those are assumptions (docs/hardware.md):
    # one channel of 256 GB/s on each outer tile side (18 sides, 4.6 TB/s in all), 512 GiB per
    # channel so that the paper's T-145B case fits as its results imply, 100 ns DRAM response,
    # 2 ns per intra-tile hop and 10 ns per inter-tile hop, SRAM at 8 TB/s per core.
    "wafer-palm": Mesh2DHardware(
        name="wafer-palm",
        tiles=(5, 4),
        cores_per_tile=(4, 4),
        core_peak_tflops=PeakTflops(fp32=4.0, bf16=16.0, fp16=16.0, fp8=32.0, int8=32.0),
        sram_per_core_mib=60 / 16 * _MB_IN_MIB,
        sram_bandwidth_per_core_gbps=8000.0,
        intra_tile_link_gbps=1024.0,
        inter_tile_link_gbps=256.0,
        intra_tile_link_latency_ns=2.0,
        inter_tile_link_latency_ns=10.0,
        dram_channels=20,  # Table VI "edge shared DRAM per tile 256 GB/s", 20 tiles
        dram_channel_bandwidth_gbps=256.0,
        dram_capacity_gib=20 * 512.0,
        dram_response_ns=100.0,
    ),
    # Tenstorrent Grayskull e150 (Vasiljevic et al., IEEE Micro 41(2) 2021; Tenstorrent e150
    # product brief): one chip of 10 x 12 Tensix cores, 1 MB SRAM each, 92 TFLOP/s fp16 and
    # 368 TOPS int8 in all (0.767 / 3.07 per core), 8 GB LPDDR4 at 118.4 GB/s on 8 channels,
    # 1.2 GHz. NoC: two 2-D torus NoCs of 32 B/cycle per direction (2 x 38.4 GB/s per link).
    "grayskull": Mesh2DHardware(
        name="grayskull",
        tiles=(1, 1),
        cores_per_tile=(10, 12),
        core_peak_tflops=PeakTflops(
            fp32=0.0, bf16=92 / 120, fp16=92 / 120, fp8=368 / 120, int8=368 / 120
        ),
        sram_per_core_mib=1.0 * _MB_IN_MIB,
        sram_bandwidth_per_core_gbps=384.0,
        intra_tile_link_gbps=38.4,
        inter_tile_link_gbps=38.4,
        intra_tile_link_latency_ns=2.0,
        inter_tile_link_latency_ns=2.0,
        dram_channels=8,
        dram_channel_bandwidth_gbps=14.8,
        dram_capacity_gib=8e9 / 2**30,
        dram_response_ns=150.0,
    ),
    # Tesla Dojo D1 (Talpes et al., IEEE Micro 43(3) 2023; Hot Chips 34, 2022): 354 cores of
    # 1.25 MB SRAM each, 362 TFLOP/s bf16/cfp8 and 22.6 fp32 in all, 2 GHz. The physical
    # grid is not published; we assume 18 x 20 sites (354 enabled; the peak below is per
    # enabled core). NoC: 512 GB/s per core in each direction (Tesla AI Day 2021). No DRAM
    # on the die: Dojo Interface Processors (32 GB HBM at 800 GB/s each, Hot Chips 34) sit
    # on the tray edge, five per training tile; modelled as 5 edge channels.
    "dojo-d1": Mesh2DHardware(
        name="dojo-d1",
        tiles=(1, 1),
        cores_per_tile=(18, 20),
        core_peak_tflops=PeakTflops(
            fp32=22.6 / 354, bf16=362 / 354, fp16=362 / 354, fp8=362 / 354, int8=0.0
        ),
        sram_per_core_mib=1.25 * _MB_IN_MIB,
        sram_bandwidth_per_core_gbps=800.0,
        intra_tile_link_gbps=512.0,
        inter_tile_link_gbps=512.0,
        intra_tile_link_latency_ns=1.0,
        inter_tile_link_latency_ns=1.0,
        dram_channels=5,
        dram_channel_bandwidth_gbps=800.0,
        dram_capacity_gib=5 * 32e9 / 2**30,
        dram_response_ns=200.0,
    ),
    # Tenstorrent Wormhole n150 (one Wormhole B0 ASIC). Sources (docs/hardware.md):
    # tt-metal tech_reports/GEMM_FLOPS/GEMM_FLOPS.md @06bd3735 (1 GHz; 8x8 compute grid; a
    # Tensix matrix engine does 8x16 x 16x16 per cycle = 4096 FLOP/cycle, 4 TFLOP/s per core at
    # LoFi, a 32x32x32 tile in 16/32/48/64 cycles at LoFi/HiFi2/HiFi3/HiFi4; ~1.5 MB SRAM);
    # tt-isa-documentation @39304719 (L1.md: 1464 KiB in 16 banks of one 128-bit access per
    # cycle = 256 B/cycle; DRAMTile: 12 GDDR6 channels of 16 bit at 12 GT/s = 24 GB/s each,
    # 12 GiB; NoC: two 2-D tori of 32 B/cycle per hop, 9 cycles router to router); tt-metal
    # tech_reports/Blackhole/BlackholeBringUpProgrammingGuide.md (8x10 Tensix, 8x8 for
    # compute). Block formats move at the same matrix-engine rate (bf16 = bfp8 = bfp4 per
    # cycle; they differ in bytes). DRAM response: assumption.
    "wormhole-n150": Mesh2DHardware(
        name="wormhole-n150",
        tiles=(1, 1),
        cores_per_tile=(8, 8),
        core_peak_tflops=PeakTflops(bf16=4.096, bfp8=4.096, bfp4=4.096),
        sram_per_core_mib=1464 / 1024,
        sram_bandwidth_per_core_gbps=256.0,
        intra_tile_link_gbps=32.0,
        inter_tile_link_gbps=32.0,
        intra_tile_link_latency_ns=9.0,
        inter_tile_link_latency_ns=9.0,
        dram_channels=12,
        dram_channel_bandwidth_gbps=24.0,
        dram_capacity_gib=12.0,
        dram_response_ns=300.0,
        math_fidelity="hifi4",
        matmul_efficiency=_TENSIX_MATMUL_EFFICIENCY,
        memory_efficiency=_TENSIX_MEMORY_EFFICIENCY,
        operand_feed_gbps=_TENSIX_FEED_BYTES_PER_CYCLE * 1.0,
        launch_us=_TENSIX_LAUNCH_US,
        host_dispatch_us=_TENSIX_HOST_DISPATCH_US,
        host_sharded_output_us=_TENSIX_HOST_SHARDED_OUTPUT_US,
        noc_floorplan="wormhole-b0",
    ),
    # Tenstorrent Blackhole p150 (one Blackhole ASIC). docs.tenstorrent.com Blackhole
    # specifications: 140 Tensix cores, AI clock up to 1.35 GHz, 1.5 MB SRAM per core, 32 GB
    # GDDR6 at 512 GB/s; tt-system-firmware docs: 8 GDDR6 channels (64 GB/s each);
    # tt-isa-documentation BlackholeA0: 1536 KiB L1 per Tensix, NoC flits of 512 bit (64 B per
    # cycle per hop = 86.4 GB/s); tt-metal BlackholeBringUpProgrammingGuide: 14x10 Tensix, 13x10
    # for compute. The matrix engine does 4096 FLOP/cycle at LoFi as on Wormhole: 140 x 4096 x
    # 1.35 GHz = 774 TFLOP/s, the card's published block-fp8 peak. L1 bandwidth, latencies,
    # DRAM response and the efficiency constants: assumptions (Wormhole's, per cycle).
    "blackhole-p150": Mesh2DHardware(
        name="blackhole-p150",
        tiles=(1, 1),
        cores_per_tile=(10, 13),
        core_peak_tflops=PeakTflops(bf16=4.096 * 1.35, bfp8=4.096 * 1.35, bfp4=4.096 * 1.35),
        sram_per_core_mib=1536 / 1024,
        sram_bandwidth_per_core_gbps=256.0 * 1.35,
        intra_tile_link_gbps=64 * 1.35,
        inter_tile_link_gbps=64 * 1.35,
        intra_tile_link_latency_ns=9 / 1.35,
        inter_tile_link_latency_ns=9 / 1.35,
        dram_channels=8,
        dram_channel_bandwidth_gbps=64.0,
        dram_capacity_gib=32.0,
        dram_response_ns=300.0,
        math_fidelity="hifi4",
        matmul_efficiency=_TENSIX_MATMUL_EFFICIENCY,
        memory_efficiency=_TENSIX_MEMORY_EFFICIENCY,
        operand_feed_gbps=_TENSIX_FEED_BYTES_PER_CYCLE * 1.35,
        launch_us=_TENSIX_LAUNCH_US,
        host_dispatch_us=_TENSIX_HOST_DISPATCH_US,
        host_sharded_output_us=_TENSIX_HOST_SHARDED_OUTPUT_US,
    ),
}


def hardware_preset(name: str) -> Hardware | None:
    """The preset called ``name`` (case-insensitive), or ``None``."""
    return HARDWARE_PRESETS.get(name.lower())
