"""The compiled builds of the fair network, the DRAM system and the resource table
(palm/engines/event/accel.py, setup.py): which the engine runs, that a stale build is never
run, and that the builds and the pure-Python modules give the same results bit for bit, on
whole simulations of every kind of case. (tests/palm/test_*_compiled.py run each module's own
tests on its build.)"""

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
from palm.engines.event import accel, dram_system, engine, fabric, fair, networks, resource_table
from palm.engines.event.engine import run_event
from palm.validation import load_cases

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUILDS = {name: accel.compiled_module(name) for name in accel.COMPILED}
FAIR_BUILD, DRAM_BUILD = BUILDS["fair"][0], BUILDS["dram_system"][0]
TABLE_BUILD = BUILDS["resource_table"][0]
PURE = {"fair": fair, "dram_system": dram_system, "resource_table": resource_table}
needs_builds = pytest.mark.skipif(
    any(module is None for module, _ in BUILDS.values()),
    reason=f"compiled builds: {', '.join(f'{n} {why}' for n, (_, why) in BUILDS.items())}",
)


def test_the_builds_are_there_where_they_are_expected() -> None:
    # .ci/run installs with a C compiler and Cython at hand: there the builds must be current
    if os.environ.get("PALM_EXPECT_COMPILED", "") in ("", "0"):
        pytest.skip("PALM_EXPECT_COMPILED not set (a checkout may run without the builds)")
    for name, (module, why) in BUILDS.items():
        assert module is not None, f"{name}: {why}"
    if not os.environ.get(accel.PURE_ENV):
        assert accel.IMPLEMENTATION == "compiled"


@needs_builds
def test_each_build_carries_the_digest_of_the_sources_it_was_made_from() -> None:
    for name, (module, _why) in BUILDS.items():
        assert module is not None
        assert accel.source_digest(name) == module.SOURCE_SHA256
    assert FAIR_BUILD is not None and DRAM_BUILD is not None and TABLE_BUILD is not None
    assert FAIR_BUILD.FairNetwork is not fair.FairNetwork
    assert DRAM_BUILD.DramSystem is not dram_system.DramSystem
    assert TABLE_BUILD.Fabric is not resource_table.Fabric
    assert not hasattr(TABLE_BUILD.Fabric(), "__dict__")
    # the classes the .pxd files type are extension types: their fields have no instance dict
    assert not hasattr(FAIR_BUILD.FairNetwork(FAIR_BUILD.FlowEnvironment(), [1.0]), "__dict__")
    env = FAIR_BUILD.FlowEnvironment()
    assert not hasattr(DRAM_BUILD.DramSystem(env, [1.0], [((0,), (1.0,))]), "__dict__")


def test_a_stale_build_is_never_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(accel.PURE_ENV, raising=False)
    monkeypatch.setattr(accel, "source_digest", lambda name: "0" * 64)  # the sources changed
    for name in accel.COMPILED:
        module, why = accel.compiled_module(name)
        assert module is None
        assert f"older than {name}.py" in why or "not built" in why
    modules, line = accel.choose()
    assert modules == PURE
    assert line.startswith("python (fair: compiled build ") and "resource_table: " in line


def test_the_pure_python_networks_can_be_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(accel.PURE_ENV, "1")
    assert accel.choose() == (PURE, f"python ({accel.PURE_ENV} is set)")
    monkeypatch.setenv(accel.PURE_ENV, "0")  # "0" asks for nothing
    modules, _ = accel.choose()
    assert modules == {name: module or PURE[name] for name, (module, _) in BUILDS.items()}


@contextmanager
def _running(modules: dict[str, ModuleType]) -> Iterator[None]:
    """The engine with these modules' fair network and clock, DRAM system and resource table
    (what accel chose at import, swapped for the duration)."""
    saved = (
        engine.FlowEnvironment,
        networks.FairNetwork,
        networks.Route,
        networks.DramSystem,
        fabric.Fabric,
    )
    engine.FlowEnvironment = modules["fair"].FlowEnvironment
    networks.FairNetwork, networks.Route = modules["fair"].FairNetwork, modules["fair"].Route
    networks.DramSystem = modules["dram_system"].DramSystem
    fabric.Fabric = modules["resource_table"].Fabric
    try:
        yield
    finally:
        (
            engine.FlowEnvironment,
            networks.FairNetwork,
            networks.Route,
            networks.DramSystem,
            fabric.Fabric,
        ) = saved


def _result(config: palm.SimConfig, modules: dict[str, ModuleType]) -> dict[str, Any]:
    """The event engine's result of ``config`` on these modules, from a plan of its own (a
    plan keeps the routes and the resource table its first run made), without wall-clock
    fields."""
    with _running(modules):
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
    # each core on its nearest channel: channel classes of several patterns (the DRAM system's
    # general loop, not the one-class one)
    nearest = palm.load_config(
        EXAMPLES / "wafer-t18b.toml", overrides=['hardware.dram_placement="nearest"']
    )
    cases = [("wafer", wafer), ("wafer link", link), ("wafer t-145b tp4", tp4), ("gpu", gpu)]
    cases += [("wafer inference", infer), ("wafer nearest channels", nearest)]
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


@needs_builds
@pytest.mark.parametrize(("name", "config"), _cases(), ids=[n for n, _ in _cases()])
def test_compiled_and_pure_python_give_the_same_result_bit_for_bit(
    name: str, config: palm.SimConfig
) -> None:
    builds = {name: module for name, (module, _) in BUILDS.items()}
    assert all(module is not None for module in builds.values())
    pure, built = _result(config, PURE), _result(config, builds)  # type: ignore[arg-type]
    assert built == pure, name  # every field, timeline included, to the last bit
    assert pure["events_simulated"] > 0
