"""Which implementation of the engine's hot modules runs: the compiled builds of
:mod:`palm.engines.event.fair` (the ``fair`` model's flows and clock),
:mod:`palm.engines.event.dram_system` (the ``exclusive`` model's DRAM channels) and
:mod:`palm.engines.event.resource_table` (the resources and the ``exclusive`` model's holds),
made by Cython at install time from each ``.py`` and the C types its ``.pxd`` declares
(setup.py), when a build is there and was made from the current sources; else the ``.py``
itself. A build and its ``.py`` give the same results bit for bit (tests/palm/test_compiled.py);
the builds take about a third less time per event on the wafer (docs/benchmarks.md, "Seventh
round").

``PALM_PURE_PYTHON=1`` in the environment selects the ``.py`` modules (to profile them, or to
compare). A build older than its ``.py`` or ``.pxd`` (an editable install edited since) is never
run: ``pip install -e .`` builds it again.
"""

from __future__ import annotations

import importlib
import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType

from palm.engines.event import builds
from palm.engines.event.builds import COMPILED

__all__ = [
    "COMPILED",
    "DRAM",
    "FAIR",
    "IMPLEMENTATION",
    "PURE_ENV",
    "TABLE",
    "choose",
    "compiled_module",
    "source_digest",
]

#: set to anything but "" or "0" to run the .py modules even where their builds are current
PURE_ENV = "PALM_PURE_PYTHON"
_HERE = Path(__file__).resolve().parent


def source_digest(name: str) -> str:
    """SHA-256 of ``<name>.py`` and ``<name>.pxd`` as installed (the build compiles the digest
    of the sources it was made from into the extension as ``SOURCE_SHA256``)."""
    return builds.source_digest(_HERE, name)


def compiled_module(name: str) -> tuple[ModuleType | None, str]:
    """The compiled build of module ``name`` if it is built and current (else None), and
    why not."""
    try:
        module = importlib.import_module(f"palm.engines.event._{name}_compiled")
    except ImportError:
        return None, "not built (no Cython or no C compiler at install time)"
    if not str(module.__file__).endswith(tuple(EXTENSION_SUFFIXES)):
        return None, f"not an extension module ({module.__file__})"
    if getattr(module, "SOURCE_SHA256", None) != source_digest(name):
        return None, f"older than {name}.py or {name}.pxd (pip install -e . rebuilds it)"
    return module, "compiled"


def _choose(name: str, pure: ModuleType) -> tuple[ModuleType, str | None]:
    """The module to run for ``name`` and, when it is the ``.py``, why."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return pure, f"{PURE_ENV} is set"
    module, why = compiled_module(name)
    return (pure, f"{name}: compiled build {why}") if module is None else (module, None)


def choose() -> tuple[dict[str, ModuleType], str]:
    """The module to run for each of :data:`COMPILED`, by name, and which they are:
    "compiled", or "python (...)" with the reasons (each once)."""
    chosen = {
        name: _choose(name, importlib.import_module(f"palm.engines.event.{name}"))
        for name in COMPILED
    }
    reasons = list(dict.fromkeys(why for _, why in chosen.values() if why is not None))
    line = f"python ({'; '.join(reasons)})" if reasons else "compiled"
    return {name: module for name, (module, _) in chosen.items()}, line


#: the modules the engine uses (chosen once, at import): FairNetwork, FlowEnvironment and Route;
#: DramSystem; Fabric; and which they are
_MODULES, IMPLEMENTATION = choose()
FAIR, DRAM, TABLE = _MODULES["fair"], _MODULES["dram_system"], _MODULES["resource_table"]
