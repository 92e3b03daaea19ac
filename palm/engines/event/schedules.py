"""The order in which one pipeline rank runs its forward and backward passes.

An operation is ``("F" | "B", chunk, micro_batch)``; ``chunk`` is the rank's local model chunk
(0 without interleaving). Orders follow Megatron-LM (``megatron/core/pipeline_parallel/
schedules.py``) and Narayanan et al. SC21 sec. 2:

* **GPipe** (Huang et al. 2019): every forward, then every backward, in micro-batch order.
* **1F1B** (PipeDream-Flush): rank ``s`` of ``p`` runs ``min(p - s - 1, m)`` warm-up forwards,
  then alternates one forward and one backward, then drains the remaining backwards.
* **Interleaved 1F1B** with ``v`` chunks: ``m v`` virtual micro-batches; warm-up
  ``min(2 (p - s - 1) + (v - 1) p, m v)`` (all of them when ``m = p``); the ``k``-th forward
  runs chunk ``(k mod p v) // p`` on micro-batch ``(k // p v) p + k mod p``; backwards walk the
  chunks in reverse.
* **Inference**: forwards only, in the forward order of the schedule.
"""

from __future__ import annotations

import functools

__all__ = ["Operation", "stage_program"]

Operation = tuple[str, int, int]


def _interleaved_ids(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    in_group = k % (p * v)
    chunk = in_group // p
    if not forward:
        chunk = v - chunk - 1
    micro_batch = (k // (p * v)) * p + k % p
    return chunk, micro_batch


@functools.lru_cache(maxsize=16)
def _passes(p: int, v: int, m: int) -> tuple[tuple[Operation, ...], tuple[Operation, ...]]:
    """Every rank's forwards and backwards in their own order (the same on every rank; the
    ranks differ in how they interleave them), built once per pipeline shape."""
    if v > 1:
        total = m * v
        fwd = tuple(("F", *_interleaved_ids(k, p, v, True)) for k in range(total))
        bwd = tuple(("B", *_interleaved_ids(k, p, v, False)) for k in range(total))
        return fwd, bwd
    return tuple(("F", 0, i) for i in range(m)), tuple(("B", 0, i) for i in range(m))


def stage_program(
    *, schedule: str, pp: int, chunks: int, micro_batches: int, stage: int, training: bool
) -> list[Operation]:
    """Operations of pipeline rank ``stage`` for one iteration, in execution order."""
    p, v, m, s = pp, chunks, micro_batches, stage
    fwd, bwd = (list(ops) for ops in _passes(p, v, m))
    if not training:
        return fwd
    if v > 1:
        total = m * v
        warmup = total if m == p else min(2 * (p - s - 1) + (v - 1) * p, total)
    elif p == 1:  # no pipeline: forward and backward alternate (gradient accumulation)
        warmup = 0
    elif schedule == "gpipe":
        return fwd + bwd
    else:
        warmup = min(p - s - 1, m)
    return _one_f_one_b(fwd, bwd, warmup)


def _one_f_one_b(fwd: list[Operation], bwd: list[Operation], warmup: int) -> list[Operation]:
    total = len(fwd)
    remaining = total - warmup
    order = fwd[:warmup]
    for k in range(remaining):
        order.append(fwd[warmup + k])
        order.append(bwd[k])
    order.extend(bwd[remaining:])
    return order
