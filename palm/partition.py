"""Cutting the operator chain into pipeline chunks (SPEC sec. 4: balanced by compute).

Transformer layers are split evenly between chunks, the embedding riding with the first and
the logits with the last, as Megatron-LM does; when the layers do not divide evenly, or for
other operator chains, chunks are balanced by forward FLOPs: the contiguous split that
minimises the largest chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

from palm.workload.model import Workload

__all__ = ["partition", "chunk_ranges"]


def partition(costs: Sequence[float], parts: int) -> list[tuple[int, int]]:
    """Contiguous split of ``costs`` into ``parts`` non-empty ranges ``[start, end)``
    minimising the largest sum (binary search on the bound, then a greedy cut that leaves
    enough items for the remaining parts)."""
    n = len(costs)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot cut {n} items into {parts} parts")
    lo, hi = max(costs), sum(costs)

    def cuts(bound: float) -> list[tuple[int, int]] | None:
        ranges: list[tuple[int, int]] = []
        start, acc = 0, 0.0
        for i, c in enumerate(costs):
            remaining_parts = parts - len(ranges) - 1
            must_cut = n - i == remaining_parts  # exactly one item left per remaining part
            if i > start and (acc + c > bound or must_cut):
                ranges.append((start, i))
                start, acc = i, 0.0
                if len(ranges) == parts:
                    return None
            acc += c
        ranges.append((start, n))
        return ranges if len(ranges) == parts and acc <= bound else None

    for _ in range(100):
        mid = (lo + hi) / 2
        if cuts(mid) is None:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * max(hi, 1e-30):
            break
    found = cuts(hi)
    assert found is not None
    return found


def chunk_ranges(
    workload: Workload, parts: int, unit_cost: Sequence[float]
) -> list[tuple[int, int]]:
    ops = workload.ops
    if workload.transformer:
        layers = workload.blocks
        if layers % parts == 0:
            per = layers // parts
            bounds = [1 + i * per for i in range(parts)] + [len(ops)]
            bounds[0] = 0
            return [(bounds[i], bounds[i + 1]) for i in range(parts)]
        # balance layers, then attach embedding and logits to the end chunks
        layer_ranges = partition(unit_cost[1:-1], parts)
        out = [(a + 1, b + 1) for a, b in layer_ranges]
        out[0] = (0, out[0][1])
        out[-1] = (out[-1][0], len(ops))
        return out
    return partition(unit_cost, parts)
