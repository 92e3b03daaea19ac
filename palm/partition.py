"""Cutting the operator chain into pipeline chunks (balanced by compute, the PALM paper sec. IV-B).

Transformer layers are split evenly between chunks, the embedding riding with the first and
the logits with the last, as Megatron-LM does; when the layers do not divide evenly, or for
other operator chains, chunks are balanced by forward FLOPs: the contiguous split that
minimises the largest chunk.

Uneven stages (Megatron-Core ``num_layers_in_first_pipeline_stage`` /
``num_layers_in_last_pipeline_stage``): the first and / or last pipeline rank get the layer
counts asked for, the other ranks share the rest evenly (earlier ranks take the remainder),
and each rank's layers are spread evenly over its ``v`` interleaved chunks, chunk ``j`` of
rank ``s`` being chunk ``j p + s`` of the model (so 126 layers on 16 ranks with 8 chunks and
first = last = 7 give one layer per chunk, the embedding and the logits alone in the first
and last chunk, as Megatron-Bridge's Llama 3.1 405B recipe splits them).
"""

from __future__ import annotations

from collections.abc import Sequence

from palm.workload.model import Workload

__all__ = ["partition", "chunk_ranges", "uneven_chunk_layers"]


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


def _spread(total: int, parts: int) -> list[int]:
    """``total`` items in ``parts`` near-equal counts, the larger ones first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def uneven_chunk_layers(*, layers: int, pp: int, chunks: int, first: int, last: int) -> list[int]:
    """Layers of each model chunk (in model order ``c = j pp + s``) when the first and / or
    last pipeline rank hold ``first`` / ``last`` layers (0: an equal share)."""
    fixed = {0: first, pp - 1: last}
    fixed = {s: n for s, n in fixed.items() if n}
    free = [s for s in range(pp) if s not in fixed]
    shares = _spread(layers - sum(fixed.values()), len(free)) if free else []
    per_stage = dict(fixed) | dict(zip(free, shares, strict=True))
    per_chunk = {s: _spread(per_stage[s], chunks) for s in range(pp)}
    # a short first (last) rank leaves its first (last) chunk the lightest: with as many
    # chunks as layers plus two, the embedding (logits) fills that chunk alone, as Megatron's
    # account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split do
    per_chunk[0] = per_chunk[0][::-1]
    return [per_chunk[c % pp][c // pp] for c in range(pp * chunks)]


def chunk_ranges(
    workload: Workload,
    parts: int,
    unit_cost: Sequence[float],
    *,
    pp: int = 1,
    first_stage_layers: int = 0,
    last_stage_layers: int = 0,
) -> list[tuple[int, int]]:
    ops = workload.ops
    if workload.transformer and (first_stage_layers or last_stage_layers):
        counts = uneven_chunk_layers(
            layers=workload.blocks,
            pp=pp,
            chunks=parts // pp,
            first=first_stage_layers,
            last=last_stage_layers,
        )
        bounds = [0]
        for n in counts:
            bounds.append(bounds[-1] + n)
        out = [(1 + a, 1 + b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        out[0] = (0, out[0][1])
        out[-1] = (out[-1][0], len(ops))
        return out
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
