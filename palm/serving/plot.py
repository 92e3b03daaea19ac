"""The Gantt chart of a served configuration: the prefill and decode steps of every
micro-batch on every pipeline stage (:func:`palm.serving.timeline.serving_spans`), prefill in
one colour and decode in another (``palm-tune plot`` of a ``training.mode = "serve"``
configuration writes it as ``gantt.png``)."""

from __future__ import annotations

from pathlib import Path

from palm.serving.simulate import serving_run
from palm.serving.timeline import serving_spans
from palm.strategy import SimConfig

__all__ = ["plot_serving_gantt"]

_COLOURS = {"prefill": "#d95f02", "decode": "#1b9e77"}


def plot_serving_gantt(out_dir: Path, *, config: SimConfig) -> Path:
    """Write ``gantt.png`` into ``out_dir`` and return its path."""
    from palm.plots import _figure, _save

    run = serving_run(config)
    spans = serving_spans(run)
    pp = len(run.model.stages)
    fig = _figure(9.0, 1.2 + 0.45 * pp)
    ax = fig.add_subplot(1, 1, 1)
    for span in spans:
        kind = span.name.split()[0]
        ax.broken_barh(
            [(span.start_s * 1e3, span.duration_s * 1e3)],
            (span.stage - 0.4, 0.8),
            facecolors=_COLOURS[kind],
            edgecolor="white",
            linewidth=0.5,
        )
    ax.set_yticks(range(pp), [f"stage {s}" for s in range(pp)])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    sv = config.serving
    ax.set_title(
        f"{config.model.name}: prefill (orange) then decode steps (green), "
        f"batch {sv.batch}, {sv.input_tokens} in / {sv.output_tokens} out"
    )
    path = out_dir / "gantt.png"
    _save(fig, path)
    return path
