"""How a :class:`~palm.result.Result` shows itself: a one-line ``repr``, an HTML table for
Jupyter (``_repr_html_``) and pandas DataFrames (``to_dataframe``). Formatting only: every
number shown is a field of the result."""

from __future__ import annotations

import dataclasses
import html
from typing import TYPE_CHECKING, Any

from palm.errors import ConfigError

if TYPE_CHECKING:
    from palm.result import Result

__all__ = ["short_repr", "html_table", "dataframe", "TABLES"]

#: what :func:`dataframe` can tabulate: one row of the scalar fields, or one row per stage,
#: link, operator
TABLES = ("summary", "stages", "links", "operators")
_GIB = 2**30


def _memory(result: Result) -> str:
    fits = "fits" if result.fits_memory else "does not fit"
    return (
        f"{result.peak_memory_bytes / _GIB:.1f} of {result.memory_capacity_bytes / _GIB:.1f} "
        f"GiB, {fits}"
    )


def short_repr(result: Result) -> str:
    """``Result(event: 6.357 samples/s, iteration 5.034 s, MFU 41.2%, ...)``: one line."""
    return (
        f"Result({result.engine}: {result.throughput_samples_per_s:,.4g} "
        f"{result.sample_unit}/s, iteration {result.iteration_time_s:.4g} s, "
        f"MFU {result.mfu:.1%}, bubble {result.bubble_fraction:.1%}, peak memory "
        f"{_memory(result)}, {result.devices} devices, {len(result.stages)} stages, "
        f"{result.micro_batches} micro-batches)"
    )


def _summary_rows(result: Result) -> list[tuple[str, str]]:
    rows = [
        ("engine", result.engine),
        ("throughput", f"{result.throughput_samples_per_s:,.4g} {result.sample_unit}/s"),
        ("iteration time", f"{result.iteration_time_s:.4g} s"),
        ("MFU", f"{result.mfu:.1%}"),
        ("model TFLOP/s per device", f"{result.model_tflops_per_device:,.4g}"),
        ("pipeline bubble", f"{result.bubble_fraction:.1%}"),
        ("peak memory", _memory(result)),
        ("devices", str(result.devices)),
        ("micro-batches", str(result.micro_batches)),
    ]
    if result.tokens_per_s is not None:
        rows.insert(2, ("tokens", f"{result.tokens_per_s:,.4g} tokens/s"))
    rows += [("note", n) for n in result.notes]
    return rows


def html_table(result: Result) -> str:
    """The summary and the per-stage times as HTML tables (Jupyter's rich display)."""
    e = html.escape
    out = ["<table><caption>palm.Result</caption>"]
    out += [
        f"<tr><th style='text-align:left'>{e(k)}</th><td>{e(v)}</td></tr>"
        for k, v in _summary_rows(result)
    ]
    out.append("</table>")
    if result.stages:
        heads = ("stage", "layers", "forward s", "backward s", "busy", "memory GiB")
        out.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>")
        for s in result.stages:
            cells = (
                str(s.stage),
                str(s.layers),
                f"{s.forward_s:.4g}",
                f"{s.backward_s:.4g}",
                f"{s.busy_fraction:.1%}",
                f"{s.memory_bytes / _GIB:.2f}",
            )
            out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        out.append("</table>")
    return "\n".join(out)


def dataframe(result: Result, table: str = "summary") -> Any:
    """``summary``: one row of the result's scalar fields (concatenate the rows of several
    results to compare them); ``stages``, ``links``, ``operators``: one row per item (an
    empty frame where the engine did not report them)."""
    import pandas  # type: ignore[import-untyped,unused-ignore]

    if table not in TABLES:
        raise ConfigError("table", table, f"one of {', '.join(TABLES)}")
    if table == "summary":
        row: dict[str, Any] = {}
        for f in dataclasses.fields(result):
            value = getattr(result, f.name)
            if f.name == "memory":
                row.update({f"memory_{k}": v for k, v in dataclasses.asdict(value).items()})
            elif not isinstance(value, (tuple, list)) or f.name == "notes":
                row[f.name] = "; ".join(value) if f.name == "notes" else value
        return pandas.DataFrame([row])
    items = getattr(result, table) or ()
    return pandas.DataFrame([dataclasses.asdict(x) for x in items])
