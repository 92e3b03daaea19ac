"""Composable pieces of a search space. Each draws its parameters from an Optuna trial and
writes them into a draft of the configuration's tables, sampling only valid values.

Optuna requires a parameter name to keep one distribution across trials; when the valid
choices of a parameter depend on an earlier one (the pipeline depth on the tensor-parallel
degree, say), the parameter's name records what its choices depend on (``pp|tp=8``), so each
name has fixed choices and TPE treats them as conditional parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import optuna

from palm.workload.ops import Conv2d, Linear, Pool
from spaces._math import divisors, factorizations, lehmer_to_permutation
from spaces.context import SpaceContext

__all__ = [
    "Draft",
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
]

Draft = dict[str, dict[str, Any]]


class SpacePart(Protocol):
    """One piece of a space: draws from ``trial`` and writes into ``draft``."""

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None: ...


def _pick(trial: optuna.Trial, name: str, choices: Sequence[Any]) -> Any:
    choices = list(choices)
    if len(choices) == 1:
        return choices[0]
    return trial.suggest_categorical(name, choices)


@dataclass(frozen=True)
class Parallelism:
    """TP from the divisors of the device count that the model allows (heads, MLP width,
    key/value heads); PP from the divisors of what is left that do not exceed the layer count
    and keep DP a divisor of the global batch; DP the rest. ``tp`` / ``pp`` restrict the
    candidates (empty: all valid)."""

    tp: tuple[int, ...] = ()
    pp: tuple[int, ...] = ()

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        n = ctx.devices
        tps = [t for t in divisors(n) if ctx.tp_allowed(t) and (not self.tp or t in self.tp)]
        if not tps:
            raise ValueError("no tensor-parallel degree fits the model and the device count")
        tp = _pick(trial, "tp", tps)
        pps = [
            p
            for p in divisors(n // tp)
            if p <= ctx.blocks
            and ctx.global_batch % (n // (tp * p)) == 0
            and (not self.pp or p in self.pp)
        ]
        if not pps:
            raise ValueError(f"no pipeline depth fits with tp = {tp}")
        pp = _pick(trial, f"pp|tp={tp}", pps)
        draft["parallelism"].update(tp=tp, pp=pp, dp=n // (tp * pp))


@dataclass(frozen=True)
class ContextParallel:
    """Context-parallel degree ``cp`` (palm ``parallelism.cp``) from ``choices``, carved out of
    the data-parallel degree the earlier parts left: only values that divide it, keep ``dp``
    a divisor of the global batch and cut the sequence into ``2 cp`` equal chunks; 1 on a
    mesh. Must come after :class:`Parallelism` and before :class:`MicroBatch`."""

    choices: tuple[int, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        par = draft["parallelism"]
        ranks = ctx.devices // (par.get("tp", 1) * par.get("pp", 1))
        seq = ctx.base.model.seq_len
        valid = [
            c
            for c in self.choices
            if not ctx.mesh
            and ranks % c == 0
            and ctx.global_batch % (ranks // c) == 0
            and (c == 1 or (ctx.workload.transformer and seq % (2 * c) == 0))
        ] or [1]
        cp = _pick(trial, f"cp|ranks={ranks}", valid)
        par.update(cp=cp, dp=ranks // cp)


@dataclass(frozen=True)
class MicroBatch:
    """Micro-batch sizes from ``choices`` that divide the per-replica batch."""

    choices: tuple[int, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        dp = draft["parallelism"]["dp"]
        per_replica = ctx.global_batch // dp
        valid = [m for m in self.choices if per_replica % m == 0] or [1]
        draft["training"]["micro_batch"] = _pick(trial, f"micro_batch|dp={dp}", valid)


@dataclass(frozen=True)
class Schedule:
    """Pipeline schedule and, for interleaved 1F1B, the chunks per device: only those that
    divide the layers evenly and leave a number of micro-batches divisible by PP."""

    choices: tuple[str, ...]
    interleave: tuple[int, ...] = (2, 3, 4)

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        par, tr = draft["parallelism"], draft["training"]
        pp = par["pp"]
        par["interleave"] = 1
        if pp == 1:
            par["schedule"] = self.choices[0]
            return
        m = ctx.global_batch // (par["dp"] * tr["micro_batch"])
        chunks = (
            [v for v in self.interleave if v > 1 and ctx.blocks % (pp * v) == 0 and m % pp == 0]
            if ctx.workload.transformer
            else []
        )
        valid = [s for s in self.choices if s != "interleaved-1f1b" or chunks]
        schedule = _pick(trial, "schedule|" + ",".join(valid), valid)
        par["schedule"] = schedule
        if schedule == "interleaved-1f1b":
            key = ",".join(str(v) for v in chunks)
            par["interleave"] = _pick(trial, f"interleave|{key}", chunks)


@dataclass(frozen=True)
class Choice:
    """A field of a table drawn from fixed choices (recompute, ZeRO, TP placement...)."""

    section: str
    field: str
    choices: tuple[Any, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        draft[self.section][self.field] = _pick(trial, self.field, self.choices)


@dataclass(frozen=True)
class Layout:
    """Stage-to-tile binding on a mesh (paper sec. V-B): ``line``, ``s-shape``, or ``explicit``.
    Explicit bindings cut the tiles, in line order, into PP equal groups and give stage ``s``
    group ``perm[s]``, the permutation drawn as a Lehmer code (one integer digit per stage),
    so that codes that differ in one late digit are placements that differ in a few stages."""

    choices: tuple[str, ...]

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        if not ctx.mesh:
            return
        hw = ctx.base.hardware
        per_tile = hw.cores_per_tile_count  # type: ignore[union-attr]
        par = draft["parallelism"]
        group, pp = par["tp"] * par["dp"], par["pp"]
        valid = [c for c in self.choices if c != "explicit" or (group % per_tile == 0 and pp > 1)]
        valid = valid or ["line"]  # explicit asked for but this plan cannot be bound by tiles
        layout = _pick(trial, "layout|" + ",".join(valid), valid)
        draft["placement"]["layout"] = layout
        draft["placement"]["stage_tiles"] = []
        if layout != "explicit":
            return
        k = group // per_tile
        rows, cols = hw.tiles  # type: ignore[union-attr]
        line = [r * cols + c for c in range(cols) for r in range(rows)]  # tile ids, line order
        groups = [line[i * k : (i + 1) * k] for i in range(pp)]
        code = [trial.suggest_int(f"lehmer{i}|pp={pp}", 0, pp - 1 - i) for i in range(pp - 1)]
        perm = lehmer_to_permutation([*code, 0])
        draft["placement"]["stage_tiles"] = [groups[perm[s]] for s in range(pp)]


@dataclass(frozen=True)
class InterGroup:
    """Inter-group strategy (paper sec. V-C) and number of adapter tiles (1 .. TP)."""

    strategies: tuple[str, ...]
    adapters: bool = True

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        if not ctx.mesh:
            return
        draft["communication"]["inter_group"] = _pick(trial, "inter_group", self.strategies)
        tp = draft["parallelism"]["tp"]
        if self.adapters and tp > 1:
            draft["communication"]["adapters"] = trial.suggest_int(f"adapters|tp={tp}", 1, tp)
        else:
            draft["communication"]["adapters"] = 1


@dataclass(frozen=True)
class HardwareKnob:
    """A hardware field searched in ``[low, high]`` (what-if and co-design studies)."""

    field: str
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        name = f"hardware.{self.field}"
        if self.integer:
            value: float = trial.suggest_int(name, int(self.low), int(self.high), log=self.log)
        else:
            value = trial.suggest_float(name, self.low, self.high, log=self.log)
        draft["hardware"][self.field] = value


_SPLIT_KIND = {"linear_split": (Linear, 4), "conv_split": (Conv2d, 4), "pool_split": (Pool, 3)}


@dataclass(frozen=True)
class OpSplit:
    """Operator-level split (paper Table III) of every operator of one kind: the
    factorisations of the stage group size whose factors divide those operators' dimensions."""

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
    devices. ``ep`` /
    ``etp`` restrict the candidates (empty: all valid; none valid for this draw: 1). TP > 1
    with experts needs sequence parallelism, which this part then sets. Apply it after the
    parts that draw ``tp``, ``dp`` and ``sequence_parallel``."""

    ep: tuple[int, ...] = ()
    etp: tuple[int, ...] = ()

    def apply(self, trial: optuna.Trial, draft: Draft, ctx: SpaceContext) -> None:
        m, par = ctx.base.model, draft["parallelism"]
        if not m.is_moe:
            return
        stage = par["tp"] * par.get("cp", 1) * par["dp"]
        eps = [e for e in divisors(m.experts) if stage % e == 0 and (not self.ep or e in self.ep)]
        ep = _pick(trial, f"ep|G={stage}", eps or [1])
        etps = [
            t
            for t in divisors(stage // ep)
            if m.moe_ffn_hidden % t == 0 and (not self.etp or t in self.etp)
        ]
        etp = _pick(trial, f"etp|G={stage},ep={ep}", etps or [1])
        par.update(ep=ep, etp=etp)
        if par["tp"] > 1:
            par["sequence_parallel"] = True
