"""Reading a simulation configuration: TOML file or dict -> validated :class:`SimConfig`.

The file format is docs/config.md's: tables ``[model]``, ``[hardware]``, ``[training]``,
``[parallelism]``, ``[placement]``, ``[communication]``. A table may name a ``preset`` and
override any of its fields; ``[model]`` may instead point at a Hugging Face ``config.json``
(``hf_config``, relative to the TOML file). ``--set section.field=value`` overrides are applied
to the raw tables before validation, values parsed as TOML (``8``, ``2.5``, ``"s-shape"``,
``true``; bare words are taken as strings).

Every mistake raises :class:`~palm.errors.ConfigError` naming the field, the value and what is
allowed. Checks that need several tables at once (TP divides the heads, the degrees multiply to
the device count, ...) are in :func:`validate`.

One job per module: :mod:`~palm.config.load` (the file, overrides, the tables in order),
:mod:`~palm.config.coerce` (a table into its typed dataclass, range checks),
:mod:`~palm.config.tables` (``[model]`` and ``[hardware]``: presets, Hugging Face imports,
operator graphs), :mod:`~palm.config.tensix` (Tenstorrent-only hardware fields),
:mod:`~palm.config.bounds` (sizes the simulator's work grows with),
:mod:`~palm.config.checks` (cross-table validation through :mod:`palm.feasibility`) and
:mod:`~palm.config.dump` (back to plain tables).
"""

from __future__ import annotations

from palm.config.bounds import MAX_DEVICES, MAX_DRAM_CHANNELS, MAX_LAYERS, MAX_PIPELINE_PASSES

# imported from palm.config though not in __all__: the bound on routed experts
# (tests/robustness/test_unbounded.py) and the validation's work function, whose calls
# tests/search/test_one_context.py counts
from palm.config.bounds import MAX_EXPERTS as MAX_EXPERTS
from palm.config.checks import _validate as _validate
from palm.config.checks import validate
from palm.config.dump import config_to_dict
from palm.config.load import apply_overrides, load_config, parse_config
from palm.config.tables import hf_model_config, hf_model_from_dict

__all__ = [
    "load_config",
    "parse_config",
    "apply_overrides",
    "config_to_dict",
    "validate",
    "hf_model_config",
    "hf_model_from_dict",
    "MAX_LAYERS",
    "MAX_DEVICES",
    "MAX_PIPELINE_PASSES",
    "MAX_DRAM_CHANNELS",
]
