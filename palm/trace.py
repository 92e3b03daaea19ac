"""Chrome / Perfetto traces of one simulated iteration (the Trace Event Format).

:func:`write_chrome_trace` turns the event engine's :class:`~palm.engines.event.engine.Timeline`
into a JSON object ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`` that
``chrome://tracing``, https://ui.perfetto.dev and ``speedscope`` open as is:

* process ``stages`` (pid 0) has one thread per pipeline stage (tid = stage), with one complete
  event (``"ph": "X"``) per pass: ``"F mb3 c0"`` is the forward pass of chunk 0 on micro-batch 3,
  ``"B mb3 c1"`` a backward pass, ``"optimizer"`` the optimizer step; ``args`` carries ``stage``,
  ``chunk`` and ``micro_batch``;
* process ``network`` (pid 1) has one thread per resource of the fabric (link, link group, port
  or DRAM channel) that carried at least one flow, named by its resource label (tid = resource
  id), with one complete event per flow named by the flow's kind (``tp``, ``dp``, ``p2p``,
  ``dram``; ``args.resource`` is the resource id). A flow that holds several resources appears
  on each of their threads. Flows share a resource at the same time (fair sharing), and a
  viewer draws one slice per thread at a time (Perfetto cannot draw slices that partially
  overlap), so a resource's flows are laid out in *lanes*: each flow on the first lane that is
  free when it starts (interval partitioning: as many lanes as the most flows the resource
  carried at once). Lane 0 is the resource's thread; lane k >= 1 is a thread of its own
  (tid after every resource id), named ``"<label> (k+1)"`` and sorted right below it. At most
  ``max_network_tracks`` resources are kept (the busiest by summed flow time; ``link``
  granularity can have thousands), and ``otherData`` says how many were dropped and how many
  lanes there are;
* metadata events (``"ph": "M"``) name the processes and threads and fix their order.

Times are microseconds from the start of the iteration (the format's unit), as unrounded
floats. ``otherData`` carries the summary of the :class:`~palm.result.Result`. The output is a
function of the inputs only (no wall-clock time, fixed key and event order): the same simulation
gives a byte-identical file.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from palm.engines.event.engine import Timeline
from palm.errors import ConfigError
from palm.inputs import read_input
from palm.result import Result
from palm.strategy import SimConfig

__all__ = [
    "write_chrome_trace",
    "complete_event",
    "load_chrome_trace",
    "MAX_NETWORK_TRACKS",
    "STAGES_PID",
    "NETWORK_PID",
]

MAX_NETWORK_TRACKS = 64
"""Default number of resource threads kept in a trace (the busiest ones)."""

STAGES_PID = 0
NETWORK_PID = 1

_US = 1e6  # seconds -> microseconds
_TRACE_FIELD = "trace file"
_TRACE_SHAPE = (
    "a Chrome trace: a JSON object with a 'traceEvents' list of event objects, each with a "
    "string 'ph' and 'name', complete ('X') events with numeric 'ts' and 'dur' >= 0"
)


def write_chrome_trace(
    path: str | Path,
    *,
    result: Result,
    timeline: Timeline,
    config: SimConfig,
    max_network_tracks: int = MAX_NETWORK_TRACKS,
) -> int:
    """Write the trace of ``timeline`` (simulated from ``config``, summarised by ``result``) to
    ``path`` as one line of compact JSON and return the number of events written (metadata
    events included: ``len(trace["traceEvents"])``).

    One ``X`` event per phase record, on the thread of its stage; ``pp`` stage threads whether
    or not a stage ran anything. Network threads: the ``max_network_tracks`` resources with the
    largest summed flow duration (ties broken by resource id), shown in resource-id order.
    The parent directory of ``path`` is created if needed. Raises
    :class:`~palm.errors.ConfigError` (field ``max_network_tracks``) for a negative limit.
    """
    if max_network_tracks < 0:
        raise ConfigError("max_network_tracks", max_network_tracks, "an integer >= 0")
    trace = _build_trace(
        result=result, timeline=timeline, config=config, max_tracks=max_network_tracks
    )
    text = json.dumps(trace, separators=(",", ":"), sort_keys=False, allow_nan=False)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n", encoding="utf-8")
    events: list[Any] = trace["traceEvents"]
    return len(events)


def load_chrome_trace(path: str | Path) -> dict[str, Any]:
    """Read a trace written by :func:`write_chrome_trace` (or any Trace Event Format file in its
    JSON-object form) and return it as parsed JSON.

    Raises :class:`~palm.errors.ConfigError` with field ``"trace file"`` if ``path`` cannot be
    read, is not JSON, or is not an object with a ``traceEvents`` list whose items are event
    objects (string ``ph`` and ``name``; ``X`` events with finite numeric ``ts`` and ``dur >=
    0``).
    """
    p = Path(path)
    text = read_input(p, field=_TRACE_FIELD, kind="JSON file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(_TRACE_FIELD, str(p), f"{_TRACE_SHAPE} (not JSON: {exc})") from exc
    problem = _trace_problem(data)
    if problem is not None:
        raise ConfigError(_TRACE_FIELD, str(p), f"{_TRACE_SHAPE}; {problem}")
    assert isinstance(data, dict)
    return data


def _trace_problem(data: object) -> str | None:
    """What makes ``data`` not a trace, or ``None``."""
    if not isinstance(data, dict):
        return f"got a JSON {type(data).__name__}"
    events = data.get("traceEvents")
    if not isinstance(events, list):
        return "no 'traceEvents' list"
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            return f"event {i} is not an object"
        if not isinstance(event.get("ph"), str) or not isinstance(event.get("name"), str):
            return f"event {i} lacks a string 'ph' or 'name'"
        if event["ph"] == "X":
            ts, dur = event.get("ts"), event.get("dur")
            if not (_is_number(ts) and isinstance(dur, int | float) and _is_number(dur)) or dur < 0:
                return f"complete event {i} lacks a numeric 'ts' or a 'dur' >= 0"
    return None


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _build_trace(
    *, result: Result, timeline: Timeline, config: SimConfig, max_tracks: int
) -> dict[str, Any]:
    pp = config.parallelism.pp
    labels = timeline.resource_labels
    flows = timeline.raw_flows

    # summed flow time per resource; a resource is on the trace if it carried a flow
    busy: dict[int, float] = {}
    for _kind, resources, start, end, _stage in flows:
        span = float(end) - float(start)
        for r in resources:
            busy[r] = busy.get(r, 0.0) + span
    ranked = sorted(busy, key=lambda r: (-busy[r], r))
    kept = sorted(ranked[:max_tracks])
    dropped = len(ranked) - len(kept)
    kept_set = set(kept)

    lanes = _lanes(flows, kept_set)
    lane_tid = _lane_threads(lanes, kept, first=max([len(labels), *kept]) + 1)

    events: list[dict[str, Any]] = [
        _meta("process_name", STAGES_PID, 0, {"name": "stages"}),
        _meta("process_sort_index", STAGES_PID, 0, {"sort_index": 0}),
    ]
    for s in range(pp):
        events.append(_meta("thread_name", STAGES_PID, s, {"name": f"stage {s}"}))
        events.append(_meta("thread_sort_index", STAGES_PID, s, {"sort_index": s}))
    if kept:
        events.append(_meta("process_name", NETWORK_PID, 0, {"name": "network"}))
        events.append(_meta("process_sort_index", NETWORK_PID, 0, {"sort_index": 1}))
    for order, ((r, lane), tid) in enumerate(sorted(lane_tid.items())):
        label = labels[r] if r < len(labels) else f"resource {r}"
        name = label if lane == 0 else f"{label} ({lane + 1})"
        events.append(_meta("thread_name", NETWORK_PID, tid, {"name": name}))
        events.append(_meta("thread_sort_index", NETWORK_PID, tid, {"sort_index": order}))

    for stage, chunk, mb, kind, start, end in timeline.raw_phases:
        name = kind if kind not in ("F", "B") else f"{kind} mb{mb} c{chunk}"
        events.append(
            complete_event(
                name,
                _PHASE_CATEGORY.get(kind, kind),
                STAGES_PID,
                stage,
                start,
                end,
                {"stage": stage, "chunk": chunk, "micro_batch": mb},
            )
        )
    for i, (kind, resources, start, end, stage) in enumerate(flows):
        for r in resources:
            if r in kept_set:
                tid = lane_tid[(r, lanes[(i, r)])]
                args = {"stage": stage, "resource": r}
                events.append(complete_event(kind, "network", NETWORK_PID, tid, start, end, args))

    other = _other_data(result=result, timeline=timeline, config=config)
    other.update(
        network_tracks=len(kept),
        network_lanes=len(lane_tid),
        network_tracks_dropped=dropped,
        network_track_limit=max_tracks,
    )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _other_data(*, result: Result, timeline: Timeline, config: SimConfig) -> dict[str, Any]:
    """The trace's ``otherData``: the run and its plan, in the order the trace shows them
    (the network's track counts are added by :func:`_build_trace`)."""
    par = config.parallelism
    return {
        "generator": "palm-tune",
        "engine": result.engine,
        "model": config.model.name,
        "hardware": config.hardware.name,
        "topology": config.hardware.topology,
        "mode": config.training.mode,
        "plan": {
            "tp": par.tp,
            "pp": par.pp,
            "dp": par.dp,
            "schedule": par.schedule,
            "chunks": par.chunks,
            "micro_batches": result.micro_batches,
        },
        "noc_granularity": config.communication.noc_granularity,
        "iteration_time_s": result.iteration_time_s,
        "throughput_samples_per_s": result.throughput_samples_per_s,
        "sample_unit": result.sample_unit,
        "events_simulated": result.events_simulated,
        "phases": len(timeline.raw_phases),
        "flows": len(timeline.raw_flows),
    }


_PHASE_CATEGORY: Mapping[str, str] = {"F": "forward", "B": "backward"}


def _lanes(flows: Any, kept: set[int]) -> dict[tuple[int, int], int]:
    """The lane of each (flow index, resource) on a kept resource: each resource's flows in
    order of start (then end, then index), each on the lowest-numbered lane whose last flow
    ended by its start, else on a new lane (interval partitioning; the lanes of a resource
    are as many as the flows it carried at once)."""
    by_resource: dict[int, list[tuple[float, float, int]]] = {}
    for i, (_kind, resources, start, end, _stage) in enumerate(flows):
        for r in resources:
            if r in kept:
                by_resource.setdefault(r, []).append((float(start), float(end), i))
    out: dict[tuple[int, int], int] = {}
    for r, spans in by_resource.items():
        free: list[int] = []  # lanes free at the current start, lowest first
        busy: list[tuple[float, int]] = []  # (end, lane) of the lanes in use
        n_lanes = 0
        for start, end, i in sorted(spans):
            while busy and busy[0][0] <= start:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, n_lanes = n_lanes, n_lanes + 1
            heapq.heappush(busy, (end, lane))
            out[(i, r)] = lane
    return out


def _lane_threads(
    lanes: dict[tuple[int, int], int], kept: list[int], *, first: int
) -> dict[tuple[int, int], int]:
    """The thread id of each (resource, lane): the resource id for lane 0, ids from ``first``
    on for the other lanes, in order of resource and lane."""
    used = sorted({(r, lane) for (_i, r), lane in lanes.items()} | {(r, 0) for r in kept})
    out: dict[tuple[int, int], int] = {}
    extra = first
    for r, lane in used:
        if lane == 0:
            out[(r, lane)] = r
        else:
            out[(r, lane)] = extra
            extra += 1
    return out


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def complete_event(
    name: str,
    category: str,
    pid: int,
    tid: int,
    start_s: float,
    end_s: float,
    args: dict[str, Any],
) -> dict[str, Any]:
    """A Chrome-trace complete event ("X") from ``start_s`` to ``end_s`` in microseconds, its
    ``ts + dur`` never past ``end_s``'s: slices that follow each other on a track do not
    overlap by a rounding error."""
    ts = float(start_s) * _US
    end = float(end_s) * _US
    dur = max(0.0, end - ts)
    # ts + dur must not pass end: an event ending where the next one on its track starts
    # would otherwise overlap it by a rounding error, which viewers treat as bad nesting
    while dur > 0.0 and ts + dur > end:
        dur = math.nextafter(dur, 0.0)
    return {
        "name": name,
        "cat": category,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }
