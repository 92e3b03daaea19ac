"""Shared by the *_compiled test files: a test file of this directory loaded once more with the
compiled build of a module (palm/engines/event/accel.py) in the module's place, so that the
same hand-worked cases, invariants and randomised checks run on the build the engine runs."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from palm.engines.event import accel

__all__ = ["loaded_on_the_build"]

_PACKAGE = "palm.engines.event"


def loaded_on_the_build(test_file: str, name: str, *, imports: str) -> dict[str, Any]:
    """The ``test_*`` functions of ``test_file`` (beside this file), imported with the build
    of ``palm.engines.event.<name>`` as that module (the whole file skips when there is no
    current build); ``imports``: a name the test file imports from the module, checked to be
    the build's."""
    build, why = accel.compiled_module(name)
    if build is None:
        pytest.skip(f"{name}: compiled build {why}", allow_module_level=True)
    module = _load(Path(__file__).with_name(test_file), f"{_PACKAGE}.{name}", build)
    tests = {k: v for k, v in vars(module).items() if k.startswith("test_")}
    assert tests, f"{test_file} has no tests to run on the build"
    assert getattr(module, imports) is getattr(build, imports), f"{imports} is not the build's"
    return tests


def _load(path: Path, qualified: str, build: ModuleType) -> ModuleType:
    package = importlib.import_module(_PACKAGE)
    attribute = qualified.rsplit(".", 1)[1]
    saved = sys.modules[qualified], getattr(package, attribute)
    sys.modules[qualified] = build
    setattr(package, attribute, build)
    try:
        spec = importlib.util.spec_from_file_location(f"_{path.stem}_on_the_build", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.modules[qualified] = saved[0]
        setattr(package, attribute, saved[1])
    return module
