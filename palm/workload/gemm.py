"""One matrix product as a workload (``[model] family = "gemm"``) and its split over a core grid.

``C[m, n] = A[m, k] B[k, n]``, operands in DRAM before and after (SPEC sec. 3, a contract), so
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
The busiest core, with ``ceil`` of each share, sets the time (tile quantisation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from palm.hardware.spec import TILE_DIM
from palm.workload.ops import Linear, Op

__all__ = ["OPERANDS", "GemmSplit", "gemm_ops", "split_product"]

OPERANDS: tuple[str, ...] = ("a", "b", "c")
"""Names of the operands of ``C = A B`` (for ``model.sram_resident``)."""


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

    @property
    def cores(self) -> int:
        return self.m_parts * self.n_parts * self.k_parts

    @property
    def tile_products(self) -> int:
        """32 x 32 x 32 tile products on the busiest core."""
        return self.tiles_m * self.tiles_n * self.tiles_k


def _tiles(size: int) -> int:
    return math.ceil(size / TILE_DIM)


def split_product(
    *, m: int, n: int, k: int, grid: tuple[int, int], linear_split: tuple[int, ...] = ()
) -> GemmSplit:
    """The 2-D block split of the output over ``grid = (rows, cols)`` or, when given, the
    ``linear_split = (b, m, n, k)`` parts (validated by :mod:`palm.config`)."""
    if linear_split:
        mp, np_, kp = linear_split[1], linear_split[2], linear_split[3]
    else:
        mp, np_, kp = grid[0], grid[1], 1
    return GemmSplit(
        m_parts=mp,
        n_parts=np_,
        k_parts=kp,
        tiles_m=math.ceil(_tiles(m) / mp),
        tiles_n=math.ceil(_tiles(n) / np_),
        tiles_k=math.ceil(_tiles(k) / kp),
    )
