"""A search space checked before its first trial: a space that cannot give a valid trial,
or lists choices no draw can take, is refused with the one-line errors of a simulation
configuration (:class:`palm.errors.ConfigError`). The rules a draw must obey are
:mod:`palm.feasibility`'s, through :class:`spaces.context.SpaceContext`, the same the
configuration's validation applies."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from palm.config import config_to_dict, parse_config
from palm.errors import ConfigError, ConfigWarning
from palm.feasibility import divisors, expert_tensor_parallel
from spaces.context import SpaceContext
from spaces.parts import (
    Choice,
    ContextParallel,
    ExpertParallelism,
    Fsdp,
    HardwareKnob,
    MicroBatch,
    Parallelism,
    Schedule,
)
from spaces.space import Space

__all__ = ["check_space", "check_sampler"]


def check_space(space: Space, ctx: SpaceContext, *, given: tuple[str, ...] = ()) -> None:
    """Refuse a space that cannot give a valid trial, with the one-line errors of a simulation
    config: no part at all, parallelism lists that no degree satisfies, choices (micro-batch
    sizes, context- and expert-parallel degrees, interleaving) that no draw of the other parts
    admits and that a trial would silently replace, a schedule list that some draw leaves
    empty, repeated choices, and hardware knobs whose bounds are not valid values of their
    field. ``given``: the keys of the ``[space]`` table (defaults are not refused)."""
    if not space.parts:
        raise ConfigError(
            "space",
            {},
            "at least one part to search (an empty space has one configuration: "
            "run it with palm-tune simulate)",
        )
    _check_distinct(space)
    schedules = next((p.choices for p in space.parts if isinstance(p, Schedule)), ())
    if "interleave" in given and "interleaved-1f1b" not in schedules:
        raise ConfigError(
            "space.interleave",
            "...",
            'choices only with space.schedule = [..., "interleaved-1f1b"] (it is ignored now)',
        )
    draws = _draws(space, ctx)
    for part in space.parts:
        if isinstance(part, MicroBatch):
            _check_micro_batch(part, {d.dp for d in draws}, ctx.global_batch)
        elif isinstance(part, HardwareKnob):
            _check_knob(part, ctx)
        elif isinstance(part, ContextParallel):
            _check_cp(part, draws, ctx)
        elif isinstance(part, Schedule):
            _check_schedule(part, draws, ctx, interleave_given="interleave" in given)
        elif isinstance(part, ExpertParallelism):
            _check_experts(part, draws, ctx)
        elif isinstance(part, Choice) and part.field == "precision":
            _check_precision(part, ctx)
        elif isinstance(part, Fsdp):
            _check_fsdp(space, ctx)


def check_sampler(space: Space, sampler: str) -> None:
    """The brute-force sampler enumerates: every knob must be discrete."""
    if sampler != "bruteforce":
        return
    for part in space.parts:
        if isinstance(part, HardwareKnob) and not part.integer:
            raise ConfigError(
                "study.sampler",
                sampler,
                f"a sampler for continuous knobs (tpe, random, cmaes, nsga2, gp): "
                f"space.hardware.{part.field} is continuous",
            )


def _check_distinct(space: Space) -> None:
    """A choice listed twice is drawn twice as often (and enumerated twice by bruteforce)."""
    named = {
        MicroBatch: ("micro_batch", "choices"),
        ContextParallel: ("cp", "choices"),
        Schedule: ("schedule", "choices"),
        Parallelism: ("parallelism", "tp"),
    }
    for part in space.parts:
        fields: list[tuple[str, tuple[Any, ...]]] = []
        if isinstance(part, Choice):
            fields.append((part.field, part.choices))
        elif isinstance(part, Parallelism):
            fields += [("parallelism.tp", part.tp), ("parallelism.pp", part.pp)]
        elif isinstance(part, Schedule):
            fields += [("schedule", part.choices), ("interleave", part.interleave)]
        elif isinstance(part, ExpertParallelism):
            fields += [("ep", part.ep), ("etp", part.etp)]
        elif type(part) in named:
            key, attr = named[type(part)]
            fields.append((key, getattr(part, attr)))
        for key, values in fields:
            if len(set(values)) != len(values):
                raise ConfigError(f"space.{key}", list(values), "distinct choices")


@dataclass(frozen=True)
class _Draw:
    """One combination of the degrees that the parallelism, context-parallel and micro-batch
    parts can draw (mirrors :mod:`spaces.parts`)."""

    tp: int
    pp: int
    cp: int
    dp: int
    micro_batch: int


def _pairs(space: Space, ctx: SpaceContext) -> set[tuple[int, int]]:
    """The (tp, pp) pairs the space's parallelism part can draw (the base plan's when
    parallelism is not searched); refuses tp / pp lists that nothing satisfies."""
    part = next((p for p in space.parts if isinstance(p, Parallelism)), None)
    base = ctx.base.parallelism
    if part is None:
        return {(base.tp, base.pp)}
    n = ctx.devices
    valid_tp = [t for t in divisors(n) if ctx.tp_allowed(t)]
    for t in part.tp:
        if t not in valid_tp:
            raise ConfigError(
                "space.parallelism.tp", t, f"a degree the model and {n} devices allow: {valid_tp}"
            )
    pairs = {
        (t, p) for t in (part.tp or valid_tp) for p in divisors(n // t) if ctx.pp_allowed(t, p)
    }
    valid_pp = sorted({p for _, p in pairs})
    if not pairs:
        raise ConfigError(
            "space.parallelism",
            {"tp": list(part.tp)},
            f"degrees leaving a pipeline depth <= {ctx.blocks} whose data-parallel degree "
            f"divides global_batch = {ctx.global_batch}",
        )
    for p in part.pp:
        if p not in valid_pp:
            raise ConfigError(
                "space.parallelism.pp",
                p,
                f"a pipeline depth that fits the layers, devices and batch: {valid_pp}",
            )
    return {(t, p) for t, p in pairs if not part.pp or p in part.pp}


def _cp_valid(c: int, ranks: int, ctx: SpaceContext) -> bool:
    """Whether ContextParallel may draw ``c`` out of ``ranks`` data-parallel ranks (never on
    a mesh, where it is not drawn)."""
    return not ctx.mesh and ctx.cp_allowed(c, ranks)


def _draws(space: Space, ctx: SpaceContext) -> list[_Draw]:
    """Every (tp, pp, cp, dp, micro_batch) the first parts of the space can draw."""
    base = ctx.base
    cp_part = next((p for p in space.parts if isinstance(p, ContextParallel)), None)
    mb_part = next((p for p in space.parts if isinstance(p, MicroBatch)), None)
    searched = any(isinstance(p, Parallelism) for p in space.parts)
    out = []
    for t, p in sorted(_pairs(space, ctx)):
        ranks = ctx.devices // (t * p)
        if cp_part is None:
            cps = [1 if searched else base.parallelism.cp]
        else:
            cps = [c for c in cp_part.choices if _cp_valid(c, ranks, ctx)] or [1]
        for c in cps:
            dp = ranks // c
            if mb_part is None:
                mbs = [base.training.micro_batch]
            else:
                per_replica = ctx.global_batch // dp
                mbs = [m for m in mb_part.choices if per_replica % m == 0] or [1]
            out += [_Draw(t, p, c, dp, m) for m in mbs]
    return out


def _check_cp(part: ContextParallel, draws: list[_Draw], ctx: SpaceContext) -> None:
    for c in part.choices:
        ranks = {(d.tp, d.pp): ctx.devices // (d.tp * d.pp) for d in draws}
        if c != 1 and not any(_cp_valid(c, r, ctx) for r in ranks.values()):
            if ctx.mesh:
                allowed = "1: context parallelism is for GPU clusters"
            else:
                allowed = (
                    f"a degree dividing the data-parallel ranks {sorted(set(ranks.values()))}, "
                    f"keeping dp a divisor of global_batch = {ctx.global_batch} and "
                    f"seq_len = {ctx.base.model.seq_len} a multiple of 2 cp"
                )
            raise ConfigError("space.cp", c, allowed)


def _chunks(part: Schedule, d: _Draw, ctx: SpaceContext) -> list[int]:
    """The interleaving factors Schedule may draw for ``d`` (mirrors spaces.parts.Schedule)."""
    m = ctx.global_batch // (d.dp * d.micro_batch)
    if not ctx.workload.transformer or m % d.pp:
        return []
    return [v for v in part.interleave if v > 1 and ctx.blocks % (d.pp * v) == 0]


def _check_schedule(
    part: Schedule, draws: list[_Draw], ctx: SpaceContext, *, interleave_given: bool
) -> None:
    interleaved = "interleaved-1f1b" in part.choices
    deep = [d for d in draws if d.pp > 1]
    if part.choices == ("interleaved-1f1b",):
        for d in deep:
            if not _chunks(part, d, ctx):
                raise ConfigError(
                    "space.schedule",
                    list(part.choices),
                    f"another schedule beside interleaved-1f1b: at tp = {d.tp}, pp = {d.pp}, "
                    f"dp = {d.dp}, micro_batch = {d.micro_batch} no interleave among "
                    f"{list(part.interleave)} divides the {ctx.blocks} layers into pp x "
                    f"interleave chunks with a micro-batch count divisible by pp",
                )
    if not interleaved:
        return
    usable = {v for d in deep for v in _chunks(part, d, ctx)}
    dead = [v for v in part.interleave if v not in usable]
    if dead and interleave_given:
        depths = sorted({d.pp for d in deep})
        warnings.warn(
            f"space.interleave = {dead} is never drawn: no drawn pipeline depth {depths} "
            f"divides the {ctx.blocks} layers into pp x interleave chunks with a micro-batch "
            "count divisible by pp" + ("; interleaved-1f1b is never drawn" if not usable else ""),
            ConfigWarning,
            stacklevel=2,
        )
    elif not usable:
        warnings.warn(
            "space.schedule = interleaved-1f1b is never drawn: no drawn pipeline depth "
            "divides the layers into pp x interleave chunks with a micro-batch count "
            "divisible by pp (set space.interleave)",
            ConfigWarning,
            stacklevel=2,
        )


def _check_experts(part: ExpertParallelism, draws: list[_Draw], ctx: SpaceContext) -> None:
    m = ctx.base.model
    stages = sorted({d.tp * d.cp * d.dp for d in draws})
    eps = {e for g in stages for e in divisors(m.experts) if g % e == 0}
    for e in part.ep:
        if e not in eps:
            raise ConfigError(
                "space.ep",
                e,
                f"a divisor of model.experts = {m.experts} and of a stage's tp x cp x dp "
                f"devices {stages}: {sorted(eps)}",
            )
    etps = {
        t
        for g in stages
        for e in (part.ep or sorted(eps))
        if g % e == 0
        for t in divisors(g // e)
        if expert_tensor_parallel(etp=t, moe_ffn_hidden=m.moe_ffn_hidden) is None
    }
    for t in part.etp:
        if t not in etps:
            raise ConfigError(
                "space.etp",
                t,
                f"a divisor of model.moe_ffn_hidden = {m.moe_ffn_hidden} and of tp x cp x dp "
                f"/ ep: {sorted(etps)}",
            )


def _check_micro_batch(part: MicroBatch, dps: set[int], global_batch: int) -> None:
    for m in part.choices:
        if not any((global_batch // dp) % m == 0 for dp in dps):
            replicas = sorted({global_batch // dp for dp in dps})
            raise ConfigError(
                "space.micro_batch",
                m,
                f"a size dividing the per-replica batch (global_batch / dp: {replicas[:12]})",
            )
    for dp in sorted(dps):
        if not any((global_batch // dp) % m == 0 for m in part.choices):
            raise ConfigError(
                "space.micro_batch",
                list(part.choices),
                f"choices one of which divides {global_batch // dp}, the per-replica batch "
                f"at dp = {dp} (add 1, or restrict space.parallelism)",
            )


def _check_precision(part: Choice, ctx: SpaceContext) -> None:
    """Every precision choice must be one the base's hardware and mode run."""
    tables = config_to_dict(ctx.base)
    for value in part.choices:
        tables["training"]["precision"] = value
        try:
            parse_config(tables)
        except ConfigError as exc:
            raise ConfigError("space.precision", value, exc.allowed) from None


def _check_fsdp(space: Space, ctx: SpaceContext) -> None:
    """``fsdp`` is drawn only at ZeRO 2 or 3 (:class:`spaces.parts.Fsdp`): some draw must
    have one."""
    zeros = next(
        (p.choices for p in space.parts if isinstance(p, Choice) and p.field == "zero"),
        (ctx.base.training.zero,),
    )
    if not {2, 3} & set(zeros):
        raise ConfigError(
            "space.fsdp",
            "...",
            f"choices only with ZeRO 2 or 3 among the zero choices {list(zeros)} "
            "(FSDP shards at those stages; set space.zero)",
        )


def _check_knob(knob: HardwareKnob, ctx: SpaceContext) -> None:
    where = f"space.hardware.{knob.field}"
    bounds = {"low": knob.low, "high": knob.high}
    if knob.integer and not all(float(v).is_integer() for v in bounds.values()):
        raise ConfigError(where, bounds, f"integer low and high: {knob.field} is an integer")
    tables = config_to_dict(ctx.base)
    for name, value in bounds.items():
        tables["hardware"][knob.field] = int(value) if knob.integer else value
        try:
            parse_config(tables)
        except ConfigError as exc:
            raise ConfigError(where, bounds, f"{name} a valid value ({exc})") from None
