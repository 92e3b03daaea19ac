"""Memory footprint of one device: weights, gradients, optimizer states, activations.

Model states per parameter (Rajbhandari et al. 2020, "ZeRO", sec. 3.1): mixed-precision Adam
keeps 16-bit weights (2 B) and gradients (2 B) plus an fp32 master copy, momentum and variance
(12 B) = 16 B per parameter. ZeRO stage 1 shards the optimizer states over the data-parallel
group, stage 2 also the gradients, stage 3 also the weights. Plain SGD keeps no optimizer
state; mixed-precision SGD keeps the fp32 master copy (4 B).

Activations per micro-batch come from the operators (Korthikanti et al. 2022, sec. 4; see
:meth:`palm.workload.ops.TransformerLayer.activation_bytes`). How many micro-batches' worth a
pipeline stage holds at its peak depends on the schedule (sec. 4.2.3 there, and Narayanan et al.
SC21 sec. 2.2): GPipe keeps all ``m`` micro-batches; 1F1B keeps ``min(p - i, m)`` on stage ``i``;
the interleaved schedule with ``v`` chunks per device keeps, on rank ``i``, the
``min(2 (p - i - 1) + (v - 1) p, m v) + 1`` chunks of Megatron-LM's warm-up, i.e.
``(1 + (p - 1)/(p v))`` times 1F1B's on the first stage.

Extra weight buffers (:func:`extra_weight_bytes`): FSDP / ZeRO-3 holds the gathered 16-bit
weights of the layer computing and of those prefetched (``training.zero3_prefetch``; PyTorch
FSDP's ``limit_all_gathers`` keeps at most two in flight, Zhao et al. 2023 sec. 3.3); FP8 training
keeps an FP8 copy (1 B) of every linear layer's weights, cast once per iteration and reused
by every micro-batch (Transformer Engine's weight caching), sharded like the weights.
Context parallelism needs nothing here: each rank's activations are those of ``s / cp``
tokens, which the operators already count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from palm.strategy import ParallelismConfig, TrainingConfig
from palm.units import bytes_per_element
from palm.workload.ops import Op, TransformerLayer

__all__ = [
    "StateBytes",
    "state_bytes_per_param",
    "in_flight_microbatches",
    "MemoryBreakdown",
    "extra_weight_bytes",
    "stage_extra_weight_bytes",
]


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each model state before ZeRO sharding."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def state_bytes_per_param(training: TrainingConfig) -> StateBytes:
    """Weights, gradients and optimizer bytes per parameter for ``training``."""
    if training.mode == "inference":
        return StateBytes(bytes_per_element(training.precision), 0, 0)
    if training.precision == "fp32":
        optimizer = 8.0 if training.optimizer == "adam" else 0.0  # momentum + variance
        return StateBytes(4.0, 4.0, optimizer)
    # mixed precision: low-precision weights (fp8 training keeps bf16 weights and gradients
    # for the non-matmul parts, counted here as 2 B), fp32 master copy in the optimizer
    optimizer = 12.0 if training.optimizer == "adam" else 4.0
    return StateBytes(2.0, 2.0, optimizer)


def extra_weight_bytes(
    *,
    linear_params: float,
    largest_layer_params: float,
    weight_bytes: float,
    zero: int,
    ranks: int,
    fp8: bool,
    gathered_layers: int = 2,
) -> float:
    """FSDP gather buffers (``gathered_layers`` layers unsharded: the one computing and those
    prefetched) plus FP8 weight copies (1 B per linear parameter, sharded over ``ranks``
    under ZeRO-3)."""
    sharded = zero >= 3 and ranks > 1
    gathered = gathered_layers * largest_layer_params * weight_bytes if sharded else 0.0
    copies = linear_params / (ranks if sharded else 1) if fp8 else 0.0
    return gathered + copies


def stage_extra_weight_bytes(
    ops: Sequence[Op],
    *,
    tp: int,
    weight_bytes: float,
    zero: int,
    ranks: int,
    fp8: bool,
    gathered_layers: int = 2,
) -> float:
    """:func:`extra_weight_bytes` of a stage's operators: its transformer layers' parameters
    are the linear ones; the largest operator sets the gather buffers."""
    per_op = [op.params_per_device(tp=tp) for op in ops]
    linear = sum(x for op, x in zip(ops, per_op, strict=True) if isinstance(op, TransformerLayer))
    return extra_weight_bytes(
        linear_params=linear,
        largest_layer_params=max(per_op, default=0.0),
        weight_bytes=weight_bytes,
        zero=zero,
        ranks=ranks,
        fp8=fp8,
        gathered_layers=gathered_layers,
    )


def in_flight_microbatches(
    *, parallelism: ParallelismConfig, stage: int, micro_batches: int, training: bool
) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of one
    micro-batch through all of the stage's layers (all its chunks)."""
    if not training:
        return 1.0
    p, m = parallelism.pp, micro_batches
    if p == 1:
        return 1.0
    if parallelism.schedule == "gpipe":
        return float(m)
    v = parallelism.chunks
    if v == 1:
        return float(min(p - stage, m))
    chunks = min(2 * (p - stage - 1) + (v - 1) * p, m * v) + 1
    return min(chunks / v, float(m))


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one device of a stage needs at its peak."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
        )

    @staticmethod
    def for_stage(
        *,
        params: float,
        states: StateBytes,
        zero: int,
        dp: int,
        activation_bytes_per_microbatch: float,
        in_flight: float,
        extra_weights_bytes: float = 0.0,
    ) -> MemoryBreakdown:
        """ZeRO stage ``zero`` shards optimizer (>= 1), gradients (>= 2), weights (3) by ``dp``;
        ``extra_weights_bytes`` (:func:`extra_weight_bytes`) adds to the weights."""
        return MemoryBreakdown(
            weights_bytes=params * states.weights / (dp if zero >= 3 else 1) + extra_weights_bytes,
            gradients_bytes=params * states.gradients / (dp if zero >= 2 else 1),
            optimizer_bytes=params * states.optimizer / (dp if zero >= 1 else 1),
            activations_bytes=activation_bytes_per_microbatch * in_flight,
        )
