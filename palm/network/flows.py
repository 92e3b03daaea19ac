"""Max-min fair rates of flows sharing links and DRAM channels.

A *flow* moves bytes at a rate ``x_i`` (bytes/s); per byte it moves it puts ``a_ir`` bytes on
resource ``r`` (1.0 on every link of its route, the number of cores a DRAM access serves from a
channel, an aggregated per-link load factor, ...). A resource of capacity ``c_r`` (bytes/s)
bounds the flows that load it:

    sum_i a_ir x_i <= c_r .

The rates are *max-min fair* (Bertsekas & Gallager, *Data Networks*, 2nd ed., 1992, sec. 6.5.2):
no flow's rate can grow without lowering the rate of a flow that is no faster. They are found by
**progressive filling**: all unfrozen flows grow at the same pace from zero; when a resource
fills up, the flows that load it are frozen at that level; repeat until every flow is frozen.
A flow alone therefore gets ``min_r c_r / a_ir`` (its analytical rate), ``k`` equal flows on one
resource each get ``1/k`` of it, and every rate is non-decreasing in every capacity.

Each filling round freezes at least one resource, so there are at most ``min(flows, resources)``
rounds of ``O(flows x resources)`` each; the event engine calls it only when a flow starts or
ends, with a handful of flows.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

__all__ = ["max_min_rates", "fill"]

#: relative slack when deciding that a resource is full (rounding of the filling levels)
_TIGHT = 1e-12


def max_min_rates(
    *, loads: Sequence[Mapping[Hashable, float]], capacity_Bps: Mapping[Hashable, float]
) -> list[float]:
    """Max-min fair rates (bytes/s of each flow) by progressive filling (Bertsekas & Gallager,
    Data Networks, sec. 6.5). ``loads[i][r]`` = bytes flow ``i`` puts on resource ``r`` per byte
    it moves (e.g. 1.0 for each link on its route, a DRAM channel, an aggregated per-link load
    factor). A flow with no resources (or only zero loads) gets rate ``inf``.

    Raises ``ValueError`` for a negative load, a load on a resource without a capacity, or a
    capacity that is not positive."""
    keys: dict[Hashable, int] = {}
    for r, cap in capacity_Bps.items():
        if not cap > 0:
            raise ValueError(f"capacity_Bps[{r!r}] = {cap!r}: must be > 0")
        keys[r] = len(keys)
    matrix = np.zeros((len(loads), len(keys)))
    for i, flow in enumerate(loads):
        for r, a in flow.items():
            if r not in keys:
                raise ValueError(f"loads[{i}] uses resource {r!r}, which has no capacity")
            if a < 0:
                raise ValueError(f"loads[{i}][{r!r}] = {a!r}: must be >= 0")
            matrix[i, keys[r]] += a
    capacity = np.fromiter(capacity_Bps.values(), dtype=np.float64, count=len(keys))
    return [float(x) for x in fill(matrix, capacity)]


def fill(matrix: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Progressive filling on arrays: ``matrix[i, r]`` the load of flow ``i`` on resource ``r``
    (>= 0), ``capacity[r] > 0``. Returns the rate of every flow (``inf`` for a flow with no
    load). The engine's fast path; :func:`max_min_rates` is its keyed front."""
    n_flows = matrix.shape[0]
    rates = np.full(n_flows, np.inf)
    if n_flows == 0:
        return rates
    uses = matrix > 0
    active = uses.any(axis=1)  # flows that still grow
    used = np.zeros(matrix.shape[1])  # capacity taken by frozen flows
    level = 0.0
    while active.any():
        weight = matrix[active].sum(axis=0)  # load of one unit of level on each resource
        loaded = weight > 0
        # how much further the level can rise before each resource is full
        headroom = np.maximum(capacity - used - weight * level, 0.0)
        ceiling = np.full(len(capacity), np.inf)
        ceiling[loaded] = headroom[loaded] / weight[loaded]
        step = float(ceiling.min())
        level += step
        full = loaded & (ceiling <= step + _TIGHT * level)
        freeze = active & uses[:, full].any(axis=1)
        rates[freeze] = level
        used += matrix[freeze].sum(axis=0) * level
        active &= ~freeze
    return rates
