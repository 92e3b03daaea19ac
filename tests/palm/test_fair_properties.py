"""Properties of the fair network (palm/engines/event/fair.py) on random networks (hypothesis):
random resources and capacities, routes over them with random loads, flows on those routes
with random bytes, starting at random times or when another flow ends. The network always
ends; after every start and every end its rates are the max-min fair rates of the flows in
flight (an exact water-filling, tests/palm/water_filling.py, and the bottleneck
characterisation); every flow moves exactly its bytes; a flow alone costs its analytical
time; and what is monotone in capacity (docs/model.md sec. 7, "Monotone in capacity") is: the
sorted rates, lexicographically, and, for flows of one bottleneck class starting at given
times, every flow's end. The counter-examples for the rest are pinned here too.

10,000 cases in all under the ``palm-ci`` profile (a fixed seed); more with
``python benchmarks/property_tests.py``. tests/palm/test_fair_properties_compiled.py runs
them again on the compiled build."""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st
from water_filling import ExactNetwork, bottleneck_violations, close, examples, water_fill

from palm.engines.event import fair
from palm.engines.event.fair import FairNetwork, FlowEnvironment, Route
from palm.engines.event.shared import Arrival

#: rates agree with the exact water-filling to this much of the flow's lone rate (the
#: network decides "full" at 1e-9 of a capacity and keeps a class's load as flows come and go)
RTOL = 1e-8

# capacities, loads, times and growth factors: a third nice values (ties, the wafer's
# figures, the loads of the case that hung), the rest arbitrary
_CAPACITIES = (1.0, 4.0, 10.0, 3.0e9, 256.0e9, 1024.0e9)
_LOADS = (1.0, 0.5, 2.0, 1.0 / 3.0, 5.8, 10.6, 0.1)
_GROWTHS = (1.0 + 1.0e-9, 1.01, 1.5, 2.0, 10.0)


def _nice(rng: random.Random, values: Sequence[float], low: float, high: float) -> float:
    """One of ``values`` a third of the time, else log-uniform in ``[low, high]``."""
    if rng.random() < 1 / 3:
        return rng.choice(values)
    return low * (high / low) ** rng.random()


class _Flow(NamedTuple):
    route: int  # index into the case's routes
    start_s: float  # when it starts, or how long after ``after`` ends
    alone_s: float  # its bytes: this long at its lone rate
    after: int | None  # the flow whose end it waits for (None: it starts at ``start_s``)


class _Case(NamedTuple):
    capacity: list[float]
    routes: list[dict[int, float]]  # resource -> load
    flows: list[_Flow]


def _capacities(rng: random.Random, n: int) -> list[float]:
    return [_nice(rng, _CAPACITIES, 0.5, 1.0e12) for _ in range(n)]


def _routes(rng: random.Random, n: int, count: int) -> list[dict[int, float]]:
    """``count`` routes over 1 to 4 of ``n`` resources, with random loads."""
    return [
        {
            r: _nice(rng, _LOADS, 1.0e-3, 1.0e3)
            for r in rng.sample(range(n), rng.randint(1, min(n, 4)))
        }
        for _ in range(count)
    ]


def _flows(rng: random.Random, routes: int, count: int, *, chained: bool) -> list[_Flow]:
    """``count`` flows on ``routes`` routes: a third of their starts and times alone nice
    values (so that flows start and end together), and, if ``chained``, a third of them
    started by an earlier flow's end."""
    flows: list[_Flow] = []
    for k in range(count):
        after = rng.randrange(k) if chained and k and rng.random() < 1 / 3 else None
        start = rng.choice((0.0, 0.25, 1.0)) if rng.random() < 1 / 3 else rng.uniform(0.0, 5.0)
        alone = rng.choice((0.5, 1.0)) if rng.random() < 1 / 3 else rng.uniform(1e-3, 5.0)
        flows.append(_Flow(rng.randrange(routes), start, alone, after))
    return flows


# hypothesis draws the sizes and a seed; the values come from a generator of that seed (its
# own draws would cost more than the simulations they feed, tests/palm/water_filling.py)
_SEED = st.integers(0, 2**32 - 1)
_RESOURCES = st.integers(1, 6)
_COUNT = st.integers(1, 12) | st.integers(13, 40)  # beyond 32 in flight, classes give way


@st.composite
def _cases(draw: st.DrawFn) -> _Case:
    """Random resources, routes over them and flows on the routes, some started by others."""
    n, routes, count = draw(_RESOURCES), draw(st.integers(1, 8)), draw(_COUNT)
    rng = random.Random(draw(_SEED))
    capacity = _capacities(rng, n)
    return _Case(capacity, _routes(rng, n, routes), _flows(rng, routes, count, chained=True))


class _Run:
    """A case simulated: each flow's start, end and bytes, and the bytes it moved (its rates
    integrated between the snapshots taken at every start and end). (Plain classes here, not
    dataclasses: the compiled copy of this file is loaded outside ``sys.modules``.)"""

    def __init__(self, n: int) -> None:
        self.start = [-1.0] * n
        self.end = [-1.0] * n
        self.nbytes = [0.0] * n
        self.moved = [0.0] * n
        self.flow_events = 0
        self.snapshots = 0


def _simulate(
    case: _Case,
    capacity: Sequence[float],
    check: Callable[[FairNetwork, dict[Any, int]], None] | None = None,
) -> _Run:
    """Run ``case`` on a fair network of ``capacity``; ``check(net, index)`` after every
    start and end (``index``: flow in flight -> its number in the case)."""
    env = FlowEnvironment()
    net = FairNetwork(env, capacity)
    routes = [net.route(list(r), list(r.values())) for r in case.routes]
    n = len(case.flows)
    done = [Arrival(env) for _ in range(n)]
    run = _Run(n)
    index = {event: k for k, event in enumerate(done)}
    rates: dict[Any, float] = {}
    since = [0.0]

    def snapshot() -> None:
        now = float(env.now)
        for event, rate in rates.items():
            run.moved[index[event]] += rate * (now - since[0])
        rates.clear()
        rates.update(net.rates())
        since[0] = now
        run.snapshots += 1
        if check is not None:
            check(net, index)

    def ended(k: int) -> None:
        run.end[k] = float(env.now)
        snapshot()

    def flow(k: int, spec: _Flow) -> Generator[simpy.Event, Any, None]:
        if spec.after is not None:
            yield done[spec.after]
        yield env.timeout(spec.start_s)
        route = routes[spec.route]
        run.start[k], run.nbytes[k] = float(env.now), spec.alone_s * route.alone_Bps
        done[k].callbacks.append(lambda _event: ended(k))
        net.start(route, run.nbytes[k], latency_s=0.0, done=done[k])
        snapshot()

    for k, spec in enumerate(case.flows):
        env.process(flow(k, spec))
    env.run()
    run.flow_events = env.flow_events
    return run


def _max_min_check(case: _Case, capacity: Sequence[float]) -> Callable[..., None]:
    """A snapshot check: the rates in flight are the exact water-filling's and satisfy the
    bottleneck characterisation."""

    exact = ExactNetwork(case.routes, capacity)
    scale = [max(capacity[r] / a for r, a in load.items()) for load in case.routes]

    def check(net: FairNetwork, index: dict[Any, int]) -> None:
        rates = net.rates()
        on = [case.flows[index[f]].route for f in rates]
        got = list(rates.values())
        for k, x, w in zip(on, got, exact.rates(on), strict=True):
            assert close(x, w, scale[k], RTOL), (x, w, on, got)
        loads = [case.routes[k] for k in on]
        assert not bottleneck_violations(loads, capacity, got, rtol=RTOL)

    return check


@examples(4000)
@given(_cases())
def test_every_run_ends_max_min_fair_and_moves_every_byte(case: _Case) -> None:
    run = _simulate(case, case.capacity, _max_min_check(case, case.capacity))
    assert min(run.end) >= 0.0  # every flow ended ...
    assert run.flow_events == len(case.flows)  # ... each with one end event
    assert run.snapshots == 2 * len(case.flows)
    assert run.moved == pytest.approx(run.nbytes, rel=1e-9)  # bytes conserved
    for k, spec in enumerate(case.flows):
        overlapping = [
            j
            for j in range(len(case.flows))
            if j != k and run.start[j] < run.end[k] and run.start[k] < run.end[j]
        ]
        route = case.routes[spec.route]
        alone = min(case.capacity[r] / a for r, a in route.items())
        if not overlapping:  # alone in the network: its analytical time, bit for bit
            assert run.end[k] == run.start[k] + run.nbytes[k] / alone
        elif all(route.keys().isdisjoint(case.routes[case.flows[j].route]) for j in overlapping):
            # alone on its resources: the same time, up to the rounding of its refills
            assert run.end[k] == pytest.approx(run.start[k] + spec.alone_s, rel=1e-9)


@examples(2500)
@given(_RESOURCES, st.integers(1, 12), _SEED)
def test_sorted_rates_grow_lexicographically_with_any_capacity(
    n: int, count: int, seed: int
) -> None:
    # the max-min fair vector is the leximin maximum of the feasible rates (docs/model.md
    # sec. 7), and more capacity only adds feasible rates: the sorted rates never fall
    # lexicographically (the slowest flow never slows down), though one flow may
    # (the theorem is checked on the exact rates: with rounding, a slowest rate rising by an
    # ulp lets a faster one fall by as much times a ratio of loads, which no tolerance on
    # the sorted vector can tell from a fall; the network's rates are checked against them)
    rng = random.Random(seed)
    capacity = _capacities(rng, n)
    loads = _routes(rng, n, count)
    grown = list(capacity)
    grown[rng.randrange(n)] *= _nice(rng, _GROWTHS, 1.0, 100.0)
    exact = {}
    for name, c in (("before", capacity), ("after", grown)):
        want = water_fill(loads, c)
        got = fair.fair_rates([Route(list(x), list(x.values()), c) for x in loads], c)
        for load, x, w in zip(loads, got, want, strict=True):
            assert close(x, w, max(c[r] / a for r, a in load.items()), RTOL)
        exact[name] = sorted(w for w in want if w is not None)
    assert exact["after"] >= exact["before"]  # lexicographically, exactly
    assert exact["after"][0] >= exact["before"][0]


@examples(1000)
@given(_RESOURCES, st.integers(1, 8), _SEED)
def test_filling_beside_a_class_takes_what_the_class_leaves(n: int, count: int, seed: int) -> None:
    # the filling a class's update runs for the other flows (fair._Filler.fill with
    # ``taken``): the max-min fair rates on what the class leaves of each capacity, no room
    # where the class fills a resource exactly, as it fills its own bottleneck (the state
    # that made the filling go round forever: 256e9 - 10.6 x (256e9 / 10.6) < 0)
    rng = random.Random(seed)
    capacity = _capacities(rng, n)
    loads = _routes(rng, n, count)
    taken = {r: _nice(rng, _LOADS, 1.0e-3, 1.0e3) for r in range(n) if rng.random() < 0.5}
    level = min((capacity[q] / t for q, t in taken.items()), default=1.0)  # fills one exactly
    if rng.random() < 0.5:
        level *= rng.random()
    # what the class leaves, as the network computes it (the filling's input: rounded, so
    # that a resource the class fills may keep a few ulps of its capacity or none)
    left = [max(0.0, c - taken.get(q, 0.0) * level) for q, c in enumerate(capacity)]
    filler = fair._Filler(list(capacity))
    routes = [Route(list(r), list(r.values()), capacity) for r in loads]
    rates = filler.fill(routes, taken, level)
    for load, x, w in zip(loads, rates, water_fill(loads, left), strict=True):
        assert x >= 0.0
        assert close(x, w, max(capacity[r] / a for r, a in load.items()), RTOL)


@st.composite
def _one_class(draw: st.DrawFn) -> tuple[_Case, list[float]]:
    """Flows whose loads are all proportional to one vector (one bottleneck class: they move
    at one rate), starting at given times; and the capacities with one of them grown."""
    n, count = draw(st.integers(1, 4)), draw(_COUNT)
    rng = random.Random(draw(_SEED))
    capacity = _capacities(rng, n)
    shape = _routes(rng, n, 1)[0]
    weights = [1.0] + [_nice(rng, (1.0, 0.5, 2.0), 0.1, 10.0) for _ in range(rng.randint(0, 4))]
    routes = [{r: w * a for r, a in shape.items()} for w in weights]
    grown = list(capacity)
    grown[rng.randrange(n)] *= _nice(rng, _GROWTHS, 1.0, 100.0)
    return _Case(capacity, routes, _flows(rng, len(routes), count, chained=False)), grown


@examples(2500)
@given(_one_class())
def test_flows_of_one_class_starting_at_given_times_end_no_later_with_more_capacity(
    drawn: tuple[_Case, list[float]],
) -> None:
    # docs/model.md sec. 7: with loads proportional to one vector, the flows in flight all
    # move at one rate, which falls with the flows' total load and rises with every
    # capacity; with the same starts, the set in flight with more capacity is a subset at
    # every instant, so every flow ends no later (bytes are the case's, not the capacity's)
    case, grown = drawn
    base = _simulate(case, case.capacity)
    more = _simulate_bytes(_Case(grown, case.routes, case.flows), base.nbytes)
    horizon = max(base.end)
    for k in range(len(case.flows)):
        assert more.end[k] <= base.end[k] + RTOL * horizon, (k, more.end[k], base.end[k])


def _simulate_bytes(case: _Case, nbytes: Sequence[float]) -> _Run:
    """:func:`_simulate` with each flow's bytes given (not its time alone)."""
    routes = case.routes
    flows = [
        _Flow(
            f.route,
            f.start_s,
            b / min(case.capacity[r] / a for r, a in routes[f.route].items()),
            None,
        )
        for f, b in zip(case.flows, nbytes, strict=True)
    ]
    return _simulate(_Case(case.capacity, routes, flows), case.capacity)


def _ends(capacity: list[float], flows: list[tuple[str, list[int], float]]) -> dict[str, float]:
    """End times of flows (name, resources with load 1, bytes) all starting at t = 0."""
    env = FlowEnvironment()
    net = FairNetwork(env, capacity)
    ends: dict[str, float] = {}
    for name, resources, nbytes in flows:
        done = Arrival(env)
        done.callbacks.append(lambda _e, name=name: ends.__setitem__(name, float(env.now)))
        net.start(net.route(resources, [1.0] * len(resources)), nbytes, latency_s=0.0, done=done)
    env.run()
    return ends


def test_the_last_end_can_come_later_with_more_capacity() -> None:
    # docs/model.md sec. 7, counter-example 2. Link A (10 B/s) carries a long flow L (50 B,
    # also on link C, 8 B/s) and a short one S (5 B, also on link B). B = 1 B/s: S moves at 1
    # (B), L at 8 (C): L ends at 50 / 8 = 6.25, S at 5. B = 100 B/s: S and L share A at 5
    # each until S ends at 1 (L has 5 B), then L moves at 8: 1 + 45 / 8 = 6.625 (+6%)
    flows = [("L", [0, 1], 50.0), ("S", [0, 2], 5.0)]
    assert _ends([10.0, 8.0, 1.0], flows) == pytest.approx({"L": 6.25, "S": 5.0}, rel=1e-12)
    assert _ends([10.0, 8.0, 100.0], flows) == pytest.approx({"L": 6.625, "S": 1.0}, rel=1e-12)


def _chained(capacity: float) -> dict[str, float]:
    """Counter-example 3: one resource; A (1 B) at t = 0, C (1 B) 2/3 s after A ends, B
    (0.45 B) at t = 1.5."""
    env = FlowEnvironment()
    net = FairNetwork(env, [capacity])
    route = net.route([0], [1.0])
    ends: dict[str, float] = {}

    def flow(name: str, nbytes: float) -> Arrival:
        done = Arrival(env)
        done.callbacks.append(lambda _e: ends.__setitem__(name, float(env.now)))
        net.start(route, nbytes, latency_s=0.0, done=done)
        return done

    def first() -> Generator[simpy.Event, Any, None]:
        yield flow("A", 1.0)
        yield env.timeout(2.0 / 3.0)
        yield flow("C", 1.0)

    def second() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1.5)
        yield flow("B", 0.45)

    env.process(first())
    env.process(second())
    env.run()
    return ends


def test_a_flow_started_by_another_flow_s_end_can_end_later_with_more_capacity() -> None:
    # docs/model.md sec. 7, counter-example 3: one class, but C starts when A ends. At 1 B/s,
    # A ends at 1, C starts at 5/3 and finds B (from 1.5) with 0.45 - 1/6 B left: both at
    # 1/2, B ends at 5/3 + 2 (0.45 - 1/6) = 2.2333. At 1.2 B/s A ends at 5/6, C starts at
    # 1.5 with B: both at 0.6, B ends at 1.5 + 0.45 / 0.6 = 2.25, later
    slow, fast = _chained(1.0), _chained(1.2)
    assert slow["B"] == pytest.approx(5.0 / 3.0 + 2.0 * (0.45 - 1.0 / 6.0), rel=1e-12)
    assert fast["B"] == pytest.approx(2.25, rel=1e-12)
    assert fast["B"] > slow["B"]
    assert fast["C"] < slow["C"]  # the last end still comes earlier here
