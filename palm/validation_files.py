"""Which kind of validation file a user gave ``palm-tune validate FILE``, recognised by its
content in one place: a new kind of file is one more entry of :data:`KINDS`.

A file of none of these shapes is refused with one line naming the shapes expected (exit 2),
instead of the loader of the closest shape failing on the first row it cannot read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palm.errors import ConfigError
from palm.inputs import read_input

__all__ = ["FileKind", "KINDS", "validation_file_kind"]


@dataclass(frozen=True)
class FileKind:
    """One shape of validation file: its name (what ``validate`` dispatches on), the words
    that describe it in an error, and the test on the parsed JSON that recognises it."""

    name: str
    expected: str
    recognise: Callable[[Any], bool]


def _cases(data: Any, key: str) -> list[Any] | None:
    rows = data.get(key) if isinstance(data, dict) else None
    return rows if isinstance(rows, list) and rows else None


def _tiled(data: Any) -> bool:
    rows = _cases(data, "cases")
    return rows is not None and all(
        isinstance(r, dict) and r.get("kind") in ("gemm", "dram") for r in rows
    )


#: what the modern loader reads from every row (palm/validation_modern.py)
_MODERN_TABLES = ("source", "hardware", "model", "training", "parallelism", "derived")


def _modern(data: Any) -> bool:
    rows = _cases(data, "cases")
    return (
        rows is not None
        and "gpu_training" not in data
        and all(
            isinstance(r, dict)
            and "id" in r
            and all(isinstance(r.get(t), dict) for t in _MODERN_TABLES)
            and "gpu" in r["hardware"]
            for r in rows
        )
    )


def _megatron(data: Any) -> bool:
    """visible.json's shape, or a suite manifest: ``cases`` naming TOML ``config`` files
    (palm/data/validation/megatron/, :func:`palm.validation.is_suite_file`)."""
    if _cases(data, "gpu_training") is not None:
        return True
    rows = _cases(data, "cases")
    return rows is not None and all(isinstance(r, dict) and "config" in r for r in rows)


def _inference(data: Any) -> bool:
    """visible_inference.json's shape: rows with a ``setup`` and a ``measured`` table."""
    rows = _cases(data, "cases")
    return rows is not None and all(
        isinstance(r, dict) and isinstance(r.get("setup"), dict) and "measured" in r for r in rows
    )


def _kernels(data: Any) -> bool:
    """kernels.json's shape: a ``kernels`` list of published kernel measurements."""
    from palm.validation_kernels import is_kernel_file

    return is_kernel_file(data)


KINDS: tuple[FileKind, ...] = (
    FileKind(
        "tiled",
        "an object with a cases list of kind gemm or dram rows (as visible_tiled.json)",
        _tiled,
    ),
    FileKind(
        "modern",
        "an object with a cases list of rows with id, "
        + ", ".join(_MODERN_TABLES)
        + " and hardware.gpu (as visible_modern.json)",
        _modern,
    ),
    FileKind(
        "megatron",
        "an object with a gpu_training list (as visible.json) or a cases list of TOML config "
        "files (a suite manifest)",
        _megatron,
    ),
    FileKind(
        "inference",
        "an object with a cases list of rows with setup and measured (as visible_inference.json)",
        _inference,
    ),
    FileKind(
        "kernels",
        "an object with a kernels list of rows with kernel, shape and measured (as kernels.json)",
        _kernels,
    ),
)


def validation_file_kind(path: str | Path) -> str:
    """The name of the :data:`KINDS` entry that ``path`` has the shape of. Raises
    :class:`ConfigError` for a file that cannot be read, is not JSON or has none of them."""
    text = read_input(path, field="validation file", kind="JSON file")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("validation file", str(path), f"valid JSON ({exc})") from None
    for kind in KINDS:
        if kind.recognise(data):
            return kind.name
    raise ConfigError(
        "validation file",
        str(path),
        "one of these shapes: " + "; ".join(k.expected for k in KINDS),
    )
