"""The fair network's clock (palm/engines/event/fair.py): flow ends are events of the
simulation taken beside SimPy's queue, bytes left are updated only when a rate changes, and
progressive filling is memoised. Hand-worked cases on one or two links."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Generator, Hashable, Mapping
from typing import Any

import pytest
import simpy

from palm.engines.event import fair
from palm.engines.event.fair import FairNetwork, FlowEnvironment, Route
from palm.engines.event.shared import Arrival
from palm.errors import NoProgressError


def _start(
    env: FlowEnvironment,
    net: FairNetwork,
    route: Route,
    nbytes: float,
    ends: dict[str, float],
    name: str,
) -> None:
    """Start a flow of ``nbytes`` on ``route`` that records its end time in ``ends``."""
    done = Arrival(env)
    done.callbacks.append(lambda _e: ends.__setitem__(name, env.now))
    net.start(route, nbytes, latency_s=0.0, done=done)


def test_a_flow_alone_ends_at_exactly_start_plus_bytes_over_rate() -> None:
    env = FlowEnvironment()
    net = FairNetwork(env, [3.0e9, 7.0e9])
    route = net.route([0, 1], [1.0, 1.0])
    ends: dict[str, float] = {}

    def later() -> Generator[simpy.Event, None, None]:
        yield env.timeout(0.123)
        _start(env, net, route, 1.7e9, ends, "a")

    env.process(later())
    env.run()
    assert ends["a"] == 0.123 + 1.7e9 / 3.0e9  # bit for bit, as the analytical engine
    assert net.recomputes == 0


def test_a_flow_joining_halfway_shares_and_the_first_speeds_up_again() -> None:
    # one link of 10 B/s. A moves 10 B from t = 0; B 2 B from t = 0.5. A alone moves 5 B by
    # 0.5; both at 5 B/s until B is through at 0.9 (A has moved 7 B); A alone moves its last
    # 3 B by 1.2.
    env = FlowEnvironment()
    net = FairNetwork(env, [10.0])
    route = net.route([0], [1.0])
    ends: dict[str, float] = {}
    _start(env, net, route, 10.0, ends, "a")

    def joiner() -> Generator[simpy.Event, None, None]:
        yield env.timeout(0.5)
        _start(env, net, route, 2.0, ends, "b")

    env.process(joiner())
    env.run()
    assert ends == {"b": pytest.approx(0.9), "a": pytest.approx(1.2)}
    assert net.busy_s == [pytest.approx(1.2)]


def test_every_flow_costs_one_end_event_however_flows_overlap() -> None:
    def run(gap: float) -> tuple[int, int]:
        env = FlowEnvironment()
        net = FairNetwork(env, [10.0, 10.0])
        routes = [net.route([0], [1.0]), net.route([0, 1], [1.0, 1.0]), net.route([1], [1.0])]
        ends: dict[str, float] = {}

        def starter() -> Generator[simpy.Event, None, None]:
            for i in range(6):
                _start(env, net, routes[i % 3], 4.0 + i, ends, str(i))
                yield env.timeout(gap)

        env.process(starter())
        env.run()
        assert len(ends) == 6
        return env.flow_events, net.recomputes

    apart, _ = run(10.0)  # one flow at a time
    together, recomputes = run(0.01)  # all overlapping, rates change at every start and end
    assert apart == together == 6
    assert recomputes > 0


def test_a_flow_ending_when_another_starts_leaves_first() -> None:
    # A ends at exactly t = 1 on a 4 B/s link; at t = 1 a process starts B there: the clock
    # takes A's end first, so B starts alone at the full rate and no rates are recomputed
    env = FlowEnvironment()
    net = FairNetwork(env, [4.0])
    route = net.route([0], [1.0])
    ends: dict[str, float] = {}
    _start(env, net, route, 4.0, ends, "a")

    def next_one() -> Generator[simpy.Event, None, None]:
        yield env.timeout(1.0)
        _start(env, net, route, 2.0, ends, "b")

    env.process(next_one())
    env.run()
    assert ends == {"a": 1.0, "b": 1.5}
    assert net.recomputes == 0


def test_repeated_sets_of_flows_reuse_their_rates() -> None:
    # the same two overlapping flows, three times over: each round recomputes rates twice (B
    # joins A and takes half of link 0 from it; B leaves and A speeds up), the first round
    # fills both sets of flows, the other two find the answers memoised, and all three rounds
    # end at the same offsets
    env = FlowEnvironment()
    net = FairNetwork(env, [10.0, 8.0])
    a, b = net.route([0, 1], [1.0, 1.0]), net.route([0], [1.0])
    ends: dict[str, float] = {}

    def rounds() -> Generator[simpy.Event, None, None]:
        for k in range(3):
            _start(env, net, a, 16.0, ends, f"a{k}")
            _start(env, net, b, 8.0, ends, f"b{k}")
            yield env.timeout(10.0)

    env.process(rounds())
    env.run()
    # both get 5 of link 0: B ends at 8/5 = 1.6 (A has 8 B left), then A alone at 8 B/s
    for k in range(3):
        assert ends[f"b{k}"] - 10.0 * k == pytest.approx(1.6)
        assert ends[f"a{k}"] - 10.0 * k == pytest.approx(2.6)
    assert net.recomputes == 6
    assert len(net._filled) == 2  # noqa: SLF001 - the two sets of flows, filled once each


def test_a_flow_in_the_room_another_leaves_changes_no_rate() -> None:
    # A is held to 4 B/s by link 1; B joins it on link 0 and takes the 6 B/s A leaves there. A
    # keeps its bottleneck and B gets one (it fills link 0, and A is no faster there), so the
    # rates are max-min fair without a recompute; when B leaves, A, slower than B on link 0,
    # still has its bottleneck on link 1: no recompute either
    env = FlowEnvironment()
    net = FairNetwork(env, [10.0, 4.0])
    a, b = net.route([0, 1], [1.0, 1.0]), net.route([0], [1.0])
    ends: dict[str, float] = {}
    _start(env, net, a, 8.0, ends, "a")
    _start(env, net, b, 8.0, ends, "b")
    env.run()
    assert ends == {"b": pytest.approx(8.0 / 6.0), "a": pytest.approx(2.0)}
    assert net.recomputes == 0


@pytest.mark.parametrize("with_network", [False, True])
def test_a_failing_process_raises_as_in_simpy(with_network: bool) -> None:
    # the clock runs SimPy's Environment.step inlined (both with and without a network): an
    # event that failed and that nobody defused raises a copy of its exception, caused by it
    env = FlowEnvironment()
    if with_network:
        FairNetwork(env, [1.0])

    def broken():  # type: ignore[no-untyped-def]
        yield env.timeout(1.0)
        raise KeyError("stage 3")

    env.process(broken())
    with pytest.raises(KeyError, match="stage 3") as caught:
        env.run()
    cause = caught.value.__cause__
    assert isinstance(cause, KeyError) and cause is not caught.value
    assert env.now == 1.0


def test_processes_resume_as_in_simpy() -> None:
    # FlowEnvironment's processes resume leaner than SimPy's, with the same behaviour: a
    # processed event's value comes back at once, a failed event is thrown into the generator,
    # and the process's event carries the generator's return value
    env = FlowEnvironment()
    done = env.event()
    done.succeed("early")
    failed = env.event()
    seen: list[object] = []

    def worker():  # type: ignore[no-untyped-def]
        seen.append((yield env.timeout(1.0, "t")))
        seen.append((yield done))  # processed by now: no wait
        failed.fail(ValueError("bad"))
        try:
            yield failed
        except ValueError as exc:
            seen.append(str(exc))
        return 7

    def parent():  # type: ignore[no-untyped-def]
        seen.append((yield env.process(worker())))

    env.process(parent())
    env.run()
    assert seen == ["t", "early", "bad", 7]
    assert env.now == 1.0


def test_flows_apart_beside_a_class_get_their_filling_bit_for_bit() -> None:
    # beside a class, flows that share no resource take each the least of their shares, which
    # is what progressive filling on what the class leaves gives them, to the last bit
    rng = random.Random(7)
    for _ in range(200):
        capacity = [rng.uniform(1.0, 10.0) for _ in range(12)]
        taken = {r: rng.uniform(0.0, 0.4) for r in rng.sample(range(12), 6)}
        level = rng.uniform(0.5, 2.0)
        picked = rng.sample(range(12), 6)
        routes = [
            Route(picked[k : k + 2], [rng.uniform(0.5, 2.0) for _ in range(2)], capacity)
            for k in (0, 2, 4)
        ]
        assert fair._apart(routes)  # noqa: SLF001
        filled = fair._Filler(capacity).fill(routes, taken, level)  # noqa: SLF001
        assert filled == [fair._share(r, capacity, taken, level) for r in routes]  # noqa: SLF001
    shared = [Route([0, 1], [1.0, 1.0], [1.0] * 3), Route([1, 2], [1.0, 1.0], [1.0] * 3)]
    assert not fair._apart(shared)  # noqa: SLF001
    assert not fair._apart([Route([0, 0], [1.0, 1.0], [1.0])])  # noqa: SLF001


def test_the_fair_network_needs_its_clock() -> None:
    with pytest.raises(TypeError, match="FlowEnvironment"):
        FairNetwork(simpy.Environment(), [1.0])


@pytest.mark.parametrize("seed", range(6))
def test_rates_after_every_start_and_end_are_max_min_fair(seed: int) -> None:
    # random flows on four resources, starting at random times: after every start and every
    # end, whether the network recomputed or kept the rates (a flow fitting in the room others
    # leave, a flow leaving that held nobody back), each flow in flight moves at the rate a
    # from-scratch progressive filling (palm.network.flows.max_min_rates) gives the set
    import random

    from palm.network.flows import max_min_rates

    rng = random.Random(seed)
    capacity = [10.0, 4.0, 7.0, 5.0]
    env = FlowEnvironment()
    net = FairNetwork(env, capacity)
    shapes = [rng.sample(range(4), rng.randint(1, 3)) for _ in range(8)]
    routes = [net.route(r, [rng.choice((0.5, 1.0, 2.0)) for _ in r]) for r in shapes]
    checked = [0]
    pace = 2.0 if seed % 2 else 0.3  # starts per second: many flows in flight, or a few

    def check() -> None:
        rates = net.rates()  # the flows in flight and their rates
        loads: list[Mapping[Hashable, float]] = [dict(f.route.pairs) for f in rates]
        want = max_min_rates(loads=loads, capacity_Bps=dict(enumerate(capacity)))
        assert list(rates.values()) == pytest.approx(want, rel=1e-9)
        checked[0] += 1

    def starter() -> Generator[simpy.Event, None, None]:
        for _ in range(40):
            done = Arrival(env)
            done.callbacks.append(lambda _e: check())
            net.start(rng.choice(routes), rng.uniform(1.0, 20.0), latency_s=0.0, done=done)
            check()
            yield env.timeout(rng.expovariate(pace))

    env.process(starter())
    env.run()
    assert checked[0] == 80


def test_flows_sharing_one_full_resource_end_as_processor_sharing_predicts() -> None:
    # four flows of 1, 2, 3 and 4 B on a 1 B/s resource (each also on a fast link of its own,
    # so that no two routes are alike) start together and form a class: each moves at 1/4
    # until the first is through at t = 4, the other three at 1/3 for their next byte (t =
    # 7), two at 1/2 (t = 9), the last alone (t = 10); every end after the class formed is
    # a class update, no full filling
    env = FlowEnvironment()
    net = FairNetwork(env, [1.0, 10.0, 10.0, 10.0, 10.0])
    ends: dict[str, float] = {}
    for i in range(4):
        _start(env, net, net.route([0, i + 1], [1.0, 1.0]), float(i + 1), ends, str(i))
    env.run()
    assert ends == pytest.approx({"0": 4.0, "1": 7.0, "2": 9.0, "3": 10.0}, rel=1e-12)
    assert net.class_updates == 3  # the ends of the first three; the last one closes it


def test_a_flow_joining_a_class_without_changing_its_level_moves_its_bytes_from_then() -> None:
    # four flows of 10 B share a 1 B/s resource (0.25 B/s each, a class); at t = 1 a flow of
    # 1 B joins that loads it by 1e-17 B per byte, too little to change the class's level in
    # floating point: it moves at 0.25 B/s from t = 1 and ends at t = 5, the others at 40
    env = FlowEnvironment()
    net = FairNetwork(env, [1.0, 10.0, 10.0, 10.0, 10.0, 10.0])
    ends: dict[str, float] = {}
    for i in range(4):
        _start(env, net, net.route([0, i + 1], [1.0, 1.0]), 10.0, ends, str(i))

    def late() -> Generator[simpy.Event, None, None]:
        yield env.timeout(1.0)
        _start(env, net, net.route([0, 5], [1e-17, 1.0]), 1.0, ends, "late")

    env.process(late())
    env.run()
    assert ends["late"] == pytest.approx(5.0, rel=1e-12)
    assert [ends[str(i)] for i in range(4)] == pytest.approx([40.0] * 4, rel=1e-12)
    assert net.class_updates > 0


def test_a_class_gives_way_to_full_fillings_with_many_flows_and_comes_back() -> None:
    # 40 flows of 1, 2, ..., 40 B start together on one 1 B/s resource: processor sharing
    # ends the k-th at sum_{j <= k} (41 - j) = 41 k - k (k + 1) / 2. A class forms at the
    # fourth start, gives way to full fillings beyond 32 flows in flight and forms again
    # once fewer are left
    n = 40
    env = FlowEnvironment()
    net = FairNetwork(env, [1.0])
    route = net.route([0], [1.0])
    ends: dict[str, float] = {}
    for k in range(1, n + 1):
        _start(env, net, route, float(k), ends, str(k))
    env.run()
    want = {str(k): (n + 1) * k - k * (k + 1) / 2 for k in range(1, n + 1)}
    assert ends == pytest.approx(want, rel=1e-12)
    assert 0 < net.class_updates < net.recomputes


@pytest.mark.parametrize("seed", range(4))
def test_a_class_keeps_rates_max_min_fair_and_moves_every_byte(seed: int) -> None:
    # the wafer's pattern: "reads" share resource 0 (the DRAM channels) and load a link of
    # their own, "sends" load two neighbouring links. After every start and end the rates
    # equal a from-scratch progressive filling, whether a class's update or a full filling
    # gave them; and integrating each flow's rate over time gives exactly its bytes
    import random

    from palm.network.flows import max_min_rates

    rng = random.Random(seed)
    capacity = [10.0] + [rng.uniform(3.0, 8.0) for _ in range(6)]
    env = FlowEnvironment()
    net = FairNetwork(env, capacity)
    reads = [net.route([0, i], [1.0, rng.choice((0.5, 1.0, 2.0))]) for i in range(1, 7)]
    sends = [net.route([i, i + 1], [1.0, 1.0]) for i in range(1, 6)]
    size: dict[Any, float] = {}
    moved: dict[Any, float] = {}
    previous: dict[Any, float] = {}  # the rates of the previous check ...
    since = [0.0]  # ... and its time

    def check() -> None:
        t, rates = float(env.now), net.rates()
        for f, rate in previous.items():
            moved[f] = moved.get(f, 0.0) + rate * (t - since[0])
        loads: list[Mapping[Hashable, float]] = [dict(f.route.pairs) for f in rates]
        want = max_min_rates(loads=loads, capacity_Bps=dict(enumerate(capacity)))
        assert list(rates.values()) == pytest.approx(want, rel=1e-9)
        previous.clear()
        previous.update(rates)
        since[0] = t

    def starter() -> Generator[simpy.Event, None, None]:
        for k in range(60):
            done = Arrival(env)
            done.callbacks.append(lambda _e: check())
            route = rng.choice(sends) if k % 4 == 3 else rng.choice(reads)
            nbytes = rng.uniform(1.0, 20.0)
            net.start(route, nbytes, latency_s=0.0, done=done)
            size[list(net.rates())[-1]] = nbytes  # the flow just started
            check()
            yield env.timeout(rng.expovariate(3.0))

    env.process(starter())
    env.run()
    assert net.class_updates > 0  # classes formed and carried changes ...
    assert net.recomputes > net.class_updates  # ... and full fillings the others
    assert moved == pytest.approx(size, rel=1e-9)


def _order_of_a_flow_end_beside_a_timeout(timeout_s: float) -> tuple[list[str], int]:
    """A flow of 1 B on a 1 B/s link from t = 0, and a timeout of ``timeout_s`` made before
    it: the order in which their callbacks run, and the events of the run."""
    env = FlowEnvironment()
    net = FairNetwork(env, [1.0])
    route = net.route([0], [1.0])
    order: list[str] = []
    timer = env.timeout(timeout_s)
    timer.callbacks.append(lambda _e: order.append(f"timeout@{env.now}"))
    done = Arrival(env)
    done.callbacks.append(lambda _e: order.append(f"done@{env.now}"))
    net.start(route, 1.0, latency_s=0.0, done=done)
    env.run()
    return order, int(next(env._eid)) + env.flow_events  # noqa: SLF001


def test_a_done_event_without_latency_keeps_its_place_among_events_of_the_same_time() -> None:
    # the flow ends at 1.0; its done event is scheduled then, after the timeout queued at
    # 1.0 earlier, so the timeout's callback runs first (the clock queues the done event)
    order, events = _order_of_a_flow_end_beside_a_timeout(1.0)
    assert order == ["timeout@1.0", "done@1.0"]
    # nothing else due at the flow's end: the done event runs at once, at the flow's end,
    # and still counts as an event (the timeout, the done event and the flow's end)
    order_later, events_later = _order_of_a_flow_end_beside_a_timeout(2.0)
    assert order_later == ["done@1.0", "timeout@2.0"]
    order_earlier, events_earlier = _order_of_a_flow_end_beside_a_timeout(0.5)
    assert order_earlier == ["timeout@0.5", "done@1.0"]
    assert events == events_later == events_earlier == 3


def test_a_memo_shared_by_two_networks_changes_no_end() -> None:
    # the runs of one plan share progressive filling's memo (FairNet keeps it with the plan's
    # routes). Link 0 of 10 B/s, link 1 of 8 B/s: A (10 B, link 0) alone until 0.5 (5 B
    # moved); then B (2 B, link 0) and C (4 B, links 0 and 1) start: 10/3 B/s each, B is
    # through at 1.1 (A and C have moved 2 B more); A and C at 5 B/s, C through at 1.5, A's
    # last byte alone at 10 B/s, through at 1.6. A network that reads the first's memo adds
    # nothing to it and gives the same ends bit for bit.
    capacity = [10.0, 8.0]
    a, c = Route([0], [1.0], capacity), Route([0, 1], [1.0, 1.0], capacity)  # the plan's routes

    def run(filled: dict[Any, Any]) -> tuple[dict[str, float], FairNetwork]:
        env = FlowEnvironment()
        net = FairNetwork(env, capacity, filled=filled)
        ends: dict[str, float] = {}
        _start(env, net, a, 10.0, ends, "a")

        def joiner() -> Generator[simpy.Event, None, None]:
            yield env.timeout(0.5)
            _start(env, net, a, 2.0, ends, "b")
            _start(env, net, c, 4.0, ends, "c")

        env.process(joiner())
        env.run()
        return ends, net

    memo: dict[Any, Any] = {}
    first, _ = run(memo)
    assert first == {"b": pytest.approx(1.1), "c": pytest.approx(1.5), "a": pytest.approx(1.6)}
    entries = len(memo)
    again, _ = run(memo)
    assert entries > 0 and len(memo) == entries  # the second run only read the memo
    assert again == first
    alone, _ = run({})
    assert alone == first


def test_a_filling_beside_a_class_that_fills_a_resource_exactly_ends() -> None:
    # the state that made progressive filling go round forever (T-145B on the wafer, link
    # mode, strided TP): a class at level 256e9 / 10.6 takes 10.6 x level of a 256 GB/s link,
    # which rounds to 3.05e-5 B/s more than the link has. No room is left there (rate 0 for
    # the flow on it, which then ends the class), and the other flow fills its own link. Run
    # in a child process: on a filling that does not end, the test fails instead of hanging
    code = (
        "import importlib\n"
        f"fair = importlib.import_module({fair.__name__!r})\n"
        "cap = [256e9, 1e9]\n"
        "routes = [fair.Route([0, 1], [5.8, 1.0], cap), fair.Route([1], [1.0], cap)]\n"
        "filler = fair._Filler(cap)\n"
        "print(filler.fill(routes, {0: 10.6}, 256e9 / 10.6), 256e9 - 10.6 * (256e9 / 10.6))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["[0.0,", "1000000000.0]", "-3.0517578125e-05"]


def test_a_filling_that_makes_no_progress_raises_instead_of_spinning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a stuck state built on purpose: a staleness test that every entry fails (a negative
    # slack), so that the filling would push the same entries back forever; the filling
    # stops after the pushes its termination proof allows and names the resource
    routes = [Route([0, 1], [1.0, 1.0], [2.0, 3.0]), Route([1], [1.0], [2.0, 3.0])]
    # the module that fills (palm.engines.event.filling, or the compiled unit of the network)
    filling = sys.modules[fair.fair_rates.__module__]
    monkeypatch.setattr(filling, "_TIGHT", -1e-9)
    with pytest.raises(NoProgressError, match=r"progressive filling of 2 flows .* resource 1 "):
        fair.fair_rates(routes, [2.0, 3.0])
    monkeypatch.undo()
    assert fair.fair_rates(routes, [2.0, 3.0]) == [1.5, 1.5]


@pytest.mark.parametrize("with_network", [True, False])
def test_a_run_stuck_at_one_instant_raises_naming_the_process(with_network: bool) -> None:
    # a process that waits on zero-delay timeouts forever keeps the clock at one instant:
    # past ``stall_limit`` events there without a flow ending, the run raises
    env = FlowEnvironment()
    env.stall_limit = 1000
    if with_network:
        net = FairNetwork(env, [1.0])
        _start(env, net, net.route([0], [1.0]), 2.0, {}, "a")

    def spinning() -> Generator[simpy.Event, None, None]:
        yield env.timeout(0.5)
        while True:
            yield env.timeout(0.0)

    env.process(spinning())
    with pytest.raises(NoProgressError, match=r"1001 events at t = 0.5 s .* resumes spinning"):
        env.run()


def test_a_run_with_flows_that_can_never_end_raises() -> None:
    # a capacity that is not a number gives a flow a rate and an end that are not numbers:
    # the clock can never reach its end, and the run says so instead of ending without it
    env = FlowEnvironment()
    net = FairNetwork(env, [float("nan"), 1.0])
    ends: dict[str, float] = {}
    _start(env, net, net.route([1], [1.0]), 1.0, ends, "fine")
    _start(env, net, net.route([0, 1], [1.0, 1.0]), 1.0, ends, "stuck")
    with pytest.raises(NoProgressError, match=r"1 flows in flight can never end.* \[0, 1\]"):
        env.run()
