"""Every divisibility and fit rule of a plan, in one place: tensor (``tp``), context (``cp``),
expert (``ep``, ``etp``) and pipeline (``pp``) parallelism against the model's heads, widths,
layers and sequence, and the data-parallel degree and micro-batch against the batch.

Each rule is a function of plain numbers (or a :class:`~palm.workload.model.ModelConfig`) that
returns ``None`` when the value is allowed, else what is allowed, in the words of a
:class:`~palm.errors.ConfigError`'s ``allowed``. Configuration validation
(:func:`palm.config.validate`) raises with it; a search space (``spaces``) keeps the values
for which it returns ``None``, so that the two can never disagree.

Sources: Megatron-LM's tensor-parallel split of attention heads and the MLP (Shoeybi et al.
2019, sec. 3; key/value heads of grouped-query attention replicated or split, Ainslie et al.
2023); Megatron-Core's expert layout (``parallel_state.initialize_model_parallel``: the
``tp x cp x dp`` devices of a stage regrouped as ``etp x ep x edp``); context parallelism's
load-balanced causal chunks (``2 cp`` chunks of the sequence, Megatron-Core's
``get_batch_on_this_cp_rank``); micro-batches per pipeline ``global_batch / (dp x
micro_batch)`` (Narayanan et al. 2021, sec. 2.2).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from palm.workload.model import ModelConfig

__all__ = [
    "divisors",
    "divisors_or_note",
    "tensor_parallel",
    "pipeline_depth",
    "context_parallel",
    "expert_parallel",
    "expert_tensor_parallel",
    "expert_layout",
    "batch_split",
    "interleave_batches",
]


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, in O(sqrt n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def divisors_or_note(n: int) -> list[int] | str:
    """:func:`divisors` of ``n``, or a placeholder for numbers too big to factor here (for
    error messages)."""
    return "its divisors" if n > 10**12 else divisors(n)


def tensor_parallel(model: ModelConfig, tp: int) -> str | None:
    """A transformer's ``tp`` divides its heads and MLP width, and divides or is a multiple of
    its key/value heads (Megatron-LM's split); any ``tp`` for other models (their operators
    are checked one by one)."""
    if not model.is_transformer:
        return None
    if model.heads % tp:
        return f"a divisor of model.heads = {model.heads}: {divisors_or_note(model.heads)}"
    if model.ffn_hidden % tp:
        return f"a divisor of model.ffn_hidden = {model.ffn_hidden}"
    kv = model.kv_heads or model.heads
    if kv % tp and tp % kv:
        return f"a divisor or multiple of kv_heads = {kv}"
    return None


def pipeline_depth(
    *, pp: int, blocks: int, chunks: int = 1, transformer: bool = True, uneven: bool = False
) -> str | None:
    """``pp x chunks`` pipeline chunks of at least one block (layer, or operator of a model
    without layers) each; uneven first and last stages (``first_stage_layers``,
    ``last_stage_layers``) may hold the embedding and the head alone."""
    extra = 2 if uneven and transformer else 0
    if pp * chunks <= blocks + extra:
        return None
    what = "layers" if transformer else "operators"
    return f"at most {blocks // chunks} stages: pp x interleave <= {blocks} {what}"


def context_parallel(*, cp: int, seq_len: int, transformer: bool, mesh: bool) -> str | None:
    """``cp`` cuts each sequence into ``2 cp`` equal chunks (load-balanced causal attention),
    on a GPU cluster and a model with attention."""
    if cp == 1:
        return None
    if not transformer:
        return "1 for a model without attention"
    if seq_len % (2 * cp):
        return (
            f"a value with 2 x cp dividing model.seq_len = {seq_len} (load-balanced causal chunks)"
        )
    if mesh:
        return "1 on a mesh2d (a gpu-cluster feature)"
    return None


def expert_parallel(*, ep: int, experts: int) -> str | None:
    """``ep`` divides the routed experts of a mixture-of-experts model."""
    if experts % ep:
        return f"a divisor of model.experts = {experts}: {divisors_or_note(experts)}"
    return None


def expert_tensor_parallel(*, etp: int, moe_ffn_hidden: int) -> str | None:
    """``etp`` divides the experts' MLP width."""
    if moe_ffn_hidden % etp:
        return f"a divisor of model.moe_ffn_hidden = {moe_ffn_hidden} (0 means etp = tp)"
    return None


def expert_layout(*, ep: int, etp: int, stage_devices: int) -> str | None:
    """``ep x etp`` divides the ``tp x cp x dp`` devices of a stage (Megatron-Core: expert
    data parallelism = ``tp x cp x dp / (ep x etp)``)."""
    if stage_devices % (ep * etp):
        return (
            f"a divisor of tp x cp x dp = {stage_devices} "
            "(expert data parallelism = tp x cp x dp / (ep x etp))"
        )
    return None


def batch_split(*, global_batch: int, dp: int, micro_batch: int = 1) -> str | None:
    """Each of the ``dp`` replicas takes ``global_batch / dp`` samples in whole micro-batches
    of ``micro_batch``."""
    if global_batch % (dp * micro_batch) == 0:
        return None
    if global_batch % micro_batch:
        hint = f" (training.micro_batch = {micro_batch} does not divide it)"
    else:
        per_replica = global_batch // micro_batch
        hint = (
            f" (parallelism.dp = {dp} does not divide global_batch / micro_batch = "
            f"{per_replica}; a dp among {divisors_or_note(per_replica)} does)"
        )
    return (
        f"a multiple of parallelism.dp x training.micro_batch = {dp} x {micro_batch}"
        f" = {dp * micro_batch}{hint}"
    )


def interleave_batches(*, micro_batches: int, pp: int, chunks: int) -> str | None:
    """Under the interleaved schedule (``chunks > 1``) the micro-batches come in groups of
    ``pp`` (Narayanan et al. 2021, sec. 2.2)."""
    if chunks > 1 and micro_batches % pp:
        return (
            f"a value giving a number of micro-batches ({micro_batches} now) "
            f"divisible by pp = {pp} under the interleaved schedule"
        )
    return None
