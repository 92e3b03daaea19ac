"""An independent reference for the fair network's property tests: max-min fair rates by
water-filling in exact rational arithmetic (no rounding, so ties are ties), the bottleneck
characterisation of max-min fairness, and the hypothesis profiles the property tests run
under.

Water-filling (Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2): every flow not
frozen yet sits at one level ``L``; resource ``r`` fills when ``used_r + W_r L = c_r``
(``used_r`` the frozen flows' use, ``W_r`` the unfrozen flows' load on it); at the least such
``L`` every resource that fills freezes its flows; repeat. Written from the definition, in
:class:`fractions.Fraction`, and sharing no code with :mod:`palm.engines.event.fair` or
:mod:`palm.network.flows`.

Profiles: ``palm-ci`` (the default: a fixed seed, ``derandomize``, so CI runs the same cases
every time) and ``palm-bench`` (a random seed, for ``benchmarks/property_tests.py``); the
environment variable ``PALM_HYPOTHESIS_PROFILE`` picks one and ``PALM_PROPERTY_SCALE``
multiplies every test's number of examples.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from fractions import Fraction

from hypothesis import HealthCheck, settings

__all__ = ["ExactNetwork", "bottleneck_violations", "close", "examples", "water_fill"]

settings.register_profile(
    "palm-ci",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "palm-bench",
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("PALM_HYPOTHESIS_PROFILE", "palm-ci"))
_SCALE = float(os.environ.get("PALM_PROPERTY_SCALE", "1"))


def examples(n: int) -> settings:
    """Settings for a property test of ``n`` examples (times ``PALM_PROPERTY_SCALE``) under
    the loaded profile."""
    return settings(max_examples=max(1, round(n * _SCALE)))


def water_fill(
    loads: Sequence[Mapping[int, float]], capacity: Sequence[float]
) -> list[Fraction | None]:
    """Exact max-min fair rates of flows putting ``loads[i][r]`` bytes on resource ``r`` per
    byte moved, under capacities ``capacity`` (bytes/s, >= 0); ``None`` for a flow that
    loads nothing (unbounded)."""
    cap = [Fraction(c) for c in capacity]
    flows = [{r: Fraction(a) for r, a in load.items() if a > 0} for load in loads]
    return _fill([(load, 1) for load in flows], cap)


class ExactNetwork:
    """:func:`water_fill` for flows on a fixed set of routes: loads and capacities turned into
    fractions once, and the rates of each multiset of routes in flight kept, rounded to the
    nearest double (flows on the same route get the same max-min fair rate)."""

    def __init__(self, routes: Sequence[Mapping[int, float]], capacity: Sequence[float]) -> None:
        self.routes = [{r: Fraction(a) for r, a in x.items() if a > 0} for x in routes]
        self.capacity = [Fraction(c) for c in capacity]
        self._memo: dict[tuple[tuple[int, int], ...], dict[int, float]] = {}

    def rates(self, on: Sequence[int]) -> list[float]:
        """The exact rates of flows on routes ``on`` (indices into the routes), in order, each
        rounded to a double (``inf`` for a route that loads nothing)."""
        counts: dict[int, int] = {}
        for k in on:
            counts[k] = counts.get(k, 0) + 1
        key = tuple(sorted(counts.items()))
        by_route = self._memo.get(key)
        if by_route is None:
            rates = _fill([(self.routes[k], n) for k, n in key], self.capacity)
            by_route = {
                k: math.inf if x is None else float(x)
                for (k, _n), x in zip(key, rates, strict=True)
            }
            self._memo[key] = by_route
        return [by_route[k] for k in on]


def _fill(
    flows: Sequence[tuple[Mapping[int, Fraction], int]], cap: Sequence[Fraction]
) -> list[Fraction | None]:
    """Water-filling of ``flows``, each a load (resource -> load) and how many flows carry it
    (they move at one rate: a filling never tells them apart)."""
    rates: list[Fraction | None] = [None] * len(flows)
    used = [Fraction(0)] * len(cap)
    live = {i for i, (load, _n) in enumerate(flows) if load}
    while live:
        weight: dict[int, Fraction] = {}
        for i in live:
            load, n = flows[i]
            for r, a in load.items():
                weight[r] = weight.get(r, Fraction(0)) + n * a
        fills = {r: (cap[r] - used[r]) / w for r, w in weight.items()}
        level = min(fills.values())
        full = {r for r, at in fills.items() if at == level}
        frozen = {i for i in live if not full.isdisjoint(flows[i][0])}
        for i in frozen:
            rates[i] = level
            load, n = flows[i]
            for r, a in load.items():
                used[r] += n * a * level
        live -= frozen
    return rates


def bottleneck_violations(
    loads: Sequence[Mapping[int, float]],
    capacity: Sequence[float],
    rates: Sequence[float],
    *,
    rtol: float,
) -> list[str]:
    """What keeps ``rates`` from being max-min fair, by the bottleneck characterisation
    (Bertsekas & Gallager sec. 6.5.2, with loads): the rates are feasible (no resource over
    its capacity) and every flow crosses a full resource on which no flow is faster. Empty
    when they are (up to ``rtol``)."""
    carried = [0.0] * len(capacity)
    fastest = [0.0] * len(capacity)  # the fastest flow on each resource
    for load, x in zip(loads, rates, strict=True):
        for r, a in load.items():
            carried[r] += a * x
            fastest[r] = max(fastest[r], x)
    wrong = [
        f"resource {r} carries {carried[r]!r} > {c!r}"
        for r, c in enumerate(capacity)
        if carried[r] > c * (1 + rtol)
    ]
    for i, (load, x) in enumerate(zip(loads, rates, strict=True)):
        if not any(
            carried[r] >= capacity[r] * (1 - rtol) and x >= fastest[r] * (1 - rtol) for r in load
        ):
            wrong.append(f"flow {i} (rate {x!r}) has no bottleneck")
    return wrong


def close(x: float, want: Fraction | float | None, scale: float, rtol: float) -> bool:
    """``x`` equals ``want`` (exact, or rounded; ``None`` or ``inf``: unbounded) up to
    ``rtol`` of ``max(want, scale)`` (``scale``: a rate the flow's rounding errors are
    relative to, e.g. its lone rate)."""
    if want is None or want == math.inf:
        return math.isinf(x)
    w = float(want)
    return abs(x - w) <= rtol * max(w, scale)
