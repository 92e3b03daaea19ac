"""tests/palm/test_fair_network.py again, every test of it, on the compiled build of the fair
network (palm/engines/event/accel.py): that file is loaded once more with the build in the
place of ``palm.engines.event.fair``, so its hand-worked cases, invariants and randomised
checks hold for the network the engine runs, not only for fair.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import palm.engines.event as event_package
from palm.engines.event import accel

_COMPILED, _WHY = accel.compiled_module()
if _COMPILED is None:
    pytest.skip(f"compiled fair network {_WHY}", allow_module_level=True)

_NAME = "palm.engines.event.fair"


def _on_the_build(build: ModuleType) -> ModuleType:
    """test_fair_network.py, imported with ``build`` as ``palm.engines.event.fair``."""
    saved = sys.modules[_NAME], event_package.fair
    sys.modules[_NAME] = event_package.fair = build  # type: ignore[attr-defined]
    try:
        path = Path(__file__).with_name("test_fair_network.py")
        spec = importlib.util.spec_from_file_location("_fair_network_on_the_build", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.FairNetwork is build.FairNetwork  # the tests' names are the build's
    finally:
        sys.modules[_NAME], event_package.fair = saved  # type: ignore[attr-defined]
    return module


_TESTS = {k: v for k, v in vars(_on_the_build(_COMPILED)).items() if k.startswith("test_")}
assert _TESTS, "test_fair_network.py has no tests to run on the build"
globals().update(_TESTS)
