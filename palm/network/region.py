"""The cores a stage occupies, as a few rectangles instead of a list of cores.

A stage of the ``line`` or ``s-shape`` layout is a run of the tile walk: whole tiles grouped by
tile column (one rectangle per column it touches) plus, when the stage does not start or end
on a tile boundary, the part of a tile its snake order covers (at most three rectangles per
partial tile). An ``explicit`` stage is one rectangle per tile. So the description grows with
the number of tile columns, not of cores, and analyses that only need *which* cores belong to
the stage (not in what order), such as the DRAM access of :mod:`palm.network.dram`, can run
over rows and columns instead of over every core.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CoreRegion", "snake_rectangles"]


@dataclass(frozen=True)
class CoreRegion:
    """Disjoint rectangles of cores ``[r0, r1) x [c0, c1)``, one row of ``rects`` each."""

    rects: np.ndarray

    @classmethod
    def of(
        cls, rects: list[tuple[int, int, int, int]], more: np.ndarray | None = None
    ) -> CoreRegion:
        """A region from disjoint rectangles (a list, and ``more`` as an ``(n, 4)`` array),
        side-by-side ones with the same rows merged, so that a stage of whole tile columns is
        one rectangle."""
        arr = np.asarray(rects, dtype=np.int64).reshape(-1, 4)
        if more is not None:
            arr = np.concatenate([arr, np.asarray(more, dtype=np.int64).reshape(-1, 4)])
        arr = arr[np.lexsort((arr[:, 2], arr[:, 1], arr[:, 0]))]
        # a rectangle continues the previous one when it has the same rows and starts where
        # the previous ends; runs of such rectangles collapse into their first
        joins = np.zeros(len(arr), dtype=bool)
        joins[1:] = (
            (arr[1:, 0] == arr[:-1, 0]) & (arr[1:, 1] == arr[:-1, 1]) & (arr[1:, 2] == arr[:-1, 3])
        )
        heads = np.nonzero(~joins)[0]
        ends = np.append(heads[1:], len(arr)) - 1
        out = arr[heads].copy()
        out[:, 3] = arr[ends, 3]
        return cls(out)

    @property
    def count(self) -> int:
        r = self.rects
        return int(((r[:, 1] - r[:, 0]) * (r[:, 3] - r[:, 2])).sum())

    def runs(self, *, per: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The region cut into runs along lines: ``per="column"`` gives, for every column of
        every rectangle, the column and its rows ``[lo, hi)``; ``per="row"`` the row and its
        columns. As many runs as the rectangles have columns (rows), not cores."""
        r = self.rects
        across, along = (r[:, 2:4], r[:, 0:2]) if per == "column" else (r[:, 0:2], r[:, 2:4])
        sizes = across[:, 1] - across[:, 0]
        which = np.repeat(np.arange(len(r)), sizes)
        starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
        line = across[which, 0] + np.arange(int(sizes.sum())) - starts
        return line, along[which, 0], along[which, 1]

    def cores(self) -> np.ndarray:
        """Every core of the region as ``(n, 2)`` coordinates (rectangle by rectangle, row by
        row): for the per-core reference analyses and small meshes."""
        parts = [
            np.stack(
                np.meshgrid(np.arange(r0, r1), np.arange(c0, c1), indexing="ij"), axis=-1
            ).reshape(-1, 2)
            for r0, r1, c0, c1 in self.rects.tolist()
        ]
        if not parts:
            return np.zeros((0, 2), dtype=np.int64)
        return np.concatenate(parts).astype(np.int64)


def snake_rectangles(
    a: int, b: int, *, origin: tuple[int, int], cores_per_tile: tuple[int, int]
) -> list[tuple[int, int, int, int]]:
    """Rectangles of the positions ``[a, b)`` of a tile's snake order (row 0 left to right,
    row 1 right to left, ...), for the tile whose top-left core is ``origin``."""
    cr, cc = cores_per_tile
    r0, c0 = origin
    if b <= a:
        return []

    def row_span(q: int, lo: int, hi: int) -> tuple[int, int, int, int]:
        # positions [lo, hi) of snake row q as a column range
        left, right = (lo, hi) if q % 2 == 0 else (cc - hi, cc - lo)
        return (r0 + q, r0 + q + 1, c0 + left, c0 + right)

    q0, q1 = a // cc, (b - 1) // cc
    if q0 == q1:
        return [row_span(q0, a % cc, (b - 1) % cc + 1)]
    out = []
    first_full = q0 if a % cc == 0 else q0 + 1
    last_full = q1 if (b - 1) % cc == cc - 1 else q1 - 1
    if first_full > q0:
        out.append(row_span(q0, a % cc, cc))
    if last_full >= first_full:
        out.append((r0 + first_full, r0 + last_full + 1, c0, c0 + cc))
    if last_full < q1:
        out.append(row_span(q1, 0, (b - 1) % cc + 1))
    assert cr >= q1 + 1
    return out
