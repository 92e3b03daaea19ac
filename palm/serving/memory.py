"""Device memory of a served model: weights, the KV cache of the sequences in flight, and the
workspace of one step; and ``max_batch``, the most sequences that fit.

On pipeline stage ``s`` of a replica holding ``n`` sequences of at most ``L = input_tokens +
output_tokens`` tokens each (the runtime reserves a sequence's whole cache when it admits it:
TensorRT-LLM's default ``GUARANTEED_NO_EVICT`` scheduler; vLLM preempts instead when it runs
out), one device needs

    M_s(n) = W_s + n L kv_s + n t a_s

with ``W_s`` the stage's weights on the device (:mod:`palm.serving.model`), ``kv_s`` the KV bytes
per token of its layers, ``t`` the step tokens per sequence (``1 + input / output`` under
continuous batching, where each step also prefills the prompts of the sequences that replace
finished ones; ``input`` under static batching, whose first step prefills every prompt; at
most ``chunk_tokens / n`` when the runtime caps a step's tokens) and ``a_s`` the activation
bytes one token of a step keeps live at once: the residual stream, the widest intermediate of
a layer (its QKV or MLP input products' output) and, on the last stage, its fp32 logits;
a step holds ``n t`` tokens, at most ``chunk_tokens`` when the runtime caps a step.
A configuration fits when ``M_s <= memory_fraction x capacity`` on every stage; ``max_batch``
is the largest system batch (``dp`` replicas of ``n`` sequences) for which it does: ``M_s``
grows with ``n``, so the largest ``n`` is found by bisection.
"""

from __future__ import annotations

from dataclasses import dataclass

from palm.serving.model import (
    ServedModel,
    embedding_params,
    kv_bytes_per_token_layer,
    layer_weight_params,
    logits_params,
)
from palm.serving.spec import ServingConfig
from palm.workload.moe import MoELayer

__all__ = ["StageMemory", "stage_memory", "max_sequences", "step_tokens", "stage_bytes"]


@dataclass(frozen=True)
class StageMemory:
    """One device of one stage: its weights (bytes), KV bytes per cached token, and step
    workspace bytes per step token."""

    weights_bytes: float
    kv_bytes_per_token: float
    workspace_bytes_per_token: float

    def total(self, *, sequences: int, max_len: int, step_tokens: float) -> float:
        """Bytes of ``sequences`` cached sequences of ``max_len`` tokens and one step of
        ``step_tokens`` tokens."""
        return (
            self.weights_bytes
            + sequences * max_len * self.kv_bytes_per_token
            + step_tokens * self.workspace_bytes_per_token
        )


def stage_memory(
    model: ServedModel,
    stage: int,
    *,
    attention_weight_bytes: float,
    mlp_weight_bytes: float,
    kv_bytes: float,
    act_bytes: float,
) -> StageMemory:
    """Memory of one device of pipeline stage ``stage`` (module docstring)."""
    tp = model.tp
    weights = 0.0
    kv = 0.0
    widest = 0.0
    for i in model.stages[stage]:
        op = model.layers[i]
        attn, mlp, other = layer_weight_params(op, tp=tp)
        weights += attn * attention_weight_bytes + mlp * mlp_weight_bytes + other * 2.0
        kv += kv_bytes_per_token_layer(op, kv_bytes=kv_bytes, tp=tp)
        mats = 1 if op.mlp == "gelu" else 2
        width = op.ffn_hidden + (
            op.shared_experts * op.moe_ffn_hidden if isinstance(op, MoELayer) else 0
        )
        if isinstance(op, MoELayer) and op.experts:
            width = max(width, op.top_k * op.moe_ffn_hidden)
        widest = max(widest, (op.q_dim + 2 * op.kv_dim) / tp, mats * width / tp)
    hidden = model.embedding.hidden
    last = stage == len(model.stages) - 1
    if stage == 0:
        weights += embedding_params(model) * 2.0
    if last and (len(model.stages) > 1 or not model.logits.tied):
        weights += logits_params(model) * 2.0
    per_token = act_bytes * (4 * hidden + widest)
    if last:
        per_token += 4.0 * model.logits.vocab / tp
    return StageMemory(
        weights_bytes=weights, kv_bytes_per_token=kv, workspace_bytes_per_token=per_token
    )


def step_tokens(serving: ServingConfig, sequences: int) -> float:
    """Tokens of the largest step of ``sequences`` sequences (module docstring): ``t`` per
    sequence, at most ``chunk_tokens`` when set."""
    i, o = serving.input_tokens, serving.output_tokens
    per = float(i) if serving.batching == "static" else 1.0 + i / o
    tokens = sequences * per
    if serving.chunk_tokens > 0:
        tokens = min(tokens, float(max(serving.chunk_tokens, sequences)))
    return tokens


def stage_bytes(stages: list[StageMemory], *, serving: ServingConfig, sequences: int) -> float:
    """The fullest stage's bytes with ``sequences`` sequences in flight on the replica."""
    max_len = serving.input_tokens + serving.output_tokens
    tokens = step_tokens(serving, sequences)
    return max(st.total(sequences=sequences, max_len=max_len, step_tokens=tokens) for st in stages)


def max_sequences(stages: list[StageMemory], *, serving: ServingConfig, usable_bytes: float) -> int:
    """The most sequences one replica fits on every stage: the largest ``n`` with
    :func:`stage_bytes` at most ``usable_bytes`` (memory grows with ``n``: bisection)."""
    if stage_bytes(stages, serving=serving, sequences=0) > usable_bytes:
        return 0
    lo, hi = 0, 1
    while stage_bytes(stages, serving=serving, sequences=hi) <= usable_bytes:
        lo, hi = hi, hi * 2
        if hi > 2**40:
            return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if stage_bytes(stages, serving=serving, sequences=mid) <= usable_bytes:
            lo = mid
        else:
            hi = mid
    return lo
