"""Study files (TOML): which model and machine, what is searched, objectives, sampler, budget.

```toml
[study]
name = "quickstart"            # default study name in the storage
base = "../examples/wafer-t18b.toml"   # simulation config, relative to this file
set = ["training.global_batch=32"]     # overrides of the base (optional)
objectives = ["throughput"]    # throughput (max), memory (min), cost (min), tpot (min)
sampler = "guided"             # guided (default for one objective), tpe (default for
                               # several), random, cmaes, nsga2, gp, bruteforce
trials = 40                    # new configurations (duplicate proposals are not counted)
seed = 0
engine = "event"
screen = 20                    # guided: configurations priced analytically at random first
                               # (default 20); other samplers: an analytical screening first
                               # (default 200 on GPUs; on meshes min(100, trials), none under
                               # 20 trials)
screen_top = 10                # screened configurations simulated first (not guided)

[space]                        # see spaces.space_from_table
parallelism = true
micro_batch = [1, 2, 4]
```
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palm.api import ENGINES
from palm.config import config_to_dict, load_config, parse_config
from palm.errors import ConfigError, ConfigWarning
from palm.inputs import read_input
from palm.strategy import SimConfig
from spaces import Space, SpaceContext, space_from_table
from spaces._math import divisors
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

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "StudySpec",
    "load_study",
    "OBJECTIVES",
    "SAMPLERS",
    "study_from_tables",
    "check_space",
    "check_sampler",
    "check_seed",
    "MAX_SEED",
    "MAX_SCREEN",
    "default_sampler",
    "with_sampler",
]

#: objective name -> (direction, what it measures)
_MIN = "minimize"  # tpot: a served base's time per output token
OBJECTIVES: dict[str, str] = {"throughput": "maximize", "memory": _MIN, "cost": _MIN, "tpot": _MIN}
SAMPLERS: tuple[str, ...] = ("guided", "tpe", "random", "cmaes", "nsga2", "gp", "bruteforce")
_STUDY_KEYS = (
    "name",
    "base",
    "set",
    "objectives",
    "sampler",
    "trials",
    "seed",
    "engine",
    "screen",
    "screen_top",
)
#: analytical screening before the event trials (search.screen): configurations ranked and
#: how many of the best are simulated first. On a GPU cluster the analytical engine is 10-70
#: times cheaper than the event engine; on a mesh both build the same plan, and a screening
#: is cheap only because its plans share their routes (palm.network.memo), so it is capped at
#: one configuration per trial of the study's budget. Measured in
#: benchmarks/sampler_efficiency.py (docs/results.md, docs/tuning.md)
DEFAULT_SCREEN = 200
DEFAULT_SCREEN_MESH = 100
DEFAULT_SCREEN_TOP = 10
#: the largest screening (docs/tuning.md): it draws up to 20 configurations per one screened,
#: keeps the distinct ones in memory and prices each one it keeps (search/screen.py)
MAX_SCREEN = 1000
#: the guided sampler (search.guided) prices this many configurations at random before its
#: first trial and the rest where its model expects the best plans
DEFAULT_SCREEN_GUIDED = 20


def default_sampler(objectives: int) -> str:
    """The sampler of a study file that names none: ``guided`` for one objective (the
    analytical engine as a cheap fidelity, :mod:`search.guided`), ``tpe`` for several."""
    return "guided" if objectives == 1 else "tpe"


def default_screen(base: SimConfig, *, trials: int, sampler: str = "tpe") -> int:
    """Configurations screened analytically when the study file does not say: for the guided
    sampler its random start (:data:`DEFAULT_SCREEN_GUIDED`). For the others, on a mesh none
    for a study of fewer than ``2 * DEFAULT_SCREEN_TOP`` trials: its screening (one
    configuration per trial) would be little more than an order for the enqueued half of
    its budget."""
    if sampler == "guided":
        return DEFAULT_SCREEN_GUIDED
    if base.hardware.topology != "mesh2d":
        return DEFAULT_SCREEN
    return min(DEFAULT_SCREEN_MESH, trials) if trials >= 2 * DEFAULT_SCREEN_TOP else 0


@dataclass(frozen=True)
class StudySpec:
    """A parsed study file."""

    name: str
    base: SimConfig
    space: Space
    context: SpaceContext
    objectives: tuple[str, ...]
    sampler: str
    trials: int
    seed: int | None
    engine: str
    fingerprint: str
    screen: int = DEFAULT_SCREEN
    screen_top: int = DEFAULT_SCREEN_TOP
    #: the study file set ``screen`` (else it follows the sampler: :func:`default_screen`)
    screen_set: bool = False

    @property
    def directions(self) -> list[str]:
        return [OBJECTIVES[o] for o in self.objectives]


#: samplers seed numpy's RandomState, which takes 0 .. 2**32 - 1
MAX_SEED = 2**32 - 1


def check_seed(seed: object, where: str) -> None:
    """A sampler seed: an integer in 0 .. :data:`MAX_SEED`."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(where, seed, f"an integer in 0..{MAX_SEED}")


def load_study(path: str | Path) -> StudySpec:
    """Read and validate a study file; every mistake is a one-line :class:`ConfigError`."""
    path = Path(path)
    text = read_input(path, field="study file", kind="TOML file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("study file", str(path), f"valid TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(
            "study file", str(path), "TOML nested less deeply (tables in tables)"
        ) from None
    return study_from_tables(data, base_dir=path.parent, default_name=path.stem)


def study_from_tables(
    data: Mapping[str, Any], *, base_dir: Path = Path("."), default_name: str = "study"
) -> StudySpec:
    for key in data:
        if key not in ("study", "space"):
            raise ConfigError(str(key), data[key], "the tables [study] and [space]")
    study = data.get("study")
    if not isinstance(study, Mapping):
        raise ConfigError("study", study, 'a [study] table with at least base = "config.toml"')
    for key in study:
        if key not in _STUDY_KEYS:
            raise ConfigError(f"study.{key}", study[key], f"a field among {', '.join(_STUDY_KEYS)}")
    base_path = study.get("base")
    if not isinstance(base_path, str):
        raise ConfigError("study.base", base_path, "the path of a simulation config (TOML)")
    overrides = study.get("set", [])
    if not isinstance(overrides, list) or not all(isinstance(x, str) for x in overrides):
        raise ConfigError("study.set", overrides, 'an array of "section.field=value" strings')
    base = load_config(base_dir / base_path, overrides=overrides)
    objectives = study.get("objectives", ["throughput"])
    if (
        not isinstance(objectives, list)
        or not objectives
        or not all(isinstance(o, str) and o in OBJECTIVES for o in objectives)
        or len(set(objectives)) != len(objectives)
    ):
        raise ConfigError(
            "study.objectives", objectives, f"distinct names among {', '.join(OBJECTIVES)}"
        )
    if "tpot" in objectives and base.training.mode != "serve":
        raise ConfigError("study.objectives", objectives, "tpot only with a served base")
    sampler = study.get("sampler", default_sampler(len(objectives)))
    if sampler not in SAMPLERS:
        raise ConfigError("study.sampler", sampler, f"one of {', '.join(SAMPLERS)}")
    check_objectives(sampler, len(objectives))
    trials = study.get("trials", 20)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigError("study.trials", trials, "an integer >= 1")
    seed = study.get("seed")
    if seed is not None:
        check_seed(seed, "study.seed")
    engine = study.get("engine", "event")
    if engine not in ENGINES:
        raise ConfigError("study.engine", engine, f"one of {', '.join(ENGINES)}")
    screen, screen_top = (
        _count(study, "screen", default_screen(base, trials=trials, sampler=sampler), 0),
        _count(study, "screen_top", DEFAULT_SCREEN_TOP, 1),
    )
    if screen > MAX_SCREEN:
        raise ConfigError(
            "study.screen",
            screen,
            f"an integer in 0..{MAX_SCREEN:,} (configurations screened analytically; "
            "the screening's time and memory grow with it)",
        )
    name = study.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ConfigError("study.name", name, "a non-empty string")
    space_table = data.get("space", {})
    if not isinstance(space_table, Mapping):
        raise ConfigError("space", space_table, "a [space] table")
    ctx = SpaceContext.of(base)
    space = space_from_table(space_table, ctx)
    check_space(space, ctx, given=tuple(space_table))
    check_sampler(space, sampler)
    # what makes two study files the same study: the resolved base, the space and objectives
    fingerprint = hashlib.sha256(
        json.dumps(
            {"base": config_to_dict(base), "space": space_table, "objectives": objectives},
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:16]
    return StudySpec(
        name=name,
        base=base,
        space=space,
        context=ctx,
        objectives=tuple(objectives),
        sampler=sampler,
        trials=trials,
        seed=seed,
        engine=engine,
        fingerprint=fingerprint,
        screen=screen if len(objectives) == 1 else 0,
        screen_top=screen_top,
        screen_set="screen" in study,
    )


def check_objectives(sampler: str, objectives: int) -> None:
    """CMA-ES and the guided sampler take one objective."""
    if sampler in ("cmaes", "guided") and objectives > 1:
        raise ConfigError(
            "study.sampler",
            sampler,
            "a multi-objective sampler (nsga2, tpe, random, gp) for several objectives",
        )


def with_sampler(spec: StudySpec, sampler: str, seed: int | None) -> StudySpec:
    """``spec`` with another sampler (and seed): the screening default follows the sampler
    unless the study file set ``screen``."""
    from dataclasses import replace

    check_objectives(sampler, len(spec.objectives))
    screen = spec.screen
    if not spec.screen_set and len(spec.objectives) == 1:
        screen = default_screen(spec.base, trials=spec.trials, sampler=sampler)
    return replace(spec, sampler=sampler, seed=seed, screen=screen)


def _count(study: Mapping[str, Any], key: str, default: int, low: int) -> int:
    value = study.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"study.{key}", value, f"an integer >= {low}")
    return value


# --------------------------------------------------------------------------------------------
# the space, checked before the first trial
# --------------------------------------------------------------------------------------------


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
        (t, p)
        for t in (part.tp or valid_tp)
        for p in divisors(n // t)
        if p <= ctx.blocks and ctx.global_batch % (n // (t * p)) == 0
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
    """Whether ContextParallel may draw ``c`` out of ``ranks`` data-parallel ranks."""
    return (
        not ctx.mesh
        and ranks % c == 0
        and ctx.global_batch % (ranks // c) == 0
        and (c == 1 or (ctx.workload.transformer and ctx.base.model.seq_len % (2 * c) == 0))
    )


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
        if m.moe_ffn_hidden % t == 0
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
