"""The event-driven engine: event logs worked by hand, network physics, agreement with the
analytical engine, conservation and determinism."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import random

import pytest

import palm
from palm.api import plan_for, simulate_timeline
from palm.engines.analytical import dram_floor_s
from palm.engines.event import run_event
from palm.engines.event.engine import _last_backward
from palm.engines.event.schedules import stage_program
from palm.engines.event.shared import ChannelClasses
from palm.plan import build_plan
from palm.validation import load_cases

US = 1e-6


def _toy(
    schedule: str = "1f1b",
    *,
    layers: int = 2,
    pp: int = 2,
    interleave: int = 1,
    global_batch: int = 3,
    **over: object,
) -> palm.SimConfig:
    """Bias-free 1000 x 1000 Linear layers, one sample per micro-batch, on a 1 TFLOP/s
    'GPU' at 100% efficiency whose memory is never the bottleneck: a forward pass takes 2 us,
    a backward pass 4 us, and a 4000-byte activation crosses the 4 GB/s switch in 1 us."""
    linear = {"type": "linear", "in_features": 1000, "out_features": 1000, "bias": False}
    tables: dict[str, dict[str, object]] = {
        "model": {"name": "toy", "ops": [linear] * layers},
        "hardware": {
            "topology": "gpu-cluster",
            "gpus_per_node": 8,
            "peak_tflops": {"fp32": 1.0},
            "hbm_gib": 80.0,
            "hbm_bandwidth_gbps": 1e9,
            "switch_bandwidth_gbps": 4.0,
            "switch_latency_us": 0.0,
            "inter_node_bandwidth_gbps": 1.0,
            "inter_node_latency_us": 0.0,
            "matmul_efficiency": 1.0,
            "matmul_half_dim": 0.0,
            "memory_efficiency": 1.0,
        },
        "training": {
            "global_batch": global_batch,
            "micro_batch": 1,
            "precision": "fp32",
            "optimizer": "sgd",
        },
        "parallelism": {"tp": 1, "pp": pp, "dp": 1, "schedule": schedule, "interleave": interleave},
    }
    for key, value in over.items():
        section, field = key.split("__")
        tables.setdefault(section, {})[field] = value
    return palm.parse_config(tables)


def _log(config: palm.SimConfig) -> list[tuple[int, int, int, str, float, float]]:
    _, timeline = simulate_timeline(config, engine="event")
    assert timeline is not None
    return [
        (r.stage, r.chunk, r.micro_batch, r.kind, round(r.start_s / US, 9), round(r.end_s / US, 9))
        for r in timeline.phases
        if r.kind in "FB"
    ]


def _by_stage(log: list[tuple[int, int, int, str, float, float]], stage: int) -> list[str]:
    return [f"{k}{c}.{mb}@{a:g}-{b:g}" for s, c, mb, k, a, b in log if s == stage]


def test_gpipe_event_log_worked_by_hand() -> None:
    log = _log(_toy("gpipe"))
    assert _by_stage(log, 0) == [
        "F0.0@0-2",
        "F0.1@2-4",
        "F0.2@4-6",
        "B0.0@14-18",
        "B0.1@18-22",
        "B0.2@22-26",
    ]
    assert _by_stage(log, 1) == [
        "F0.0@3-5",
        "F0.1@5-7",
        "F0.2@7-9",
        "B0.0@9-13",
        "B0.1@13-17",
        "B0.2@17-21",
    ]


def test_1f1b_event_log_worked_by_hand() -> None:
    log = _log(_toy("1f1b"))
    # stage 1 turns each micro-batch round at once; stage 0 waits for its gradients
    assert _by_stage(log, 0) == [
        "F0.0@0-2",
        "F0.1@2-4",
        "B0.0@10-14",
        "F0.2@14-16",
        "B0.1@16-20",
        "B0.2@24-28",
    ]
    assert _by_stage(log, 1) == [
        "F0.0@3-5",
        "B0.0@5-9",
        "F0.1@9-11",
        "B0.1@11-15",
        "F0.2@17-19",
        "B0.2@19-23",
    ]
    result = palm.simulate(_toy("1f1b"))
    assert result.iteration_time_s == pytest.approx(28 * US, rel=1e-6)  # + a 12 ps optimizer


def test_interleaved_event_log_worked_by_hand() -> None:
    # 2 ranks x 2 chunks x 4 micro-batches; chunk c of rank s is virtual stage 2c + s
    log = _log(_toy("interleaved-1f1b", layers=4, interleave=2, global_batch=4))
    assert _by_stage(log, 0) == [
        "F0.0@0-2",
        "F0.1@2-4",
        "F1.0@6-8",
        "F1.1@8-10",
        "F0.2@10-12",
        "B1.0@16-20",
        "F0.3@20-22",
        "B1.1@22-26",
        "F1.2@26-28",
        "B0.0@28-32",
        "F1.3@32-34",
        "B0.1@34-38",
        "B1.2@40-44",
        "B1.3@46-50",
        "B0.2@50-54",
        "B0.3@56-60",
    ]
    assert _by_stage(log, 1) == [
        "F0.0@3-5",
        "F0.1@5-7",
        "F1.0@9-11",
        "B1.0@11-15",
        "F1.1@15-17",
        "B1.1@17-21",
        "F0.2@21-23",
        "B0.0@23-27",
        "F0.3@27-29",
        "B0.1@29-33",
        "F1.2@33-35",
        "B1.2@35-39",
        "F1.3@39-41",
        "B1.3@41-45",
        "B0.2@45-49",
        "B0.3@51-55",
    ]


def test_inference_throughput_is_the_steady_state() -> None:
    result = palm.simulate(_toy("1f1b", global_batch=6, training__mode="inference"))
    # one micro-batch leaves every max(F, hand-off) = 2 us once the pipeline is full
    assert result.iteration_time_s == pytest.approx(6 * 2 * US, rel=1e-9)
    assert result.throughput_samples_per_s == pytest.approx(1 / (2 * US), rel=1e-9)


@pytest.mark.parametrize("granularity", ["group", "link"])
def test_bytes_sent_equal_bytes_received(granularity: str) -> None:
    cfg = palm.load_config(
        "examples/wafer-t18b.toml",
        overrides=[f'communication.noc_granularity="{granularity}"', "training.global_batch=8"],
    )
    result = palm.simulate(cfg)
    sent = sum(s.sent_bytes for s in result.stages)
    assert sent == sum(s.received_bytes for s in result.stages)
    # 19 boundaries x 4 micro-batches x 16 devices x b s h / tp (x 2: activations and gradients)
    assert sent == pytest.approx(19 * 4 * 16 * 2048 * 6144 * 2 / 8 * 2)
    assert [s.sent_bytes for s in result.stages] == [
        s.sent_bytes for s in palm.simulate(cfg, engine="analytical").stages
    ]


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.case_id)
def test_engines_agree_within_1pct_on_the_uncontended_gpu_cases(case: object) -> None:
    cfg = case.config  # type: ignore[attr-defined]
    event = palm.simulate(cfg, engine="event").iteration_time_s
    analytical = palm.simulate(cfg, engine="analytical").iteration_time_s
    assert event == pytest.approx(analytical, rel=0.01)


def test_contention_makes_the_event_engine_slower() -> None:
    # weight streaming: every stage reads its weights from DRAM in every pass; with 64 GB/s
    # channels the streams outlast the compute and the stages sharing the channels slow each
    # other down. The analytical engine sees that only in aggregate, as its DRAM floor (all
    # bytes over all channels, a bound no schedule beats); the event engine also sees that the
    # stages' streams do not line up to keep every channel busy all the time
    cfg = palm.load_config(
        "examples/wafer-t18b.toml",
        overrides=["hardware.dram_channel_bandwidth_gbps=64", "training.global_batch=32"],
    )
    event = palm.simulate(cfg, engine="event")
    analytical = palm.simulate(cfg, engine="analytical")
    plan = build_plan(cfg)
    floor = dram_floor_s(plan, micro_batches=plan.micro_batches)
    assert analytical.iteration_time_s == pytest.approx(floor, rel=1e-12)
    assert event.iteration_time_s > analytical.iteration_time_s * 1.01
    assert max(event.dram_channel_utilisation or ()) > 0.5


@pytest.mark.parametrize("path", ["examples/t18b-dgx-a100.toml", "examples/wafer-t18b.toml"])
def test_event_engine_is_never_faster_than_analytical_without_interleaving(path: str) -> None:
    for over in (
        [],
        ["parallelism.tp=4", "parallelism.dp=64"]
        if "dgx" in path
        else ["hardware.dram_channel_bandwidth_gbps=100"],
    ):
        cfg = palm.load_config(path, overrides=over)
        event = palm.simulate(cfg, engine="event").iteration_time_s
        assert event >= palm.simulate(cfg, engine="analytical").iteration_time_s * (1 - 1e-12)


@pytest.mark.parametrize(
    "path, extra, fields, tolerance",
    [
        (
            "examples/t18b-dgx-a100.toml",
            [],
            ["switch_bandwidth_gbps", "inter_node_bandwidth_gbps"],
            1e-12,
        ),
        # DRAM fast enough not to contend: exact
        (
            "examples/wafer-t18b.toml",
            ["hardware.dram_channel_bandwidth_gbps=1e6"],
            ["intra_tile_link_gbps", "inter_tile_link_gbps"],
            1e-12,
        ),
        # contended DRAM: fair-shared reads that shift in time may overlap a little more, which
        # can cost a few parts in 1e5 (no shared-resource model is free of such effects)
        (
            "examples/wafer-t18b.toml",
            [],
            ["intra_tile_link_gbps", "inter_tile_link_gbps", "dram_channel_bandwidth_gbps"],
            1e-4,
        ),
    ],
)
def test_more_bandwidth_never_slows_the_event_engine(
    path: str, extra: list[str], fields: list[str], tolerance: float
) -> None:
    base = palm.load_config(path, overrides=extra)
    t0 = palm.simulate(base).iteration_time_s
    for field in fields:
        value = getattr(base.hardware, field)
        for factor in (1.5, 2.0, 4.0):
            over = [*extra, f"hardware.{field}={value * factor}"]
            faster = palm.load_config(path, overrides=over)
            assert palm.simulate(faster).iteration_time_s <= t0 * (1 + tolerance)


def test_same_input_same_json() -> None:
    cfg = palm.load_config("examples/wafer-t18b.toml")
    a, b = palm.simulate(cfg).to_dict(), palm.simulate(cfg).to_dict()
    a.pop("sim_wall_s"), b.pop("sim_wall_s")
    assert json.dumps(a) == json.dumps(b)
    assert a["engine"] == "event" and a["events_simulated"] > 0


def test_last_backward_is_the_programs_last_backward_pass() -> None:
    for schedule, chunks in (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2)):
        for pp, training, stage in itertools.product((1, 4), (True, False), range(4)):
            if stage >= pp:
                continue
            program = stage_program(
                schedule=schedule,
                pp=pp,
                chunks=chunks,
                micro_batches=8,
                stage=stage,
                training=training,
            )
            passes = [i for i, (kind, _, _) in enumerate(program) if kind == "B"]
            assert _last_backward(program) == (passes[-1] if passes else -1)


@pytest.mark.parametrize("noc_model", ["fair", "exclusive"])
@pytest.mark.parametrize("path", ["examples/wafer-t18b.toml", "examples/megatron-145b.toml"])
def test_runs_of_one_plan_agree(path: str, noc_model: str) -> None:
    # the engine builds its resources, flows and routes once per plan (Plan.engine_tables):
    # later runs of the plan, which read them, give the first run's result bit for bit, and
    # a run's counters (bytes read, busy times) start from zero
    cfg = palm.load_config(path, overrides=[f'communication.noc_model="{noc_model}"'])
    plan = plan_for(cfg, engine="event")
    first = run_event(plan, record=False)[0].to_dict()
    again = run_event(plan, record=True)[0].to_dict()
    fresh = run_event(plan_for(cfg, engine="event"), record=False)[0].to_dict()
    for result in (first, again, fresh):
        result.pop("sim_wall_s")
    assert json.dumps(first) == json.dumps(again) == json.dumps(fresh)
    assert plan.engine_tables  # the tables were kept
    assert not dataclasses.replace(plan).engine_tables  # and are not carried over


def test_event_count_does_not_grow_with_the_tile_count() -> None:
    counts = []
    for tiles, dp in (((5, 4), 2), ((10, 8), 8), ((50, 40), 200)):
        cfg = palm.load_config(
            "examples/wafer-t18b.toml",
            overrides=[
                f"hardware.tiles=[{tiles[0]}, {tiles[1]}]",
                f"parallelism.dp={dp}",
                f"training.global_batch={32 * dp}",
            ],
        )
        counts.append(palm.simulate(cfg).events_simulated)
    assert counts[0] == counts[1] == counts[2]


def test_fair_and_exclusive_agree_when_nothing_overlaps() -> None:
    # the hand-worked toys: every hand-off crosses the switch while the sender computes and
    # no two flows ever share a port at the same time
    for schedule in ("gpipe", "1f1b"):
        times = [
            palm.simulate(_toy(schedule, communication__noc_model=m)).iteration_time_s
            for m in ("fair", "exclusive")
        ]
        assert times[0] == pytest.approx(times[1], rel=1e-12)
        assert _log(_toy(schedule, communication__noc_model="fair")) == _log(
            _toy(schedule, communication__noc_model="exclusive")
        )


def _random_loads(
    rng: random.Random, n: int, m: int, *, most: int, repeats: bool = False
) -> tuple[list[float], list[tuple[list[int], list[float]]]]:
    """Capacities of ``n`` resources and ``m`` flows, each on up to ``most`` of them (with
    ``repeats``, a fifth of the flows list their first resource twice), for binding_links."""
    cap = [rng.choice([1.0, 2.0, 3e9, rng.random() * 1e10 + 1]) for _ in range(n)]
    table = []
    for _ in range(m):
        rs = rng.sample(range(n), rng.randint(0, min(n, most)))
        if repeats:
            rs += rs[:1] if rng.random() < 0.2 else []
        table.append((rs, [rng.choice([1.0, 0.5, 1e-11, rng.random(), 0.0]) for _ in rs]))
    return cap, table


def test_binding_links_small_tables_match_the_array_form() -> None:
    # hand-worked, capacities 1. Flow A loads link 0 by 1 and link 1 by 0.5; flow B loads
    # link 0 by 1. Link 0 carries at least link 1's load of every flow, so 1 never binds;
    # its flows (A) differ from 0's (A, B), so it keeps its own busy time: -1
    from palm.engines.event import networks

    table = [([0, 1], [1.0, 0.5]), ([0], [1.0])]
    assert networks.binding_links([1.0, 1.0], table) == [0, -1]
    # flow A alone: link 1 carries the same flows as 0, less of each: a twin of 0
    assert networks.binding_links([1.0, 1.0], table[:1]) == [0, 0]
    # no link carries at least another's load of both flows: each can bind
    table = [([0, 2], [1.0, 1.0]), ([1, 2], [1.0, 1.0])]
    assert networks.binding_links([1.0, 1.0, 2.0], table) == [0, 1, 2]
    # the plain-Python form (small tables) and the array form agree on varied tables
    rng = __import__("random").Random(7)
    for _ in range(300):
        cap, table = _random_loads(rng, rng.randint(1, 8), rng.randint(0, 7), most=8)
        small = networks.binding_links(cap, table)
        saved, networks._SMALL = networks._SMALL, -1  # noqa: SLF001 - force the array form
        try:
            assert networks.binding_links(cap, table) == small
        finally:
            networks._SMALL = saved  # noqa: SLF001


def test_binding_links_all_pairs_at_once_match_one_resource_at_a_time() -> None:
    # the one-pass comparison of every pair of resources (small enough tables) and the
    # resource-by-resource form (link mode's many links) agree, repeated loads included
    from palm.engines.event import networks

    rng = __import__("random").Random(11)
    for _ in range(300):
        n, m = rng.randint(1, 30), rng.randint(8, 40)
        cap, table = _random_loads(rng, n, m, most=5, repeats=True)
        dense = networks.binding_links(cap, table)
        saved, networks._DENSE = networks._DENSE, -1  # noqa: SLF001 - one resource at a time
        try:
            assert networks.binding_links(cap, table) == dense
        finally:
            networks._DENSE = saved  # noqa: SLF001


def test_fair_network_two_equal_flows_take_twice_as_long_as_one() -> None:

    from palm.engines.event.fair import FairNetwork, FlowEnvironment
    from palm.engines.event.shared import Arrival

    def run(n: int) -> tuple[list[float], FairNetwork]:
        env = FlowEnvironment()
        net = FairNetwork(env, [100.0, 400.0])  # a slow and a fast link, bytes/s
        route = net.route([0, 1], [1.0, 1.0])  # a route over both: the slow one binds
        ends: list[float] = []
        for _ in range(n):
            done = Arrival(env)
            done.callbacks.append(lambda _e: ends.append(env.now))
            net.start(route, 50.0, latency_s=0.25, done=done)
        env.run()
        return ends, net

    alone, net = run(1)
    assert alone == [pytest.approx(50.0 / 100.0 + 0.25)]  # bytes / bottleneck + latency
    both, net = run(2)
    assert both == [pytest.approx(2 * 0.5 + 0.25)] * 2
    # bytes are conserved: each link carried both flows' 50 bytes once, busy for 1 s
    assert list(net.nbytes) == pytest.approx([100.0, 100.0])
    assert list(net.busy_s) == pytest.approx([1.0, 1.0])


def test_fair_network_shares_a_bottleneck_max_min() -> None:
    # B (4 B/s) carries flows 0 and 2, A (10 B/s) flows 0 and 1; 8 bytes each, from t = 0.
    # Rates 2, 8, 2 until flow 1 ends at 1 s; then flow 0 and 2 keep 2 each (B binds): both
    # end at 4 s.

    from palm.engines.event.fair import FairNetwork, FlowEnvironment
    from palm.engines.event.shared import Arrival

    env = FlowEnvironment()
    net = FairNetwork(env, [10.0, 4.0])
    ends: dict[int, float] = {}
    for i, (res, loads) in enumerate([([0, 1], [1.0, 1.0]), ([0], [1.0]), ([1], [1.0])]):
        done = Arrival(env)
        done.callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
        net.start(net.route(res, loads), 8.0, latency_s=0.0, done=done)
    env.run()
    assert ends == {1: pytest.approx(1.0), 0: pytest.approx(4.0), 2: pytest.approx(4.0)}


def test_noc_model_exclusive_is_the_paper_holds() -> None:
    # exclusive holds never let two flows share a resource: on a contended wafer both models
    # run, and the analytical engine is a lower bound for both
    cfg = "examples/wafer-t18b.toml"
    analytical = palm.simulate(palm.load_config(cfg), engine="analytical").iteration_time_s
    for model in ("fair", "exclusive"):
        over = [f'communication.noc_model="{model}"']
        assert palm.simulate(palm.load_config(cfg, overrides=over)).iteration_time_s >= analytical
    with pytest.raises(palm.ConfigError, match="noc_model"):
        palm.load_config(cfg, overrides=['communication.noc_model="shared"'])


def test_the_simulator_does_not_import_the_tuner() -> None:
    import subprocess
    import sys

    code = "import sys, palm; palm.simulate(palm.load_config('examples/wafer-t18b.toml'));"
    code += "print(sorted(m for m in ('optuna', 'search', 'spaces') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_timeline_is_recorded_only_when_asked() -> None:
    plan = plan_for(_toy("1f1b"))
    _, quiet = run_event(plan, record=False)
    _, kept = run_event(plan, record=True)
    assert not quiet.raw_phases and not quiet.raw_flows
    assert kept.raw_phases and kept.raw_flows


def test_run_event_takes_the_network_model_from_the_plans_config() -> None:
    # one source of truth: run_event(plan) ran "group" whatever the config said (T-18B on the
    # wafer in link mode gave 5.2086 samples/s, the group answer, instead of 4.7293)
    cfg = palm.load_config(
        "examples/grayskull-bert-base.toml",
        overrides=[
            'training.mode="train"',
            "training.global_batch=80",
            'communication.noc_granularity="link"',
        ],
    )
    plan = plan_for(cfg, engine="event")
    default, _ = run_event(plan, record=False)
    group, _ = run_event(plan, granularity="group", record=False)
    assert default.iteration_time_s == palm.simulate(cfg).iteration_time_s
    assert default.iteration_time_s != group.iteration_time_s
    exclusive = dataclasses.replace(
        cfg, communication=dataclasses.replace(cfg.communication, noc_model="exclusive")
    )
    plan = plan_for(exclusive, engine="event")
    assert run_event(plan, record=False)[0].iteration_time_s == (
        palm.simulate(exclusive).iteration_time_s
    )


def test_each_stage_books_only_its_own_tensor_parallel_time() -> None:
    """The busy time booked on a stage's tensor-parallel links is that stage's collectives:
    micro-batches x the forward and backward collective time of its chunks (Megatron 76.1B:
    TP 8, PP 4, interleaved x3; each pipeline stage is one NVSwitch link group ``sw_out[s]``).
    All stages once booked one running total, ~PP times too much."""
    case = next(c for c in load_cases() if "76.1b" in c.case_id)
    plan = build_plan(case.config)
    result = palm.simulate(case.config, engine="event")
    p = case.config.parallelism.pp
    expected = [0.0] * p
    for g, ch in enumerate(plan.chunks):
        forward = ch.tp_forward_s + ch.recv_forward_s
        per_micro_batch = forward + ch.tp_backward_s + ch.recv_backward_s
        expected[g % p] += plan.micro_batches * per_micro_batch
    booked = {link.name: link.busy_fraction * result.iteration_time_s for link in result.links}
    for s in range(p):
        assert booked[f"sw_out[{s}]"] == pytest.approx(expected[s], rel=1e-9)


def test_patterns_on_the_same_channels_are_one_class_with_their_least_share() -> None:
    # three stages reading the same three channels (interleaved placement): one class; a
    # stage's limit is the least of bandwidth / cores over the channels (hand-worked:
    # 10 / 2, 6 / 1, 8 / 4 -> 2; 10 / 1, 6 / 3, 8 / 1 -> 2; 10 / 5, 6 / 1, 8 / 1 -> 2), as the
    # general grouping gives; a fourth stage on two of them makes two classes
    bandwidth = [10.0, 6.0, 8.0, 7.0]  # channel 3 unused
    same = [
        ([0, 1, 2], [2.0, 1.0, 4.0]),
        ([0, 1, 2], [1.0, 3.0, 1.0]),
        ([0, 1, 2], [5.0, 1.0, 1.0]),
    ]
    one = ChannelClasses(bandwidth, same)
    assert one.count == 1 and one.channel_class.tolist() == [0, 0, 0, -1]
    assert one.limits == [((0, 2.0),), ((0, 2.0),), ((0, 2.0),)]
    two = ChannelClasses(bandwidth, [*same, ([1, 2], [1.0, 2.0])])
    assert two.count == 2 and two.channel_class.tolist() == [0, 1, 1, -1]
    assert two.limits[0] == ((0, 5.0), (1, 2.0))  # 10 / 2 on class 0; min(6, 2) on class 1
    assert two.limits[3] == ((1, 4.0),)  # min(6 / 1, 8 / 2)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_run_leaves_the_cycle_collector_as_it_found_it(enabled: bool) -> None:
    # the engine pauses the collector for a run (engine._no_cycle_collection) and restores it,
    # also when the run fails
    plan = plan_for(palm.load_config("examples/wafer-t18b.toml"))
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        run_event(plan, record=False)
        assert gc.isenabled() is enabled
        broken = dataclasses.replace(plan, chunks=())  # the run fails part-way
        with pytest.raises(IndexError):
            run_event(broken, record=False)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
