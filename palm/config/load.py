"""Reading a configuration's tables: a TOML file, ``--set`` overrides, then each table built
(:mod:`palm.config.tables`) and the whole validated (:mod:`palm.config.checks`).

The file format is docs/config.md's: tables ``[model]``, ``[hardware]``, ``[training]``,
``[parallelism]``, ``[placement]``, ``[communication]``, ``[serving]``, ``[software]``.
``--set section.field=value`` overrides are applied to the raw tables before validation,
values parsed as TOML (``8``, ``2.5``, ``"s-shape"``, ``true``; bare words are taken as
strings)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from palm.config.checks import validate
from palm.config.coerce import build
from palm.config.tables import parse_hardware, parse_model
from palm.errors import ConfigError
from palm.inputs import read_toml
from palm.serving.spec import ServingConfig
from palm.software import with_software_defaults
from palm.strategy import (
    CommunicationConfig,
    ParallelismConfig,
    PlacementConfig,
    SimConfig,
    TrainingConfig,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["SECTIONS", "load_config", "apply_overrides", "parse_config"]


SECTIONS = (
    "model",
    "hardware",
    "training",
    "parallelism",
    "placement",
    "communication",
    "serving",
    "software",
)


def load_config(path: str | Path, *, overrides: Iterable[str] = ()) -> SimConfig:
    """Read the TOML file at ``path``, apply ``section.field=value`` overrides, validate."""
    path = Path(path)
    data = read_toml(path, field="config file")
    data = apply_overrides(data, overrides)
    return parse_config(data, base_dir=path.parent)


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``a.b.c=value`` override set."""
    out: dict[str, Any] = json.loads(json.dumps(data))
    for item in overrides:
        if "\n" in item or "\r" in item:
            raise ConfigError("--set", item, "one section.field=value on one line")
        if "=" not in item:
            raise ConfigError("--set", item, "section.field=value, e.g. parallelism.tp=4")
        key, raw = item.split("=", 1)
        parts = [p.strip() for p in key.strip().split(".")]
        if len(parts) < 2 or parts[0] not in SECTIONS or not all(parts):
            raise ConfigError("--set", item, f"section.field=value with section one of {SECTIONS}")
        node = out
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError("--set", item, f"a path through tables ({part} is a value)")
            node = child
        node[parts[-1]] = _parse_value(raw.strip())
    return out


def parse_config(data: Mapping[str, Any], *, base_dir: Path | None = None) -> SimConfig:
    """Build and validate a :class:`SimConfig` from the raw tables of a TOML file."""
    if not isinstance(data, Mapping):
        raise ConfigError("config", data, "a table of tables")
    for key in data:
        if key not in SECTIONS:
            raise ConfigError(str(key), data[key], f"a table among {', '.join(SECTIONS)}")
    for section in ("model", "hardware"):
        if section not in data:
            raise ConfigError(section, None, f"a [{section}] table (with a preset or fields)")
    for section in SECTIONS:
        if section in data and not isinstance(data[section], Mapping):
            raise ConfigError(section, data[section], "a table")
    # the [software] framework's documented behaviours fill the fields not given (palm.software)
    software, data = with_software_defaults(data)
    config = SimConfig(
        model=parse_model(dict(data["model"]), base_dir or Path(".")),
        hardware=parse_hardware(dict(data["hardware"])),
        training=build(TrainingConfig, dict(data.get("training", {})), "training"),
        parallelism=build(ParallelismConfig, dict(data.get("parallelism", {})), "parallelism"),
        placement=build(PlacementConfig, dict(data.get("placement", {})), "placement"),
        communication=build(
            CommunicationConfig, dict(data.get("communication", {})), "communication"
        ),
        serving=build(ServingConfig, dict(data.get("serving", {})), "serving"),
        software=software,
    )
    validate(config)
    return config


def _parse_value(raw: str) -> Any:
    """An override's value read as TOML, or the bare word as a string; a value that reads as
    more than one key (``1\nbogus = 2``, refused before) is an error, not silently dropped."""
    try:
        doc = tomllib.loads(f"v = {raw}")
    except tomllib.TOMLDecodeError:
        return raw
    if list(doc) != ["v"]:
        raise ConfigError("--set", raw, "one value (an override sets one field)")
    return doc["v"]
