"""A search space: parts applied in order to a draft of the base configuration."""

from __future__ import annotations

import copy
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from palm.config import config_to_dict
from palm.errors import ConfigError
from palm.strategy import (
    INTER_GROUP_STRATEGIES,
    LAYOUTS,
    RECOMPUTE_MODES,
    SCHEDULES,
    TP_GROUPS,
    TrainingConfig,
)
from spaces.context import SpaceContext
from spaces.parts import (
    Choice,
    ContextParallel,
    Draft,
    ExpertParallelism,
    Fsdp,
    HardwareKnob,
    Infeasible,
    InterGroup,
    Layout,
    MicroBatch,
    OpSplit,
    Parallelism,
    Schedule,
    SpacePart,
)

__all__ = ["Space", "space_from_table", "SPACE_KEYS", "Infeasible"]

ATTENTION_KERNELS = ("auto", "flash", "unfused")  # palm ModelConfig.attention
#: compute precisions a space may search (palm TrainingConfig.precision; the hardware must
#: have a peak rate for each, checked by search.study_file.check_space)
#: every compute precision a configuration takes (``training.precision``)
PRECISIONS = typing.get_args(typing.get_type_hints(TrainingConfig)["precision"])

SPACE_KEYS = (
    "parallelism",
    "cp",
    "attention",
    "splits",
    "micro_batch",
    "schedule",
    "interleave",
    "recompute",
    "zero",
    "fsdp",
    "precision",
    "sequence_parallel",
    "tp_group",
    "layout",
    "inter_group",
    "adapters",
    "ep",
    "etp",
    "hardware",
    "batch",
    "precision",
    "chunk_tokens",
    "weights",
    "kv_cache",
)


@dataclass(frozen=True)
class Space:
    """Parts applied in order; :meth:`sample` turns a trial into configuration tables."""

    parts: tuple[SpacePart, ...]

    def sample(self, trial: optuna.Trial, ctx: SpaceContext) -> Draft:
        """The draft of ``trial``'s draw; :class:`~spaces.parts.Infeasible` when its choices
        contradict each other (the objective reports that to the sampler as a constraint)."""
        base = ctx.memo("base tables", lambda: config_to_dict(ctx.base))
        # parts assign fields of a section (never mutate a nested value in place), so a copy
        # of each section is enough
        draft: Draft = {
            k: dict(v) if isinstance(v, dict) else copy.deepcopy(v) for k, v in base.items()
        }
        for part in self.parts:
            part.apply(trial, draft, ctx)
        return draft


def _choices(
    table: Mapping[str, Any],
    key: str,
    allowed: tuple[Any, ...] | None = None,
    kind: type[int] | None = None,
) -> tuple[Any, ...]:
    value = table[key]
    where = f"space.{key}"
    if not isinstance(value, list) or not value:
        raise ConfigError(where, value, "a non-empty array of choices")
    for v in value:
        if allowed is not None and v not in allowed:
            raise ConfigError(where, v, f"choices among {', '.join(map(str, allowed))}")
        if kind is int and (
            isinstance(v, bool)
            or not isinstance(v, int)
            or v < (0 if key in ("zero", "chunk_tokens") else 1)
        ):
            raise ConfigError(where, v, "positive integer choices")
    return tuple(value)


def space_from_table(table: Mapping[str, Any], ctx: SpaceContext) -> Space:
    """Build a :class:`Space` from a study file's ``[space]`` table."""
    for key in table:
        if key not in SPACE_KEYS:
            raise ConfigError(
                f"space.{key}", table[key], f"a space part among {', '.join(SPACE_KEYS)}"
            )
    par = table.get("parallelism", False)
    parts: list[SpacePart] = [] if par is False else [_parallelism(par)]
    if "cp" in table:
        parts.append(ContextParallel(_choices(table, "cp", kind=int)))
    elif par is not False and ctx.base.parallelism.cp > 1:
        parts.append(ContextParallel((ctx.base.parallelism.cp, 1)))  # keep the base's if valid
    if "attention" in table:
        parts.append(Choice("model", "attention", _choices(table, "attention", ATTENTION_KERNELS)))
    if "splits" in table:
        for field in _choices(table, "splits", ("linear_split", "conv_split", "pool_split")):
            parts.append(OpSplit(field))
    if "micro_batch" in table:
        parts.append(MicroBatch(_choices(table, "micro_batch", kind=int)))
    elif par is not False:
        parts.append(MicroBatch(tuple(dict.fromkeys((ctx.base.training.micro_batch, 1)))))
    if "schedule" in table:
        inter = _choices(table, "interleave", kind=int) if "interleave" in table else (2, 3, 4)
        parts.append(Schedule(_choices(table, "schedule", SCHEDULES), inter))
    elif par is not False:
        parts.append(
            Schedule(
                (
                    ctx.base.parallelism.schedule
                    if ctx.base.parallelism.schedule != "interleaved-1f1b"
                    else "1f1b",
                )
            )
        )
    if "recompute" in table:
        parts.append(Choice("training", "recompute", _choices(table, "recompute", RECOMPUTE_MODES)))
    if "zero" in table:
        parts.append(Choice("training", "zero", _choices(table, "zero", (0, 1, 2, 3))))
    if "fsdp" in table:
        parts.append(Fsdp(_choices(table, "fsdp", (True, False))))
    if "precision" in table:
        parts.append(Choice("training", "precision", _choices(table, "precision", PRECISIONS)))
    if "sequence_parallel" in table:
        parts.append(
            Choice(
                "parallelism",
                "sequence_parallel",
                _choices(table, "sequence_parallel", (True, False)),
            )
        )
    if "ep" in table or "etp" in table or (par is not False and ctx.base.model.is_moe):
        parts.append(_experts(table, ctx))
    if "tp_group" in table:
        parts.append(Choice("placement", "tp_group", _choices(table, "tp_group", TP_GROUPS)))
    if "layout" in table:
        parts.append(Layout(_choices(table, "layout", LAYOUTS)))
    elif par is not False and ctx.base.placement.layout == "explicit":
        raise ConfigError(
            "space.layout", None, "a layout choice: searching parallelism changes the stage tiles"
        )
    if "inter_group" in table or "adapters" in table:
        strategies = (
            _choices(table, "inter_group", INTER_GROUP_STRATEGIES)
            if "inter_group" in table
            else (ctx.base.communication.inter_group,)
        )
        adapters = table.get("adapters", False)
        if not isinstance(adapters, bool):
            raise ConfigError("space.adapters", adapters, "true or false")
        max_tp = max(_tp_candidates(parts, ctx))
        parts.append(InterGroup(strategies, adapters, max_tp=max_tp))
    parts += _serving_parts(table)
    hardware = table.get("hardware", {})
    if not isinstance(hardware, Mapping):
        raise ConfigError("space.hardware", hardware, "a table of hardware fields")
    for field, spec in hardware.items():
        parts.append(_knob(field, spec, ctx))
    return Space(tuple(parts))


def _parallelism(par: Any) -> Parallelism:
    """The part of ``space.parallelism``: ``true`` (every valid degree) or a table restricting
    ``tp`` and ``pp`` to non-empty arrays of degrees."""
    if par is True:
        return Parallelism()
    if not isinstance(par, Mapping):
        raise ConfigError("space.parallelism", par, "true, false or a table with tp / pp")
    for k, v in par.items():
        if (
            k not in ("tp", "pp")
            or not isinstance(v, list)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)
        ):
            raise ConfigError(f"space.parallelism.{k}", v, "tp or pp with an array of degrees")
        if not v:  # as every other choice list: an empty one is refused, not read as "all"
            raise ConfigError(
                f"space.parallelism.{k}",
                v,
                f"a non-empty array of degrees (leave {k} out to search every valid one)",
            )
    return Parallelism(tp=tuple(par.get("tp", ())), pp=tuple(par.get("pp", ())))


def _tp_candidates(parts: list[SpacePart], ctx: SpaceContext) -> list[int]:
    par = next((p for p in parts if isinstance(p, Parallelism)), None)
    return par.candidates(ctx)[0] if par is not None else [ctx.base.parallelism.tp]


def _experts(table: Mapping[str, Any], ctx: SpaceContext) -> ExpertParallelism:
    """``ep`` / ``etp`` choices; a MoE model whose parallelism is searched keeps the base
    plan's degrees where they stay valid."""
    if not ctx.base.model.is_moe:
        key = "ep" if "ep" in table else "etp"
        raise ConfigError(f"space.{key}", table[key], "no choices: the model has no experts")
    base = ctx.base.parallelism
    ep = _choices(table, "ep", kind=int) if "ep" in table else (base.ep,)
    etp = _choices(table, "etp", kind=int) if "etp" in table else (base.expert_tp,)
    return ExpertParallelism(ep=ep, etp=etp)


def _knob(field: str, spec: Any, ctx: SpaceContext) -> HardwareKnob:
    where = f"space.hardware.{field}"
    current = getattr(ctx.base.hardware, field, None)
    if isinstance(current, bool) or not isinstance(current, (int, float)):
        raise ConfigError(
            where,
            spec,
            f"a numeric field of the {ctx.base.hardware.topology} "
            "hardware (e.g. sram_per_core_mib, inter_tile_link_gbps)",
        )
    if isinstance(spec, Mapping) and set(spec) == {"values"}:
        values = spec["values"]
        ok = (
            isinstance(values, list)
            and values
            and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in values
            )
        )
        if not ok or len(set(values)) != len(values):
            raise ConfigError(where, values, "a non-empty array of distinct positive values")
        if isinstance(current, int) and not all(float(x).is_integer() for x in values):
            raise ConfigError(where, values, "integer values (the field is an integer)")
        kind = int if isinstance(current, int) else float
        grid = tuple(sorted(kind(x) for x in values))
        return HardwareKnob(field, grid[0], grid[-1], integer=isinstance(current, int), values=grid)
    if not isinstance(spec, Mapping) or "low" not in spec or "high" not in spec:
        raise ConfigError(
            where, spec, "a table with low and high (and optionally log), or with values"
        )
    low, high, log = spec["low"], spec["high"], spec.get("log", False)
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (low, high))
    if not ok or not 0 < low < high or not isinstance(log, bool):
        raise ConfigError(where, spec, "0 < low < high, log = true or false")
    return HardwareKnob(field, float(low), float(high), log, integer=isinstance(current, int))


def _serving_parts(table: Mapping[str, Any]) -> list[SpacePart]:
    """Choices of a served configuration (``training.mode = "serve"``): the batch, the step cap
    and the weights' and KV cache's formats (the compute precision is the training part's)."""
    from palm.serving.spec import KV_FORMATS, WEIGHT_FORMATS

    parts: list[SpacePart] = []
    if "batch" in table:
        parts.append(Choice("serving", "batch", _choices(table, "batch", kind=int)))
    if "chunk_tokens" in table:
        parts.append(Choice("serving", "chunk_tokens", _choices(table, "chunk_tokens", kind=int)))
    if "weights" in table:
        parts.append(Choice("serving", "weights", _choices(table, "weights", WEIGHT_FORMATS)))
    if "kv_cache" in table:
        parts.append(Choice("serving", "kv_cache", _choices(table, "kv_cache", KV_FORMATS)))
    return parts
