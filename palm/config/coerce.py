"""The generic typed builder: a raw TOML table into a frozen config dataclass, each value
checked against the field's type hint (nested tables merge into the preset's value), then
each field's range. Every mistake raises :class:`~palm.errors.ConfigError` naming the field,
the value and what is allowed."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any

from palm.errors import ConfigError
from palm.hardware.spec import (
    PeakTflops,
)

__all__ = ["build"]


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


def build(cls: type[_T], table: dict[str, Any], section: str, *, base: _T | None = None) -> _T:
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
        return build(PeakTflops, raw, where, base=base)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(raw, dict):
            raise ConfigError(where, raw, "a table")
        return build(hint, raw, where, base=base)
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


#: model fields that are sizes of every transformer (0 is refused by
#: :mod:`palm.config.tables`)
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
