"""The serving runtime's fixed costs (:class:`palm.serving.step.RuntimeCosts`): the time each
kernel launch adds and the time each forward step adds, beyond what its kernels' work and
traffic take. Fitted on the visible inference rows by ``benchmarks/calibrate_serving.py``
(docs/validation.md, "LLM inference"); the values and their fit live in
``palm/data/serving_constants.json``."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from importlib import resources
from typing import Any

from palm.hardware.spec import GpuClusterHardware
from palm.serving.step import RuntimeCosts
from palm.strategy import SimConfig

__all__ = ["runtime_costs", "serving_constants", "constants_override"]


@functools.cache
def serving_constants() -> dict[str, Any]:
    """The fitted constants as stored (``palm/data/serving_constants.json``)."""
    text = resources.files("palm").joinpath("data/serving_constants.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


_OVERRIDE: list[dict[str, Any]] = []


@contextlib.contextmanager
def constants_override(runtime: dict[str, dict[str, float]]) -> Iterator[None]:
    """Price with ``runtime`` (the ``runtime`` table's shape) instead of the stored constants
    inside the block (for the calibration script)."""
    _OVERRIDE.append(runtime)
    try:
        yield
    finally:
        _OVERRIDE.pop()


def runtime_costs(config: SimConfig) -> RuntimeCosts:
    """The runtime costs of ``config``'s device kind (``gpu`` or ``mesh``)."""
    kind = "gpu" if isinstance(config.hardware, GpuClusterHardware) else "mesh"
    table = _OVERRIDE[-1] if _OVERRIDE else serving_constants()["runtime"]
    values = table[kind]
    return RuntimeCosts(
        kernel_s=float(values["kernel_us"]) * 1e-6,
        step_s=float(values["step_us"]) * 1e-6,
        sequence_s=float(values.get("sequence_us", 0.0)) * 1e-6,
        grouped_efficiency=float(values.get("grouped_efficiency", 0.0)),
        attention_efficiency=float(values.get("attention_efficiency", 0.0)),
        matmul_efficiency=float(values.get("matmul_efficiency", 0.0)),
    )
