"""SRAM allocation of a stage's operators (paper Algorithm 1, sec. IV-C).

On a tiled accelerator what stays in a core's SRAM decides the DRAM traffic of every pass. For
the operators of one stage, split over its tile group, with per-device sizes ``W`` (weights),
``WSG`` (weights + optimizer states + weight gradients), ``I`` and ``O`` (input and output
activations of one micro-batch) and SRAM capacity ``S`` per device:

* ``activation-stream``: the model state of the stage (``sum WSG`` in training, ``sum W`` in
  inference) stays in SRAM; activations stream: forward ``I + O``, backward ``2 I + O``
  (re-read the stashed input, read the output gradient, write the input gradient), no traffic
  for the update.
* ``weight-stream``: the model state does not fit but the stage's activations (``sum I``) do:
  weights stream in every pass: forward ``W``, backward ``2 W`` (read the weights again, write
  the weight gradient), plus ``W`` for a full recompute; the update reads and writes the
  optimizer states in DRAM.
* neither fits (the penalty strategy): each operator tiles its largest operand through SRAM,
  ``Phi_1 = ceil(W / S) I`` (``weight-stationary``: the weights in SRAM-sized pieces, the
  input re-read for each) or ``Phi_2 = ceil(I / S) W`` (``input-stationary``), whichever is
  smaller: forward ``Phi + O``, backward ``2 Phi + O``; the update as for weight streaming.

Beyond the paper: when the model state *and* the activations fit together, nothing needs to go
to DRAM (``on-chip``, no traffic); Algorithm 1 would still stream activations.

Algorithm 1 as printed tests ``Wt < S`` first and ``WSG <= S`` second, so its second branch can
never be taken (``WSG >= Wt``). We follow the text instead, which names the four cases by what
stays on chip (model state and activations, only model state, only activations, nothing), and
test the model state first. Sizes are per device, after the tensor or operator split.

With ``hardware.sram_model = "blocked"`` (the default) the strategy only decides what stays
resident (model state, activations, everything or nothing); the bytes of each pass are then
those of its matrix products (:mod:`palm.plan.products`, :mod:`palm.cost.blocking`), and the
penalty strategies become ``"blocked"``. ``"algorithm1"`` keeps the bytes above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["OpFootprint", "SramAllocation", "Strategy", "allocate_sram", "STRATEGIES"]

Strategy = Literal[
    "on-chip",
    "activation-stream",
    "weight-stream",
    "weight-stationary",
    "input-stationary",
    "blocked",
]
STRATEGIES: tuple[str, ...] = (
    "on-chip",
    "activation-stream",
    "weight-stream",
    "weight-stationary",
    "input-stationary",
    "blocked",  # nothing resident, every product blocked (hardware.sram_model = "blocked")
)


@dataclass(frozen=True)
class OpFootprint:
    """Per-device bytes of one operator: weights, optimizer states + gradients, and one
    micro-batch's input and output activations."""

    name: str
    weights: float
    states: float
    inputs: float
    outputs: float


@dataclass(frozen=True)
class SramAllocation:
    """The strategy chosen for one operator and the DRAM bytes it moves per device: per
    micro-batch in the forward and backward passes, once per iteration for the update."""

    name: str
    strategy: Strategy
    forward_bytes: float
    backward_bytes: float
    update_bytes: float


def allocate_sram(
    ops: Sequence[OpFootprint],
    *,
    sram_bytes: float,
    training: bool,
    full_recompute: bool = False,
    update_bytes_per_weight_byte: float = 0.0,
) -> list[SramAllocation]:
    """Algorithm 1 over the operators of one stage. ``update_bytes_per_weight_byte`` is the
    optimizer's DRAM traffic per byte of weights when the model state is in DRAM."""
    s = sram_bytes
    weights = sum(op.weights for op in ops)
    state = sum(op.weights + op.states for op in ops) if training else weights
    acts = sum(op.inputs for op in ops)
    largest_output = max((x.outputs for x in ops), default=0.0)
    out: list[SramAllocation] = []
    for op in ops:
        w, i, o = op.weights, op.inputs, op.outputs
        update = w * update_bytes_per_weight_byte if training else 0.0
        if state + acts + largest_output <= s:
            out.append(SramAllocation(op.name, "on-chip", 0.0, 0.0, 0.0))
        elif state <= s:
            out.append(
                SramAllocation(
                    op.name, "activation-stream", i + o, (2 * i + o) if training else 0.0, 0.0
                )
            )
        elif acts <= s:
            backward = (2 * w + (w if full_recompute else 0.0)) if training else 0.0
            out.append(SramAllocation(op.name, "weight-stream", w, backward, update))
        else:
            phi1 = math.ceil(w / s) * i if w > 0 else math.inf
            phi2 = math.ceil(i / s) * w
            strategy: Strategy = "weight-stationary" if phi1 < phi2 else "input-stationary"
            phi = min(phi1, phi2)
            backward = (2 * phi + o) if training else 0.0
            out.append(SramAllocation(op.name, strategy, phi + o, backward, update))
    return out
