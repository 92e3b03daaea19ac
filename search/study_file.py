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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palm.api import ENGINES
from palm.config import config_to_dict, load_config
from palm.errors import ConfigError
from palm.inputs import read_toml
from palm.strategy import SimConfig
from spaces import Space, SpaceContext, check_sampler, check_space, space_from_table

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
    data = read_toml(path, field="study file")
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
    objectives = _objectives(study, base)
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
    fingerprint = _fingerprint(base, space_table, objectives)
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


def _objectives(study: Mapping[str, Any], base: SimConfig) -> list[str]:
    """``study.objectives``: distinct names among :data:`OBJECTIVES` (``tpot`` only with a
    served base)."""
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
        raise ConfigError(
            "study.objectives", objectives, 'tpot only with a served base (training.mode = "serve")'
        )
    return objectives


def _fingerprint(base: SimConfig, space_table: Mapping[str, Any], objectives: list[str]) -> str:
    """What makes two study files the same study: the resolved base, the space and the
    objectives."""
    return hashlib.sha256(
        json.dumps(
            {"base": config_to_dict(base), "space": space_table, "objectives": objectives},
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:16]


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
