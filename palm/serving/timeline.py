"""The steps of a served configuration laid out in time, per pipeline stage: a prefill step
(or the steps a chunked prefill takes) and the decode steps after it, with the pipeline's
micro-batches one stage behind the other. Written as a Chrome / Perfetto trace
(``palm-tune simulate --trace``), drawn as a Gantt chart (``palm-tune plot``), and read by
the readable summary (:func:`format_serving`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from palm.result import Result
from palm.serving.simulate import ServingRun

__all__ = ["Span", "serving_spans", "write_serving_trace", "format_serving", "DECODE_SHOWN"]

#: decode steps drawn after the prefill (the steady state repeats them)
DECODE_SHOWN = 4


@dataclass(frozen=True)
class Span:
    """One step of one micro-batch on one stage (seconds)."""

    stage: int
    name: str
    start_s: float
    duration_s: float


def serving_spans(run: ServingRun, *, decode_steps: int = DECODE_SHOWN) -> list[Span]:
    """The prefill then ``decode_steps`` decode steps of every micro-batch on every stage."""
    out = run.outcome
    pp = len(run.model.stages)
    micro = max(1, min(pp, out.sequences))
    spans: list[Span] = []
    busy = [0.0] * pp  # when each stage is next free
    for kind, costs, steps in (
        ("prefill", out.prefill, out.prefill_steps),
        ("decode", out.decode, decode_steps),
    ):
        for step in range(steps):
            for m in range(micro):
                ready = 0.0
                for s in range(pp):
                    start = max(busy[s], ready)
                    dur = costs[s].time_s
                    spans.append(Span(s, f"{kind} {step} mb{m}", start, dur))
                    busy[s] = ready = start + dur
    return spans


def write_serving_trace(path: Path, run: ServingRun) -> None:
    """A Chrome trace (``traceEvents``, microseconds) of :func:`serving_spans`."""
    from palm.trace import complete_event

    events = [
        complete_event(
            span.name,
            span.name.split()[0],
            0,
            span.stage,
            span.start_s,
            span.start_s + span.duration_s,
            {},
        )
        for span in serving_spans(run)
    ]
    names = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": s, "args": {"name": f"stage {s}"}}
        for s in range(len(run.model.stages))
    ]
    path.write_text(json.dumps({"traceEvents": names + events}, indent=1) + "\n")


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:,.2f} ms"


def format_serving(run: ServingRun, result: Result) -> str:
    """The readable summary of a served configuration: prefill and decode."""
    sv, par, cfg = run.config.serving, run.config.parallelism, run.config
    s = result.serving
    assert s is not None
    pre, dec = s.prefill, s.decode
    lines = [
        f"model      {cfg.model.name} on {cfg.hardware.name} ({result.devices} devices)",
        f"plan       serve, TP={par.tp} PP={par.pp} DP={par.dp}"
        + (f" EP={par.ep}" if cfg.model.is_moe else "")
        + f", {cfg.training.precision}, {sv.batching} batching, {sv.scenario}",
        f"requests   batch {sv.batch} ({s.sequences_in_flight} in flight, max {s.max_batch}), "
        f"{sv.input_tokens} in / {sv.output_tokens} out tokens",
        "",
        f"first token {_ms(s.ttft_s)}   per output token {_ms(s.tpot_s)}"
        f"   ({s.output_tokens_per_s_per_user:,.1f} tokens/s per user)",
        f"throughput {s.output_tokens_per_s:,.1f} output tokens/s, "
        f"{s.requests_per_s:,.3f} requests/s, MFU {result.mfu:.1%}",
        f"memory     {result.peak_memory_bytes / 2**30:,.1f} GiB of "
        f"{result.memory_capacity_bytes / 2**30:,.1f} GiB per device "
        f"({sv.memory_fraction:.0%} usable): weights "
        f"{result.memory.weights_bytes / 2**30:,.1f} GiB, KV cache "
        f"{s.kv_cache_bytes_per_device / 2**30:,.2f} GiB "
        f"({s.kv_cache_bytes_per_token / 2**10:,.1f} KiB per token)",
    ]
    if not result.fits_memory:
        lines.append(
            f"           DOES NOT FIT: over by {result.memory_overflow_bytes / 2**30:,.2f} GiB"
        )
    if s.saturated:
        lines.append("           SATURATED: requests arrive faster than they are answered")
    lines += ["", "step       time      products  attention  element-wise  collectives  fixed"]
    for name, st in (("prefill", pre), ("decode", dec)):
        lines.append(
            f"{name:<9} {_ms(st.time_s):>10} {_ms(st.gemm_s):>9} {_ms(st.attention_s):>10} "
            f"{_ms(st.vector_s):>13} {_ms(st.comm_s):>12} {_ms(st.overhead_s):>9}"
        )
    lines.append("(device time of one step of one micro-batch over the stages)")
    return "\n".join(lines) + "\n"
