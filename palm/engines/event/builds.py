"""The event engine's modules that have a compiled build, the source modules each build is
made of, and the digest of a build's sources. Read by ``setup.py`` (loaded by path, before
palm's dependencies are installed) and by :mod:`palm.engines.event.accel` (which compares the
digest compiled into a build with the installed sources'), so the two can never disagree.
Standard library only."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["COMPILED", "PARTS", "parts", "source_digest", "unit_source"]

#: the modules with a compiled build, each built as ``palm.engines.event._<name>_compiled``
COMPILED = ("fair", "dram_system", "resource_table")

#: builds made of several source modules, in order: compiled as one unit (their text joined,
#: the imports between them dropped), typed by ``<name>.pxd``, so that their classes and
#: functions call each other as C code. A build not listed is its own module alone.
PARTS = {"fair": ("filling", "flowclass", "clock", "fair")}


def parts(name: str) -> tuple[str, ...]:
    """The source modules of build ``name``, in order."""
    return PARTS.get(name, (name,))


def source_digest(directory: Path, name: str) -> str:
    """SHA-256 of build ``name``'s ``.py`` sources (:func:`parts`) and its ``.pxd`` in
    ``directory``."""
    digest = hashlib.sha256()
    for path in [directory / f"{p}.py" for p in parts(name)] + [directory / f"{name}.pxd"]:
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def unit_source(directory: Path, name: str) -> str:
    """The text Cython compiles for build ``name``: its parts joined in order, each import of
    one part from another (which the unit defines itself) and every ``from __future__``
    import but the first replaced by ``pass``, so that names resolve inside the unit."""
    members = parts(name)
    if len(members) == 1:
        return (directory / f"{name}.py").read_text(encoding="utf-8")
    siblings = "|".join(re.escape(p) for p in members)
    between = re.compile(
        rf"^([ \t]*)from palm\.engines\.event\.(?:{siblings}) import (?:\([^)]*\)|[^\n]*)",
        re.MULTILINE,
    )
    future = re.compile(r"^from __future__ import annotations$", re.MULTILINE)
    texts = []
    for i, part in enumerate(members):
        text = between.sub(r"\1pass", (directory / f"{part}.py").read_text(encoding="utf-8"))
        texts.append(text if i == 0 else future.sub("pass", text))
    return "\n\n".join(texts)
