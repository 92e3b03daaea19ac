"""Shared by the benchmark scripts: replace a generated block of a Markdown document.

A block sits between ``<!-- BEGIN name -->`` and ``<!-- END name -->``; everything else in the
document is left as written.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["read_section", "write_section"]


def write_section(doc: Path, name: str, text: str) -> None:
    """Replace the block ``name`` of ``doc`` with ``text``; exit with a message if the
    document has no such block."""
    content = doc.read_text(encoding="utf-8")
    marker = re.compile(
        rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)", re.S
    )
    if not marker.search(content):
        raise SystemExit(f"no markers for {name} in {doc}")
    doc.write_text(
        marker.sub(lambda mo: mo.group(1) + text + "\n" + mo.group(2), content), encoding="utf-8"
    )


def read_section(doc: Path, name: str) -> str | None:
    """The text of the block ``name`` of ``doc`` (without its markers and final newline), or
    ``None`` if the document has no such block."""
    content = doc.read_text(encoding="utf-8")
    found = re.search(
        rf"<!-- BEGIN {re.escape(name)} -->\n(.*?)\n?<!-- END {re.escape(name)} -->", content, re.S
    )
    return found.group(1) if found else None
