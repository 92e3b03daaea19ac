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
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
import types
import typing
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from palm import feasibility
from palm.cost.execution import check_execution
from palm.errors import ConfigError
from palm.hardware.presets import HARDWARE_PRESETS, hardware_preset
from palm.hardware.spec import (
    FLOORPLAN_TENSIX_GRID,
    MATH_FIDELITY_CYCLES,
    GpuClusterHardware,
    Hardware,
    Mesh2DHardware,
    PeakTflops,
)
from palm.hf_import import hf_model_table, hf_table_from_dict
from palm.inputs import read_input
from palm.serving.spec import ServingConfig
from palm.serving.validate import validate_serving
from palm.software import with_software_defaults
from palm.strategy import (
    INTER_GROUP_STRATEGIES,
    CommunicationConfig,
    ParallelismConfig,
    PlacementConfig,
    SimConfig,
    TrainingConfig,
)
from palm.units import PRECISIONS
from palm.workload.gemm import MAX_GEMM_DIM, OPERANDS
from palm.workload.model import (
    ModelConfig,
    Workload,
    build_workload,
    check_tensor_parallel,
)
from palm.workload.ops import Conv2d, Linear, Op, Pool, TransformerLayer
from palm.workload.presets import MODEL_PRESETS, model_preset

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

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

_SECTIONS = (
    "model",
    "hardware",
    "training",
    "parallelism",
    "placement",
    "communication",
    "serving",
    "software",
)
_TOPOLOGIES = {"mesh2d": Mesh2DHardware, "gpu-cluster": GpuClusterHardware}


# --------------------------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------------------------


def load_config(path: str | Path, *, overrides: Iterable[str] = ()) -> SimConfig:
    """Read the TOML file at ``path``, apply ``section.field=value`` overrides, validate."""
    path = Path(path)
    text = read_input(path, field="config file", kind="TOML file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config file", str(path), f"valid TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(
            "config file", str(path), "TOML nested less deeply (tables in tables)"
        ) from None
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
        if len(parts) < 2 or parts[0] not in _SECTIONS or not all(parts):
            raise ConfigError("--set", item, f"section.field=value with section one of {_SECTIONS}")
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
        if key not in _SECTIONS:
            raise ConfigError(str(key), data[key], f"a table among {', '.join(_SECTIONS)}")
    for section in ("model", "hardware"):
        if section not in data:
            raise ConfigError(section, None, f"a [{section}] table (with a preset or fields)")
    for section in _SECTIONS:
        if section in data and not isinstance(data[section], Mapping):
            raise ConfigError(section, data[section], "a table")
    # the [software] framework's documented behaviours fill the fields not given (palm.software)
    software, data = with_software_defaults(data)
    config = SimConfig(
        model=_parse_model(dict(data["model"]), base_dir or Path(".")),
        hardware=_parse_hardware(dict(data["hardware"])),
        training=_build(TrainingConfig, dict(data.get("training", {})), "training"),
        parallelism=_build(ParallelismConfig, dict(data.get("parallelism", {})), "parallelism"),
        placement=_build(PlacementConfig, dict(data.get("placement", {})), "placement"),
        communication=_build(
            CommunicationConfig, dict(data.get("communication", {})), "communication"
        ),
        serving=_build(ServingConfig, dict(data.get("serving", {})), "serving"),
        software=software,
    )
    validate(config)
    return config


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------


def _parse_model(table: dict[str, Any], base_dir: Path) -> ModelConfig:
    base = ModelConfig()
    preset = table.pop("preset", None)
    hf = table.pop("hf_config", None)
    if preset is not None and hf is not None:
        raise ConfigError("model.hf_config", hf, "either model.preset or model.hf_config, not both")
    if preset is not None:
        found = model_preset(preset) if isinstance(preset, str) else None
        if found is None:
            raise ConfigError("model.preset", preset, f"one of {', '.join(MODEL_PRESETS)}")
        base = found
    elif hf is not None:
        if not isinstance(hf, str):
            raise ConfigError("model.hf_config", hf, "a path to a config.json file")
        base = hf_model_config(base_dir / hf, seq_len_given="seq_len" in table)
    ops_tables = table.pop("ops", None)
    if ops_tables is not None:
        if not isinstance(ops_tables, list) or not all(isinstance(t, dict) for t in ops_tables):
            raise ConfigError("model.ops", ops_tables, "an array of operator tables")
        if len(ops_tables) > MAX_LAYERS:
            raise ConfigError(
                "model.ops",
                f"{len(ops_tables):,} operators",
                f"at most {MAX_LAYERS:,} operators ({_WHY})",
            )
        ops = tuple(_parse_graph_op(i, dict(t)) for i, t in enumerate(ops_tables))
        base = dataclasses.replace(base, graph_ops=ops, family="graph")
    if "graph_ops" in table:
        raise ConfigError("model.graph_ops", table["graph_ops"], "model.ops (an array of tables)")
    model = _build(ModelConfig, table, "model", base=base)
    if preset is None and "name" not in table:
        name = Path(hf).parent.name if hf else model.family
        model = dataclasses.replace(model, name=name or model.family)
    _validate_model(model)
    return model


def hf_model_config(path: Path, *, seq_len_given: bool = False) -> ModelConfig:
    """The model of a Hugging Face ``config.json`` (:mod:`palm.hf_import`)."""
    table = hf_model_table(path, seq_len_given=seq_len_given)
    return _build(ModelConfig, table, "model.hf_config")


def hf_model_from_dict(
    raw: Mapping[str, Any], *, source: str, seq_len_given: bool = False
) -> ModelConfig:
    """:func:`hf_model_config` of a ``config.json`` already read (``source`` names it in
    errors)."""
    table = hf_table_from_dict(raw, source=source, seq_len_given=seq_len_given)
    return _build(ModelConfig, table, "model.hf_config")


_OP_TYPES: dict[str, type[Op]] = {
    "linear": Linear,
    "conv2d": Conv2d,
    "pool": Pool,
    "transformer": TransformerLayer,
}


def _parse_graph_op(index: int, table: dict[str, Any]) -> Op:
    """One operator of a ``family = "graph"`` model, type-checked like every other table."""
    where = f"model.ops[{index}]"
    kind = table.pop("type", None)
    if kind not in _OP_TYPES:
        raise ConfigError(f"{where}.type", kind, f"one of {', '.join(_OP_TYPES)}")
    table.setdefault("name", f"op{index}")
    if kind == "transformer" and "kv_heads" not in table:
        table["kv_heads"] = table.get("heads", 0)
    op = _build(_OP_TYPES[kind], table, where)
    zero_ok = {"padding", "kv_heads"} | ({"kernel"} if kind == "pool" else set())
    for f in dataclasses.fields(op):
        value = getattr(op, f.name)
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if is_int and f.name not in zero_ok and value < 1:
            raise ConfigError(f"{where}.{f.name}", value, "an integer >= 1")
    if isinstance(op, Conv2d) and (op.in_channels % op.groups or op.out_channels % op.groups):
        raise ConfigError(
            f"{where}.groups",
            op.groups,
            f"a divisor of in_channels ({op.in_channels}) and out_channels ({op.out_channels})",
        )
    if isinstance(op, (Conv2d, Pool)):
        if any(x < 1 for x in op.in_hw):
            raise ConfigError(f"{where}.in_hw", list(op.in_hw), "two integers >= 1")
        if any(x < 1 for x in op.out_hw):
            raise ConfigError(f"{where}.kernel", op.kernel, "at most the padded input size")
    bad_heads = isinstance(op, TransformerLayer) and (
        op.hidden % op.heads or op.heads % (op.kv_heads or op.heads)
    )
    if bad_heads:
        raise ConfigError(
            f"{where}.heads",
            getattr(op, "heads", None),
            "a divisor of hidden, divisible by kv_heads",
        )
    return op


def _parse_hardware(table: dict[str, Any]) -> Hardware:
    preset = table.pop("preset", None)
    topology = table.pop("topology", None)
    if preset is not None:
        found = hardware_preset(preset) if isinstance(preset, str) else None
        if found is None:
            raise ConfigError("hardware.preset", preset, f"one of {', '.join(HARDWARE_PRESETS)}")
        if topology is not None and topology != found.topology:
            raise ConfigError("hardware.topology", topology, f"{found.topology!r} for {preset}")
        hw = _build(type(found), table, "hardware", base=found)
        has_fidelity: bool | None = bool(getattr(found, "math_fidelity", ""))
    else:
        if topology not in _TOPOLOGIES:
            raise ConfigError(
                "hardware.topology", topology, f"one of {', '.join(_TOPOLOGIES)} (or a preset)"
            )
        cls = _TOPOLOGIES[topology]
        table.setdefault("name", f"custom-{topology}")
        hw = _build(cls, table, "hardware")
        has_fidelity = None  # a custom mesh may or may not have a Tensix matrix engine
    if isinstance(hw, Mesh2DHardware):
        hw = _tensix_fields(hw, has_fidelity=has_fidelity)
        _check_floorplan(hw)
        _check_chips(hw)
    return hw


def _check_chips(hw: Mesh2DHardware) -> None:
    """Tiles that are chips own an equal share of the channels (``per-tile``)."""
    tiles = hw.tiles[0] * hw.tiles[1]
    if hw.dram_placement == "per-tile" and (hw.dram_channels < tiles or hw.dram_channels % tiles):
        raise ConfigError(
            "hardware.dram_channels",
            hw.dram_channels,
            f'a multiple of the {tiles} tiles with dram_placement = "per-tile" (each tile '
            "owns an equal share)",
        )


def _check_floorplan(hw: Mesh2DHardware) -> None:
    """A mesh with the Wormhole B0 NoC floorplan (``noc_floorplan``) is one tile whose cores fit
    Tensix cores (``FLOORPLAN_TENSIX_GRID``, 10 x 8)."""
    if hw.noc_floorplan != "wormhole-b0":
        return
    rows, cols = FLOORPLAN_TENSIX_GRID[hw.noc_floorplan]
    if hw.tiles != (1, 1):
        raise ConfigError(
            "hardware.tiles", list(hw.tiles), '[1, 1] with noc_floorplan = "wormhole-b0"'
        )
    grid = hw.cores_per_tile
    if not (1 <= grid[0] <= rows and 1 <= grid[1] <= cols):
        raise ConfigError(
            "hardware.cores_per_tile",
            list(grid),
            f"[rows, cols] with rows <= {rows} and cols <= {cols} (the Tensix cores of the "
            'Wormhole B0 floorplan, noc_floorplan = "wormhole-b0"; "" for none)',
        )


def _tensix_fields(hw: Mesh2DHardware, *, has_fidelity: bool | None) -> Mesh2DHardware:
    """Check ``math_fidelity`` (required on a preset that has one, refused on one that has
    not, optional on a custom mesh) and ``compute_grid``; a compute grid becomes the mesh the
    job runs on (``cores_per_tile``), so that every later model sees only the selected cores."""
    fidelity = hw.math_fidelity.lower()
    allowed = ", ".join(repr(f) for f in MATH_FIDELITY_CYCLES)
    bad = fidelity not in MATH_FIDELITY_CYCLES and (fidelity or has_fidelity)
    if has_fidelity is not False and bad:
        raise ConfigError("hardware.math_fidelity", hw.math_fidelity, f"one of {allowed}")
    if has_fidelity is False and hw.math_fidelity:
        raise ConfigError(
            "hardware.math_fidelity",
            hw.math_fidelity,
            f"unset on {hw.name} (only chips with a Tensix matrix engine, e.g. wormhole-n150)",
        )
    hw = dataclasses.replace(hw, math_fidelity=fidelity)
    grid = hw.compute_grid
    if grid == (0, 0):
        return hw
    rows, cols = hw.core_grid
    if hw.tiles != (1, 1):
        raise ConfigError(
            "hardware.compute_grid", list(grid), f"[0, 0] (all) on {hw.name}, a mesh of tiles"
        )
    if not (1 <= grid[0] <= rows and 1 <= grid[1] <= cols):
        raise ConfigError(
            "hardware.compute_grid",
            list(grid),
            f"[rows, cols] with 1 <= rows <= {rows} and 1 <= cols <= {cols} (the cores of "
            f"{hw.name})",
        )
    return dataclasses.replace(hw, cores_per_tile=grid)


# --------------------------------------------------------------------------------------------
# generic typed builder
# --------------------------------------------------------------------------------------------

_NONNEG_INTS = {
    "sm_count",
    "zero",
    "zero3_prefetch",
    "gpus",
    "kv_heads",
    "padding",
    "first_stage_layers",
    "last_stage_layers",
    "m",
    "k",
    "n",
    "etp",
    "chunk_tokens",
    "chip_links_per_edge",
}
_T = typing.TypeVar("_T")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a config dataclass (resolving them is most of the cost
    of parsing a configuration; a class's hints never change)."""
    return typing.get_type_hints(cls)


def _build(cls: type[_T], table: dict[str, Any], section: str, *, base: _T | None = None) -> _T:
    hints = _hints(cls)  # type: ignore[arg-type]  # a class is hashable
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, raw in table.items():
        where = f"{section}.{key}"
        if key not in fields or key in ("topology", "graph_ops"):
            allowed = sorted(k for k in fields if k not in ("topology", "graph_ops"))
            raise ConfigError(where, raw, f"a known field: {', '.join(allowed)}")
        inner = getattr(base, key) if base is not None else None
        values[key] = _coerce(raw, hints[key], where, base=inner)
    if base is None:
        missing = [
            name
            for name, f in fields.items()
            if f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
            and name not in values
        ]
        if missing:
            raise ConfigError(f"{section}.{missing[0]}", None, "a value (this field is required)")
        obj = cls(**values)
    else:
        obj = dataclasses.replace(base, **values)  # type: ignore[type-var]
    _check_ranges(obj, section)
    return obj


def _coerce(raw: Any, hint: Any, where: str, *, base: Any = None) -> Any:
    """``raw`` checked against the type ``hint``. A nested table (a dataclass field such as
    ``peak_tflops``) merges into ``base``, the preset's value, field by field: overriding one
    precision keeps the others."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        if raw not in args:
            raise ConfigError(where, raw, "one of " + ", ".join(repr(a) for a in args))
        return raw
    if hint is bool:
        if not isinstance(raw, bool):
            raise ConfigError(where, raw, "true or false")
        return raw
    if hint is int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ConfigError(where, raw, "an integer")
        return raw
    if hint is float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ConfigError(where, raw, "a number")
        if not math.isfinite(raw):
            raise ConfigError(where, raw, "a finite number")
        return float(raw)
    if hint is str:
        if not isinstance(raw, str):
            raise ConfigError(where, raw, "a string")
        return raw
    if hint is PeakTflops:
        if not isinstance(raw, dict):
            raise ConfigError(where, raw, "a table of TFLOP/s by precision (fp32, bf16, ...)")
        return _build(PeakTflops, raw, where, base=base)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(raw, dict):
            raise ConfigError(where, raw, "a table")
        return _build(hint, raw, where, base=base)
    if origin is tuple:
        if not isinstance(raw, list):
            raise ConfigError(where, raw, "an array")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(item, args[0], f"{where}[{i}]") for i, item in enumerate(raw))
        if len(raw) != len(args):
            raise ConfigError(where, raw, f"an array of {len(args)} values")
        return tuple(
            _coerce(item, a, f"{where}[{i}]")
            for i, (item, a) in enumerate(zip(raw, args, strict=True))
        )
    if origin in (typing.Union, types.UnionType):
        return raw
    raise ConfigError(where, raw, f"a value of type {hint}")  # pragma: no cover


_MAX_INT = 2**53
_MAX_FLOAT = 1e12
_MIN_POSITIVE = 1e-9


def _check_ranges(obj: Any, section: str) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        where = f"{section}.{f.name}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and abs(value) > _MAX_INT:
            raise ConfigError(where, value, f"an integer of at most {_MAX_INT}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ConfigError(where, value, "a finite number")
            if abs(value) > _MAX_FLOAT:
                raise ConfigError(where, value, f"a number of at most {_MAX_FLOAT:g}")
            if 0 < value < _MIN_POSITIVE:
                raise ConfigError(where, value, f"0 or a number of at least {_MIN_POSITIVE:g}")
            if f.name == "activation_offload":
                if not 0 <= value <= 1:
                    raise ConfigError(where, value, "a fraction in [0, 1] of each chunk's layers")
            elif f.name.endswith(("_ns", "_us")) or f.name in (
                "host_link_gbps",
                "matmul_half_dim",
                "operand_feed_gelems",
                "external_memory_gbps",
                "overlap_interference",
                "sfu_exp_tera_per_s",
                "tpot_limit_s",
                "ttft_limit_s",
            ):
                if value < 0:
                    raise ConfigError(where, value, "a finite number >= 0")
            elif f.name.endswith("_efficiency"):
                if not 0 < value <= 1:
                    raise ConfigError(where, value, "a fraction in (0, 1]")
            elif f.name == "capacity_factor":
                if value < 0:
                    raise ConfigError(where, value, "0 (dropless) or a number > 0")
            elif section.endswith("peak_tflops"):
                if value < 0:
                    raise ConfigError(where, value, "a finite number >= 0 (0 = unsupported)")
            elif value <= 0:
                raise ConfigError(where, value, "a finite number > 0")
        elif isinstance(value, int):
            if f.name == "zero":
                if value not in (0, 1, 2, 3):
                    raise ConfigError(where, value, "a ZeRO stage 0, 1, 2 or 3")
            elif f.name in _NONNEG_INTS or section.startswith("model"):
                least = _least_model_int(obj, f.name)
                if value < least:
                    raise ConfigError(where, value, f"an integer >= {least}")
            elif value < 1:
                raise ConfigError(where, value, "an integer >= 1")
        elif (
            isinstance(value, tuple)
            and f.name in ("tiles", "cores_per_tile")
            and any(v < 1 for v in value)
        ):
            raise ConfigError(where, list(value), "two integers >= 1 (rows, cols)")


#: model fields that are sizes of every transformer (0 is refused: :func:`_validate_model`)
_TRANSFORMER_SIZES = frozenset({"layers", "hidden", "heads", "ffn_hidden", "seq_len", "vocab"})


def _least_model_int(obj: Any, name: str) -> int:
    """The least value of an integer field whose check allows 0 in general: 1 for the sizes
    the model's family needs (a transformer's layers, a product's m, k, n), so that a
    negative value is told the bound that will hold, not ``>= 0``."""
    if getattr(obj, "is_transformer", False) and name in _TRANSFORMER_SIZES:
        return 1
    if getattr(obj, "family", None) == "gemm" and name in ("m", "k", "n"):
        return 1
    return 0


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


# --------------------------------------------------------------------------------------------
# cross-table validation
# --------------------------------------------------------------------------------------------


def _validate_model(m: ModelConfig) -> None:
    if m.family == "gemm":
        for name in ("m", "k", "n"):
            if getattr(m, name) < 1:
                raise ConfigError(f"model.{name}", getattr(m, name), "an integer >= 1")
            if getattr(m, name) > MAX_GEMM_DIM:
                raise ConfigError(
                    f"model.{name}",
                    getattr(m, name),
                    f"at most {MAX_GEMM_DIM:,} for family gemm (the blocking search grows "
                    "with its square root)",
                )
        for i, name in enumerate(m.sram_resident):
            if name not in OPERANDS:
                raise ConfigError(f"model.sram_resident[{i}]", name, "one of 'a', 'b', 'c'")
        return
    if not m.is_transformer:
        if m.family == "resnet50" and m.image_size < 32:
            raise ConfigError("model.image_size", m.image_size, "an integer >= 32 (pixels)")
        if m.family == "resnet50" and m.classes < 1:
            raise ConfigError("model.classes", m.classes, "an integer >= 1")
        return
    for name in ("layers", "hidden", "heads", "ffn_hidden", "seq_len", "vocab"):
        if getattr(m, name) < 1:
            raise ConfigError(f"model.{name}", getattr(m, name), "an integer >= 1")
    if m.layers > MAX_LAYERS:
        raise ConfigError("model.layers", m.layers, f"at most {MAX_LAYERS:,} layers ({_WHY})")
    if m.hidden % m.heads:
        raise ConfigError("model.heads", m.heads, f"a divisor of model.hidden = {m.hidden}")
    kv = m.kv_heads or m.heads
    if m.heads % kv:
        raise ConfigError("model.kv_heads", kv, f"a divisor of model.heads = {m.heads}")
    _validate_moe_model(m)


#: most routed experts of a MoE layer (the largest published models use 256; the tuner's
#: expert-parallel part enumerates the divisors)
MAX_EXPERTS = 2**16


def _validate_moe_model(m: ModelConfig) -> None:
    """Mixture-of-experts and MLA fields of a transformer ``[model]``."""
    if m.experts:
        if m.experts > MAX_EXPERTS:
            raise ConfigError(
                "model.experts",
                m.experts,
                f"at most {MAX_EXPERTS:,} (the tuner lists its divisors)",
            )
        if not 1 <= m.top_k <= m.experts:
            raise ConfigError("model.top_k", m.top_k, f"an integer in 1..experts = {m.experts}")
        if m.moe_ffn_hidden < 1:
            raise ConfigError("model.moe_ffn_hidden", m.moe_ffn_hidden, "an integer >= 1")
        if m.dense_layers >= m.layers:
            raise ConfigError(
                "model.dense_layers", m.dense_layers, f"fewer than model.layers = {m.layers}"
            )
        if m.moe_layer_freq < 1:
            raise ConfigError("model.moe_layer_freq", m.moe_layer_freq, "an integer >= 1")
        if m.moe_load_imbalance < 1:
            raise ConfigError(
                "model.moe_load_imbalance",
                m.moe_load_imbalance,
                "a number >= 1 (busiest device's routed tokens / mean; 1 = balanced)",
            )
    else:
        for name in ("top_k", "moe_ffn_hidden", "shared_experts", "dense_layers"):
            if getattr(m, name):
                raise ConfigError(
                    f"model.{name}", getattr(m, name), "0 unless model.experts > 0 (a MoE model)"
                )
    qk = m.head_dim or m.hidden // m.heads
    if m.kv_lora_rank and (m.qk_rope_head_dim >= qk or m.v_head_dim < 1):
        raise ConfigError(
            "model.qk_rope_head_dim",
            m.qk_rope_head_dim,
            "less than model.head_dim (nope + rope), with model.v_head_dim >= 1 for MLA",
        )


def _validate_moe_parallelism(config: SimConfig) -> None:
    """Megatron-Core's expert layout rules (parallel_state.initialize_model_parallel): the
    ``tp x cp x dp`` devices of a stage are regrouped as ``etp x ep x edp``."""
    m, par = config.model, config.parallelism
    if not m.is_moe:
        if par.ep != 1:
            raise ConfigError("parallelism.ep", par.ep, "1 for a dense model (model.experts = 0)")
        if par.etp > 1:
            raise ConfigError(
                "parallelism.etp", par.etp, "0 or 1 for a dense model (model.experts = 0)"
            )
        return
    etp = par.expert_tp
    allowed = feasibility.expert_parallel(ep=par.ep, experts=m.experts)
    if allowed is not None:
        raise ConfigError("parallelism.ep", par.ep, allowed)
    allowed = feasibility.expert_tensor_parallel(etp=etp, moe_ffn_hidden=m.moe_ffn_hidden)
    if allowed is not None:
        raise ConfigError("parallelism.etp", etp, allowed)
    stage = par.tp * par.cp * par.dp
    allowed = feasibility.expert_layout(ep=par.ep, etp=etp, stage_devices=stage)
    if allowed is not None:
        raise ConfigError("parallelism.ep*etp", f"{par.ep}*{etp} = {par.ep * etp}", allowed)
    if par.tp > 1 and not par.sequence_parallel:
        raise ConfigError(
            "parallelism.sequence_parallel",
            par.sequence_parallel,
            "true when tp > 1 with a MoE model (Megatron-Core requires it)",
        )


#: Bounds on values that the simulator's work grows with (docs/config.md, "Bounds"); beyond
#: them a config is refused with a one-line error instead of running out of time or memory.
MAX_LAYERS = 10_000
MAX_DEVICES = 2**20
MAX_PIPELINE_PASSES = 2**17
MAX_DRAM_CHANNELS = 2**16
_WHY = "the simulator's work grows with it"


def _validate_bounds(config: SimConfig) -> None:
    """Refuse sizes whose cost grows with their value: devices (meshes, rings and placement are
    arrays over devices), DRAM channels, and micro-batches x pipeline chunks (the event engine
    simulates every forward and backward pass)."""
    hw, tr, par = config.hardware, config.training, config.parallelism
    devices = hw.device_count if isinstance(hw, Mesh2DHardware) else max(par.devices, hw.gpus)
    if devices > MAX_DEVICES:
        where = (
            "hardware.tiles x cores_per_tile"
            if isinstance(hw, Mesh2DHardware)
            else ("hardware.gpus" if hw.gpus > par.devices else "parallelism.tp*pp*dp")
        )
        raise ConfigError(where, devices, f"at most {MAX_DEVICES:,} devices ({_WHY})")
    if isinstance(hw, Mesh2DHardware) and hw.dram_channels > MAX_DRAM_CHANNELS:
        raise ConfigError(
            "hardware.dram_channels", hw.dram_channels, f"at most {MAX_DRAM_CHANNELS:,} ({_WHY})"
        )
    per_pipeline = tr.global_batch // max(1, par.dp * tr.micro_batch)
    if per_pipeline * par.pp * par.chunks > MAX_PIPELINE_PASSES:
        raise ConfigError(
            "training.global_batch",
            tr.global_batch,
            f"a value giving micro-batches x pp x interleave = "
            f"{per_pipeline} x {par.pp} x {par.chunks} of at most {MAX_PIPELINE_PASSES:,} "
            f"(the event engine simulates each pass)",
        )


#: the configurations validated in this process, by identity: a SimConfig is frozen, so one
#: that passed stays valid, and a trial's configuration is validated once however many steps
#: (parsing, the plan context) ask for it
_VALIDATED: dict[int, weakref.ref[SimConfig]] = {}
_VALIDATED_MAX = 4096


def validate(config: SimConfig) -> None:
    """Checks that involve more than one table. Raises :class:`ConfigError`. A configuration
    object that passed before is not checked again."""
    seen = _VALIDATED.get(id(config))
    if seen is not None and seen() is config:
        return
    _validate(config)
    if len(_VALIDATED) >= _VALIDATED_MAX:
        _VALIDATED.clear()
    _VALIDATED[id(config)] = weakref.ref(config)


def _validate(config: SimConfig) -> None:
    """:func:`validate`'s checks."""
    m, hw, tr, par = config.model, config.hardware, config.training, config.parallelism
    _validate_bounds(config)
    check_execution(config)
    if m.family == "gemm":
        _validate_gemm(config)
        return
    if validate_serving(config):  # training.mode = "serve" (palm.serving.validate)
        return
    if m.is_transformer:
        check_tensor_parallel(m, par.tp)
    workload = build_workload(m)
    allowed = feasibility.pipeline_depth(
        pp=par.pp,
        blocks=workload.blocks,
        chunks=par.chunks,
        transformer=workload.transformer,
        uneven=bool(par.first_stage_layers or par.last_stage_layers),
    )
    if allowed is not None:
        raise ConfigError("parallelism.pp", par.pp, allowed)
    _validate_modern_parallelism(config, workload)
    if par.interleave > 1 and par.schedule != "interleaved-1f1b" and par.pp > 1:
        raise ConfigError(
            "parallelism.interleave", par.interleave, "1 unless schedule = 'interleaved-1f1b'"
        )
    # the degrees before the batch: a wrong dp is a degree error, not a batch one
    if isinstance(hw, Mesh2DHardware):
        if par.devices != hw.device_count:
            raise ConfigError(
                "parallelism.tp*pp*dp",
                f"{par.tp}*{par.pp}*{par.dp} = {par.devices}",
                f"degrees whose product equals the {hw.device_count} cores of {hw.name}",
            )
    elif hw.gpus and par.devices != hw.gpus:
        names, values = ("tp*pp*dp", f"{par.tp}*{par.pp}*{par.dp}")
        if par.cp > 1:
            names, values = (names + "*cp", values + f"*{par.cp}")
        raise ConfigError(
            f"parallelism.{names}",
            f"{values} = {par.devices}",
            f"degrees whose product equals hardware.gpus = {hw.gpus}",
        )
    allowed = feasibility.batch_split(
        global_batch=tr.global_batch, dp=par.dp, micro_batch=tr.micro_batch
    ) or feasibility.interleave_batches(
        micro_batches=tr.global_batch // (par.dp * tr.micro_batch), pp=par.pp, chunks=par.chunks
    )
    if allowed is not None:
        raise ConfigError("training.global_batch", tr.global_batch, allowed)
    peak = hw.peak_tflops if isinstance(hw, GpuClusterHardware) else hw.core_peak_tflops
    if peak.get(tr.precision) <= 0:
        ok = [p for p in PRECISIONS if peak.get(p) > 0]
        raise ConfigError("training.precision", tr.precision, f"one of {ok} on {hw.name}")
    _validate_offload(config)
    if tr.mode == "train" and tr.precision in ("int8", "bfp8", "bfp4", "fp4"):
        raise ConfigError(
            "training.precision", tr.precision, "fp32, bf16, fp16 or fp8 for training"
        )
    _validate_operator_widths(config, workload)
    _validate_moe_parallelism(config)
    _validate_splits(config, workload)
    _validate_placement(config)
    _validate_communication(config)


def _validate_operator_widths(config: SimConfig, workload: Workload) -> None:
    """Tensor parallelism over a graph model's operators: a divisor of every unsplit
    operator's output width, and a divisor or a multiple of every convolution's groups."""
    par = config.parallelism
    if par.tp > 1 and not workload.transformer:
        for op in workload.ops:
            width = (
                op.out_features
                if isinstance(op, Linear)
                else (op.out_channels if isinstance(op, Conv2d) else 0)
            )
            split = par.linear_split if isinstance(op, Linear) else par.conv_split
            groups = op.groups if isinstance(op, Conv2d) else 1
            if groups > 1 and not split and groups % par.tp and par.tp % groups:
                raise ConfigError(
                    "parallelism.tp",
                    par.tp,
                    f"a divisor or a multiple of every convolution's groups ({op.name} has "
                    f"{groups})",
                )
            if width and not split and width % par.tp:
                raise ConfigError(
                    "parallelism.tp",
                    par.tp,
                    f"a divisor of every operator's output width ({op.name} has {width})",
                )


def _validate_communication(config: SimConfig) -> None:
    """One inter-group strategy per pipeline boundary, and no more adapters than a stage's
    devices."""
    par = config.parallelism
    comm = config.communication
    group = par.tp * par.dp
    boundaries = par.pp * par.chunks - 1
    if comm.boundary_strategies:
        if len(comm.boundary_strategies) != boundaries:
            raise ConfigError(
                "communication.boundary_strategies",
                list(comm.boundary_strategies),
                f"one strategy per pipeline boundary ({boundaries})",
            )
        for i, name in enumerate(comm.boundary_strategies):
            if name not in INTER_GROUP_STRATEGIES:
                raise ConfigError(
                    f"communication.boundary_strategies[{i}]",
                    name,
                    f"one of {', '.join(INTER_GROUP_STRATEGIES)}",
                )
    if comm.adapters > group:
        raise ConfigError(
            "communication.adapters", comm.adapters, f"at most the {group} devices of a stage"
        )


def _validate_offload(config: SimConfig) -> None:
    """``training.activation_offload > 0`` needs a GPU cluster whose preset knows its host link,
    and a training run (:mod:`palm.cost.offload`)."""
    hw, tr = config.hardware, config.training
    if tr.activation_offload <= 0:
        return
    if not isinstance(hw, GpuClusterHardware):
        raise ConfigError(
            "training.activation_offload", tr.activation_offload, "0 on a mesh (GPU clusters only)"
        )
    if tr.mode != "train":
        raise ConfigError(
            "training.activation_offload", tr.activation_offload, "0 unless training.mode = 'train'"
        )
    if hw.host_link_gbps <= 0:
        raise ConfigError(
            "training.activation_offload",
            tr.activation_offload,
            f"0 on {hw.name}, whose host link is not known (set hardware.host_link_gbps > 0)",
        )


def _validate_modern_parallelism(config: SimConfig, workload: Workload) -> None:
    """Context parallelism, uneven first / last pipeline stages and the FSDP alias."""
    m, par, tr = config.model, config.parallelism, config.training
    allowed = feasibility.context_parallel(
        cp=par.cp,
        seq_len=m.seq_len,
        transformer=workload.transformer,
        mesh=isinstance(config.hardware, Mesh2DHardware),
    )
    if allowed is not None:
        raise ConfigError("parallelism.cp", par.cp, allowed)
    if tr.fsdp and tr.zero not in (0, 2, 3):
        raise ConfigError(
            "training.zero", tr.zero, "0, 3 or 2 (SHARD_GRAD_OP) with training.fsdp = true"
        )
    if par.overlap_param_gather and (tr.zero_stage not in (1, 2) or tr.fsdp):
        raise ConfigError(
            "parallelism.overlap_param_gather",
            True,
            "false unless training.zero is 1 or 2 without training.fsdp (it overlaps the "
            "distributed optimizer's weight all-gather; ZeRO-3 / FSDP gathers every layer "
            "anyway)",
        )
    given = [
        (name, getattr(par, name))
        for name in ("first_stage_layers", "last_stage_layers")
        if getattr(par, name)
    ]
    if not given:
        return
    if not workload.transformer or par.pp < 2:
        name, value = given[0]
        raise ConfigError(f"parallelism.{name}", value, "0 unless a transformer with pp >= 2")
    for name, value in given:
        if value < par.chunks - 1:
            raise ConfigError(
                f"parallelism.{name}",
                value,
                f"at least one layer per chunk but the end one ({par.chunks - 1})",
            )
    rest = workload.blocks - sum(v for _, v in given)
    middle = par.pp - len(given)
    if rest < middle * par.chunks or (middle == 0 and rest != 0):
        name, value = given[-1]
        raise ConfigError(
            f"parallelism.{name}",
            value,
            f"a value leaving {middle * par.chunks or 'no'} layers or more for the other "
            f"{middle} stages (model.layers = {workload.blocks})"
            if middle
            else f"first + last = model.layers = {workload.blocks} when pp = 2",
        )


def _validate_gemm(config: SimConfig) -> None:
    """``family = "gemm"``: one product on the cores of a mesh chip, split by the chip's matmul
    library (2-D blocks) or by ``linear_split``; no pipeline, no batch, no training."""
    hw, tr, par = config.hardware, config.training, config.parallelism
    if not isinstance(hw, Mesh2DHardware):
        raise ConfigError("hardware", hw.name, "a mesh2d chip (e.g. wormhole-n150) for family gemm")
    if tr.mode != "inference":
        raise ConfigError("training.mode", tr.mode, "'inference' for family gemm (one product)")
    if tr.global_batch != 1 or tr.micro_batch != 1:
        raise ConfigError(
            "training.global_batch", tr.global_batch, "1 with micro_batch 1 for family gemm"
        )
    if hw.peak_flops(tr.precision) <= 0:
        ok = [p for p in PRECISIONS if hw.core_peak_tflops.get(p) > 0]
        raise ConfigError("training.precision", tr.precision, f"one of {ok} on {hw.name}")
    if (par.tp, par.pp, par.dp) != (1, 1, 1):
        raise ConfigError(
            "parallelism.tp*pp*dp",
            f"{par.tp}*{par.pp}*{par.dp}",
            "1*1*1 for family gemm (the product is split over the compute grid; "
            "parallelism.linear_split = [1, m, n, k] chooses the split)",
        )
    split = par.linear_split
    if split and (len(split) != 4 or split[0] != 1 or math.prod(split) != hw.device_count):
        raise ConfigError(
            "parallelism.linear_split",
            list(split),
            f"[1, m, n, k] with m x n x k = the {hw.device_count} cores of the compute grid",
        )


def _validate_splits(config: SimConfig, workload: Workload) -> None:
    par = config.parallelism
    group = par.tp * par.dp
    wanted = {
        "linear_split": (4, Linear, "(b, m, n, k)"),
        "conv_split": (4, Conv2d, "(b, c, i, k)"),
        "pool_split": (3, Pool, "(b, c, i)"),
    }
    for field, (length, cls, dims) in wanted.items():
        split = getattr(par, field)
        if not split:
            continue
        where = f"parallelism.{field}"
        if len(split) != length or any(x < 1 for x in split) or math.prod(split) != group:
            raise ConfigError(
                where,
                list(split),
                f"{length} factors {dims} >= 1 whose product is "
                f"the stage group size tp x dp = {group}",
            )
        for op in workload.ops:
            if isinstance(op, cls):
                _check_split_fits(op, split, where)


def _check_split_fits(op: Op, split: tuple[int, ...], where: str) -> None:
    if isinstance(op, Linear):
        pairs = [
            ("m", split[1], op.tokens),
            ("n", split[2], op.out_features),
            ("k", split[3], op.in_features),
        ]
    elif isinstance(op, Conv2d):
        if op.groups > 1 and math.prod(split) > 1:
            raise ConfigError(
                where, list(split), f"[1, 1, 1, 1]: {op.name} is a grouped convolution"
            )
        pairs = [
            ("c", split[1], op.in_channels),
            ("i", split[2], op.out_hw[0]),
            ("k", split[3], op.out_channels),
        ]
    else:
        assert isinstance(op, Pool)
        pairs = [("c", split[1], op.channels), ("i", split[2], op.out_hw[0])]
    for dim, factor, size in pairs:
        if size % factor:
            raise ConfigError(
                where, list(split), f"a split whose {dim} divides {size} (operator {op.name})"
            )


def _validate_placement(config: SimConfig) -> None:
    pl, hw, par = config.placement, config.hardware, config.parallelism
    if pl.layout != "explicit":
        if pl.stage_tiles:
            raise ConfigError(
                "placement.stage_tiles",
                [list(t) for t in pl.stage_tiles],
                "empty unless layout = 'explicit'",
            )
        return
    if not isinstance(hw, Mesh2DHardware):
        raise ConfigError("placement.layout", pl.layout, "'line' or 's-shape' on a gpu-cluster")
    if len(pl.stage_tiles) != par.pp:
        raise ConfigError(
            "placement.stage_tiles",
            [list(t) for t in pl.stage_tiles],
            f"one tile list per stage ({par.pp} lists, one per pipeline stage)",
        )
    n_tiles = hw.tiles[0] * hw.tiles[1]
    seen: set[int] = set()
    for s, tiles in enumerate(pl.stage_tiles):
        for t in tiles:
            if not 0 <= t < n_tiles:
                raise ConfigError(
                    f"placement.stage_tiles[{s}]", t, f"a tile id in 0..{n_tiles - 1}"
                )
            if t in seen:
                raise ConfigError(
                    f"placement.stage_tiles[{s}]", t, "a tile not used by another stage"
                )
            seen.add(t)
        if len(tiles) * hw.cores_per_tile_count != par.tp * par.dp:
            raise ConfigError(
                f"placement.stage_tiles[{s}]",
                list(tiles),
                f"{par.tp * par.dp // max(1, hw.cores_per_tile_count)} tiles "
                f"(tp x dp = {par.tp * par.dp} cores of {hw.cores_per_tile_count} per tile)",
            )


# --------------------------------------------------------------------------------------------
# back to plain data
# --------------------------------------------------------------------------------------------


def config_to_dict(config: SimConfig) -> dict[str, Any]:
    """The fully resolved configuration as TOML-compatible tables (presets expanded)."""
    out: dict[str, Any] = {}
    for section in _SECTIONS:
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
