"""Composable pieces of a search space. Each draws its parameters from an Optuna trial and
writes them into a draft of the configuration's tables.

Encoding (docs/tuning.md): one decision is one Optuna parameter with one distribution in every
trial, so that TPE carries what it learns about, say, the pipeline depth at one TP degree to
every other. Degrees are ordered integers: ``log2_<name>`` when the candidates are consecutive
powers of two (``tp = 2 ** log2_tp``), else a categorical of the candidates. A draw whose
choices contradict each other (``tp x pp`` not dividing the devices, a micro-batch that does
not divide the per-replica batch...) raises :class:`Infeasible`; the objective reports it to
the sampler as a violated constraint and prunes the trial, so no plan is built for it. Where
valid-only sampling costs nothing it is kept: a parameter whose choices are fixed by the
study (not by another draw) lists only valid values, and a parameter that has no meaning for
a draw (the schedule when PP = 1, interleaving for plain 1F1B) is not drawn at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import optuna

from palm.feasibility import (
    batch_split,
    divisors,
    expert_layout,
    expert_parallel,
    expert_tensor_parallel,
    interleave_batches,
)
from palm.workload.ops import Conv2d, Linear, Pool
from spaces._math import factorizations, lehmer_to_permutation
from spaces.context import SpaceContext

__all__ = [
    "Draft",
    "Infeasible",
    "SpacePart",
    "Parallelism",
    "MicroBatch",
    "Schedule",
    "Choice",
    "Layout",
    "InterGroup",
    "HardwareKnob",
    "OpSplit",
    "ExpertParallelism",
    "ContextParallel",
    "Fsdp",
    "pick_degree",
]

Draft = dict[str, dict[str, Any]]


class Infeasible(Exception):
    """The draw's choices contradict each other; ``field`` / ``value`` name the first
    choice that cannot hold and ``rule`` says what it must satisfy."""

    def __init__(self, field: str, value: Any, rule: str) -> None:
        super().__init__(f"{field} = {value}: {rule}")
        self.field, self.value, self.rule = field, value, rule


class SpacePart(Protocol):
    """One piece of a space: draws from ``trial`` and writes into ``draft``."""

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None: ...


def _pick(trial: optuna.Trial, name: str, choices: Sequence[Any]) -> Any:
    choices = list(choices)
    if len(choices) == 1:
        return choices[0]
    return trial.suggest_categorical(name, choices)


def _log2_run(values: Sequence[int]) -> tuple[int, int] | None:
    """``(lo, hi)`` when ``values`` are exactly 2**lo, 2**(lo+1), ..., 2**hi."""
    exps = [v.bit_length() - 1 for v in values]
    if any(v < 1 or 1 << e != v for v, e in zip(values, exps, strict=True)):
        return None
    lo, hi = min(exps), max(exps)
    return (lo, hi) if sorted(exps) == list(range(lo, hi + 1)) else None


def pick_degree(trial: optuna.Trial, name: str, values: Sequence[int]) -> int:
    """One of the sorted ``values`` (fixed for the study): an ordered integer ``log2_<name>``
    when they are consecutive powers of two, else a categorical ``name``."""
    values = sorted(set(values))
    if len(values) == 1:
        return values[0]
    run = _log2_run(values)
    if run is None:
        return int(trial.suggest_categorical(name, values))
    return 1 << trial.suggest_int(f"log2_{name}", run[0], run[1])


@dataclass(frozen=True)
class Parallelism:
    """TP from the divisors of the device count that the model allows (heads, MLP width,
    key/value heads); PP from the depths some TP allows (divisors of the devices left that do
    not exceed the layer count and keep DP a divisor of the global batch); DP the rest. Both
    lists are fixed for the study; a (TP, PP) pair that does not fit raises
    :class:`Infeasible`. ``tp`` / ``pp`` restrict the candidates (empty: all valid)."""

    tp: tuple[int, ...] = ()
    pp: tuple[int, ...] = ()

    def candidates(self, ctx: SpaceContext) -> tuple[list[int], list[int]]:
        """The TP and PP lists (fixed for the study)."""
        return ctx.memo(self, lambda: self._candidates(ctx))

    def _candidates(self, ctx: SpaceContext) -> tuple[list[int], list[int]]:
        n = ctx.devices
        tps = [t for t in divisors(n) if ctx.tp_allowed(t) and (not self.tp or t in self.tp)]
        if not tps:
            raise ValueError("no tensor-parallel degree fits the model and the device count")
        pps = sorted({p for t in tps for p in divisors(n // t) if self._pp_fits(ctx, t, p)})
        if not pps:
            raise ValueError("no pipeline depth fits the devices, layers and batch")
        return tps, pps

    def _pp_fits(self, ctx: SpaceContext, tp: int, pp: int) -> bool:
        return ctx.pp_allowed(tp, pp) and (not self.pp or pp in self.pp)

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        tps, pps = self.candidates(ctx)
        tp = pick_degree(trial, "tp", tps)
        pp = pick_degree(trial, "pp", pps)
        if not self._pp_fits(ctx, tp, pp):
            raise Infeasible(
                "pp",
                pp,
                f"tp x pp must divide {ctx.devices} devices, leaving a dp that "
                f"divides the global batch {ctx.global_batch} (tp = {tp})",
            )
        n = ctx.devices
        draft["parallelism"].update(tp=tp, pp=pp, dp=n // (tp * pp))


@dataclass(frozen=True)
class ContextParallel:
    """Context-parallel degree ``cp`` (palm ``parallelism.cp``) from ``choices``, carved out of
    the data-parallel degree the earlier parts left: it must divide it, keep ``dp`` a divisor
    of the global batch and cut the sequence into ``2 cp`` equal chunks (else
    :class:`Infeasible`); not drawn on a mesh (1). Must come after :class:`Parallelism` and
    before :class:`MicroBatch`."""

    choices: tuple[int, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        par = draft["parallelism"]
        if ctx.mesh:
            par.update(cp=1)
            return
        ranks = ctx.devices // (par.get("tp", 1) * par.get("pp", 1))
        seq = ctx.base.model.seq_len
        cp = pick_degree(trial, "cp", self.choices)
        if not ctx.cp_allowed(cp, ranks):
            raise Infeasible(
                "cp",
                cp,
                f"must divide the {ranks} data ranks, keep dp a divisor of the global "
                f"batch and split the sequence ({seq}) into 2 cp chunks",
            )
        par.update(cp=cp, dp=ranks // cp)


@dataclass(frozen=True)
class MicroBatch:
    """Micro-batch size from ``choices``; one that does not divide the per-replica batch
    raises :class:`Infeasible`."""

    choices: tuple[int, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        dp = draft["parallelism"]["dp"]
        per_replica = ctx.global_batch // dp
        m = pick_degree(trial, "micro_batch", self.choices)
        if batch_split(global_batch=ctx.global_batch, dp=dp, micro_batch=m) is not None:
            raise Infeasible(
                "micro_batch", m, f"must divide the per-replica batch {per_replica} (dp = {dp})"
            )
        draft["training"]["micro_batch"] = m


@dataclass(frozen=True)
class Schedule:
    """Pipeline schedule (drawn only when PP > 1) and, for interleaved 1F1B, the chunks per
    device (drawn only then): they must divide the layers evenly and the number of
    micro-batches must be divisible by PP (else :class:`Infeasible`)."""

    choices: tuple[str, ...]
    interleave: tuple[int, ...] = (2, 3, 4)

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        par, tr = draft["parallelism"], draft["training"]
        pp = par["pp"]
        par["interleave"] = 1
        offered = [
            s for s in self.choices if s != "interleaved-1f1b" or ctx.workload.transformer
        ] or ["1f1b"]
        if pp == 1:
            par["schedule"] = offered[0] if offered[0] != "interleaved-1f1b" else "1f1b"
            return
        schedule = _pick(trial, "schedule", offered)
        par["schedule"] = schedule
        if schedule != "interleaved-1f1b":
            return
        v = pick_degree(trial, "interleave", [c for c in self.interleave if c > 1])
        m = ctx.global_batch // (par["dp"] * tr["micro_batch"])
        # even chunks of layers (the space's choice), micro-batches in groups of pp (a rule)
        if ctx.blocks % (pp * v) or interleave_batches(micro_batches=m, pp=pp, chunks=v):
            raise Infeasible(
                "interleave",
                v,
                f"pp x interleave must divide the {ctx.blocks} layers and pp "
                f"the {m} micro-batches (pp = {pp})",
            )
        par["interleave"] = v


@dataclass(frozen=True)
class Choice:
    """A field of a table drawn from fixed choices (recompute, ZeRO, TP placement...)."""

    section: str
    field: str
    choices: tuple[Any, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        draft[self.section][self.field] = _pick(trial, self.field, self.choices)


@dataclass(frozen=True)
class Fsdp:
    """PyTorch FSDP or a distributed optimizer at the same ZeRO stage (palm
    ``training.fsdp``): drawn only where the drawn (or the base's) ZeRO stage is 2 or 3, the
    stages FSDP has (``SHARD_GRAD_OP`` and ``FULL_SHARD``); the jobs then differ in when
    ZeRO-2 reduces and in how full recompute ends (docs/model.md). At ZeRO 0 and 1 it is
    ``false`` (``fsdp = true`` there would mean ZeRO 3: the same configuration as the draw
    with ``zero = 3``). Apply it after the part that draws ``zero``."""

    choices: tuple[bool, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        tr = draft["training"]
        tr["fsdp"] = _pick(trial, "fsdp", self.choices) if tr["zero"] in (2, 3) else False


@dataclass(frozen=True)
class Layout:
    """Stage-to-tile binding on a mesh (paper sec. V-B): ``line``, ``s-shape``, or ``explicit``.
    Explicit bindings cut the tiles, in line order, into PP equal groups and give stage ``s``
    group ``perm[s]``, the permutation drawn as a Lehmer code so that codes that differ in one
    late digit are placements that differ in a few stages. Digit ``i`` is the parameter
    ``lehmer{i}`` in ``0 .. T-1-i`` for every PP (``T`` the tiles, the deepest pipeline a
    binding by tiles can have), scaled to this PP's range ``0 .. PP-1-i`` as
    ``d (PP - i) // (T - i)`` (order-preserving, so what TPE learns about early or late
    stages carries across depths). ``explicit`` when a stage does not fill whole tiles or
    PP = 1 raises :class:`Infeasible`."""

    choices: tuple[str, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        if not ctx.mesh:
            return
        hw = ctx.base.hardware
        per_tile = hw.cores_per_tile_count  # type: ignore[union-attr]
        par = draft["parallelism"]
        group, pp = par["tp"] * par["dp"], par["pp"]
        layout = _pick(trial, "layout", self.choices)
        draft["placement"]["layout"] = layout
        draft["placement"]["stage_tiles"] = []
        if layout != "explicit":
            return
        if group % per_tile or pp == 1:
            raise Infeasible(
                "layout",
                "explicit",
                f"needs PP > 1 and stages of whole tiles ({per_tile} "
                f"cores; this stage has {group})",
            )
        k = group // per_tile
        rows, cols = hw.tiles  # type: ignore[union-attr]
        deepest = rows * cols
        line = [r * cols + c for c in range(cols) for r in range(rows)]  # tile ids, line order
        groups = [line[i * k : (i + 1) * k] for i in range(pp)]
        code = [
            trial.suggest_int(f"lehmer{i}", 0, deepest - 1 - i) * (pp - i) // (deepest - i)
            for i in range(pp - 1)
        ]
        perm = lehmer_to_permutation([*code, 0])
        draft["placement"]["stage_tiles"] = [groups[perm[s]] for s in range(pp)]


@dataclass(frozen=True)
class InterGroup:
    """Inter-group strategy (paper sec. V-C) and number of adapter tiles, a power of two up
    to TP: ``log2_adapters`` in ``0 .. log2(max TP)``, capped at this draw's TP (valid-only;
    draws above the cap are the same configuration, which the tuner never simulates twice).
    ``max_tp`` is the largest TP the space can draw."""

    strategies: tuple[str, ...]
    adapters: bool = True
    max_tp: int = 1

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        if not ctx.mesh:
            return
        draft["communication"]["inter_group"] = _pick(trial, "inter_group", self.strategies)
        tp = draft["parallelism"]["tp"]
        adapters = 1
        if self.adapters and tp > 1 and self.max_tp > 1:
            top = self.max_tp.bit_length() - 1
            adapters = min(tp, 1 << trial.suggest_int("log2_adapters", 0, top))
        draft["communication"]["adapters"] = adapters


@dataclass(frozen=True)
class HardwareKnob:
    """A hardware field searched in ``[low, high]`` (what-if and co-design studies), or among
    fixed ``values`` (a grid, drawn as an ordered index ``hardware.<field>.index`` into them so
    that neighbouring values stay neighbours)."""

    field: str
    low: float
    high: float
    log: bool = False
    integer: bool = False
    values: tuple[float, ...] = ()

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        name = f"hardware.{self.field}"
        value: float
        if self.values:
            grid = sorted(self.values)
            i = trial.suggest_int(f"{name}.index", 0, len(grid) - 1) if len(grid) > 1 else 0
            value = grid[i]
        elif self.integer:
            value = trial.suggest_int(name, int(self.low), int(self.high), log=self.log)
        else:
            value = trial.suggest_float(name, self.low, self.high, log=self.log)
        draft["hardware"][self.field] = value


_SPLIT_KIND = {"linear_split": (Linear, 4), "conv_split": (Conv2d, 4), "pool_split": (Pool, 3)}


@dataclass(frozen=True)
class OpSplit:
    """Operator-level split (paper Table III) of every operator of one kind: the
    factorisations of the stage group size whose factors divide those operators' dimensions.
    The one conditional name left (``linear_split|G=64``): the factorisations of different
    group sizes share no choice, so one parameter would be mostly infeasible draws."""

    field: str  # linear_split, conv_split or pool_split

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        cls, parts = _SPLIT_KIND[self.field]
        ops = [op for op in ctx.workload.ops if isinstance(op, cls)]
        if not ops:
            return
        group = draft["parallelism"]["tp"] * draft["parallelism"]["dp"]
        valid = [f for f in factorizations(group, parts) if all(_fits(op, f) for op in ops)]
        if not valid:
            return
        names = ["x".join(str(x) for x in f) for f in valid]
        chosen = _pick(trial, f"{self.field}|G={group}", names)
        draft["parallelism"][self.field] = [int(x) for x in chosen.split("x")]


def _fits(op: Any, split: tuple[int, ...]) -> bool:
    ok: bool
    if isinstance(op, Linear):
        ok = (
            op.tokens % split[1] == 0
            and op.out_features % split[2] == 0
            and op.in_features % split[3] == 0
        )
    elif isinstance(op, Conv2d):
        ok = (
            op.in_channels % split[1] == 0
            and op.out_hw[0] % split[2] == 0
            and op.out_channels % split[3] == 0
        )
    else:
        ok = op.channels % split[1] == 0 and op.out_hw[0] % split[2] == 0
    return ok


@dataclass(frozen=True)
class ExpertParallelism:
    """Expert (``ep``) and expert-tensor (``etp``) parallel degrees of a mixture-of-experts
    model that obey Megatron-Core's layout for the drawn ``tp``, ``cp`` and ``dp``: ``ep``
    divides the experts, ``etp`` the expert width, ``ep x etp`` the stage's ``tp x cp x dp``
    devices. Several choices are drawn as fixed lists and a draw that breaks a rule raises
    :class:`Infeasible`; a single choice (the base plan's degree, kept when only parallelism
    is searched) falls back to 1 where it does not hold (no decision, nothing to learn). TP > 1
    with experts needs sequence parallelism, which this part then sets. Apply it after the
    parts that draw ``tp``, ``dp`` and ``sequence_parallel``."""

    ep: tuple[int, ...] = (1,)
    etp: tuple[int, ...] = (1,)

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        m, par = ctx.base.model, draft["parallelism"]
        if not m.is_moe:
            return
        stage = par["tp"] * par.get("cp", 1) * par["dp"]
        ep = pick_degree(trial, "ep", self.ep)
        if expert_parallel(ep=ep, experts=m.experts) or stage % ep:
            if len(set(self.ep)) > 1:
                raise Infeasible(
                    "ep", ep, f"must divide the {m.experts} experts and the stage's {stage} devices"
                )
            ep = 1
        etp = pick_degree(trial, "etp", self.etp)
        if expert_tensor_parallel(etp=etp, moe_ffn_hidden=m.moe_ffn_hidden) or expert_layout(
            ep=ep, etp=etp, stage_devices=stage
        ):
            if len(set(self.etp)) > 1:
                raise Infeasible(
                    "etp",
                    etp,
                    f"ep x etp must divide the stage's {stage} devices and etp the "
                    f"expert width {m.moe_ffn_hidden} (ep = {ep})",
                )
            etp = 1
        par.update(ep=ep, etp=etp)
        if par["tp"] > 1:
            par["sequence_parallel"] = True
