"""A scoped memo of the geometric pricing that many plans of one study share.

Pricing a mesh plan is mostly geometry: which links every flow of a hand-off, a ring or a
DRAM read crosses (:func:`~palm.network.loads.mesh_profile`,
:func:`~palm.network.dram.dram_access`). Plans that differ only in micro-batch, recompute
or schedule place their stages on the same cores, so a batch of plans (an analytical
screening of a space, :mod:`search.screen`) repeats the same geometric work many times.
Inside :func:`shared_geometry` those pure functions remember their results by their exact
inputs (the coordinates' bytes and every hardware field they read), so a repeated call
returns the very object the first call built: results are identical bit for bit. Outside it
nothing is remembered. :func:`palm.plan.build_plan` prices every plan inside a block (its own,
dropped with the plan, unless a study's encloses it): a plan's stages are often copies of one
another moved by whole tiles, and mesh routes and rings are remembered under keys that such a
move leaves unchanged (:func:`~palm.network.loads.tile_aligned_key`), so one plan prices each
shape once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["shared_geometry", "remember", "memo_stats"]

T = TypeVar("T")

#: the active memo (None: not inside :func:`shared_geometry`), its size limit and its hit /
#: miss counts
_memo: dict[Hashable, object] | None = None
_limit = [100_000]
_stats = [0, 0]


@contextmanager
def shared_geometry(
    *, max_entries: int = 100_000, store: dict[Hashable, object] | None = None
) -> Iterator[None]:
    """Remember geometric pricing inside the ``with`` block (nested blocks share the outer
    memo). The memo is dropped at the end of the outermost block; past ``max_entries``
    entries it is cleared (bounded memory, same results). ``store``: remember in this dict
    instead of a fresh one, so that a caller that prices plans in many short blocks (the
    guided sampler, one block a trial) keeps what earlier blocks learnt; outside a block
    nothing is remembered all the same."""
    global _memo
    if _memo is not None:
        yield
        return
    _memo = {} if store is None else store
    _stats[:] = [0, 0]
    _limit[0] = max_entries
    try:
        yield
    finally:
        _memo = None


def remember(make_key: Callable[[], Hashable], compute: Callable[[], T]) -> T:
    """``compute()``, or the value it returned for the key ``make_key()`` earlier in the same
    :func:`shared_geometry` block. The key must hold every input ``compute`` reads; it is
    built only inside a block, so a single simulation pays nothing for it."""
    memo = _memo  # the block's memo, even if another thread's block ends meanwhile
    if memo is None:
        return compute()
    key = make_key()
    if key in memo:
        _stats[0] += 1
        return memo[key]  # type: ignore[return-value]
    _stats[1] += 1
    if len(memo) >= _limit[0]:
        memo.clear()
    value = compute()
    memo[key] = value
    return value


def memo_stats() -> tuple[int, int]:
    """Hits and misses of the current (or last) :func:`shared_geometry` block."""
    return _stats[0], _stats[1]
