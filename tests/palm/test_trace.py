"""Chrome/Perfetto traces of the event engine's timeline: one event per pass, tracks per stage
and per busy resource, the cap on network tracks, determinism, and the loader's checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mesh_toys import simulate_with_timeline, toy_mesh

import palm
from palm.engines.event.engine import Timeline
from palm.trace import (
    MAX_NETWORK_TRACKS,
    NETWORK_PID,
    STAGES_PID,
    load_chrome_trace,
    write_chrome_trace,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _write(tmp_path: Path, config: palm.SimConfig, **kw: Any) -> tuple[dict[str, Any], Timeline]:
    result, timeline = simulate_with_timeline(config)
    path = tmp_path / "trace.json"
    n = write_chrome_trace(path, result=result, timeline=timeline, config=config, **kw)
    trace = load_chrome_trace(path)
    assert n == len(trace["traceEvents"])
    return trace, timeline


def _threads(trace: dict[str, Any], pid: int) -> dict[int, str]:
    return {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid
    }


def _complete(trace: dict[str, Any], pid: int) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]


def _busy_by_resource(timeline: Timeline) -> dict[int, float]:
    busy: dict[int, float] = {}
    for flow in timeline.flows:
        for r in flow.resources:
            busy[r] = busy.get(r, 0.0) + (flow.end_s - flow.start_s)
    return busy


@pytest.mark.parametrize("granularity", ["group", "link"])
def test_one_complete_event_per_phase_in_microseconds(tmp_path: Path, granularity: str) -> None:
    trace, timeline = _write(tmp_path, toy_mesh(granularity))
    events = _complete(trace, STAGES_PID)
    phases = timeline.phases
    assert len(events) == len(phases) > 0
    for event, phase in zip(events, phases, strict=True):
        assert event["tid"] == phase.stage
        if phase.kind in ("F", "B"):
            assert event["name"] == f"{phase.kind} mb{phase.micro_batch} c{phase.chunk}"
        else:
            assert event["name"] == phase.kind == "optimizer"
        assert event["ts"] == pytest.approx(phase.start_s * 1e6, rel=1e-12, abs=1e-9)
        assert event["dur"] == pytest.approx((phase.end_s - phase.start_s) * 1e6, rel=1e-9)
        assert event["args"] == {
            "stage": phase.stage,
            "chunk": phase.chunk,
            "micro_batch": phase.micro_batch,
        }
    names = {e["name"] for e in events}
    assert "F mb3 c0" in names and "B mb0 c0" in names and "optimizer" in names


def test_passes_of_a_stage_do_not_overlap_after_conversion(tmp_path: Path) -> None:
    # a pass ending where the next starts (in seconds) must not overlap it in microseconds
    # (on this example the naive conversion overlaps one pair of passes by 2e-10 us)
    trace, _ = _write(tmp_path, palm.load_config(EXAMPLES / "t18b-dgx-a100.toml"))
    by_stage: dict[int, list[tuple[float, float]]] = {}
    for e in _complete(trace, STAGES_PID):
        by_stage.setdefault(e["tid"], []).append((e["ts"], e["dur"]))
    touching = 0
    for events in by_stage.values():
        events.sort()
        for (ts, dur), (next_ts, _) in zip(events, events[1:], strict=False):
            assert ts + dur <= next_ts
            touching += ts + dur == next_ts
    assert touching > 0  # back-to-back passes exist, so the check above had teeth


def test_stage_and_network_tracks(tmp_path: Path) -> None:
    config = toy_mesh("group")
    trace, timeline = _write(tmp_path, config)
    pp = config.parallelism.pp
    assert _threads(trace, STAGES_PID) == {s: f"stage {s}" for s in range(pp)}
    processes = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert processes == {STAGES_PID: "stages", NETWORK_PID: "network"}

    # one network thread per resource that carried a flow, named by its label, and one more
    # per extra lane of flows that shared it at once ("<label> (2)", ...)
    network = _threads(trace, NETWORK_PID)
    busy = _busy_by_resource(timeline)
    assert set(busy) <= set(network)
    for tid in busy:
        assert network[tid] == timeline.resource_labels[tid]
    lanes = {tid: name for tid, name in network.items() if tid not in busy}
    assert lanes, "the toy's rings share links: some flows overlap"
    assert all(tid > max(busy) for tid in lanes)
    assert all(name.rsplit(" (", 1)[0] in timeline.resource_labels for name in lanes.values())
    # every flow appears once on each of its resources' threads, named by its kind
    flow_events = _complete(trace, NETWORK_PID)
    assert len(flow_events) == sum(len(f.resources) for f in timeline.flows)
    assert {e["name"] for e in flow_events} == {f.kind for f in timeline.flows}
    for r in busy:
        on_resource = sum(e["dur"] for e in flow_events if e["args"]["resource"] == r)
        assert on_resource == pytest.approx(busy[r] * 1e6, rel=1e-9)
        lane_of = {e["tid"] for e in flow_events if e["args"]["resource"] == r}
        assert {network[t].rsplit(" (", 1)[0] for t in lane_of} == {network[r]}

    other = trace["otherData"]
    assert other["network_tracks"] == len(busy)
    assert other["network_lanes"] == len(network)
    assert other["network_tracks_dropped"] == 0
    assert trace["displayTimeUnit"] == "ms"


def test_summary_in_other_data(tmp_path: Path) -> None:
    config = toy_mesh("group")
    result, timeline = simulate_with_timeline(config)
    path = tmp_path / "t.json"
    write_chrome_trace(path, result=result, timeline=timeline, config=config)
    other = load_chrome_trace(path)["otherData"]
    assert other["engine"] == "event"
    assert other["iteration_time_s"] == result.iteration_time_s
    assert other["throughput_samples_per_s"] == result.throughput_samples_per_s
    assert other["events_simulated"] == result.events_simulated
    assert other["model"] == "toy"
    assert other["hardware"] == config.hardware.name
    assert other["plan"]["pp"] == 4 and other["plan"]["tp"] == 2 and other["plan"]["dp"] == 2


def test_cap_keeps_the_busiest_resources(tmp_path: Path) -> None:
    config = toy_mesh("link")
    trace, timeline = _write(tmp_path, config, max_network_tracks=5)
    busy = _busy_by_resource(timeline)
    assert len(busy) > 5
    kept = {e["args"]["resource"] for e in _complete(trace, NETWORK_PID)}
    assert len(kept) == 5 == trace["otherData"]["network_tracks"]
    assert kept <= set(_threads(trace, NETWORK_PID))
    assert min(busy[r] for r in kept) >= max(busy[r] for r in set(busy) - kept) * (1 - 1e-9)
    assert trace["otherData"]["network_tracks_dropped"] == len(busy) - 5
    assert trace["otherData"]["network_track_limit"] == 5
    # the stages are all there whatever the cap
    assert len(_complete(trace, STAGES_PID)) == len(timeline.phases)


def test_default_cap_on_the_wafer_in_link_granularity(tmp_path: Path) -> None:
    config = palm.load_config(
        EXAMPLES / "wafer-t18b.toml", overrides=['communication.noc_granularity="link"']
    )
    trace, timeline = _write(tmp_path, config)
    busy = _busy_by_resource(timeline)
    assert len(busy) > MAX_NETWORK_TRACKS == 64
    kept = {e["args"]["resource"] for e in _complete(trace, NETWORK_PID)}
    assert len(kept) == MAX_NETWORK_TRACKS == trace["otherData"]["network_tracks"]
    network = _threads(trace, NETWORK_PID)
    assert {network[r] for r in kept} <= set(timeline.resource_labels)
    assert trace["otherData"]["network_tracks_dropped"] == len(busy) - MAX_NETWORK_TRACKS
    assert len(_threads(trace, STAGES_PID)) == config.parallelism.pp == 20


def test_gpu_cluster_trace(tmp_path: Path) -> None:
    config = palm.load_config(EXAMPLES / "t18b-dgx-a100.toml")
    trace, timeline = _write(tmp_path, config)
    assert len(_threads(trace, STAGES_PID)) == config.parallelism.pp
    assert len(_complete(trace, STAGES_PID)) == len(timeline.phases)
    assert set(_threads(trace, NETWORK_PID).values()) <= set(timeline.resource_labels)


def test_byte_identical(tmp_path: Path) -> None:
    config = toy_mesh("link")
    result, timeline = simulate_with_timeline(config)
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    write_chrome_trace(a, result=result, timeline=timeline, config=config)
    write_chrome_trace(b, result=result, timeline=timeline, config=config)
    assert a.read_bytes() == b.read_bytes()
    # a second simulation of the same configuration (its wall time differs) gives the same file
    result2, timeline2 = simulate_with_timeline(config)
    write_chrome_trace(c, result=result2, timeline=timeline2, config=config)
    assert a.read_bytes() == c.read_bytes()
    assert json.loads(a.read_text())["traceEvents"]


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        '{"events": []}',
        '{"traceEvents": {}}',
        '{"traceEvents": [1]}',
        '{"traceEvents": [{"name": "x"}]}',
        '{"traceEvents": [{"name": "x", "ph": "X", "ts": 0}]}',
        '{"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": -1}]}',
        '{"traceEvents": [{"name": "x", "ph": "X", "ts": "0", "dur": 1}]}',
        '{"result": {"iteration_time_s": 1.0}}',
        "not json {",
    ],
)
def test_load_rejects_non_traces(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(palm.ConfigError) as info:
        load_chrome_trace(path)
    assert info.value.field == "trace file"


def test_load_rejects_missing_file(tmp_path: Path) -> None:
    with pytest.raises(palm.ConfigError) as info:
        load_chrome_trace(tmp_path / "nope.json")
    assert info.value.field == "trace file"


def test_negative_cap_is_refused(tmp_path: Path) -> None:
    config = toy_mesh("group")
    result, timeline = simulate_with_timeline(config)
    with pytest.raises(palm.ConfigError):
        write_chrome_trace(
            tmp_path / "t.json",
            result=result,
            timeline=timeline,
            config=config,
            max_network_tracks=-1,
        )
