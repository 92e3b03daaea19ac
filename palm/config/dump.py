"""Back to plain data: a validated :class:`~palm.strategy.SimConfig` as TOML-compatible
tables, presets expanded."""

from __future__ import annotations

import dataclasses
from typing import Any

from palm.config.load import SECTIONS
from palm.strategy import (
    SimConfig,
)

__all__ = ["config_to_dict"]


def config_to_dict(config: SimConfig) -> dict[str, Any]:
    """The fully resolved configuration as TOML-compatible tables (presets expanded)."""
    out: dict[str, Any] = {}
    for section in SECTIONS:
        if section == "software" and not config.software.framework:
            continue  # none named: the defaults are the simulator's own
        obj = getattr(config, section)
        table = dataclasses.asdict(obj)
        if section == "model":
            ops = table.pop("graph_ops")
            if ops:
                table["ops"] = [
                    {
                        "type": type(op)
                        .__name__.lower()
                        .replace("transformerlayer", "transformer"),
                        **{
                            k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in dataclasses.asdict(op).items()
                        },
                    }
                    for op in config.model.graph_ops
                ]
        out[section] = _listify(table)
    return out


def _listify(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _listify(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_listify(v) for v in value]
    return value
