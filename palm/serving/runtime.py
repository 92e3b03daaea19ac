"""The serving runtime's fixed costs (:class:`palm.serving.step.RuntimeCosts`): the time each
kernel launch adds and the time each forward step adds, beyond what its kernels' work and
traffic take. Fitted on the visible inference rows by ``benchmarks/calibrate_serving.py``
(docs/validation.md, "LLM inference"); the values and their fit live in
``palm/data/serving_constants.json``."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from palm.hardware.spec import GpuClusterHardware
from palm.serving.step import RuntimeCosts
from palm.strategy import SimConfig

__all__ = ["runtime_costs", "serving_constants"]


@functools.cache
def serving_constants() -> dict[str, Any]:
    """The fitted constants as stored (``palm/data/serving_constants.json``)."""
    text = resources.files("palm").joinpath("data/serving_constants.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def runtime_costs(config: SimConfig) -> RuntimeCosts:
    """The runtime costs of ``config``'s device kind (``gpu`` or ``mesh``)."""
    kind = "gpu" if isinstance(config.hardware, GpuClusterHardware) else "mesh"
    values = serving_constants()["runtime"][kind]
    return RuntimeCosts(
        kernel_s=float(values["kernel_us"]) * 1e-6, step_s=float(values["step_us"]) * 1e-6
    )
