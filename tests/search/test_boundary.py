"""The tuner (``search``, ``spaces``) reaches the simulator through its public modules only:
a trial through ``palm.api`` (``evaluate``, ``batch``), configurations through
``palm.config`` and ``palm.strategy``, the rules of a valid plan through ``palm.feasibility``.
No tuner module imports the simulator's internals (its network, plan, cost or engines), so
that those can change without the tuner noticing; the few other simulator modules the tuner
still imports are listed below, each with what it is for, and a new one fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: the simulator's public modules
PUBLIC = {
    "palm",
    "palm.api",
    "palm.config",
    "palm.errors",
    "palm.feasibility",
    "palm.result",
    "palm.strategy",
}
#: other simulator modules a tuner module imports, and why (a shrinking list)
ALSO = {
    "palm.cli": "the simulator's commands, registered on palm-tune",
    "palm.engines.event.accel": "palm-tune --version names the compiled builds",
    "palm.inputs": "reading a study file with the simulator's one-line input errors",
    "palm.plots": "the best trial's Gantt chart and heat map as artifacts",
    "palm.trace": "the best trial's Chrome trace as an artifact",
    "palm.serving.plot": "a served trial's artifacts",
    "palm.serving.simulate": "a served trial's artifacts",
    "palm.serving.timeline": "a served trial's artifacts",
    "palm.serving.spec": "the serving space's weight and KV-cache formats",
    "palm.hardware.spec": "whether the base machine is a mesh (SpaceContext)",
    "palm.workload.model": "the base model's workload (SpaceContext)",
    "palm.workload.ops": "the operator kinds an operator-split part splits",
}
#: never imported by the tuner
INTERNAL = ("palm.network", "palm.plan", "palm.cost", "palm.engines.event.fair")


def _imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for package in ("search", "spaces"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                for name in names:
                    if name == "palm" or name.startswith("palm."):
                        found.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_the_tuner_imports_no_simulator_internals() -> None:
    imports = _imports()
    internal = {m: f for m, f in imports.items() if m.startswith(INTERNAL)}
    assert not internal, f"tuner modules import simulator internals: {internal}"
    unlisted = {m: f for m, f in imports.items() if m not in PUBLIC and m not in ALSO}
    assert not unlisted, f"use palm.api (or list the module in ALSO, with why): {unlisted}"


def test_the_objective_and_the_screening_go_through_evaluate() -> None:
    for name in ("objective.py", "screen.py"):
        text = (ROOT / "search" / name).read_text(encoding="utf-8")
        assert "evaluate(" in text, name
        assert "shared_geometry" not in text and "plan_context" not in text, name
