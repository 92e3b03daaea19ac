"""The event-driven engine (paper sec. IV-A): one SimPy actor per pipeline rank.

Virtual tile aggregation: rank ``s`` stands for its whole tile group (all ``tp x dp`` devices
of the stage do the same work at the same time), so the number of events grows with the
number of micro-batches, chunks and gradient buckets, never with the number of tiles. Each
actor runs its :func:`~palm.engines.event.schedules.stage_program` in order:

* **forward** of chunk ``g`` on micro-batch ``i`` waits for the activation of chunk ``g - 1``
  (chunk 0 reads its input from DRAM on a mesh: the data fetch), computes while its weights
  stream from DRAM if they do not fit on chip, runs its tensor-parallel collectives, then hands
  the activation to chunk ``g + 1`` as a transfer;
* **backward** waits for the gradient of chunk ``g + 1`` (the last chunk starts from the loss),
  recomputes and computes, runs its collectives and hands the gradient back. During the rank's
  last backward the data-parallel gradient all-reduce starts bucket by bucket, overlapping it
  (PyTorch DDP; under ZeRO 1-2 the reduce-scatter half); after it, the optimizer step and,
  under ZeRO 1-2, the all-gather of the updated weights (:mod:`palm.plan.stages`).

Every transfer, collective and DRAM access is a flow on the shared resources of
:mod:`palm.engines.event.fabric`: it waits until its resources are free, which is what makes
this engine slower than the analytical one when flows contend, and equal to it when they do not.
Sends are asynchronous (the sender goes on computing). Layers of a chunk are folded into one
event per phase, and a tensor-parallel flow whose resources nothing else uses is folded into the
compute event (it can never wait).

Inference (sec. V-A3): forwards only, with double buffering between stages (a stage runs at
most two micro-batches ahead of the next); at least ``2 x chunks + 96`` micro-batches are
simulated and the throughput is the steady-state spacing of those leaving the last chunk over
the second half of the run before the pipeline starts draining, without fill and drain.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from palm.cost.collectives import bytes_sent_per_member
from palm.engines._common import assemble_result
from palm.engines.event import fair
from palm.engines.event.accel import FAIR
from palm.engines.event.fabric import Fabric, Flow, FlowTable, build_fabric
from palm.engines.event.networks import ExclusiveNet, FairNet, Net
from palm.engines.event.schedules import Operation, stage_program
from palm.engines.event.shared import PENDING, Arrival
from palm.errors import NoProgressError
from palm.plan import Plan
from palm.result import LinkResult, Result
from palm.workload.ops import Collective

if TYPE_CHECKING:
    from palm.engines.event.fair import FlowEnvironment
else:  # the compiled build of fair.py when it is current, else fair.py (accel)
    FlowEnvironment = FAIR.FlowEnvironment

__all__ = ["run_event", "Timeline", "PhaseRecord", "FlowRecord"]

_new_event = object.__new__
_NORMAL = simpy.events.NORMAL  # SimPy's priority of a scheduled (not urgent) event


@dataclass(frozen=True)
class PhaseRecord:
    """One forward or backward pass of one chunk on one micro-batch."""

    stage: int
    chunk: int
    micro_batch: int
    kind: str  # "F", "B" or "optimizer"
    start_s: float
    end_s: float


@dataclass(frozen=True)
class FlowRecord:
    kind: str
    resources: tuple[int, ...]
    start_s: float
    end_s: float
    stage: int


@dataclass
class Timeline:
    """What happened when: passes per stage and flows per resource (for traces and plots).
    Records are kept as plain tuples while simulating and turned into objects on demand."""

    raw_phases: list[tuple[int, int, int, str, float, float]] = field(default_factory=list)
    raw_flows: list[tuple[str, tuple[int, ...], float, float, int]] = field(default_factory=list)
    resource_labels: list[str] = field(default_factory=list)
    resource_kinds: list[str] = field(default_factory=list)

    @property
    def phases(self) -> list[PhaseRecord]:
        return [PhaseRecord(*x) for x in self.raw_phases]

    @property
    def flows(self) -> list[FlowRecord]:
        return [FlowRecord(*x) for x in self.raw_flows]


#: inference: how many micro-batches a stage may run ahead of the next (double buffering)
_BUFFER = 2
#: inference: micro-batches simulated beyond two per chunk, so that the steady state is reached
_STEADY_EXTRA = 96
#: inference: fewest exits before the drain for the steady-state window to use them only
_STEADY_MIN = 8
#: most SimPy events one operation of a stage's program (a pass, a gradient bucket, the
#: optimizer step) schedules: its waits (inbox, back-pressure), the data fetch, compute, the
#: weight stream and its NoC tail, collectives, ZeRO-3, the hand-off and its arrival, each
#: one or two; ``_Run.operations()`` times this bounds the events of a run, and so those of
#: one instant (tests/palm/test_no_progress.py checks it on every shipped example)
_EVENTS_PER_OPERATION = 16


def _fabric(plan: Plan, granularity: str, noc_model: str) -> tuple[Fabric, FlowTable]:
    """The plan's resources and flows (:func:`build_fabric`), built once per plan and model
    (``Plan.engine_tables``), with a fabric of the run's own (its counters at zero)."""
    key = ("fabric", granularity, noc_model)
    built = plan.engine_tables.get(key)
    if built is None:
        built = plan.engine_tables[key] = build_fabric(plan, granularity, noc_model)
    fabric, flows = built
    return fabric.fresh(), flows


def _arrivals(env: FlowEnvironment, n: int) -> list[Arrival]:
    """``[Arrival(env) for _ in range(n)]``, the events built without their constructor's call
    (made in one pass, then given the fields :class:`Arrival`'s constructor sets)."""
    out = list(map(_new_event, repeat(Arrival, n)))
    for event in out:
        event.env, event.callbacks, event._value = env, [], PENDING  # noqa: SLF001
    return out


def _last_backward(program: Sequence[Operation]) -> int:
    """Index of the last backward pass of ``program`` (-1 if it has none), looked for from
    the end (in training, the program's last operation)."""
    for index in range(len(program) - 1, -1, -1):
        if program[index][0] == "B":
            return index
    return -1


def _rows(pool: list[Arrival], start: int, m: int, count: int) -> list[list[Arrival]]:
    """``count`` consecutive rows of ``m`` events of ``pool`` from index ``start`` on."""
    return [pool[start + i * m : start + (i + 1) * m] for i in range(count)]


def _events_scheduled(env: FlowEnvironment) -> int:
    """Events of the simulation: those SimPy scheduled, which it numbers from one counter
    (``Environment._eid``, an ``itertools.count``; SimPy 4, simpy/core.py), and the ends of
    the fair network's flows, which the environment's clock takes from the network."""
    counter = env._eid  # noqa: SLF001 - reading SimPy's own event counter
    return int(next(counter)) + env.flow_events


@dataclass(slots=True)
class _PassParams:
    """What one forward or backward pass of one chunk needs (seconds, bytes). Made afresh by
    every run (two per chunk) and never changed (not frozen: a frozen dataclass's constructor
    sets each field through ``object.__setattr__``, five times the cost)."""

    compute: float
    stream: float
    stream_bytes: float
    comm: float
    sent: float
    zero3: float
    hand_off: tuple[Flow, float, float, list[Arrival]] | None
    inbox: list[Arrival] | None
    inbound: float


def run_event(
    plan: Plan,
    *,
    granularity: str | None = None,
    record: bool = True,
    noc_model: str | None = None,
) -> tuple[Result, Timeline]:
    """Simulate one iteration of ``plan``; returns the result and its timeline (empty unless
    ``record``). ``granularity`` ("group" or "link") and ``noc_model`` ("fair" or
    "exclusive") default to the plan's configuration (``communication.noc_granularity``,
    ``communication.noc_model``); a ``link`` plan needs its link loads
    (:func:`palm.api.plan_for` with ``engine="event"``)."""
    wall = time.perf_counter()
    comm = plan.config.communication
    model = noc_model or comm.noc_model
    with _no_cycle_collection():
        run = _Run(
            plan, granularity=granularity or comm.noc_granularity, noc_model=model, record=record
        )
        stages = [run.env.process(run.stage(s)) for s in range(run.p)]
        run.env.stall_limit = max(fair.STALL_LIMIT, _EVENTS_PER_OPERATION * run.operations())
        run.env.run()
        stuck = [s for s, process in enumerate(stages) if process.is_alive]
        if stuck:
            raise NoProgressError(
                f"event engine: stage(s) {stuck} of {run.p} never finished: each waits for an "
                "event nothing is left to fire (the simulation ran out of events); "
                + "; ".join(_waiting_at(s, stages[s]) for s in stuck[:3])
            )
        return run.result(wall), run.timeline


def _waiting_at(s: int, process: simpy.Process) -> str:
    """Where stage ``s``'s process waits: the pass of its program it is in (its generator's
    locals, read for the error message only)."""
    frame = getattr(process._generator, "gi_frame", None)  # noqa: SLF001
    where = frame.f_locals if frame is not None else {}
    if "kind" not in where:
        return f"stage {s} waits after its passes"
    return f"stage {s} waits in {where['kind']} of chunk {where['g']}, micro-batch {where['mb']}"


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the duration (re-enabled after, as it
    was, whatever happens). A run allocates tens of thousands of short-lived events, flows and
    heap entries, which reference counting frees; only the stage processes (a generator and
    its frame) form cycles, a few hundred objects at most, which the collector takes once it
    runs again. Without the pause the collector traverses every young object about every 700
    allocations for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Run:
    """The state of one simulation: the stage processes and what they record."""

    def __init__(self, plan: Plan, *, granularity: str, noc_model: str, record: bool) -> None:
        par = plan.config.parallelism
        self.plan, self.par = plan, par
        self.p, self.v, self.m = par.pp, par.chunks, plan.micro_batches
        self.n_chunks = self.p * self.v
        self.training = plan.training
        if not self.training:  # simulate long enough to reach the steady state
            self.m = max(self.m, 2 * self.n_chunks + _STEADY_EXTRA)
        # the exclusive model runs SimPy's events alone, on fair.py's clock: the interpreter
        # runs that plain loop faster than the compiled build of it (docs/benchmarks.md)
        self.env = FlowEnvironment() if noc_model == "fair" else fair.FlowEnvironment()
        self.timeline = Timeline()
        self.keep = record
        log = self.timeline.raw_flows.append if record else None
        self.fabric, self.flows = _fabric(plan, granularity, noc_model)
        net_class = FairNet if noc_model == "fair" else ExclusiveNet
        self.net: Net = net_class(self.env, plan, self.fabric, self.flows, log)
        m, env = self.m, self.env
        # what each chunk receives: activations (but the first chunk) and, in training,
        # gradients (but the last chunk); made in one batch
        last = self.n_chunks - 1
        backs = last if self.training else 0
        pool = _arrivals(env, (last + backs) * m)
        self.act = [[], *_rows(pool, 0, m, last)]
        self.grad = [*_rows(pool, last * m, m, backs), *([] for _ in range(last + 1 - backs))]
        # inference back-pressure: a chunk may run at most BUFFER micro-batches ahead (the
        # marks made as the hand-offs are, in one batch)
        self.started = (
            [] if self.training else _rows(_arrivals(env, self.n_chunks * m), 0, m, self.n_chunks)
        )
        p = self.p
        self.pipe_end, self.stage_end = [0.0] * p, [0.0] * p
        self.busy, self.sent_bytes, self.received = [0.0] * p, [0.0] * p, [0.0] * p
        # tensor-parallel time and bytes folded into each stage's passes (one total per stage)
        self._tp_busy, self._tp_bytes = [0.0] * p, [0.0] * p
        self.done_last: list[float] = []
        self.group = par.tp * par.data_ranks
        self.forward, self.backward = self._pass_params()

    def operations(self) -> int:
        """The operations of the run's programs: every stage's passes (two per chunk and
        micro-batch in training, one in inference), its gradient buckets, and per stage its
        start, end, optimizer step and weight gather."""
        passes = (2 if self.training else 1) * self.n_chunks * self.m
        buckets = sum(stage.dp_buckets for stage in self.plan.stages)
        return passes + buckets + 4 * self.p

    def _pass_params(self) -> tuple[list[_PassParams], list[_PassParams]]:
        """Per chunk and direction: compute, weight stream, collectives, ZeRO-3 gather, the
        hand-off to the next chunk and the inbox it waits on."""
        chunks, flows, group = self.plan.chunks, self.flows, self.group
        last = self.n_chunks - 1
        fwd, bwd = [], []
        for g, ch in enumerate(chunks):
            prev = chunks[g - 1] if g > 0 else None
            fwd.append(
                _PassParams(
                    ch.forward_compute_s + ch.offload_forward_s,
                    ch.stream_forward_s,
                    ch.stream_bytes_forward,
                    ch.tp_forward_s + ch.recv_forward_s,
                    ch.tp_sent_forward,
                    ch.zero3_gather_s,
                    (flows.send[g], ch.send_s, ch.send_bytes, self.act[g + 1])
                    if g < last
                    else None,
                    self.act[g] if g > 0 else None,
                    prev.send_bytes * group if prev is not None else 0.0,
                )
            )
            bwd.append(
                _PassParams(
                    ch.backward_compute_s + ch.recompute_s + ch.offload_backward_s,
                    ch.stream_backward_s,
                    ch.stream_bytes_backward,
                    ch.tp_backward_s + ch.recv_backward_s,
                    ch.tp_sent_backward,
                    ch.zero3_backward_s,
                    (flows.grad[g - 1], prev.grad_send_s, prev.send_bytes, self.grad[g - 1])
                    if prev is not None
                    else None,
                    self.grad[g] if g < last else None,
                    ch.send_bytes * group if g < last else 0.0,
                )
            )
        return fwd, bwd

    def stage(self, s: int) -> Generator[simpy.Event, Any, None]:
        """Pipeline rank ``s``: its passes in schedule order, then the gradient all-reduce's
        tail, the optimizer step and, under ZeRO 1-2, the all-gather of the updated weights.

        The hot loop of the engine (one turn per pass): a pass that only computes (most passes
        on GPUs) is run inline, one that streams its weights or waits for its collectives in
        :meth:`_streamed_pass`; what the loop reads is held in locals, so that a pass costs
        few calls beyond its events (the events, and their order, are those of
        :meth:`_pass`)."""
        p = self.p
        program = stage_program(
            schedule=self.par.schedule,
            pp=p,
            chunks=self.v,
            micro_batches=self.m,
            stage=s,
            training=self.training,
        )
        last_backward = _last_backward(program)
        stage_busy = 0.0
        dp_proc = None
        env, net, keep = self.env, self.net, self.keep
        timeout = env.timeout
        forward_params, backward_params = self.forward, self.backward
        started, n_chunks = self.started, self.n_chunks
        received, sent_bytes, done_last = self.received, self.sent_bytes, self.done_last
        raw_phases = self.timeline.raw_phases
        send, group = net.send, self.group
        fetch_s = self.plan.chunks[0].fetch_s
        buckets = bool(self.plan.stages[s].dp_buckets)
        tp_exclusive = self.flows.tp_exclusive[s]
        for index, (kind, j, mb) in enumerate(program):
            g = j * p + s
            forward = kind == "F"
            x = forward_params[g] if forward else backward_params[g]
            inbox = x.inbox
            if inbox is not None:
                arrival = inbox[mb]
                if arrival.callbacks is not None:  # not processed yet
                    yield arrival
                received[s] += x.inbound
            if started:
                if g < n_chunks - 1 and mb >= _BUFFER:
                    ahead = started[g + 1][mb - _BUFFER]
                    if ahead.callbacks is not None:
                        yield ahead
                started[g][mb].succeed()
            t0 = env._now  # noqa: SLF001 - the clock (a float), without the property
            if forward and g == 0 and fetch_s > 0:
                yield from net.wait(net.read(s, self.plan.chunks[0].fetch_bytes))
            if index == last_backward and buckets:
                backward_s = self.plan.chunks[g].backward_s
                dp_proc = env.process(self._buckets(s, float(env.now), backward_s))
            comm = x.comm
            fold = comm > 0 and tp_exclusive
            if x.stream <= 0 and x.zero3 <= 0 and (comm <= 0 or fold):
                # a pass that only computes (and runs collectives folded into it, which
                # nothing else can delay): one timeout (most passes on GPUs)
                now = env._now  # noqa: SLF001
                end = now + x.compute
                if comm > 0:
                    self._fold(s, end, x)
                    end += comm
                if end - now > 0:
                    yield timeout(end - now)
            else:
                yield from self._streamed_pass(s, x, fold)
            now = env._now  # noqa: SLF001
            stage_busy += now - t0
            if keep:
                raw_phases.append((s, j, mb, kind, t0, now))
            hand_off = x.hand_off
            if hand_off is not None:
                flow, duration, nbytes, targets = hand_off
                send(flow, duration, nbytes, s, targets[mb])
                sent_bytes[s] += nbytes * group
            elif forward:
                done_last.append(now)
        self.busy[s] = stage_busy
        yield from self._stage_tail(s, dp_proc)

    def _streamed_pass(
        self, s: int, x: _PassParams, fold: bool
    ) -> Generator[simpy.Event, Any, None]:
        """:meth:`_pass` for :meth:`stage`: compute while the weights stream from DRAM, then
        the collectives (folded when nothing else uses their resources), then ZeRO-3."""
        env, net = self.env, self.net
        timeout, comm = env.timeout, x.comm
        now = env._now  # noqa: SLF001 - the clock (a float), without the property
        end = now + x.compute
        streaming = net.read(s, x.stream_bytes) if x.stream > 0 else None
        if fold and streaming is None:
            self._fold(s, end, x)
            end += comm
        if end > now:
            yield timeout(end - now)
        if streaming is not None:
            if isinstance(net, FairNet):  # FairNet.wait, inline
                if streaming.callbacks is not None:
                    yield streaming
            else:  # ExclusiveNet.wait, inline: the channels, then the NoC links
                channels, noc_end = streaming
                if channels.callbacks is not None:
                    yield channels
                if noc_end > env._now:  # noqa: SLF001
                    yield timeout(noc_end - env._now)  # noqa: SLF001
            if fold:  # the collectives follow the pass, which waited for its weights
                self._fold(s, env._now, x)  # noqa: SLF001
                yield timeout(comm)
        if comm > 0 and not fold:
            event = net.block(self.flows.tp[s], comm, x.sent, s)
            if event is not None:
                yield event
        if x.zero3 > 0:
            event = net.block(self.flows.dp[s], x.zero3, 0.0, s)
            if event is not None:
                yield event

    def _stage_tail(
        self, s: int, dp_proc: simpy.Process | None
    ) -> Generator[simpy.Event, Any, None]:
        """After stage ``s``'s last pass: its folded collectives accounted, the gradient
        all-reduce's tail (``dp_proc``), the optimizer step and ZeRO 1-2's all-gather."""
        if self._tp_busy[s]:
            self.net.account(self.flows.tp[s], self._tp_busy[s], self._tp_bytes[s])
        self.pipe_end[s] = float(self.env.now)
        if dp_proc is not None:
            yield dp_proc
        yield from self._optimizer(s)
        yield from self._param_gather(s)
        self.stage_end[s] = float(self.env.now)

    def _fold(self, s: int, start: float, x: _PassParams) -> None:
        self._tp_busy[s] += x.comm
        self._tp_bytes[s] += x.sent
        if self.keep:
            flow = self.flows.tp[s]
            self.timeline.raw_flows.append(("tp", flow.resources, start, start + x.comm, s))

    def _buckets(self, s: int, t0: float, backward_s: float) -> Generator[simpy.Event, Any, None]:
        """The data-parallel gradient all-reduce, bucket by bucket as the last backward pass
        makes the gradients ready (PyTorch DDP)."""
        st = self.plan.stages[s]
        n = st.dp_buckets
        per = st.dp_allreduce_s / n
        # ZeRO 1 / 2: only the reduce-scatter runs here (the plan prices the gather)
        if st.dp_param_gather_s > 0:
            grads = Collective("reduce-scatter", st.dp_grad_bytes)
        else:
            grads = Collective("all-reduce", st.dp_grad_bytes)
        sent = bytes_sent_per_member(grads, n=self.par.data_ranks) / n
        env, flow, block = self.env, self.flows.dp[s], self.net.block
        timeout = env.timeout
        for k in range(n):
            ready = t0 + (k + 1) / n * backward_s
            now = env._now  # noqa: SLF001 - the clock
            yield timeout(ready - now if ready > now else 0.0)
            event = block(flow, per, sent, s)
            if event is not None:
                yield event

    def _param_gather(self, s: int) -> Generator[simpy.Event, Any, None]:
        """ZeRO 1 / 2: the all-gather of the updated weights after the optimizer step
        (:mod:`palm.plan.stages`). Without ``overlap_param_gather`` it runs whole on the
        stage's data-parallel links, sharing them with whatever else still uses them; with it,
        what the next first forward pass leaves of the bucket chain (plan-priced)."""
        st = self.plan.stages[s]
        if st.param_gather_exposed_s <= 0:
            return
        if self.par.overlap_param_gather:
            yield self.env.timeout(st.param_gather_exposed_s)
            return
        weights = Collective("all-gather", st.dp_grad_bytes)
        sent = bytes_sent_per_member(weights, n=self.par.data_ranks)
        yield from self.net.blocking(self.flows.dp[s], st.dp_param_gather_s, sent, s)

    def _optimizer(self, s: int) -> Generator[simpy.Event, Any, None]:
        st = self.plan.stages[s]
        if st.optimizer_s <= 0:
            return
        t0 = float(self.env.now)
        if self.flows.dram is not None and st.optimizer_in_dram:
            yield from self.net.wait(self.net.read(s, st.optimizer_bytes))
        else:
            yield self.env.timeout(st.optimizer_s)
        if self.keep:
            self.timeline.raw_phases.append((s, 0, 0, "optimizer", t0, float(self.env.now)))

    def _iteration(self) -> tuple[float, list[float], list[float]]:
        """Iteration time, exposed DP time and bubble per stage."""
        p, plan = self.p, self.plan
        if self.training:
            t = max(self.stage_end)
            exposed = [
                self.stage_end[s] - self.pipe_end[s] - plan.stages[s].optimizer_s for s in range(p)
            ]
            bubble = [max(0.0, self.pipe_end[s] - self.busy[s]) for s in range(p)]
            return t, exposed, bubble
        period = _steady_period(self.done_last, drain_s=min(self.pipe_end))
        return plan.micro_batches * period, [0.0] * p, [0.0] * p

    def result(self, wall: float) -> Result:
        t, exposed, bubble = self._iteration()
        self.timeline.resource_labels = list(self.fabric.labels)
        self.timeline.resource_kinds = list(self.fabric.kinds)
        links, dram = _network_results(self.net, self.fabric, float(self.env.now))
        return assemble_result(
            self.plan,
            engine="event",
            pipeline_busy_s=self.busy,
            dp_exposed_s=[max(0.0, x) for x in exposed],
            iteration_time_s=t,
            bubble_s=bubble,
            sent_bytes=self.sent_bytes,
            received_bytes=self.received,
            events=_events_scheduled(self.env),
            wall_s=time.perf_counter() - wall,
            links=links,
            dram=dram,
        )


def _steady_period(done_last: list[float], *, drain_s: float) -> float:
    """Inference: the steady-state spacing of the micro-batches leaving the last chunk, over
    the second half (the first half fills the pipeline) of the exits before ``drain_s``, when
    the first rank has run all its passes. From then on fewer ranks contend for DRAM and
    links, and the exits of the draining pipeline come faster than the steady state allows
    (counting them let a DRAM-bound pipeline beat its channels' bandwidth). With fewer than
    ``_STEADY_MIN`` exits in that window, the second half of all exits."""
    done = sorted(done_last)
    full = [t for t in done if t <= drain_s]
    window = full[len(full) // 2 :]
    if len(window) < _STEADY_MIN:
        window = done[len(done) // 2 :]
    return (window[-1] - window[0]) / (len(window) - 1)


def _network_results(
    net: Net, fabric: Fabric, t: float
) -> tuple[tuple[LinkResult, ...], tuple[float, ...] | None]:
    """Busy fraction and bytes of every link resource and, on a mesh, the fraction of each DRAM
    channel's bandwidth used."""
    busy_s, nbytes = net.link_usage()
    links = tuple(
        LinkResult(
            name=name,
            busy_fraction=min(1.0, busy / t) if t > 0 else 0.0,
            bytes=carried,
        )
        for name, busy, carried in zip(fabric.labels, busy_s, nbytes, strict=True)
    )
    channels = net.channels
    if channels is None:  # a GPU cluster (every mesh plan has DRAM channels)
        return links, None
    # bandwidth used: bytes moved over what the channel could move in the time
    moved = channels.nbytes
    capacity = np.asarray(channels.bandwidth) * t
    used = np.minimum(1.0, moved / capacity) if t > 0 else np.zeros(len(moved))
    return links, tuple(used.tolist())
