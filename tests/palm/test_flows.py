"""Max-min fair rates by progressive filling (palm.network.flows)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from palm.network.flows import fill, max_min_rates


def _finish_times(sizes, loads, capacity):
    """Fluid simulation: rates recomputed whenever a flow ends. Returns end times and the
    bytes each flow moved (integrated rate)."""
    remaining = list(sizes)
    moved = [0.0] * len(sizes)
    end = [0.0] * len(sizes)
    live = [i for i, b in enumerate(sizes) if b > 0]
    now = 0.0
    while live:
        rates = max_min_rates(loads=[loads[i] for i in live], capacity_Bps=capacity)
        # no resource is over capacity
        for r, cap in capacity.items():
            assert sum(
                loads[i].get(r, 0.0) * x for i, x in zip(live, rates, strict=True)
            ) <= cap * (1 + 1e-9)
        dt = min(remaining[i] / x for i, x in zip(live, rates, strict=True))
        now += dt
        for i, x in zip(live, rates, strict=True):
            remaining[i] -= x * dt
            moved[i] += x * dt
        done = [i for i in live if remaining[i] <= 1e-9 * sizes[i]]
        for i in done:
            end[i] = now
        live = [i for i in live if i not in done]
    return end, moved


def test_a_flow_alone_gets_the_full_capacity_and_costs_its_analytical_time() -> None:
    # a route over a fast and a slow link: the slow one sets the rate
    loads = [{"fast": 1.0, "slow": 1.0}]
    cap = {"fast": 1024e9, "slow": 256e9}
    assert max_min_rates(loads=loads, capacity_Bps=cap) == [256e9]
    end, _ = _finish_times([1e9], loads, cap)
    assert end[0] == pytest.approx(1e9 / 256e9, rel=1e-12)


def test_two_equal_flows_on_one_link_each_take_twice_as_long_as_alone() -> None:
    cap = {"link": 100.0}
    alone, _ = _finish_times([50.0], [{"link": 1.0}], cap)
    both, _ = _finish_times([50.0, 50.0], [{"link": 1.0}, {"link": 1.0}], cap)
    assert both == pytest.approx([2 * alone[0], 2 * alone[0]])


def test_bottleneck_sharing_hand_worked_three_flows() -> None:
    # A (10 B/s) carries flows 0 and 1, B (4 B/s) flows 0 and 2. Filling: B fills at level 2
    # (flows 0 and 2 frozen at 2), then flow 1 takes what A has left: 10 - 2 = 8.
    rates = max_min_rates(
        loads=[{"A": 1.0, "B": 1.0}, {"A": 1.0}, {"B": 1.0}],
        capacity_Bps={"A": 10.0, "B": 4.0},
    )
    assert rates == pytest.approx([2.0, 8.0, 2.0])


def test_weighted_loads_hand_worked() -> None:
    # flow 0 puts 3 bytes on the channel per byte it moves (it serves three cores), flow 1 one:
    # level x fills the 12 B/s channel at 3x + x = 12, so both get 3.
    rates = max_min_rates(loads=[{"ch": 3.0}, {"ch": 1.0}], capacity_Bps={"ch": 12.0})
    assert rates == pytest.approx([3.0, 3.0])
    # with a second, tighter limit on flow 1 (2 B/s), flow 0 takes the rest: (12 - 2) / 3
    rates = max_min_rates(
        loads=[{"ch": 3.0}, {"ch": 1.0, "noc": 1.0}], capacity_Bps={"ch": 12.0, "noc": 2.0}
    )
    assert rates == pytest.approx([10.0 / 3.0, 2.0])


def test_flow_without_resources_is_unbounded() -> None:
    assert max_min_rates(loads=[{}, {"a": 0.0}], capacity_Bps={"a": 1.0}) == [np.inf, np.inf]
    assert fill(np.zeros((0, 2)), np.ones(2)).shape == (0,)


def test_rates_are_max_min_fair_and_feasible_on_random_instances() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n, k = rng.integers(1, 7), rng.integers(1, 5)
        matrix = rng.uniform(0.1, 3.0, (n, k)) * (rng.random((n, k)) < 0.6)
        cap = rng.uniform(0.5, 10.0, k)
        x = fill(matrix, cap)
        load = matrix.T @ np.where(np.isfinite(x), x, 0.0)
        assert (load <= cap * (1 + 1e-9)).all()
        for i in np.nonzero(np.isfinite(x))[0]:
            # every flow crosses a full resource on which no flow is faster (bottleneck)
            full = np.isclose(load, cap, rtol=1e-9) & (matrix[i] > 0)
            assert any(x[i] >= x[matrix[:, r] > 0].max() * (1 - 1e-9) for r in np.nonzero(full)[0])


def _lex_ge(a: np.ndarray, b: np.ndarray) -> bool:
    """Sorted vector ``a`` is lexicographically >= sorted ``b`` (up to rounding)."""
    for x, y in zip(np.sort(a), np.sort(b), strict=True):
        if not np.isclose(x, y, rtol=1e-9):
            return bool(x > y)
    return True


@pytest.mark.parametrize("seed", range(20))
def test_rates_are_monotone_in_every_capacity(seed: int) -> None:
    """More capacity anywhere never lowers the slowest flow, nor the sorted rate vector
    (lexicographically), nor the total load carried by the resource that grew."""
    rng = np.random.default_rng(seed)
    n, k = 5, 4
    matrix = rng.uniform(0.1, 2.0, (n, k)) * (rng.random((n, k)) < 0.7)
    matrix[:, 0] += 0.5  # every flow loads something
    cap = rng.uniform(1.0, 5.0, k)
    base = fill(matrix, cap)
    for r, factor in itertools.product(range(k), (1.01, 1.5, 4.0)):
        more = cap.copy()
        more[r] *= factor
        grown = fill(matrix, more)
        assert grown.min() >= base.min() * (1 - 1e-12)
        assert _lex_ge(grown, base)
        # every flow that loads the grown resource and was bottlenecked there is no slower
        assert (grown[matrix[:, r] > 0] >= base[matrix[:, r] > 0].min() * (1 - 1e-12)).all()


def test_a_single_flow_rate_can_fall_when_another_bottleneck_grows() -> None:
    """Max-min fairness is not monotone flow by flow (Bertsekas & Gallager sec. 6.5): freeing
    flow 0 on B lets it take A's bandwidth from flow 1. The engine's results are tested for
    monotonicity in bandwidth at the level of whole iterations instead."""
    loads = [{"A": 1.0, "B": 1.0}, {"A": 1.0}]
    before = max_min_rates(loads=loads, capacity_Bps={"A": 10.0, "B": 2.0})
    after = max_min_rates(loads=loads, capacity_Bps={"A": 10.0, "B": 20.0})
    assert before == pytest.approx([2.0, 8.0])
    assert after == pytest.approx([5.0, 5.0])


def test_bytes_are_conserved_and_capacity_never_exceeded() -> None:
    loads = [{"A": 1.0, "B": 1.0}, {"A": 1.0}, {"B": 2.0}, {"C": 1.0, "A": 0.5}]
    cap = {"A": 10.0, "B": 4.0, "C": 3.0}
    sizes = [7.0, 30.0, 5.0, 12.0]
    end, moved = _finish_times(sizes, loads, cap)
    assert moved == pytest.approx(sizes, rel=1e-9)
    assert all(t > 0 for t in end)


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"capacity_Bps\['a'\]"):
        max_min_rates(loads=[{"a": 1.0}], capacity_Bps={"a": 0.0})
    with pytest.raises(ValueError, match="no capacity"):
        max_min_rates(loads=[{"b": 1.0}], capacity_Bps={"a": 1.0})
    with pytest.raises(ValueError, match="must be >= 0"):
        max_min_rates(loads=[{"a": -1.0}], capacity_Bps={"a": 1.0})


def test_the_engine_filling_equals_the_reference() -> None:
    from palm.engines.event.fair import Route, fair_rates

    rng = np.random.default_rng(3)
    for _ in range(300):
        n, k = rng.integers(1, 9), rng.integers(1, 6)
        matrix = rng.uniform(0.1, 3.0, (n, k)) * (rng.random((n, k)) < 0.6)
        cap = rng.uniform(0.5, 10.0, k).tolist()
        routes = [Route(range(k), row.tolist(), cap) for row in matrix]
        assert fair_rates(routes, cap) == pytest.approx(fill(matrix, np.asarray(cap)).tolist())
