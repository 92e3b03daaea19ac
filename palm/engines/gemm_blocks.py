"""The output blocks of a hand-tuned product: the block size a tuned program config picks.

tt-metal's 2-D multicast program config (``MatmulMultiCoreReuseMultiCastProgramConfig``) gives
each core a ``per_core_M x per_core_N`` share of C and lets it compute that share in output
blocks of ``out_block_h x out_block_w`` tiles (by default the whole share): a block is packed
only after its last k-block, so only the last block's write is left after the math
(``palm/engines/gemm.py``, "Streaming and the output tail"), while every block needs its rows
of A and columns of B over the whole depth again, so cutting the share into ``nh x nw``
blocks streams A ``nw`` times and B ``nh`` times. A block with its partial sums must fit in
half the core's SRAM (the other half holds the double-buffered operand blocks):
``h x w <= cap``. A hand-tuned config is the one that runs fastest, so the model takes the
block of least total time among those that fit (:func:`block_candidates`): more SRAM only
adds candidates, so a hand-tuned product is never slower with more SRAM. ttnn's out-of-box
selection does not search; it keeps the largest block that fits (:func:`palm.engines.gemm.
output_tail_bytes`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_SIDES", "block_candidates", "block_sides", "sram_block_cap"]

MAX_SIDES = 48
"""At most this many block sides are tried per dimension (spread geometrically over the
distinct ``ceil(tiles / parts)``), so the search costs the same for any product size; the
sides tried depend on the share alone, never on the SRAM, so more SRAM only adds candidates."""


def sram_block_cap(sram_bytes: float, tile_bytes: float) -> int:
    """Tiles of the largest output block that fits with its fp32-sized partial sums in half
    the SRAM: ``2 x tiles x tile <= S / 2`` (at least one tile)."""
    return max(1, int(sram_bytes // (4 * tile_bytes)))


def block_sides(tiles: int) -> list[int]:
    """The block sides that cut ``tiles`` into equal parts (``ceil(tiles / parts)`` for every
    part count), largest first, thinned to :data:`MAX_SIDES` (always the whole and 1)."""
    sides: set[int] = set()
    parts = 1
    while parts <= tiles:
        side = math.ceil(tiles / parts)
        sides.add(side)
        parts = math.ceil(tiles / (side - 1)) if side > 1 else tiles + 1
    ordered = sorted(sides, reverse=True)
    if len(ordered) <= MAX_SIDES:
        return ordered
    picks = np.unique(np.geomspace(1, len(ordered), MAX_SIDES).round().astype(int) - 1)
    return sorted({ordered[0], ordered[-1], *(ordered[i] for i in picks)}, reverse=True)


def block_candidates(tiles_m: int, tiles_n: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Heights and widths (tiles) of the output blocks that fit ``cap``, largest first; the
    single-tile block always fits."""
    grid_h, grid_w = np.meshgrid(block_sides(tiles_m), block_sides(tiles_n), indexing="ij")
    h, w = grid_h.ravel(), grid_w.ravel()
    fits = h * w <= cap
    return h[fits], w[fits]
