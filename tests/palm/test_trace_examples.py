"""The trace of every example in examples/ draws in Perfetto: on no track do two slices
partially overlap (a viewer draws one slice per track at a time: slices on one track are
disjoint or nested), and the trace and the Gantt chart span exactly the iteration (training;
an inference example streams micro-batches, and both span that stream; a serving example's
trace is its prefill and decode steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import palm
from palm.api import simulate_timeline
from palm.trace import load_chrome_trace, write_chrome_trace

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.toml"))


def partial_overlaps(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The pairs of complete events on one track (pid, tid) that overlap without one holding
    the other: each track's slices in order of start (longer first on a tie) against the
    stack of the slices still open."""
    tracks: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append(
                (e["ts"], e["ts"] + e["dur"], e["name"])
            )
    bad = []
    for track, spans in tracks.items():
        open_ends: list[tuple[float, str]] = []
        for start, end, name in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0]:
                bad.append((track, open_ends[-1][1], name, start, end, open_ends[-1][0]))
            open_ends.append((end, name))
    return bad


def test_the_checker_finds_a_partial_overlap_and_accepts_nesting() -> None:
    def x(ts: float, dur: float, tid: int = 0) -> dict[str, Any]:
        return {"ph": "X", "pid": 0, "tid": tid, "ts": ts, "dur": dur, "name": f"{ts}"}

    assert partial_overlaps([x(0, 10), x(2, 3), x(5, 5), x(10, 1)]) == []  # nested, touching
    assert len(partial_overlaps([x(0, 10), x(5, 10)])) == 1
    assert partial_overlaps([x(0, 10), x(5, 10, tid=1)]) == []  # another track


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_examples_trace_has_one_slice_per_track_at_a_time(path: Path, tmp_path: Path) -> None:
    config = palm.load_config(path)
    if config.training.mode == "serve":  # prefill and decode steps (palm.serving.timeline)
        from palm.serving.simulate import serving_run
        from palm.serving.timeline import write_serving_trace

        out = tmp_path / "t.json"
        write_serving_trace(out, serving_run(config))
        events = load_chrome_trace(out)["traceEvents"]
        assert [e for e in events if e["ph"] == "X"] and partial_overlaps(events) == []
        return
    result, timeline = simulate_timeline(config, engine="event")
    if timeline is None:  # a single product (family gemm): no timeline, no trace
        assert config.model.family == "gemm"
        return
    out = tmp_path / "t.json"
    write_chrome_trace(out, result=result, timeline=timeline, config=config)
    events = load_chrome_trace(out)["traceEvents"]
    assert partial_overlaps(events) == []
    slices = [e for e in events if e["ph"] == "X"]
    start = min(e["ts"] for e in slices)
    end = max(e["ts"] + e["dur"] for e in slices)
    assert start >= 0.0
    if config.training.mode != "inference":
        assert end == pytest.approx(result.iteration_time_s * 1e6, rel=1e-12)
        span_s = result.iteration_time_s
    else:  # the stream of micro-batches, longer than the steady-state iteration
        span_s = max(float(p[5]) for p in timeline.raw_phases)
        assert end == pytest.approx(span_s * 1e6, rel=1e-12)
    pytest.importorskip("matplotlib")
    from palm.plots import _gantt_figure, _time_unit

    fig = _gantt_figure(timeline=timeline, result=result, config=config)
    _, scale = _time_unit(span_s)
    assert fig.axes[0].get_xlim() == pytest.approx((0.0, span_s * scale), rel=1e-12)
