"""Time of one matrix product on a mesh chip (``[model] family = "gemm"``), in closed form.

The product ``C[m, n] = A[m, k] B[k, n]`` is split over the compute grid
(:func:`palm.workload.gemm.split_product`: hand-tuned 2-D blocks, ttnn's out-of-box choice, or a
``linear_split``); its time is that of the busiest core plus the DRAM traffic and the fixed cost
of one program launch (docs/model.md, "One matrix product"):

    t_core   = max(max(t_math, t_feed) / eta, t_noc, t_send) + t_reduce
    t_math   = T x 2 x 32^3 / peak(precision, fidelity)      T = tile products of the core
    t_feed   = T x 1024 / operand_feed                         1024 datums per tile product
    t_noc    = (multicast + DRAM reads) / cores / (2 link)     two NoC ports in per core
    t_send   = S x (1 / (channel x memory_efficiency) + 1 / link)   the busiest sender
    t_reduce = (k_parts - 1) x tiles_m tiles_n x 1024 x 4 B / link   (fp32 partial sums)
    t_dram   = (Q - W) / (channels x channel bandwidth x memory_efficiency)
    t_tail   = W / write_rate                                  the last output block
    t        = launch + max(t_core, t_dram) + t_tail           (dispatch = "trace")
             = max(host, launch + max(t_core, t_dram) + t_tail)  (dispatch = "host")
    host     = host_dispatch (+ host_sharded_output when C is L1-sharded)

``eta`` is ``matmul_efficiency``, the achievable fraction of the matrix engine's pipeline
(unpack, math and pack run as three threads; the slowest sets the rate, ``t_feed`` when the
fidelity is low).

**Operand feed per datum, not per byte.** An unpacker fetches from L1 at up to 16, 32 or 64
bytes per cycle (tt-isa-documentation WormholeB0 ``UNPACR_Regular.md``, "Performance"; two
unpackers jointly five 128-bit reads per cycle, ``L1.md``), and "depending on the data format
being unpacked, the bottleneck for the unpacker might be downstream of L1", where it writes
datums into ``SrcA``/``SrcB`` after converting them (block-float mantissas expanded with their
shared exponent, ``FormatConversion.md``). So the feed is priced in datums: ``operand_feed``
elements per second, fitted per chip (elements per cycle at 1 GHz; 0, no limit, on a chip
none of whose measured products it binds). At the Wormhole fit
(about 24 datums per cycle) a bf16 tile needs 49 bytes per cycle, a bfp8 tile (1088 bytes,
``palm.units``) 26 and a bfp4 tile (576 bytes) 14, all below one unpacker's 64-byte fetch: the
L1 side never binds, and a product's feed time is the same in every format.
Block formats are cheaper only in the bytes they move through DRAM and the NoC.

``Q`` is the DRAM traffic of the product on the grid's pooled SRAM
(:func:`palm.cost.blocking.product_traffic`: compulsory traffic when it fits, re-reads of
output-stationary blocks when not; operands named in ``model.sram_resident`` move nothing).
**Streaming and the output tail.** Operand blocks are double-buffered (tt-metal's circular
buffers of two ``in0_block_w`` blocks), so the reads stream under the compute: the core time and
the DRAM time of everything but the last output block overlap, ``max(t_core, t_dram)``. The
output is different: a core packs an output block only after its last k-block
(``bmm_large_block_zm_fused_bias_activation``) and its writer sends it to DRAM after that, so the
last block's write ``W`` follows all the math (:func:`output_tail_bytes`). Its rate is not the
DRAM's: the writer kernel runs on NoC 0 on Wormhole (the NoC tt-metal prefers for DRAM reads)
and every core writes pages interleaved over all 12 channels, which the route-level NoC model
puts at 74.9 GB/s for the 8 x 8 grid (:func:`palm.network.tensix_noc.interleaved_write_Bps`; no
fitted constant); other chips write at the DRAM rate (their floorplan is not modelled). A core
holds one output block with its partial sums in at most half its SRAM (the other half holds the
double-buffered operand blocks): ``2 x tiles x 1024 e <= S / 2``, so a core's share of C is cut
into ``ceil(share / cap)`` equal blocks, ``cap = floor(S / (4 x 1024 e))`` tiles (183 for bf16 on
Wormhole's 1464 KiB), and ``W = cores x ceil(share / blocks) x 1024 e`` (at most all of C).
An L1-resident (sharded) output has no tail. Against the earlier rule (all DRAM time added to
the compute, fitted overlap 0.00) this brings the out-of-box products at m <= 1024 from 12-22%
under to within about 15% (docs/validation.md, Wormhole).

**Multicast senders.** Every multicast operand block is read from DRAM by one *sender* core and
multicast from it (tt-metal's ``reader_bmm_tile_layout_in0_sender`` / ``in1_sender`` kernels): the
sender's data-movement core reads a block, waits for the read barrier, then multicasts it, so
its bytes pay a one-core DRAM read and a link in series. One core reading one channel gets the
channel's achievable rate (tt-isa-documentation DRAMTile: 22.2 GB/s of 24 for one Tensix core;
``channel x memory_efficiency`` here) and a multicast leaves at one link's rate, so ``S`` bytes
take ``S (1 / (channel memory_efficiency) + 1 / link)``: 13.1 GB/s on Wormhole, no fitted
constant. ``S`` is the busiest sender's share: ``tiles_m x Kt`` tiles of A for a grid row (2-D),
``Kt x tiles_n`` of B for a grid column, all of A for the one sender of a 1-D multicast of A (the
out-of-box choice when ``m`` is one block of 16 tiles), and an operand already in SRAM costs
its sender nothing. It binds when a core has little to compute per byte it waits for.

An untraced program costs the host ``host_dispatch`` to enqueue, which overlaps the device's
work on the previous product; an L1-sharded output adds ``host_sharded_output`` (ttnn rebuilds the
sharded buffer's layout on every dispatch: tt-metal PR #12205 cached the page mapping of sharded
buffers for this reason, and PR #48252 names ``create_output_tensors`` recomputing it per
dispatch). Never faster than the peak compute or than the compulsory traffic at the peak DRAM
bandwidth: ``eta <= 1`` and ``memory_efficiency <= 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from palm.cost.blocking import ProductTraffic, product_traffic
from palm.engines.gemm_blocks import block_candidates, sram_block_cap
from palm.hardware.spec import TILE_DIM, Mesh2DHardware
from palm.network.tensix_noc import interleaved_write_Bps
from palm.result import MemoryResult, OperatorResult, Result, StageResult
from palm.strategy import SimConfig
from palm.units import GB, bytes_per_element
from palm.workload.gemm import GemmSplit, split_product

__all__ = [
    "GemmTimes",
    "gemm_times",
    "host_cost_s",
    "output_tail_bytes",
    "fastest_output_block",
    "output_write_Bps",
    "run_gemm",
    "sender_bytes",
]

_TILE_ELEMS = TILE_DIM * TILE_DIM
_PARTIAL_BYTES = 4.0  # fp32 partial sums of a depth split
_WRITER_NOC = 0  # tt-metal: the in1 reader/output writer runs on GetPreferredNOCForDRAMRead


@dataclass(frozen=True)
class GemmTimes:
    """The terms of one product's time (seconds) and its DRAM traffic."""

    math_s: float
    feed_s: float
    noc_s: float
    send_s: float
    reduce_s: float
    core_s: float
    dram_s: float
    tail_s: float
    launch_s: float
    total_s: float
    split: GemmSplit
    traffic: ProductTraffic
    #: the output block (tiles, height x width) a core computes before packing it
    out_block: tuple[int, int] = (0, 0)


def _hw(config: SimConfig) -> Mesh2DHardware:
    hw = config.hardware
    assert isinstance(hw, Mesh2DHardware)  # checked by palm.config
    return hw


def gemm_times(config: SimConfig, *, out_block: tuple[int, int] | None = None) -> GemmTimes:
    """Every term of the product's time for ``config`` (family ``gemm``, validated). A core
    computes its share of C in the largest output block that fits (:func:`output_tail_bytes`,
    what the measured programs do: docs/model.md sec. 7b); ``out_block`` (tiles, height x
    width) prices a hand-tuned 2-D or ``linear_split`` product whose C goes to DRAM with that
    block instead, its operands streamed once per block (:mod:`palm.engines.gemm_blocks`,
    :func:`fastest_output_block`)."""
    hw, model = _hw(config), config.model
    p = _setup(config)
    split, traffic, e, resident, terms = p.split, p.traffic, p.e, p.resident, p.terms
    if out_block is not None and _blocked(split, hw) and traffic.dram_write_bytes > 0:
        block = out_block
        t = _timed(split, e, resident, traffic.dram_write_bytes, terms, *block)
    else:
        block = (split.tiles_m, split.tiles_n)
        tail = output_tail_bytes(split, e, hw.sram_per_core_mib * 2**20, traffic.dram_write_bytes)
        sent = sender_bytes(split, e, resident)
        t = _assemble(terms, send_bytes=sent, extra_noc_bytes=0.0, extra_dram_bytes=0.0, tail=tail)
    noc_s, send_s, core_s, dram_s, tail_s, device_s = t
    total = device_s
    if hw.dispatch == "host":
        total = max(host_cost_s(hw, frozenset(model.sram_resident)), total)
    return GemmTimes(
        math_s=p.math_s, feed_s=p.feed_s, noc_s=noc_s, send_s=send_s, reduce_s=terms.reduce_s,
        core_s=core_s, dram_s=dram_s, tail_s=tail_s, launch_s=terms.launch_s, total_s=total,
        split=split, traffic=traffic, out_block=block,
    )  # fmt: skip


@dataclass(frozen=True)
class _Setup:
    split: GemmSplit
    traffic: ProductTraffic
    e: float
    resident: frozenset[str]
    math_s: float
    feed_s: float
    terms: _Terms


def _setup(config: SimConfig) -> _Setup:
    """The split, traffic and the block-independent terms of a product (module docstring)."""
    hw, model, tr = _hw(config), config.model, config.training
    e = bytes_per_element(tr.precision)
    split = split_product(
        m=model.m, n=model.n, k=model.k, grid=hw.core_grid,
        linear_split=config.parallelism.linear_split, matmul_config=hw.matmul_config,
    )  # fmt: skip
    cores = split.cores
    resident = frozenset(model.sram_resident)
    traffic = product_traffic(
        m=model.m, n=model.n, k=model.k, a_bytes=e, b_bytes=e, c_bytes=e,
        sram_bytes=hw.sram_per_core_mib * 2**20 * cores, cores=cores, resident=resident,
        grid=(split.m_parts, split.n_parts * split.k_parts),
    )  # fmt: skip
    products = split.tile_products
    math_s = products * 2.0 * TILE_DIM**3 / hw.peak_flops(tr.precision)
    feed = hw.operand_feed_gelems * 1e9
    feed_s = products * _TILE_ELEMS / feed if feed > 0 else 0.0
    link = hw.intra_tile_link_gbps * GB
    partials = split.tiles_m * split.tiles_n * _TILE_ELEMS * _PARTIAL_BYTES
    writers = (split.m_parts, split.n_parts) if split.kind in ("2d", "linear") else None
    terms = _Terms(
        engine_s=max(math_s, feed_s) / hw.matmul_efficiency,
        noc_s=(traffic.multicast_bytes + traffic.dram_read_bytes) / cores / (2.0 * link),
        reduce_s=(split.k_parts - 1) * partials / link,
        send_s_per_byte=1.0 / (hw.dram_channel_bandwidth_gbps * GB * hw.memory_efficiency)
        + 1.0 / link,
        dram_bytes=traffic.dram_bytes,
        dram_Bps=hw.dram_bandwidth_gbps * GB * hw.memory_efficiency,
        write_Bps=output_write_Bps(hw, split.m_parts * split.n_parts, grid=writers),
        link_Bps=link,
        launch_s=hw.launch_us * 1e-6,
    )
    return _Setup(split, traffic, e, resident, math_s, feed_s, terms)


@dataclass(frozen=True)
class _Terms:
    """The parts of a product's time that do not depend on its output block."""

    engine_s: float  # max(math, feed) / eta
    noc_s: float  # one pass of the operands into a core
    reduce_s: float
    send_s_per_byte: float  # a multicast sender: one-core DRAM read and a link, in series
    dram_bytes: float
    dram_Bps: float
    write_Bps: float
    link_Bps: float
    launch_s: float


_Timed = tuple[float, float, float, float, float, float]  # noc, send, core, dram, tail, device


def _assemble(
    terms: _Terms, *, send_bytes: float, extra_noc_bytes: float, extra_dram_bytes: float,
    tail: float,
) -> _Timed:  # fmt: skip
    """The time of one choice of output block (module docstring): NoC, sender, core, DRAM
    (all but the tail, streamed under the math), tail and device time."""
    noc_s = terms.noc_s + extra_noc_bytes / (2.0 * terms.link_Bps)
    send_s = send_bytes * terms.send_s_per_byte
    core_s = max(terms.engine_s, noc_s, send_s) + terms.reduce_s
    dram_s = (terms.dram_bytes + extra_dram_bytes - tail) / terms.dram_Bps
    tail_s = tail / terms.write_Bps if tail > 0 else 0.0
    return noc_s, send_s, core_s, dram_s, tail_s, terms.launch_s + max(core_s, dram_s) + tail_s


def _restreams(
    split: GemmSplit, e: float, resident: frozenset[str], h: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Per output block ``h x w``: the busiest sender's bytes, the extra bytes into a core and
    the extra DRAM reads of streaming A ``nw`` times and B ``nh`` times."""
    tile = _TILE_ELEMS * e
    a = 0.0 if "a" in resident else split.tiles_m * split.tiles_k * tile  # a core's A
    b = 0.0 if "b" in resident else split.tiles_k * split.tiles_n * tile  # a core's B
    nh, nw = -(-split.tiles_m // h), -(-split.tiles_n // w)
    sent = np.maximum(a * nw, b * nh)
    extra = (nw - 1) * a + (nh - 1) * b
    dram = ((nw - 1) * a * split.m_parts + (nh - 1) * b * split.n_parts) * split.k_parts
    return sent, extra, dram


def _tails(split: GemmSplit, e: float, c_write: float, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The last block of every writing core, at most all of C."""
    tails: np.ndarray = np.minimum(c_write, split.m_parts * split.n_parts * h * w * _TILE_ELEMS * e)
    return tails


def _blocked(split: GemmSplit, hw: Mesh2DHardware) -> bool:
    """A program config that names its output block: hand-tuned 2-D, or a linear split."""
    return split.kind == "linear" or (split.kind == "2d" and hw.matmul_config == "block2d")


def fastest_output_block(config: SimConfig) -> tuple[int, int] | None:
    """The output block (tiles, height x width) of least device time among those that fit
    half a core's SRAM (:mod:`palm.engines.gemm_blocks`), for a hand-tuned 2-D or
    ``linear_split`` product whose C goes to DRAM (else ``None``): what a config tuned for
    time alone would name. Ties go to the larger block (fewer re-streams). More SRAM only
    adds candidates, so the time at this block never grows with the SRAM."""
    hw = _hw(config)
    p = _setup(config)
    if not _blocked(p.split, hw) or p.traffic.dram_write_bytes <= 0:
        return None
    return _best_block(p.split, p.e, hw, p.traffic.dram_write_bytes, p.resident, p.terms)


def _best_block(
    split: GemmSplit, e: float, hw: Mesh2DHardware, c_write: float, resident: frozenset[str],
    terms: _Terms,
) -> tuple[int, int]:  # fmt: skip
    """The output block of least device time among those that fit (gemm_blocks); ties go to
    the larger block, the candidates being ordered largest first."""
    cap = sram_block_cap(hw.sram_per_core_mib * 2**20, _TILE_ELEMS * e)
    h, w = block_candidates(split.tiles_m, split.tiles_n, cap)
    sent, extra, dram = _restreams(split, e, resident, h, w)
    tail = _tails(split, e, c_write, h, w)
    noc = terms.noc_s + extra / (2.0 * terms.link_Bps)
    core = np.maximum(np.maximum(terms.engine_s, noc), sent * terms.send_s_per_byte)
    device = np.maximum(core + terms.reduce_s, (terms.dram_bytes + dram - tail) / terms.dram_Bps)
    device = device + tail / terms.write_Bps
    i = int(np.argmin(device))
    return int(h[i]), int(w[i])


def _timed(
    split: GemmSplit, e: float, resident: frozenset[str], c_write: float, terms: _Terms, h: int,
    w: int,
) -> _Timed:  # fmt: skip
    hs, ws = np.array([h]), np.array([w])
    sent, extra, dram = (float(x[0]) for x in _restreams(split, e, resident, hs, ws))
    tail = float(_tails(split, e, c_write, hs, ws)[0])
    return _assemble(terms, send_bytes=sent, extra_noc_bytes=extra, extra_dram_bytes=dram,
                     tail=tail)  # fmt: skip


def output_tail_bytes(split: GemmSplit, e: float, sram_bytes: float, c_write_bytes: float) -> float:
    """Bytes of C written after the last math (module docstring, "Streaming and the output
    tail"): each of the ``m_parts x n_parts`` writing cores' last output block, the core's
    share of ``tiles_m x tiles_n`` tiles cut into the fewest equal blocks that fit with their
    partial sums in half the SRAM; at most ``c_write_bytes`` (0 when C stays in SRAM)."""
    if c_write_bytes <= 0:
        return 0.0
    tile = _TILE_ELEMS * e
    cap = sram_block_cap(sram_bytes, tile)
    share = split.tiles_m * split.tiles_n
    block = -(-share // -(-share // cap))  # ceil(share / ceil(share / cap))
    return min(c_write_bytes, split.m_parts * split.n_parts * block * tile)


def output_write_Bps(
    hw: Mesh2DHardware, cores: int, *, grid: tuple[int, int] | None = None
) -> float:
    """Rate at which ``cores`` cores write an interleaved output: on a chip with the Wormhole B0
    floorplan (``noc_floorplan``) the route-level NoC model of the writer's NoC
    (:func:`palm.network.tensix_noc.interleaved_write_Bps`) for the first ``cores`` cores, row by
    row, of ``grid`` (default: the compute grid; a 2-D split's writers are its own
    ``m_parts x n_parts`` corner of it), elsewhere the achievable DRAM bandwidth."""
    dram = hw.dram_bandwidth_gbps * GB * hw.memory_efficiency
    if hw.noc_floorplan != "wormhole-b0":
        return dram
    grid = grid or hw.core_grid
    rate = interleaved_write_Bps(
        grid=grid, cores=min(cores, grid[0] * grid[1]), noc=_WRITER_NOC,
        link_gbps=hw.intra_tile_link_gbps, channel_gbps=hw.dram_channel_bandwidth_gbps
        * hw.memory_efficiency,
    )  # fmt: skip
    return min(rate, dram)


def sender_bytes(split: GemmSplit, e: float, resident: frozenset[str]) -> float:
    """Bytes the busiest multicast sender reads from DRAM and multicasts (module docstring):
    a grid row's ``tiles_m x tiles_k`` tiles of A, a grid column's ``tiles_k x tiles_n`` of B, or
    for a 1-D multicast the whole multicast operand (the other is read by each core itself and
    not multicast); an operand already in SRAM costs its sender nothing."""
    tile = _TILE_ELEMS * e
    a = 0.0 if "a" in resident else split.tiles_m * split.tiles_k * tile
    b = 0.0 if "b" in resident else split.tiles_k * split.tiles_n * tile
    if split.kind == "1d-a":
        return a
    if split.kind == "1d-b":
        return b
    return max(a, b)


def host_cost_s(hw: Mesh2DHardware, resident: frozenset[str]) -> float:
    """Host time to enqueue one untraced program: ``host_dispatch``, plus
    ``host_sharded_output`` when the output C is an L1-sharded tensor."""
    sharded = hw.host_sharded_output_us if "c" in resident else 0.0
    return (hw.host_dispatch_us + sharded) * 1e-6


def run_gemm(config: SimConfig) -> Result:
    """The :class:`Result` of one product: ``iteration_time_s`` is its time, throughput in
    products per second, TFLOP/s and MFU per core against the peak at the configured fidelity."""
    hw, model, tr = _hw(config), config.model, config.training
    t = gemm_times(config)
    cores = hw.device_count
    flops = 2.0 * model.m * model.n * model.k
    per_core_tflops = flops / t.total_s / cores / 1e12
    e = bytes_per_element(tr.precision)
    operands = (model.m * model.k + model.k * model.n + model.m * model.n) * e
    capacity = hw.device_memory_bytes
    per_core = operands / cores
    stage = StageResult(
        stage=0, layers=1, forward_s=t.total_s, backward_s=0.0, busy_s=t.total_s, idle_s=0.0,
        bubble_s=0.0, busy_fraction=1.0, memory_bytes=per_core, dp_allreduce_s=0.0,
        dp_exposed_s=0.0, optimizer_s=0.0, sent_bytes=0.0, received_bytes=0.0,
    )  # fmt: skip
    operator = OperatorResult(
        stage=0, name="gemm", strategy=t.traffic.strategy,
        dram_forward_bytes=t.traffic.dram_bytes / cores, dram_backward_bytes=0.0,
        dram_update_bytes=0.0,
    )  # fmt: skip
    us = 1e6
    note = (
        f"gemm on {t.split.cores} of {cores} cores ({t.split.kind} "
        f"{t.split.m_parts}x{t.split.n_parts}x{t.split.k_parts} split, "
        f"{t.split.tile_products} tile products on the busiest core): launch "
        f"{t.launch_s * us:.1f} us + core {t.core_s * us:.1f} us (math {t.math_s * us:.1f}, "
        f"operand feed {t.feed_s * us:.1f}, NoC {t.noc_s * us:.1f}, sender {t.send_s * us:.1f}, "
        f"reduce {t.reduce_s * us:.1f}) "
        f"overlapping DRAM {t.dram_s * us:.1f} us ({t.traffic.dram_bytes / 2**20:.1f} MiB, "
        f"{t.traffic.strategy}), then output tail {t.tail_s * us:.1f} us; dispatch {hw.dispatch}"
    )
    return Result(
        throughput_samples_per_s=1.0 / t.total_s,
        iteration_time_s=t.total_s,
        model_tflops_per_device=per_core_tflops,
        hardware_tflops_per_device=per_core_tflops,
        mfu=per_core_tflops * 1e12 / hw.peak_flops(tr.precision),
        bubble_fraction=0.0,
        peak_memory_bytes=per_core,
        memory_capacity_bytes=capacity,
        fits_memory=per_core <= capacity,
        memory_overflow_bytes=max(0.0, per_core - capacity),
        engine="analytical",
        events_simulated=None,
        sim_wall_s=None,
        devices=cores,
        micro_batches=1,
        sample_unit="products",
        tokens_per_s=None,
        memory=MemoryResult(0.0, 0.0, 0.0, per_core),
        stages=(stage,),
        operators=(operator,),
        notes=(note,),
    )
