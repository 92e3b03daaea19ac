"""Study files (TOML): which model and machine, what is searched, objectives, sampler, budget.

```toml
[study]
name = "quickstart"            # default study name in the storage
base = "../examples/wafer-t18b.toml"   # simulation config, relative to this file
set = ["training.global_batch=32"]     # overrides of the base (optional)
objectives = ["throughput"]    # throughput (max), memory (min), cost (min)
sampler = "tpe"                # tpe, random, cmaes, nsga2, gp, bruteforce
trials = 40
seed = 0
engine = "event"

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
from palm.config import load_config
from palm.errors import ConfigError
from palm.strategy import SimConfig
from spaces import Space, SpaceContext, space_from_table

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["StudySpec", "load_study", "OBJECTIVES", "SAMPLERS", "study_from_tables"]

#: objective name -> (direction, what it measures)
OBJECTIVES: dict[str, str] = {"throughput": "maximize", "memory": "minimize", "cost": "minimize"}
SAMPLERS: tuple[str, ...] = ("tpe", "random", "cmaes", "nsga2", "gp", "bruteforce")
_STUDY_KEYS = ("name", "base", "set", "objectives", "sampler", "trials", "seed", "engine")


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
    name = study.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ConfigError("study.name", name, "a non-empty string")
    space_table = data.get("space", {})
    if not isinstance(space_table, Mapping):
        raise ConfigError("space", space_table, "a [space] table")
    ctx = SpaceContext.of(base)
    space = space_from_table(space_table, ctx)
    # what makes two study files the same study: the resolved base, the space and objectives
    from palm.config import config_to_dict

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
    )
