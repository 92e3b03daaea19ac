"""Study files (TOML): which model and machine, what is searched, objectives, sampler, budget.

```toml
[study]
name = "quickstart"            # default study name in the storage
base = "../examples/wafer-t18b.toml"   # simulation config, relative to this file
set = ["training.global_batch=32"]     # overrides of the base (optional)
objectives = ["throughput"]    # throughput (max), memory (min), cost (min)
sampler = "tpe"                # tpe, random, cmaes, nsga2, gp, bruteforce
trials = 40                    # new configurations (duplicate proposals are not counted)
seed = 0
engine = "event"
screen = 200                   # analytical screening first (default 200 on GPUs, 0 on meshes)
screen_top = 10                # screened configurations simulated first

[space]                        # see spaces.space_from_table
parallelism = true
micro_batch = [1, 2, 4]
```
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palm.api import ENGINES
from palm.config import config_to_dict, load_config, parse_config
from palm.errors import ConfigError
from palm.strategy import SimConfig
from spaces import Space, SpaceContext, space_from_table
from spaces._math import divisors
from spaces.parts import HardwareKnob, MicroBatch, Parallelism

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
]

#: objective name -> (direction, what it measures)
OBJECTIVES: dict[str, str] = {"throughput": "maximize", "memory": "minimize", "cost": "minimize"}
SAMPLERS: tuple[str, ...] = ("tpe", "random", "cmaes", "nsga2", "gp", "bruteforce")
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
#: how many of the best are simulated first, on a GPU cluster (where the analytical engine is
#: 10-30 times cheaper than the event engine) and on a mesh (where both are dominated by
#: building the plan, under 2 times); measured in benchmarks/sampler_efficiency.py
DEFAULT_SCREEN = 200
DEFAULT_SCREEN_MESH = 0
DEFAULT_SCREEN_TOP = 10


def default_screen(base: SimConfig) -> int:
    """Configurations screened analytically when the study file does not say."""
    return DEFAULT_SCREEN_MESH if base.hardware.topology == "mesh2d" else DEFAULT_SCREEN


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

    @property
    def directions(self) -> list[str]:
        return [OBJECTIVES[o] for o in self.objectives]


def load_study(path: str | Path) -> StudySpec:
    """Read and validate a study file; every mistake is a one-line :class:`ConfigError`."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("study file", str(path), "an existing TOML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("study file", str(path), f"a readable file ({exc})") from None
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
        or any(o not in OBJECTIVES for o in objectives)
        or len(set(objectives)) != len(objectives)
    ):
        raise ConfigError(
            "study.objectives", objectives, f"distinct names among {', '.join(OBJECTIVES)}"
        )
    sampler = study.get("sampler", "tpe")
    if sampler not in SAMPLERS:
        raise ConfigError("study.sampler", sampler, f"one of {', '.join(SAMPLERS)}")
    if sampler == "cmaes" and len(objectives) > 1:
        raise ConfigError(
            "study.sampler",
            sampler,
            "a multi-objective sampler (nsga2, tpe, random, gp) for several objectives",
        )
    trials = study.get("trials", 20)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigError("study.trials", trials, "an integer >= 1")
    seed = study.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError("study.seed", seed, "an integer")
    engine = study.get("engine", "event")
    if engine not in ENGINES:
        raise ConfigError("study.engine", engine, f"one of {', '.join(ENGINES)}")
    screen, screen_top = (
        _count(study, "screen", default_screen(base), 0),
        _count(study, "screen_top", DEFAULT_SCREEN_TOP, 1),
    )
    name = study.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ConfigError("study.name", name, "a non-empty string")
    space_table = data.get("space", {})
    if not isinstance(space_table, Mapping):
        raise ConfigError("space", space_table, "a [space] table")
    ctx = SpaceContext.of(base)
    space = space_from_table(space_table, ctx)
    check_space(space, ctx)
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
    )


def _count(study: Mapping[str, Any], key: str, default: int, low: int) -> int:
    value = study.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"study.{key}", value, f"an integer >= {low}")
    return value


# --------------------------------------------------------------------------------------------
# the space, checked before the first trial
# --------------------------------------------------------------------------------------------


def check_space(space: Space, ctx: SpaceContext) -> None:
    """Refuse a space that cannot give a valid trial, with the one-line errors of a simulation
    config: no part at all, parallelism lists that no degree satisfies, micro-batch sizes that
    divide no per-replica batch, and hardware knobs whose bounds are not valid values of
    their field."""
    if not space.parts:
        raise ConfigError(
            "space",
            {},
            "at least one part to search (an empty space has one configuration: "
            "run it with palm-tune simulate)",
        )
    dps = _reachable_dps(space, ctx)
    for part in space.parts:
        if isinstance(part, MicroBatch):
            _check_micro_batch(part, dps, ctx.global_batch)
        elif isinstance(part, HardwareKnob):
            _check_knob(part, ctx)


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


def _reachable_dps(space: Space, ctx: SpaceContext) -> set[int]:
    """The data-parallel degrees the space's parallelism part can draw (the base plan's when
    parallelism is not searched); mirrors :class:`spaces.parts.Parallelism`."""
    part = next((p for p in space.parts if isinstance(p, Parallelism)), None)
    if part is None:
        return {ctx.base.parallelism.dp}
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
    return {n // (t * p) for t, p in pairs if not part.pp or p in part.pp}


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
