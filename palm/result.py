"""What comes out: the typed result of one simulation and its JSON form (README,
"Simulate a configuration").

``model_tflops_per_device`` counts one forward and one backward pass of the matrix multiplies
(no recompute); ``hardware_tflops_per_device`` includes the recompute that actually ran.
A field an engine does not compute is ``None`` (JSON ``null``), never invented.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Result",
    "StageResult",
    "LinkResult",
    "MemoryResult",
    "OperatorResult",
    "ServingResult",
    "ServingStep",
]


@dataclass(frozen=True)
class StageResult:
    """One pipeline rank over one iteration (seconds; per-micro-batch times for one pass).
    ``sent_bytes`` and ``received_bytes`` are the activations and gradients its devices handed
    to and took from neighbouring stages, summed over the stage's devices."""

    stage: int
    layers: int
    forward_s: float
    backward_s: float
    busy_s: float
    idle_s: float
    bubble_s: float
    busy_fraction: float
    memory_bytes: float
    dp_allreduce_s: float
    dp_exposed_s: float
    optimizer_s: float
    sent_bytes: float
    received_bytes: float


@dataclass(frozen=True)
class LinkResult:
    """One link (or aggregated link group) of the network."""

    name: str
    busy_fraction: float
    bytes: float


@dataclass(frozen=True)
class OperatorResult:
    """The SRAM strategy chosen for one operator on one stage (paper Algorithm 1) and the DRAM
    bytes it moves per device: per micro-batch forward and backward, per iteration update."""

    stage: int
    name: str
    strategy: str
    dram_forward_bytes: float
    dram_backward_bytes: float
    dram_update_bytes: float


@dataclass(frozen=True)
class MemoryResult:
    """Peak per-device memory by kind (the stage with the largest total)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float


@dataclass(frozen=True)
class ServingStep:
    """One serving step on the busiest device, summed over the pipeline's stages (seconds):
    products, attention, element-wise traffic, collectives and the runtime's fixed costs."""

    time_s: float
    gemm_s: float
    attention_s: float
    vector_s: float
    comm_s: float
    overhead_s: float


@dataclass(frozen=True)
class ServingResult:
    """What a served model does (``training.mode = "serve"``; :mod:`palm.serving`): time to
    first token and per output token, output tokens per second of the whole system and of one
    user, the KV cache one device holds, the largest batch that fits, the sequences in flight,
    and the prefill and decode steps. ``ttft_s`` is ``None`` when requests arrive faster than
    the server can answer them (``saturated``)."""

    ttft_s: float | None
    tpot_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_user: float
    kv_cache_bytes_per_device: float
    kv_cache_bytes_per_token: float
    max_batch: int
    sequences_in_flight: int
    requests_per_s: float
    saturated: bool
    prefill: ServingStep
    decode: ServingStep


@dataclass(frozen=True)
class Result:
    throughput_samples_per_s: float
    iteration_time_s: float
    model_tflops_per_device: float
    hardware_tflops_per_device: float
    mfu: float
    bubble_fraction: float
    peak_memory_bytes: float
    memory_capacity_bytes: float
    fits_memory: bool
    memory_overflow_bytes: float
    engine: str
    events_simulated: int | None
    sim_wall_s: float | None
    devices: int
    micro_batches: int
    sample_unit: str
    tokens_per_s: float | None
    memory: MemoryResult
    stages: tuple[StageResult, ...]
    links: tuple[LinkResult, ...] | None = None
    dram_channel_utilisation: tuple[float, ...] | None = None
    operators: tuple[OperatorResult, ...] | None = None
    notes: tuple[str, ...] = field(default=())
    serving: ServingResult | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON; key order is fixed (determinism). A serving result's fields
        are top-level keys (docs/serving.md: ``ttft_s``, ``tpot_s``, ...)."""
        out = dataclasses.asdict(self)
        serving = out.pop("serving")
        if serving is not None:
            out.update(serving)
        out["stages"] = [dataclasses.asdict(s) for s in self.stages]
        out["links"] = None if self.links is None else [dataclasses.asdict(x) for x in self.links]
        out["notes"] = list(self.notes)
        if self.dram_channel_utilisation is not None:
            out["dram_channel_utilisation"] = list(self.dram_channel_utilisation)
        if self.operators is not None:
            out["operators"] = [dataclasses.asdict(o) for o in self.operators]
        return out

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def __repr__(self) -> str:
        """One line: engine, throughput, iteration, MFU, bubble, memory, size
        (:mod:`palm.result_view`); every field stays an attribute."""
        from palm.result_view import short_repr

        return short_repr(self)

    def _repr_html_(self) -> str:
        from palm.result_view import html_table

        return html_table(self)

    def to_dataframe(self, table: str = "summary") -> Any:
        """A pandas DataFrame: ``summary`` (one row of the scalar fields), ``stages``,
        ``links`` or ``operators`` (one row each); see :func:`palm.result_view.dataframe`."""
        from palm.result_view import dataframe

        return dataframe(self, table)
