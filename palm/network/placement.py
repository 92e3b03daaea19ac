"""Where each rank runs: (stage, dp rank, tp rank) -> a device.

On a ``gpu-cluster`` a device is a global GPU rank, in Megatron-LM's order (tensor-parallel
ranks fastest, then data-parallel, then pipeline), and GPU ``r`` sits in node
``r // gpus_per_node``.

On a ``mesh2d`` a device is a core ``(row, col)`` of the global core mesh. Tiles are visited in
layout order (paper sec. V-B, Fig. 8): ``line`` walks each tile column top to bottom and starts
the next column at the top again; ``s-shape`` walks the next column back up (boustrophedon), so
consecutive stages always touch; ``explicit`` takes the tile ids of each stage from the
configuration (tile id = row * tile_cols + col). Inside a tile, cores are visited in snake
order so that consecutive cores are neighbours. Stage ``s`` takes the next ``tp * dp`` cores;
inside the stage, ``compact`` puts tensor-parallel partners on consecutive cores (rank
``d * tp + t``) and ``strided`` spreads them ``dp`` apart (rank ``t * dp + d``).

Coordinates are computed on demand, never materialised for the whole mesh, so that placement
cost does not grow with the tile count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
from palm.network.region import CoreRegion, snake_rectangles
from palm.strategy import SimConfig

__all__ = ["Placement", "make_placement", "Device"]

Device = int | tuple[int, int]


@dataclass(frozen=True)
class Placement:
    """Maps ranks to devices for one configuration."""

    pp: int
    dp: int
    tp: int
    compact: bool
    hardware: GpuClusterHardware | Mesh2DHardware
    stage_tiles: tuple[tuple[tuple[int, int], ...], ...] = ()
    layout_snake: bool = False
    #: :meth:`stage_region`'s answers by stage (a placement's regions are asked for by the
    #: plan's pricing and again by the event engine's DRAM aggregate)
    _regions: dict[int, CoreRegion] = field(
        init=False, default_factory=dict, compare=False, repr=False
    )

    @property
    def group_size(self) -> int:
        return self.tp * self.dp

    def _local_index(self, d: int, t: int) -> int:
        return d * self.tp + t if self.compact else t * self.dp + d

    def device(self, stage: int, d: int, t: int) -> Device:
        """The device of tensor rank ``t`` of data-parallel replica ``d`` in ``stage``."""
        hw = self.hardware
        if isinstance(hw, GpuClusterHardware):
            return stage * self.group_size + d * self.tp + t  # Megatron order: tp, dp, pp
        index = self._local_index(d, t)
        per_tile = hw.cores_per_tile_count
        tile = self.stage_tiles[stage][index // per_tile] if self.stage_tiles else None
        if tile is None:
            global_index = stage * self.group_size + index
            tile = self._tile_at(global_index // per_tile)
            within = global_index % per_tile
        else:
            within = index % per_tile
        cr, cc = hw.cores_per_tile
        r_in, c_in = divmod(within, cc)
        if r_in % 2:
            c_in = cc - 1 - c_in
        return (tile[0] * cr + r_in, tile[1] * cc + c_in)

    def _tile_at(self, k: int) -> tuple[int, int]:
        hw = self.hardware
        assert isinstance(hw, Mesh2DHardware)
        rows = hw.tiles[0]
        c, r = divmod(k, rows)
        if self.layout_snake and c % 2 == 1:
            r = rows - 1 - r
        return (r, c)

    def stage_array(self, stage: int) -> np.ndarray:
        """Devices of ``stage`` as an array indexed ``[d, t]``: global ranks on a cluster
        (shape ``(dp, tp)``), core coordinates on a mesh (shape ``(dp, tp, 2)``)."""
        d = np.arange(self.dp)[:, None]
        t = np.arange(self.tp)[None, :]
        hw = self.hardware
        if isinstance(hw, GpuClusterHardware):
            out: np.ndarray = stage * self.group_size + d * self.tp + t
            return out
        local = d * self.tp + t if self.compact else t * self.dp + d
        per_tile = hw.cores_per_tile_count
        if self.stage_tiles:
            tiles = np.asarray(self.stage_tiles[stage], dtype=np.int64)
            tile_r, tile_c = tiles[local // per_tile, 0], tiles[local // per_tile, 1]
            within = local % per_tile
        else:
            global_index = stage * self.group_size + local
            k = global_index // per_tile
            tile_c, tile_r = np.divmod(k, hw.tiles[0])
            if self.layout_snake:
                tile_r = np.where(tile_c % 2 == 1, hw.tiles[0] - 1 - tile_r, tile_r)
            within = global_index % per_tile
        cr, cc = hw.cores_per_tile
        r_in, c_in = np.divmod(within, cc)
        c_in = np.where(r_in % 2 == 1, cc - 1 - c_in, c_in)
        return np.stack([tile_r * cr + r_in, tile_c * cc + c_in], axis=-1)

    def stage_region(self, stage: int) -> CoreRegion:
        """The cores of ``stage`` (mesh only) as rectangles: one per tile column of the walk it
        touches, plus the covered parts of tiles it fills only partly (see
        :mod:`palm.network.region`). The same cores as :meth:`stage_array`, without their
        order and without one entry per core. Computed once per stage and placement."""
        region = self._regions.get(stage)
        if region is None:
            region = self._regions[stage] = self._stage_region(stage)
        return region

    def _stage_region(self, stage: int) -> CoreRegion:
        hw = self.hardware
        assert isinstance(hw, Mesh2DHardware), "stage_region is for meshes"
        cr, cc = hw.cores_per_tile
        per_tile = hw.cores_per_tile_count
        size = self.group_size
        rects: list[tuple[int, int, int, int]] = []

        def part(tile: tuple[int, int], lo: int, hi: int) -> None:
            rects.extend(
                snake_rectangles(
                    lo, hi, origin=(tile[0] * cr, tile[1] * cc), cores_per_tile=(cr, cc)
                )
            )

        if self.stage_tiles:
            tiles = self.stage_tiles[stage]
            for k in range(-(-size // per_tile)):
                part(tiles[k], 0, min(per_tile, size - k * per_tile))
            return CoreRegion.of(rects)
        start, stop = stage * size, (stage + 1) * size
        k0, k1 = start // per_tile, (stop - 1) // per_tile  # first and last tile of the walk
        a, b = start - k0 * per_tile, stop - k1 * per_tile
        if k0 == k1:
            part(self._tile_at(k0), a, b)
            return CoreRegion.of(rects)
        if a > 0:
            part(self._tile_at(k0), a, per_tile)
            k0 += 1
        if b < per_tile:
            part(self._tile_at(k1), 0, b)
            k1 -= 1
        rows = hw.tiles[0]
        col = np.arange(k0 // rows, k1 // rows + 1)  # whole tiles, by tile column
        r_lo = np.maximum(k0, col * rows) - col * rows
        r_hi = np.minimum(k1, col * rows + rows - 1) - col * rows
        if self.layout_snake:
            odd = col % 2 == 1
            r_lo, r_hi = np.where(odd, rows - 1 - r_hi, r_lo), np.where(odd, rows - 1 - r_lo, r_hi)
        whole = np.stack([r_lo * cr, (r_hi + 1) * cr, col * cc, (col + 1) * cc], axis=1)
        return CoreRegion.of(rects, whole)

    def tp_group(self, stage: int, d: int = 0) -> list[Device]:
        return [self.device(stage, d, t) for t in range(self.tp)]

    def dp_group(self, stage: int, t: int = 0) -> list[Device]:
        return [self.device(stage, d, t) for d in range(self.dp)]

    def stage_devices(self, stage: int) -> list[Device]:
        return [self.device(stage, d, t) for d in range(self.dp) for t in range(self.tp)]


def make_placement(config: SimConfig) -> Placement:
    """The placement of ``config`` (validated)."""
    par, pl, hw = config.parallelism, config.placement, config.hardware
    explicit: tuple[tuple[tuple[int, int], ...], ...] = ()
    if isinstance(hw, Mesh2DHardware) and pl.layout == "explicit":
        cols = hw.tiles[1]
        explicit = tuple(tuple(divmod(t, cols) for t in tiles) for tiles in pl.stage_tiles)
    return Placement(
        pp=par.pp,
        dp=par.data_ranks,  # dp x cp: CP ranks sit between TP and DP (Megatron-Core order)
        tp=par.tp,
        compact=pl.tp_group == "compact",
        hardware=hw,
        stage_tiles=explicit,
        layout_snake=pl.layout == "s-shape",
    )
