"""Which fair network the engine runs: the compiled build of :mod:`palm.engines.event.fair`
(``palm.engines.event._fair_compiled``, made by Cython at install time from ``fair.py`` and the
C types ``fair.pxd`` declares; see setup.py) when it is there and was built from the current
sources, else ``fair.py`` itself. The two give the same results bit for bit
(tests/palm/test_fair_compiled.py); the compiled one takes about a third less time per event on
the wafer's ``fair`` runs (docs/benchmarks.md).

``PALM_PURE_PYTHON=1`` in the environment selects ``fair.py`` (to profile it, or to compare).
A build older than ``fair.py`` or ``fair.pxd`` (an editable install edited since) is never run:
``pip install -e .`` builds it again.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType

from palm.engines.event import fair

__all__ = ["FAIR", "IMPLEMENTATION", "PURE_ENV", "compiled_module", "source_digest"]

#: set to anything but "" or "0" to run fair.py even where the compiled build is current
PURE_ENV = "PALM_PURE_PYTHON"
_HERE = Path(__file__).resolve().parent


def source_digest() -> str:
    """SHA-256 of ``fair.py`` and ``fair.pxd`` as installed (the build compiles the digest of
    the sources it was made from into the extension as ``SOURCE_SHA256``)."""
    digest = hashlib.sha256()
    for name in ("fair.py", "fair.pxd"):
        digest.update((_HERE / name).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def compiled_module() -> tuple[ModuleType | None, str]:
    """The compiled fair network if it is built and current (else None), and why not."""
    try:
        module = importlib.import_module("palm.engines.event._fair_compiled")
    except ImportError:
        return None, "not built (no Cython or no C compiler at install time)"
    if not str(module.__file__).endswith(tuple(EXTENSION_SUFFIXES)):
        return None, f"not an extension module ({module.__file__})"
    if getattr(module, "SOURCE_SHA256", None) != source_digest():
        return None, "older than fair.py or fair.pxd (pip install -e . rebuilds it)"
    return module, "compiled"


def _choose() -> tuple[ModuleType, str]:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return fair, f"python ({PURE_ENV} is set)"
    module, why = compiled_module()
    if module is None:
        return fair, f"python (compiled build {why})"
    return module, why


#: the module whose FairNetwork, FlowEnvironment and Route the engine uses, and a line saying
#: which it is ("compiled", or "python (...)" with the reason)
FAIR, IMPLEMENTATION = _choose()
