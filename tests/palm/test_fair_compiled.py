"""The compiled build of the fair network (palm/engines/event/accel.py, setup.py): which one the
engine runs, that a stale build is never run, and that the compiled and the pure-Python network
give the same results bit for bit, on whole simulations of every kind of case.
(tests/palm/test_fair_network_compiled.py runs the fair network's own tests on the build.)"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import palm
from palm.api import plan_for
from palm.engines.event import accel, engine, fair, networks
from palm.engines.event.engine import run_event
from palm.validation import load_cases

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COMPILED, WHY = accel.compiled_module()
needs_build = pytest.mark.skipif(COMPILED is None, reason=f"compiled fair network {WHY}")


def test_the_build_is_there_where_it_is_expected() -> None:
    # .ci/run installs with a C compiler and Cython at hand: there the build must be current
    if os.environ.get("PALM_EXPECT_COMPILED", "") in ("", "0"):
        pytest.skip("PALM_EXPECT_COMPILED not set (a checkout may run without the build)")
    assert COMPILED is not None, WHY
    assert accel.IMPLEMENTATION == "compiled" or os.environ.get(accel.PURE_ENV)


@needs_build
def test_the_build_carries_the_digest_of_the_sources_it_was_made_from() -> None:
    assert COMPILED is not None
    assert accel.source_digest() == COMPILED.SOURCE_SHA256
    assert COMPILED.FairNetwork is not fair.FairNetwork
    # the classes the .pxd types are extension types: their fields have no instance dict
    assert not hasattr(COMPILED.FairNetwork(COMPILED.FlowEnvironment(), [1.0]), "__dict__")


def test_a_stale_build_is_never_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accel, "source_digest", lambda: "0" * 64)  # the sources changed
    module, why = accel.compiled_module()
    assert module is None
    assert "older than fair.py" in why or "not built" in why
    module, line = accel._choose()  # noqa: SLF001 - the choice made at import
    assert module is fair and line.startswith("python (")


def test_the_pure_python_network_can_be_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(accel.PURE_ENV, "1")
    module, line = accel._choose()  # noqa: SLF001
    assert module is fair and accel.PURE_ENV in line
    monkeypatch.setenv(accel.PURE_ENV, "0")  # "0" asks for nothing
    assert accel._choose()[0] is (COMPILED or fair)  # noqa: SLF001


@contextmanager
def _running(module: ModuleType) -> Iterator[None]:
    """The engine with ``module``'s fair network and clock (what accel chose at import,
    swapped for the duration)."""
    saved = (engine.FlowEnvironment, networks.FairNetwork, networks.Route)
    engine.FlowEnvironment = module.FlowEnvironment
    networks.FairNetwork, networks.Route = module.FairNetwork, module.Route
    try:
        yield
    finally:
        engine.FlowEnvironment, networks.FairNetwork, networks.Route = saved


def _result(config: palm.SimConfig, module: ModuleType) -> dict[str, Any]:
    """The event engine's result of ``config`` on ``module``'s network, from a plan of its own
    (a plan keeps the routes its first run made), without wall-clock fields."""
    with _running(module):
        result, _ = run_event(plan_for(config), record=True)
    out = result.to_dict()
    return {k: v for k, v in out.items() if "wall" not in k}


def _cases() -> list[tuple[str, palm.SimConfig]]:
    wafer = palm.load_config(EXAMPLES / "wafer-t18b.toml")
    gpu = load_cases()[0].config
    link = dataclasses.replace(
        wafer, communication=dataclasses.replace(wafer.communication, noc_granularity="link")
    )
    tp4 = palm.load_config(
        EXAMPLES / "wafer-t18b.toml",
        overrides=['model.preset="t-145b"', "parallelism.tp=4", "parallelism.dp=4"],
    )
    infer = palm.load_config(EXAMPLES / "wafer-t18b.toml", overrides=['training.mode="inference"'])
    cases = [("wafer", wafer), ("wafer link", link), ("wafer t-145b tp4", tp4), ("gpu", gpu)]
    cases.append(("wafer inference", infer))
    return [
        (
            f"{name} {model}",
            dataclasses.replace(
                cfg, communication=dataclasses.replace(cfg.communication, noc_model=model)
            ),
        )
        for name, cfg in cases
        for model in ("fair", "exclusive")
    ]


@needs_build
@pytest.mark.parametrize(("name", "config"), _cases(), ids=[n for n, _ in _cases()])
def test_compiled_and_pure_python_give_the_same_result_bit_for_bit(
    name: str, config: palm.SimConfig
) -> None:
    assert COMPILED is not None
    pure, built = _result(config, fair), _result(config, COMPILED)
    assert built == pure, name  # every field, timeline included, to the last bit
    assert pure["events_simulated"] > 0
