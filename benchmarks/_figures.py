"""Shared by the case-study scripts (``case_*.py``, ``grayskull_inference.py``): their command
line, how they print and write their tables, and how they make and save their figures.

Every script takes ``--quick`` (a small version for the smoke tests) and ``--write-docs`` (put
its tables between its markers in a document, see :mod:`_docblock`); the figure scripts also
take ``--out`` (figure folder). Figures are written without a ``Software`` tag, so the same
input gives the same bytes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from _docblock import write_section

__all__ = [
    "ROOT",
    "FIGURES",
    "CaseArgs",
    "parse_case_args",
    "publish",
    "case_main",
    "pyplot",
    "save_figure",
    "markdown_table",
    "grouped_bars",
]

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"

CaseArgs = argparse.Namespace


def parse_case_args(
    argv: Sequence[str] | None,
    *,
    description: str,
    quick_help: str,
    doc: Path,
    figures: bool = True,
) -> CaseArgs:
    """``--quick``, ``--write-docs``, (``--out`` when the script draws figures) and the hidden
    ``--doc`` (the document ``--write-docs`` updates; the smoke tests point it elsewhere)."""
    ap = argparse.ArgumentParser(description=description.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    if figures:
        ap.add_argument("--out", type=Path, default=FIGURES, help="figure folder")
    ap.add_argument(
        "--write-docs", action="store_true", help=f"update {_relative(doc)} between its markers"
    )
    ap.add_argument("--doc", type=Path, default=doc, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def publish(args: CaseArgs, name: str, text: str, figures: Iterable[Path] = ()) -> int:
    """Print ``text`` and the figures written; with ``--write-docs`` put ``text`` between the
    ``name`` markers of ``args.doc``. Returns the exit code."""
    print(text)
    for path in figures:
        print(f"\nwrote {path}")
    if args.write_docs:
        write_section(args.doc, name, text)
        print(f"updated {args.doc}")
    return 0


def case_main(
    *,
    description: str,
    quick_help: str,
    doc: Path,
    name: str,
    run: Callable[[bool, Path], tuple[str, Sequence[Path]]],
) -> Callable[[Sequence[str] | None], int]:
    """A figure script's ``main(argv)``: parse the command line, ``run(quick, out)`` (its tables
    and the figures it wrote into ``out``) and :func:`publish` them."""

    def main(argv: Sequence[str] | None = None) -> int:
        args = parse_case_args(argv, description=description, quick_help=quick_help, doc=doc)
        text, figures = run(args.quick, args.out)
        return publish(args, name, text, figures)

    return main


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, out: Path, name: str) -> Path:
    """Write ``fig`` as ``out / name`` (creating ``out``), close it and return the path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    fig.savefig(path, metadata={"Software": None})
    pyplot().close(fig)
    return path


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: ``head`` cells, then one line per row of cells (``str`` of each)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines.extend("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)


def grouped_bars(
    ax: Any,
    x: Sequence[float],
    series: Sequence[tuple[Sequence[float], str]],
    *,
    width: float,
    offset: float,
    hatch: Callable[[int, int], str | None] | None = None,
    **bar: Any,
) -> list[Any]:
    """Side-by-side bars: series ``k`` (its values and colour) at ``x + (k + offset) width``;
    ``hatch(k, i)`` may hatch bar ``i`` of series ``k``. Returns the bar containers."""
    out = []
    for k, (values, colour) in enumerate(series):
        bars = ax.bar(
            [xi + (k + offset) * width for xi in x],
            values,
            width,
            color=colour,
            edgecolor="black",
            linewidth=0.4,
            **bar,
        )
        if hatch is not None:
            for i, b in enumerate(bars):
                h = hatch(k, i)
                if h:
                    b.set_hatch(h)
        out.append(bars)
    return out
