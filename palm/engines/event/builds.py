"""The event engine's modules that have a compiled build, and the digest of a build's sources.
Read by ``setup.py`` (loaded by path, before palm's dependencies are installed) and by
:mod:`palm.engines.event.accel` (which compares the digest compiled into a build with the
installed sources'), so the two can never disagree. Standard library only."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["COMPILED", "source_digest"]

#: the modules with a compiled build, each built as ``palm.engines.event._<name>_compiled``
COMPILED = ("fair", "dram_system", "resource_table")


def source_digest(directory: Path, name: str) -> str:
    """SHA-256 of ``<name>.py`` and ``<name>.pxd`` in ``directory``."""
    digest = hashlib.sha256()
    for suffix in (".py", ".pxd"):
        digest.update((directory / f"{name}{suffix}").read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()
