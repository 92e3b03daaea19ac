"""One matrix product as a workload (``[model] family = "gemm"``) and its split over a core grid.

``C[m, n] = A[m, k] B[k, n]``, operands in DRAM before and after (docs/config.md, a contract), so
that a chip can be checked against kernel measurements. As an operator it is one bias-free
:class:`~palm.workload.ops.Linear` (``tokens = m``, ``in_features = k``, ``out_features = n``).

**Split.** A Tensix matrix engine works on 32 x 32 tiles (``TILE_DIM``), so each dimension is
padded to whole tiles: ``Mt = ceil(m / 32)`` and likewise ``Nt``, ``Kt``. By default the output
is cut in a 2-D block split over the compute grid of ``rows x cols`` cores, as tt-metal's
``matmul_multi_core_reuse_mcast_2d`` does: the core in grid row ``i`` and column ``j`` computes
the ``ceil(Mt / rows) x ceil(Nt / cols)`` output tiles of block ``(i, j)`` over the whole depth,
receiving its rows of A by multicast along its grid row and its columns of B along its grid
column. ``linear_split = [b, m, n, k]`` (paper Table III) replaces it with ``m x n x k`` parts
(``b`` must be 1: one product); ``k > 1`` splits the depth and adds a reduction of partial sums.
The busiest core, with ``ceil`` of each share, sets the time (tile quantisation); parts left
without tiles (16 tile rows over 5 grid rows of 4 each fill 4) take no part, as tt-metal runs
the program on ``ceil(Mt / per_core_M) x ceil(Nt / per_core_N)`` cores.

**Out-of-box program configs** (``hardware.matmul_config = "auto"``). Called without a program
config on interleaved tensors, ttnn picks one itself (tt-metal
``ttnn/cpp/ttnn/operations/matmul/device/config/matmul_program_config.cpp``,
``create_simple_matmul_program_config``, at the GEMM_FLOPS report's commit 06bd3735). It first
sizes square output blocks of ``AUTO_BLOCK_TILES = 16`` tiles a side (its ``get_per_core_factor``:
the largest of 16, 8, 4, 2 whose circular buffers fit in L1; for 16 x 16 bf16 tiles and
``in0_block_w = 2`` its estimate is 2 x 128 KiB of operand buffers and 2 x 512 KiB of output
and intermediate buffers, 1.25 MiB, within Wormhole's 1464 KiB of L1) and counts them,
``by = ceil(Mt / 16)`` rows by ``bx = ceil(Nt / 16)`` columns. When there is more than one and
they fit the grid, a single row of blocks (``by = 1``, short ``m``) selects the **1-D multicast of
A** (``MatmulMultiCoreReuseMultiCast1DProgramConfig`` with ``mcast_in0``) and a single column the
1-D multicast of B; a narrow output (one side over 8 times the other, or a side of one tile) does
too. Everything else takes the 2-D multicast with ``ceil(Mt / rows) x ceil(Nt / cols)`` tiles per
core, as above. The 1-D multicast of A gives every core all ``Mt`` rows and ``per_core_N =
ceil(ceil(n / cores) / 32)`` columns, so only ``ceil(Nt / per_core_N)`` cores work, and one
sender core streams the whole of A to them (``palm/engines/gemm.py`` prices that stream).

**Output blocks.** A core's ``tiles_m x tiles_n`` output share is computed in blocks that are
packed only after their last k-block; the share is cut into the fewest equal blocks that fit,
with their partial sums, in half the core's SRAM, and the last one is written to DRAM after
the math (``palm/engines/gemm.py``, ``output_tail_bytes``; docs/model.md sec. 6b).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from palm.hardware.spec import TILE_DIM
from palm.workload.ops import Linear, Op

__all__ = [
    "AUTO_BLOCK_TILES",
    "MATMUL_CONFIGS",
    "MAX_GEMM_DIM",
    "OPERANDS",
    "GemmSplit",
    "auto_program_kind",
    "gemm_ops",
    "split_product",
]

MAX_GEMM_DIM = 2**24
"""Largest ``m``, ``k`` or ``n`` of a ``family = "gemm"`` product (16,777,216: a 2^24-square
bf16 operand is 512 TiB, far past any chip's DRAM). The blocking search
(``palm.cost.blocking``) tries about ``2 sqrt(m)`` block heights, so its arrays, its time and
how soon a stop signal is acted on grow with ``sqrt(m)``; at the bound they are 8,193 values,
where ``m = 2^53`` needed about 10^8 (out of memory)."""

OPERANDS: tuple[str, ...] = ("a", "b", "c")
"""Names of the operands of ``C = A B`` (for ``model.sram_resident``)."""

MATMUL_CONFIGS: tuple[str, ...] = ("block2d", "auto")
"""``hardware.matmul_config``: the 2-D block split of hand-tuned program configs, or ttnn's
out-of-box choice."""

AUTO_BLOCK_TILES = 16
"""Side, in tiles, of the output blocks ttnn's out-of-box selection counts (its per-core factor
for 16-bit tiles; tt-metal ``get_per_core_factor``)."""

_NARROW_RATIO = 8  # tt-metal is_narrow_shape: NARROW_SHAPE_RATIO_THRESHOLD


def gemm_ops(*, m: int, k: int, n: int) -> tuple[Op, ...]:
    """The product as the one operator of a workload."""
    return (Linear(name="gemm", in_features=k, out_features=n, tokens=m, bias=False),)


@dataclass(frozen=True)
class GemmSplit:
    """How many parts each dimension is cut into and the tiles of the busiest core."""

    m_parts: int
    n_parts: int
    k_parts: int
    tiles_m: int
    tiles_n: int
    tiles_k: int
    #: "2d" (both operands multicast along grid rows and columns), "1d-a" (one sender
    #: multicasts all of A, every core reads its own columns of B), "1d-b" (the mirror image)
    #: or "linear" (``linear_split``)
    kind: str = "2d"

    @property
    def cores(self) -> int:
        return self.m_parts * self.n_parts * self.k_parts

    @property
    def tile_products(self) -> int:
        """32 x 32 x 32 tile products on the busiest core."""
        return self.tiles_m * self.tiles_n * self.tiles_k


def _tiles(size: int) -> int:
    return math.ceil(size / TILE_DIM)


def auto_program_kind(*, m: int, n: int, grid: tuple[int, int]) -> str:
    """The multicast ttnn's out-of-box selection uses for an all-DRAM interleaved product
    (module docstring): ``"1d-a"``, ``"1d-b"`` or ``"2d"``."""
    mt, nt = _tiles(m), _tiles(n)
    height, width = mt * TILE_DIM, nt * TILE_DIM
    ratio = max(height, width) // min(height, width)
    if ratio > _NARROW_RATIO or min(height, width) <= TILE_DIM:
        return "1d-a" if width > height else "1d-b"
    by, bx = math.ceil(mt / AUTO_BLOCK_TILES), math.ceil(nt / AUTO_BLOCK_TILES)
    if (by, bx) != (1, 1) and by <= grid[0] and bx <= grid[1]:
        if by == 1:
            return "1d-a"
        if bx == 1:
            return "1d-b"
    return "2d"


def _one_d(*, m: int, n: int, k: int, cores: int, kind: str) -> GemmSplit:
    """1-D multicast over ``cores``: the multicast operand whole on every core, the other cut
    into ``ceil(ceil(size / cores) / 32)`` tiles per core (tt-metal ``get_mcast_1d_config``)."""
    if kind == "1d-a":
        per_core = _tiles(math.ceil(_tiles(n) * TILE_DIM / cores))
        parts = math.ceil(_tiles(n) / per_core)
        return GemmSplit(1, parts, 1, _tiles(m), per_core, _tiles(k), kind)
    per_core = _tiles(math.ceil(_tiles(m) * TILE_DIM / cores))
    parts = math.ceil(_tiles(m) / per_core)
    return GemmSplit(parts, 1, 1, per_core, _tiles(n), _tiles(k), kind)


def split_product(
    *,
    m: int,
    n: int,
    k: int,
    grid: tuple[int, int],
    linear_split: tuple[int, ...] = (),
    matmul_config: str = "block2d",
) -> GemmSplit:
    """The 2-D block split of the output over ``grid = (rows, cols)``, ttnn's out-of-box choice
    (``matmul_config = "auto"``) or, when given, the ``linear_split = (b, m, n, k)`` parts
    (validated by :mod:`palm.config`)."""
    if linear_split:
        mp, np_, kp = linear_split[1], linear_split[2], linear_split[3]
        kind = "linear"
    else:
        mp, np_, kp = grid[0], grid[1], 1
        kind = auto_program_kind(m=m, n=n, grid=grid) if matmul_config == "auto" else "2d"
        if kind != "2d":
            return _one_d(m=m, n=n, k=k, cores=grid[0] * grid[1], kind=kind)
    # parts that get no tiles do not take part (tt-metal sizes the cores a 2-D multicast
    # program runs on as ceil(Mt / per_core_M) x ceil(Nt / per_core_N)): they neither receive
    # multicasts nor write C nor add partial sums
    tm, tn, tk = (math.ceil(_tiles(size) / p) for size, p in ((m, mp), (n, np_), (k, kp)))
    return GemmSplit(
        m_parts=math.ceil(_tiles(m) / tm),
        n_parts=math.ceil(_tiles(n) / tn),
        k_parts=math.ceil(_tiles(k) / tk),
        tiles_m=tm,
        tiles_n=tn,
        tiles_k=tk,
        kind=kind,
    )
