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
  (PyTorch DDP); after it, the optimizer step.

Every transfer, collective and DRAM access is a flow on the shared resources of
:mod:`palm.engines.event.fabric`: it waits until its resources are free, which is what makes
this engine slower than the analytical one when flows contend, and equal to it when they do not.
Sends are asynchronous (the sender goes on computing). Layers of a chunk are folded into one
event per phase, and a tensor-parallel flow whose resources nothing else uses is folded into the
compute event (it can never wait).

Inference (sec. V-A3): forwards only, with double buffering between stages (a stage runs at
most two micro-batches ahead of the next); at least ``2 x chunks + 96`` micro-batches are
simulated and the throughput is the steady-state spacing of those leaving the last chunk over
the second half of the run, without fill and drain.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from palm.cost.collectives import bytes_sent_per_member
from palm.engines._common import assemble_result
from palm.engines.event.fabric import Fabric, Flow, build_fabric, resource_label
from palm.engines.event.schedules import stage_program
from palm.engines.event.shared import Arrival, DramSystem
from palm.hardware.spec import Mesh2DHardware
from palm.plan import Plan
from palm.result import LinkResult, Result
from palm.workload.ops import Collective

__all__ = ["run_event", "Timeline", "PhaseRecord", "FlowRecord"]


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


def _discard(_item: object) -> None:
    """Stands in for a list's append when the timeline is not recorded."""


def _events_scheduled(env: simpy.Environment) -> int:
    """Events the environment scheduled: SimPy numbers every scheduled event from one counter
    (``Environment._eid``, an ``itertools.count``; SimPy 4, simpy/core.py); reading the next
    number costs one more, hence the minus one."""
    counter = env._eid  # noqa: SLF001 - reading SimPy's own event counter
    return int(next(counter))


def run_event(
    plan: Plan, *, granularity: str = "group", record: bool = True
) -> tuple[Result, Timeline]:
    """Simulate one iteration of ``plan``; returns the result and its timeline (empty unless
    ``record``)."""
    wall = time.perf_counter()
    par = plan.config.parallelism
    p, v, m = par.pp, par.chunks, plan.micro_batches
    n_chunks = p * v
    training = plan.training
    if not training:  # simulate long enough to reach the steady state, measured below
        m = max(m, 2 * n_chunks + _STEADY_EXTRA)
    fabric, flows = build_fabric(plan, granularity)
    env = simpy.Environment()
    timeline = Timeline()
    chunks = plan.chunks
    act = [[Arrival(env) for _ in range(m)] for _ in range(n_chunks)]
    # inference back-pressure: a chunk may run at most BUFFER micro-batches ahead of the next
    started = [[env.event() for _ in range(m)] for _ in range(n_chunks)] if not training else []
    grad = [[Arrival(env) for _ in range(m)] for _ in range(n_chunks)]
    pipe_end = [0.0] * p
    stage_end = [0.0] * p
    busy = [0.0] * p
    sent_bytes = [0.0] * p
    received = [0.0] * p
    group = par.tp * par.data_ranks
    done_last: list[float] = []
    phases = timeline.raw_phases
    flow_log = timeline.raw_flows
    keep = record

    def hold(flow: Flow, now: float, duration: float, nbytes: float, stage: int) -> float:
        if duration <= 0:
            return now
        if not flow.resources:
            return now + duration
        end = fabric.reserve(flow, now, duration, nbytes)
        if keep:
            flow_log.append((flow.kind, flow.resources, end - duration, end, stage))
        return end

    dram_system: DramSystem | None = None
    if plan.dram is not None:
        hw_mesh = plan.config.hardware
        assert isinstance(hw_mesh, Mesh2DHardware)
        bandwidth = plan.dram[0].channel_bandwidth_Bps
        dram_system = DramSystem(
            env,
            [bandwidth] * hw_mesh.dram_channels,
            [(a.channels, a.cores_per_channel) for a in plan.dram],
        )

    def dram_read(s: int, now: float, nbytes: float) -> tuple[list[simpy.Event], float]:
        """Every core of stage ``s`` reads ``nbytes`` from its nearest channel. Returns the
        events of the channels' transfers and when the NoC part (link mode) is through."""
        assert flows.dram is not None and plan.dram is not None and dram_system is not None
        access = plan.dram[s]
        events = [
            dram_system.read(
                nbytes,
                pattern=s,
                noc_bandwidth_Bps=access.noc.bandwidth_Bps,
                latency_s=access.response_s + access.noc.latency_s,
            )
        ]
        noc = flows.dram[s].noc
        end = now
        if noc.resources and nbytes > 0:
            # the reads occupy the mesh links they cross for bytes / bandwidth (the rest of
            # the access is the channels' time, during which those links carry other flows)
            end = hold(noc, now, nbytes / access.noc.bandwidth_Bps, nbytes, s)
        return events, end

    def dram_wait(events: list[simpy.Event], end: float) -> Generator[simpy.Event, Any, None]:
        for ev in events:
            if not ev.processed:
                yield ev
        if end > env.now:
            yield env.timeout(end - env.now)

    def buckets(s: int, t0: float, backward_s: float) -> Generator[simpy.Event, Any, None]:
        st = plan.stages[s]
        n = st.dp_buckets
        per = st.dp_allreduce_s / n
        grads = Collective("all-reduce", st.dp_grad_bytes)
        sent = bytes_sent_per_member(grads, n=par.data_ranks) / n
        for k in range(n):
            ready = t0 + (k + 1) / n * backward_s
            yield env.timeout(max(0.0, ready - env.now))
            end = hold(flows.dp[s], env.now, per, sent, s)
            yield env.timeout(end - env.now)

    last_chunk = n_chunks - 1
    # per chunk and direction: compute, stream, stream bytes, comm, comm bytes, zero-3 gather,
    # then the hand-off (flow, duration, bytes, arrival events) or None
    fwd_params = []
    bwd_params = []
    for g, ch in enumerate(chunks):
        send = (flows.send[g], ch.send_s, ch.send_bytes, act[g + 1]) if g < last_chunk else None
        back = (
            (flows.grad[g - 1], chunks[g - 1].grad_send_s, chunks[g - 1].send_bytes, grad[g - 1])
            if g > 0
            else None
        )
        fwd_params.append(
            (
                ch.forward_compute_s,
                ch.stream_forward_s,
                ch.stream_bytes_forward,
                ch.tp_forward_s + ch.recv_forward_s,
                ch.tp_sent_forward,
                ch.zero3_gather_s,
                send,
                act[g] if g > 0 else None,
                chunks[g - 1].send_bytes * group if g > 0 else 0.0,
            )
        )
        bwd_params.append(
            (
                ch.backward_compute_s + ch.recompute_s,
                ch.stream_backward_s,
                ch.stream_bytes_backward,
                ch.tp_backward_s + ch.recv_backward_s,
                ch.tp_sent_backward,
                ch.zero3_backward_s,
                back,
                grad[g] if g < last_chunk else None,
                ch.send_bytes * group if g < last_chunk else 0.0,
            )
        )

    def stage(s: int) -> Generator[simpy.Event, Any, None]:
        program = stage_program(
            schedule=par.schedule, pp=p, chunks=v, micro_batches=m, stage=s, training=training
        )
        last_backward = max((i for i, op in enumerate(program) if op[0] == "B"), default=-1)
        tp_flow, exclusive = flows.tp[s], flows.tp_exclusive[s]
        dp_flow = flows.dp[s]
        timeout = env.timeout
        record = phases.append if keep else _discard
        log_flow = flow_log.append if keep else _discard
        tp_busy = tp_bytes = 0.0
        stage_busy = 0.0
        dp_proc = None
        for index, (kind, j, mb) in enumerate(program):
            g = j * p + s
            forward = kind == "F"
            compute, stream, stream_bytes, comm, sent, zero3, hand_off, inbox, inbound = (
                fwd_params[g] if forward else bwd_params[g]
            )
            if inbox is not None:
                arrival = inbox[mb]
                if not arrival.processed:
                    yield arrival
                received[s] += inbound
            if started:
                if g < last_chunk and mb >= _BUFFER:
                    ahead = started[g + 1][mb - _BUFFER]
                    if not ahead.processed:
                        yield ahead
                started[g][mb].succeed()
            now = t0 = float(env.now)
            if forward and g == 0 and chunks[0].fetch_s > 0:
                yield from dram_wait(*dram_read(s, now, chunks[0].fetch_bytes))
                now = env.now
            if index == last_backward and plan.stages[s].dp_buckets:
                dp_proc = env.process(buckets(s, now, chunks[g].backward_s))
            end = now + compute
            streaming: tuple[list[simpy.Event], float] | None = None
            if stream > 0:
                streaming = dram_read(s, now, stream_bytes)
            fold = comm > 0 and exclusive
            if fold and streaming is None:
                tp_busy += comm
                tp_bytes += sent
                log_flow(("tp", tp_flow.resources, end, end + comm, s))
                end += comm
            if end > now:
                yield timeout(end - now)
                now = end
            if streaming is not None:
                yield from dram_wait(*streaming)
                now = env.now
                if fold:  # the collectives follow the pass, which waited for its weights
                    tp_busy += comm
                    tp_bytes += sent
                    log_flow(("tp", tp_flow.resources, now, now + comm, s))
                    yield timeout(comm)
                    now = env.now
            if comm > 0 and not exclusive:
                end = hold(tp_flow, now, comm, sent, s)
                yield timeout(end - now)
                now = end
            if zero3 > 0:
                end = hold(dp_flow, now, zero3, 0.0, s)
                yield timeout(end - now)
                now = end
            stage_busy += now - t0
            record((s, j, mb, kind, t0, now))
            if hand_off is not None:
                flow, duration, nbytes, targets = hand_off
                targets[mb].succeed_in(hold(flow, now, duration, nbytes, s) - now)
                sent_bytes[s] += nbytes * group
            elif forward:
                done_last.append(now)
        busy[s] = stage_busy
        if tp_busy:
            fabric.account(tp_flow, tp_busy, tp_bytes)
        pipe_end[s] = env.now
        if dp_proc is not None:
            yield dp_proc
        st = plan.stages[s]
        if st.optimizer_s > 0:
            t0 = env.now
            if flows.dram is not None and st.optimizer_in_dram:
                yield from dram_wait(*dram_read(s, env.now, st.optimizer_bytes))
            else:
                yield env.timeout(st.optimizer_s)
            record((s, 0, 0, "optimizer", t0, env.now))
        stage_end[s] = env.now

    for s in range(p):
        env.process(stage(s))
    env.run()

    if training:
        t = max(stage_end)
        exposed = [stage_end[s] - pipe_end[s] - plan.stages[s].optimizer_s for s in range(p)]
        bubble = [max(0.0, pipe_end[s] - busy[s]) for s in range(p)]
    else:
        done_last.sort()
        # steady-state spacing of the micro-batches leaving the pipeline, over the second half
        # of the run (the first half fills it), for the configured number of micro-batches
        half = done_last[len(done_last) // 2 :]
        period = (half[-1] - half[0]) / (len(half) - 1)
        t = plan.micro_batches * period
        exposed = [0.0] * p
        bubble = [0.0] * p
    timeline.resource_labels = [resource_label(k) for k in fabric.keys]
    timeline.resource_kinds = list(fabric.kinds)
    links, dram = _network_results(fabric, float(env.now), plan, dram_system)
    result = assemble_result(
        plan,
        engine="event",
        pipeline_busy_s=busy,
        dp_exposed_s=[max(0.0, x) for x in exposed],
        iteration_time_s=t,
        bubble_s=bubble,
        sent_bytes=sent_bytes,
        received_bytes=received,
        events=_events_scheduled(env),
        wall_s=time.perf_counter() - wall,
        links=links,
        dram=dram,
    )
    return result, timeline


def _network_results(
    fabric: Fabric, t: float, plan: Plan, dram_system: DramSystem | None
) -> tuple[tuple[LinkResult, ...], tuple[float, ...] | None]:
    """Busy fraction and bytes of every link resource and, on a mesh, the fraction of each DRAM
    channel's bandwidth used."""
    links = tuple(
        LinkResult(
            name=resource_label(key),
            busy_fraction=min(1.0, busy / t) if t > 0 else 0.0,
            bytes=nbytes,
        )
        for key, busy, nbytes in zip(fabric.keys, fabric.busy_s, fabric.nbytes, strict=True)
    )
    if dram_system is None:  # a GPU cluster (every mesh plan has a DRAM system)
        return links, None
    # bandwidth used: bytes moved over what the channel could move in the time
    moved = dram_system.nbytes
    capacity = np.asarray(dram_system.bandwidth) * t
    used = np.minimum(1.0, moved / capacity) if t > 0 else np.zeros(len(moved))
    return links, tuple(used.tolist())
